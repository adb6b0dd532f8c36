// libFuzzer target: the remap rule parser (-m FILE) and the rules it accepts, run over names.
// Input: a rule file, then a NUL, then file names separated by newlines. Nothing may crash or
// hang: every outcome is a mapping, a refusal, or the loop guard.

import FuzzCorpus
import Glibc
import StampedeFiles
import StampedeIO

func remapFuzz(_ input: UnsafeRawBufferPointer) {
    let bytes = Array(input)
    let split = bytes.firstIndex(of: 0) ?? bytes.count
    guard let rules = try? RemapRules(parsing: Array(bytes[..<split])) else { return }
    let names = split < bytes.count ? bytes[(split + 1)...].split(separator: 10) : [[UInt8]("pxelinux.0".utf8)[...]]
    let clients = [SocketAddress(parsing: "192.0.2.9:1", defaultPort: 0)!, SocketAddress(parsing: "[2001:db8::9]:1", defaultPort: 0)!]
    // A request's file name ends at its first NUL: none reaches the rules with one inside.
    for name in names.prefix(8) where !name.contains(0) {
        for client in clients {
            for isWrite in [false, true] {
                if case .mapped(let mapped) = rules.apply(to: Array(name), isWrite: isWrite, client: client) {
                    precondition(!mapped.contains(0), "a NUL in a mapped name")
                }
            }
        }
    }
}

@main enum Harness {
    static func main() { exit(runHarness(remapFuzz)) }
}
