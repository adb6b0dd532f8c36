import StampedeDHCP

/// A fault in a record file, with where it is.
public struct RecordError: Error, Equatable, Sendable, CustomStringConvertible {
    public var file: String
    /// 1-based; 0 for the file as a whole.
    public var line: Int
    public var message: String

    public init(file: String, line: Int, _ message: String) {
        self.file = file
        self.line = line
        self.message = message
    }

    public var description: String { line > 0 ? "\(file):\(line): \(message)" : "\(file): \(message)" }
}

extension MachineRecord {
    /// The keys a record file takes; `mac`, `uuid`, `arch` and `boot-file` may repeat.
    static let keys = ["mac", "uuid", "arch", "default", "action", "once", "boot-file", "kernel", "initrd", "cmdline", "script", "var NAME"]

    /// A record file's text, `file` its name. Two forms:
    ///
    /// - a record: `key = value` lines, blank lines and lines starting with `#` aside:
    ///   `mac = 52:54:00:12:34:56`, `uuid = 8-4-4-4-12 hex`, `arch = efi-arm64` (a selector of
    ///   `--boot-file` but ipxe, or an architecture number), `default = yes` (machines no other
    ///   record selects), `action = boot|local|ignore` (boot when not said), `boot-file =
    ///   SELECTOR=NAME` as `--boot-file` takes it; `kernel = LOCATION`, `initrd = LOCATION`
    ///   (repeatable), `cmdline = ...` (a boot Stampede writes for iPXE, GRUB and PXELINUX:
    ///   `RenderedBoot`), `var NAME = VALUE` (what the command line may name as `${NAME}`),
    ///   `once = yes` (booted until its boot is done, from its disk after), `script = PATH` (the
    ///   operator's iPXE script beneath the root, for its machines);
    /// - an Ironic (dnsmasq `dhcp-hostsdir`) hosts file: one line, `MAC` or `MAC,ignore`, with
    ///   `*:*:*:*:*:*` for every machine no other file names.
    ///
    /// Nil for a file with nothing in it (as dnsmasq reads an emptied hosts file); every fault
    /// found otherwise, each with its line.
    public static func parse(_ text: [UInt8], file: String) throws(RecordFaults) -> MachineRecord? {
        guard let string = String(validating: text, as: UTF8.self) else {
            throw RecordFaults([RecordError(file: file, line: 0, "not UTF-8 text")])
        }
        let lines = string.split(separator: "\n", omittingEmptySubsequences: false).enumerated().compactMap { index, raw in
            let line = raw.trimmingSpaces
            return line.isEmpty || line.hasPrefix("#") ? nil : (number: index + 1, text: line)
        }
        guard let first = lines.first else { return nil }
        if !first.text.contains("=") { return try hostsFile(lines, file: file) }
        var reader = RecordReader(file: file)
        for (number, text) in lines { reader.read(text, line: number) }
        return try reader.finish()
    }

    /// dnsmasq's `dhcp-hostsdir` line as Ironic's PXE filter writes it: `MAC` (boot it),
    /// `MAC,ignore`, and `*:*:*:*:*:*` for every machine.
    static func hostsFile(_ lines: [(number: Int, text: Substring)], file: String) throws(RecordFaults) -> MachineRecord {
        let (number, text) = lines[0]
        guard lines.count == 1 else {
            throw RecordFaults([RecordError(file: file, line: lines[1].number, "a hosts file (MAC or MAC,ignore) holds one line")])
        }
        let fields = text.split(separator: ",", omittingEmptySubsequences: false).map(\.trimmingSpaces)
        let selector: Selector
        if fields[0] == "*:*:*:*:*:*" {
            selector = .everyMachine
        } else if let address = hardwareAddress(fields[0]) {
            selector = .hardwareAddress(address)
        } else {
            throw RecordFaults([RecordError(file: file, line: number, "\(fields[0]): neither key = value nor a hosts file's MAC or MAC,ignore")])
        }
        switch fields.dropFirst() {
        case []: return MachineRecord(name: file, selectors: [(selector, number)])
        case ["ignore"]: return MachineRecord(name: file, selectors: [(selector, number)], action: .ignore)
        default:
            throw RecordFaults([RecordError(file: file, line: number, "of a hosts file's line only MAC and MAC,ignore are read, not \(text)")])
        }
    }

    /// Six hex pairs split by `:` or `-`.
    public static func hardwareAddress<Text: StringProtocol>(_ text: Text) -> [UInt8]? {
        let pairs = text.split(omittingEmptySubsequences: false) { $0 == ":" || $0 == "-" }
        guard pairs.count == 6 else { return nil }
        let bytes = pairs.compactMap { $0.count == 2 ? UInt8($0, radix: 16) : nil }
        return bytes.count == 6 ? bytes : nil
    }

    /// `8-4-4-4-12` hex digits, as option 97's UUID is written: lower-cased.
    static func uuid<Text: StringProtocol>(_ text: Text) -> String? {
        let groups = text.split(separator: "-", omittingEmptySubsequences: false)
        guard groups.map(\.count) == [8, 4, 4, 4, 12], groups.allSatisfy({ $0.allSatisfy(\.isHexDigit) }) else { return nil }
        return text.lowercased()
    }
}

extension StringProtocol {
    /// Without spaces and tabs at either end.
    var trimmingSpaces: Substring {
        let text = Substring(self)
        let start = text.firstIndex { $0 != " " && $0 != "\t" && $0 != "\r" } ?? text.endIndex
        let end = text.lastIndex { $0 != " " && $0 != "\t" && $0 != "\r" }.map { text.index(after: $0) } ?? start
        return text[start..<Swift.max(start, end)]
    }
}
