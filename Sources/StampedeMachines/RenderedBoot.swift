import StampedeBase
import StampedeDHCP

/// A record's boot that Stampede writes for the loader that asks (iPXE, GRUB, PXELINUX:
/// `LoaderScript`): a kernel, its initrds and its command line. A location is a path beneath the
/// root or a URL; the command line may name the record's variables and the machine's (`${mac}`,
/// `${mac:hexhyp}`, `${uuid}`, `${arch}`). Everything in it is data: what could end a loader's
/// command, start another or expand in it is refused when the record is read.
public struct RenderedBoot: Equatable, Sendable {
    public var kernel: String
    public var initrds: [String]
    /// As written, its `${name}`s not yet replaced.
    public var commandLine: String
    /// What iPXE shows before the boot (an inventory's `message`).
    public var message: String?

    public init(kernel: String, initrds: [String] = [], commandLine: String = "") {
        self.kernel = kernel
        self.initrds = initrds
        self.commandLine = commandLine
    }

    /// The variables every machine has.
    static let machineVariables = ["mac", "mac:hexhyp", "uuid", "arch", "done-url"]

    /// The boot for one machine: its command line with every `${name}` replaced (the machine's
    /// own worked out only when named; `${done-url}` is `doneURL`'s).
    public func rendered(for machine: MachineIdentity, variables: [String: String],
                         doneURL: () -> String = { "" }) -> RenderedBoot {
        func value(_ name: Substring) -> String {
            switch name {
            case "done-url": doneURL()
            case "mac": machine.hardwareAddress.hardwareAddressText(separator: ":")
            case "mac:hexhyp": machine.hardwareAddress.hardwareAddressText(separator: "-")
            case "uuid": machine.uuid ?? ""
            case "arch": machine.firmware?.name ?? machine.architecture.map(String.init) ?? ""
            default: variables[String(name)] ?? ""
            }
        }
        var boot = self
        guard commandLine.containsBytes("${") else { return boot }
        var line = ""
        var rest = Substring(commandLine)
        while let start = rest.byteRange(of: "${"), let end = rest[start.upperBound...].utf8.firstIndex(of: UInt8(ascii: "}")) {
            line += rest[..<start.lowerBound]
            line += value(rest[start.upperBound..<end])
            rest = rest[rest.utf8.index(after: end)...]
        }
        boot.commandLine = line + rest
        return boot
    }

    // MARK: What a record may say

    /// A location: letters, digits and `-._~:/?#[]@!*+,=%` (a URL's characters, without those a
    /// loader's script reads: quotes, `$`, `;`, `&`, `|`, braces, spaces, backslashes).
    static func checkLocation(_ text: String) -> String? {
        guard text.isAlphanumeric(or: "-._~:/?#[]@!*+,=%") else {
            return "holds a character a loader's script would read (a location takes letters, digits and -._~:/?#[]@!*+,=%)"
        }
        return nil
    }

    /// A variable's name: a lower-case letter, then lower-case letters, digits, `-` and `_`.
    static func checkVariableName(_ name: String) -> String? {
        guard let first = name.first, first.isASCII, first.isLowercase,
              name.allSatisfy({ $0.isASCII && ($0.isLowercase || $0.isNumber || $0 == "-" || $0 == "_") }) else {
            return "a variable's name is a lower-case letter, then lower-case letters, digits, - and _"
        }
        return RenderedBoot.machineVariables.contains(name) ? "\(name) is the machine's own variable" : nil
    }

    /// A variable's value: letters, digits and `-._:,+@/=` (a hostname, a role, a disk).
    static func checkVariableValue(_ value: String) -> String? {
        guard value.isAlphanumeric(or: "-._:,+@/=") else {
            return "a variable's value takes letters, digits and -._:,+@/= (it is data in a command line, never code)"
        }
        return nil
    }

    /// A message to show: letters, digits, spaces and `-._:,+@/=()!?%` (iPXE's `echo` expands
    /// `${…}`).
    static func checkMessage(_ text: String) -> String? {
        guard text.utf8.count <= 200, text.isAlphanumeric(or: " -._:,+@/=()!?%") else {
            return "a message takes at most 200 letters, digits, spaces and -._:,+@/=()!?%"
        }
        return nil
    }

    /// A command line: printable ASCII without what a loader's script reads (quotes, backslashes,
    /// `;`, `|`, `&&`, `#`, braces but a variable's), each `${name}` a variable of `known` or the
    /// machine's.
    static func checkCommandLine(_ text: String, known: Set<String>) -> String? {
        var rest = Substring(text)
        while let start = rest.byteRange(of: "${") {
            guard let end = rest[start.upperBound...].utf8.firstIndex(of: UInt8(ascii: "}")) else { return "${ without its }" }
            let name = String(rest[start.upperBound..<end])
            guard known.contains(name) || machineVariables.contains(name) else {
                return "${\(name)}: no such variable (var \(name) = VALUE makes one; the machine's are \(machineVariables.joined(separator: ", ")))"
            }
            if let bad = plain(rest[..<start.lowerBound]) { return bad }
            rest = rest[rest.utf8.index(after: end)...]
        }
        return plain(rest)
    }

    /// Printable ASCII without quotes, backslashes, `;|#<>`, `$`, braces or `&&`.
    private static func plain(_ text: Substring) -> String? {
        let refused: StaticString = "\"'`\\;|#<>${}"
        let clean = refused.withUTF8Buffer { refused in text.utf8.allSatisfy { $0 >= 0x20 && $0 < 0x7f && !refused.contains($0) } }
        guard clean, !text.containsBytes("&&") else {
            return "holds what a loader's script reads (quotes, backslashes, ;, |, &&, #, <, >, $ or braces but a ${variable}'s)"
        }
        return nil
    }
}
