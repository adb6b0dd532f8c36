import ArgumentParser
import StampedeBase
import StampedeFiles
import StampedeIO
import StampedeProtocol

/// `--map-test FILE`, as in.tftpd 7.3's: each line of FILE as a requested name, what -m and
/// --normalize make of it on standard output ("ERROR: message" for a refusal); the rules' steps
/// on standard error at -v 3. An `E` rule never finds its file, as in 7.3, whose probe answers
/// "Just testing..." under --map-test whatever directory is named: the output is what the rules
/// make of the name, the same on every host.
struct MapTest {
    let options: ServeOptions
    let rules: RemapRules?

    func run(_ path: String) throws {
        // The client the names come from: --map-client, or the documentation's examples.
        let client = options.mapClient ?? SocketAddress(numericHost: options.ipv6 ? "2001:db8::feed:face:dead:beef" : "192.0.2.34", port: 0)!
        let text: [UInt8]
        do {
            text = try path == "-" ? readToEnd(0) : readWholeFile(path)
        } catch {
            throw serveFailure("--map-test \(path): cannot read: \(error)", status: 66)
        }
        let trace: ((String) -> Void)? = options.level >= 3 ? { writeToStandardError("\($0)\n") } : nil
        for warning in rules?.warnings ?? [] { writeToStandardError("stampede: -m \(options.mapFile ?? ""): \(warning)\n") }
        var lines = text.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
        if lines.last?.isEmpty == true { lines.removeLast() }
        var output: [UInt8] = []
        for line in lines {
            let outcome = rules?.apply(to: Array(line), isWrite: options.create, client: client, servable: nil, trace: trace)
                ?? .mapped(Array(line))
            switch outcome {
            case .mapped(let mapped):
                output += FilenameProcessing.normalize(mapped, options.normalize) + [UInt8(ascii: "\n")]
            case .refused(let message):
                output += Array("ERROR: \(message ?? "Access violation")\n".utf8)
            case .failed(let failure):
                // As 7.3: the refusal on standard output, why on standard error.
                output += Array("ERROR: Remap table failure\n".utf8)
                writeToStandardError("stampede: remap: \(sanitizedForLog(line)): \(failure)\n")
            }
        }
        output.withUnsafeBytes { try? writeFully(1, $0) }
    }
}
