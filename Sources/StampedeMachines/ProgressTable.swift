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
        let top: JSONReader.Value
        do { top = try JSONReader.read(json) } catch { throw Unreadable(description: error.description) }
        guard case .object(let top) = top, case .array(let machines)? = top["machines"] else {
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
