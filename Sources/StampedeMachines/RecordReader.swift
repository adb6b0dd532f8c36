import StampedeDHCP

/// A record file's `key = value` lines read one by one (`MachineRecord.parse`), every fault kept
/// with its line, then the record checked whole.
struct RecordReader {
    let file: String
    private(set) var errors: [RecordError] = []
    private var record: MachineRecord
    /// The line each key was first said on.
    private var said: [String: Int] = [:]
    private var kernel: String?
    private var initrds: [String] = []
    private var commandLine: (text: String, line: Int)?

    /// The keys said once at most.
    static let once: Set = ["default", "action", "once", "kernel", "cmdline", "script"]

    init(file: String) {
        self.file = file
        record = MachineRecord(name: file, selectors: [])
    }

    private mutating func fault(_ message: String, line: Int) { errors.append(RecordError(file: file, line: line, message)) }

    /// One `key = value` line.
    mutating func read(_ text: Substring, line: Int) {
        guard let equals = text.firstIndex(of: "=") else { return fault("not key = value", line: line) }
        var key = String(text[..<equals].trimmingSpaces)
        let value = String(text[text.index(after: equals)...].trimmingSpaces)
        var variable = ""
        if key.hasPrefix("var ") || key.hasPrefix("var\t") {
            variable = String(key.dropFirst(4).trimmingSpaces)
            key = "var NAME"
            if let bad = RenderedBoot.checkVariableName(variable) { return fault("var \(variable): \(bad)", line: line) }
        }
        let keys = MachineRecord.keys
        guard keys.contains(key) else { return fault("unknown key \"\(key)\" (a record takes \(keys.joined(separator: ", ")))", line: line) }
        guard !value.isEmpty, value.unicodeScalars.allSatisfy({ $0.value >= 0x20 && $0.value != 0x7f }) else {
            return fault("\(key): the value is empty or holds a control character", line: line)
        }
        if Self.once.contains(key), let earlier = said[key] { return fault("\(key) said again (first on line \(earlier))", line: line) }
        said[key] = said[key] ?? line
        if let bad = take(key, value, line: line) ?? boot(key, value, variable: variable, line: line) { fault(bad, line: line) }
    }

    /// A selector or the action: the fault, if any (nil too for a key it does not take).
    private mutating func take(_ key: String, _ value: String, line: Int) -> String? {
        switch key {
        case "mac":
            guard let address = MachineRecord.hardwareAddress(value) else { return "mac \(value): not a hardware address like 52:54:00:12:34:56" }
            record.selectors.append((.hardwareAddress(address), line))
        case "uuid":
            guard let uuid = MachineRecord.uuid(value) else { return "uuid \(value): not a UUID like 4c4c4544-0031-3510-8052-b4c04f4c4e31" }
            record.selectors.append((.uuid(uuid), line))
        case "arch":
            if let selector = BootSelector.named.first(where: { $0.name == value }), selector != .ipxe {
                record.selectors.append((.firmware(selector), line))
            } else if let code = UInt16(value) {
                record.selectors.append((.architecture(code), line))
            } else {
                let names = BootSelector.named.filter { $0 != .ipxe }.map(\.name).joined(separator: ", ")
                return "arch \(value): not one of \(names), nor an architecture number (0-65535)"
            }
        case "default":
            guard value == "yes" || value == "no" else { return "default \(value): yes or no" }
            if value == "yes" { record.selectors.append((.everyMachine, line)) }
        case "action":
            guard let action = MachineRecord.Action(rawValue: value) else {
                return "action \(value): one of \(MachineRecord.Action.allCases.map(\.rawValue).joined(separator: ", "))"
            }
            record.action = action
        case "once":
            guard value == "yes" || value == "no" else { return "once \(value): yes or no" }
            record.once = value == "yes"
        default:
            break
        }
        return nil
    }

    /// What the boot is (its files, kernel, script, variables): the fault, if any.
    private mutating func boot(_ key: String, _ value: String, variable: String, line: Int) -> String? {
        switch key {
        case "kernel", "initrd":
            if let bad = RenderedBoot.checkLocation(value) { return "\(key) \(value): \(bad)" }
            if key == "kernel" { kernel = value } else { initrds.append(value) }
        case "cmdline":
            commandLine = (value, line)
        case "script":
            if let bad = RenderedBoot.checkLocation(value) ?? (value.contains("://") ? "a file beneath the root, not a URL" : nil) {
                return "script \(value): \(bad)"
            }
            record.script = String(value.drop { $0 == "/" })
        case "var NAME":
            if let bad = RenderedBoot.checkVariableValue(value) { return "var \(variable) = \(value): \(bad)" }
            if record.variables[variable] != nil { return "var \(variable) said twice" }
            record.variables[variable] = value
        case "boot-file":
            do {
                let choice = try BootFileChoice(parsing: value)
                if record.bootFiles[choice.selector] != nil { return "boot-file for \(choice.selector.name) said twice" }
                record.bootFiles[choice.selector] = choice.target
            } catch {
                return "boot-file \(value): \(error)"
            }
        default:
            break
        }
        return nil
    }

    /// The record, checked whole: its command line's variables, what goes together, what its
    /// action leaves nothing to do with, that it selects a machine.
    mutating func finish() throws(RecordFaults) -> MachineRecord {
        if let (text, line) = commandLine, let bad = RenderedBoot.checkCommandLine(text, known: Set(record.variables.keys)) {
            fault("cmdline: \(bad)", line: line)
        }
        if let kernel {
            record.boot = RenderedBoot(kernel: kernel, initrds: initrds, commandLine: commandLine?.text ?? "")
        } else if let line = said["initrd"] ?? said["cmdline"] {
            fault("initrd and cmdline go with a kernel", line: line)
        }
        let action = record.action.rawValue
        let checks: [(Bool, String, String)] = [
            (record.script != nil && record.boot != nil, "kernel", "a kernel and a script: the script boots the machine, say one"),
            (record.script != nil && record.action != .boot, "script", "script in a record whose action is \(action): nothing would run it"),
            (record.boot != nil && record.action != .boot, "kernel", "kernel in a record whose action is \(action): nothing would boot it"),
            (record.once && record.action != .boot, "once", "once in a record whose action is \(action): it boots nothing to be done with"),
            (record.selectors.isEmpty, "", "selects no machine: give it a mac, uuid or arch, or default = yes"),
            (!record.bootFiles.isEmpty && record.action != .boot, "boot-file", "boot-file in a record whose action is \(action): nothing would offer it"),
        ]
        // The first that holds, and only when the lines were right: one fault says what to fix.
        if errors.isEmpty, let (_, key, message) = checks.first(where: { $0.0 }) { fault(message, line: said[key] ?? 0) }
        guard errors.isEmpty else { throw RecordFaults(errors) }
        return record
    }
}
