/// `stampede machines list`: the `/machines` view read back (`MachineProgress.json` writes it) and
/// printed as a table, a machine a line, with how many machines are at each stage.
public enum ProgressTable {
    public struct Row: Equatable, Sendable {
        public var mac: String
        public var record: String?
        public var stage: String
        public var why: String?
        public var address: String?
        public var lastSeen: Int
        public var bytes: Int
    }

    /// Why a view cannot be read.
    public struct Unreadable: Error, CustomStringConvertible {
        public var description: String
    }

    /// The rows of a `/machines` view.
    public static func rows(_ json: [UInt8]) throws(Unreadable) -> [Row] {
        var reader = JSONReader(bytes: json)
        guard case .object(let top) = try reader.value(), case .array(let machines)? = top["machines"] else {
            throw Unreadable(description: "not a /machines view (no \"machines\" list)")
        }
        return try machines.map { (value: JSONReader.Value) throws(Unreadable) -> Row in
            guard case .object(let fields) = value, case .string(let mac)? = fields["mac"], case .string(let stage)? = fields["stage"],
                  case .number(let seen)? = fields["last_seen"] else {
                throw Unreadable(description: "a machine without its mac, stage or last_seen")
            }
            func text(_ key: String) -> String? { if case .string(let value)? = fields[key] { value } else { nil } }
            let bytes = if case .number(let taken)? = fields["bytes"] { Int(taken) } else { 0 }
            return Row(mac: mac, record: text("record"), stage: stage, why: text("why"), address: text("address"), lastSeen: Int(seen),
                       bytes: bytes)
        }
    }

    /// The table, `stage` alone if given, then how many machines are at each stage.
    public static func table(_ rows: [Row], now: Int, stage: String? = nil) -> String {
        let shown = rows.filter { stage == nil || $0.stage == stage }
        let header = ["MAC", "RECORD", "STAGE", "ADDRESS", "LAST SEEN", "BYTES", "WHY"]
        // What a server sent is text for a terminal: a control character is shown as "?".
        let cells = shown.map { row in
            [row.mac, row.record.map { String($0.split(separator: "/").last ?? "") } ?? "-", row.stage, row.address ?? "-",
             "\(max(0, now - row.lastSeen)) s ago", "\(row.bytes)", row.why ?? ""].map { cell in
                String(cell.unicodeScalars.map { $0.value < 0x20 || $0.value == 0x7f ? "?" : Character($0) })
            }
        }
        let widths = header.indices.map { column in ([header] + cells).map { $0[column].count }.max() ?? 0 }
        let lines = ([header] + cells).map { line in
            line.enumerated().map { column, cell in
                column == line.count - 1 ? cell : cell + String(repeating: " ", count: widths[column] - cell.count)
            }.joined(separator: "  ").trimmingSpaces
        }
        var counts: [String: Int] = [:]
        for row in rows { counts[row.stage, default: 0] += 1 }
        let order = ["left_alone", "dhcp", "boot_file", "script", "kernel", "initrd", "done"]
        let summary = order.compactMap { key in counts[key].map { "\($0) \(key)" } }.joined(separator: ", ")
        return lines.joined(separator: "\n") + "\n\(rows.count) machines" + (summary.isEmpty ? "" : ": " + summary) + "\n"
    }
}

/// Enough of JSON (RFC 8259) to read a `/machines` view: objects, arrays, strings (escapes,
/// `\u` and its surrogate pairs), numbers, true, false, null.
struct JSONReader {
    enum Value: Equatable {
        case object([String: Value]), array([Value]), string(String), number(Double), bool(Bool), null
    }

    let bytes: [UInt8]
    var at = 0

