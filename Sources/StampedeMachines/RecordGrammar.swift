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
        var errors: [RecordError] = []
        var record = MachineRecord(name: file, selectors: [])
        var said: [String: Int] = [:]
        var kernel: String?
        var initrds: [String] = []
        var commandLine: (text: String, line: Int)?
        for (number, text) in lines {
            func fault(_ message: String) { errors.append(RecordError(file: file, line: number, message)) }
            guard let equals = text.firstIndex(of: "=") else {
                fault("not key = value")
                continue
            }
            var key = String(text[..<equals].trimmingSpaces)
            let value = String(text[text.index(after: equals)...].trimmingSpaces)
            var variable = ""
            if key.hasPrefix("var ") || key.hasPrefix("var\t") {
                variable = String(key.dropFirst(4).trimmingSpaces)
                key = "var NAME"
                if let bad = RenderedBoot.checkVariableName(variable) {
                    fault("var \(variable): \(bad)")
                    continue
                }
            }
            guard keys.contains(key) else {
                fault("unknown key \"\(key)\" (a record takes \(keys.joined(separator: ", ")))")
                continue
            }
            guard !value.isEmpty, value.unicodeScalars.allSatisfy({ $0.value >= 0x20 && $0.value != 0x7f }) else {
                fault("\(key): the value is empty or holds a control character")
                continue
            }
            if ["default", "action", "once", "kernel", "cmdline", "script"].contains(key), let earlier = said[key] {
                fault("\(key) said again (first on line \(earlier))")
                continue
            }
            said[key] = said[key] ?? number
            switch key {
            case "mac":
                guard let address = hardwareAddress(value) else {
                    fault("mac \(value): not a hardware address like 52:54:00:12:34:56")
                    continue
                }
                record.selectors.append((.hardwareAddress(address), number))
            case "uuid":
                guard let uuid = uuid(value) else {
                    fault("uuid \(value): not a UUID like 4c4c4544-0031-3510-8052-b4c04f4c4e31")
                    continue
                }
                record.selectors.append((.uuid(uuid), number))
            case "arch":
                if let selector = BootSelector(rawValue: value), selector != .ipxe {
                    record.selectors.append((.firmware(selector), number))
                } else if let code = UInt16(value) {
                    record.selectors.append((.architecture(code), number))
                } else {
                    let names = BootSelector.allCases.filter { $0 != .ipxe }.map(\.rawValue).joined(separator: ", ")
                    fault("arch \(value): not one of \(names), nor an architecture number (0-65535)")
                }
            case "default":
                switch value {
                case "yes": record.selectors.append((.everyMachine, number))
                case "no": break
                default: fault("default \(value): yes or no")
                }
            case "action":
                guard let action = Action(rawValue: value) else {
                    fault("action \(value): one of \(Action.allCases.map(\.rawValue).joined(separator: ", "))")
                    continue
                }
                record.action = action
            case "once":
                switch value {
                case "yes": record.once = true
                case "no": break
                default: fault("once \(value): yes or no")
                }
            case "kernel", "initrd":
                if let bad = RenderedBoot.checkLocation(value) {
                    fault("\(key) \(value): \(bad)")
                    continue
                }
                if key == "kernel" { kernel = value } else { initrds.append(value) }
            case "cmdline":
                commandLine = (value, number)
            case "script":
                if let bad = RenderedBoot.checkLocation(value) ?? (value.contains("://") ? "a file beneath the root, not a URL" : nil) {
                    fault("script \(value): \(bad)")
                    continue
                }
                record.script = String(value.drop { $0 == "/" })
            case "var NAME":
                if let bad = RenderedBoot.checkVariableValue(value) {
                    fault("var \(variable) = \(value): \(bad)")
                    continue
                }
                if record.variables[variable] != nil { fault("var \(variable) said twice") }
                record.variables[variable] = value
            default:  // boot-file
                do {
                    let choice = try BootFileChoice(parsing: value)
                    if record.bootFiles[choice.selector] != nil { fault("boot-file for \(choice.selector.rawValue) said twice") }
                    record.bootFiles[choice.selector] = choice.target
                } catch {
                    fault("boot-file \(value): \(error)")
                }
            }
        }
        if let (text, line) = commandLine, let bad = RenderedBoot.checkCommandLine(text, known: Set(record.variables.keys)) {
            errors.append(RecordError(file: file, line: line, "cmdline: \(bad)"))
        }
        if let kernel {
            record.boot = RenderedBoot(kernel: kernel, initrds: initrds, commandLine: commandLine?.text ?? "")
        } else if let line = said["initrd"] ?? said["cmdline"] {
            errors.append(RecordError(file: file, line: line, "initrd and cmdline go with a kernel"))
        }
        if errors.isEmpty, record.script != nil, let line = said["kernel"] {
            errors.append(RecordError(file: file, line: line, "a kernel and a script: the script boots the machine, say one"))
        }
        if errors.isEmpty, record.script != nil, record.action != .boot, let line = said["script"] {
            errors.append(RecordError(file: file, line: line, "script in a record whose action is \(record.action.rawValue): nothing would run it"))
        }
        if errors.isEmpty, record.boot != nil, record.action != .boot, let line = said["kernel"] {
            errors.append(RecordError(file: file, line: line, "kernel in a record whose action is \(record.action.rawValue): nothing would boot it"))
        }
        if errors.isEmpty, record.once, record.action != .boot, let line = said["once"] {
            errors.append(RecordError(file: file, line: line, "once in a record whose action is \(record.action.rawValue): it boots nothing to be done with"))
        }
        if errors.isEmpty && record.selectors.isEmpty {
            errors.append(RecordError(file: file, line: 0, "selects no machine: give it a mac, uuid or arch, or default = yes"))
        }
        if errors.isEmpty, !record.bootFiles.isEmpty, record.action != .boot, let line = said["boot-file"] {
            errors.append(RecordError(file: file, line: line, "boot-file in a record whose action is \(record.action.rawValue): nothing would offer it"))
        }
        guard errors.isEmpty else { throw RecordFaults(errors) }
        return record
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