    mutating func value(depth: Int = 0) throws(ProgressTable.Unreadable) -> Value {
        guard depth < 64 else { throw fault("nested too deep") }
        skipSpace()
        guard at < bytes.count else { throw fault("ends early") }
        switch bytes[at] {
        case UInt8(ascii: "{"):
            at += 1
            var fields: [String: Value] = [:]
            skipSpace()
            if peek(UInt8(ascii: "}")) { return .object(fields) }
            repeat {
                skipSpace()
                guard case .string(let key) = try value(depth: depth + 1) else { throw fault("a key that is not a string") }
                skipSpace()
                guard peek(UInt8(ascii: ":")) else { throw fault("no : after a key") }
                fields[key] = try value(depth: depth + 1)
                skipSpace()
            } while peek(UInt8(ascii: ","))
            guard peek(UInt8(ascii: "}")) else { throw fault("an object not closed") }
            return .object(fields)
        case UInt8(ascii: "["):
            at += 1
            var items: [Value] = []
            skipSpace()
            if peek(UInt8(ascii: "]")) { return .array(items) }
            repeat { items.append(try value(depth: depth + 1)); skipSpace() } while peek(UInt8(ascii: ","))
            guard peek(UInt8(ascii: "]")) else { throw fault("an array not closed") }
            return .array(items)
        case UInt8(ascii: "\""):
            return .string(try string())
        default:
            for (word, meaning) in [("true", Value.bool(true)), ("false", .bool(false)), ("null", .null)]
            where bytes[at...].starts(with: word.utf8) {
                at += word.utf8.count
                return meaning
            }
            let number = bytes[at...].prefix { "-+.eE0123456789".utf8.contains($0) }
            guard !number.isEmpty, let parsed = Double(String(decoding: number, as: UTF8.self)) else { throw fault("not a value") }
            at += number.count
            return .number(parsed)
        }
    }

    private mutating func string() throws(ProgressTable.Unreadable) -> String {
        at += 1
        var scalars = String.UnicodeScalarView()
        var pending: [UInt8] = []
        func flush() {
            scalars.append(contentsOf: String(decoding: pending, as: UTF8.self).unicodeScalars)
            pending = []
        }
        while at < bytes.count {
            let byte = bytes[at]
            at += 1
            switch byte {
            case UInt8(ascii: "\""):
                flush()
                return String(scalars)
            case UInt8(ascii: "\\"):
                flush()
                guard at < bytes.count else { break }
                let escape = bytes[at]
                at += 1
                let simple: [UInt8: UInt8] = [0x22: 0x22, 0x5c: 0x5c, 0x2f: 0x2f, 0x62: 8, 0x66: 12, 0x6e: 10, 0x72: 13, 0x74: 9]
                if let plain = simple[escape] {
                    scalars.append(Unicode.Scalar(plain))
                } else if escape == UInt8(ascii: "u") {
                    var code = try hex4()
                    if (0xD800..<0xDC00).contains(code), bytes[at...].starts(with: "\\u".utf8) {
                        at += 2
                        let low = try hex4()
                        code = 0x10000 + (code - 0xD800) << 10 + (low - 0xDC00)
                    }
                    scalars.append(Unicode.Scalar(code) ?? "\u{FFFD}")
                } else {
                    throw fault("an unknown escape")
                }
            default:
                pending.append(byte)
            }
        }
        throw fault("a string not closed")
    }

    private mutating func hex4() throws(ProgressTable.Unreadable) -> UInt32 {
        guard at + 4 <= bytes.count, let code = UInt32(String(decoding: bytes[at..<(at + 4)], as: UTF8.self), radix: 16) else {
            throw fault("a bad \\u escape")
        }
        at += 4
        return code
    }

    private mutating func skipSpace() {
        while at < bytes.count, [0x20, 0x09, 0x0a, 0x0d].contains(bytes[at]) { at += 1 }
    }

    private mutating func peek(_ byte: UInt8) -> Bool {
        guard at < bytes.count, bytes[at] == byte else { return false }
        at += 1
        return true
    }

    private func fault(_ what: String) -> ProgressTable.Unreadable { ProgressTable.Unreadable(description: "\(what) at byte \(at)") }
}
