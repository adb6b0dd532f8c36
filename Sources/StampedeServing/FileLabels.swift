import Synchronization

/// The file label of the transfer-duration histogram, shared by a server's workers. Its cardinality
/// is bounded whatever clients ask: a name is labelled by the file actually served (after `-m`
/// remapping), with every path component's machine-specific part (a MAC address, a UUID, an IPv4
/// address dotted or in hex, anything in pxelinux.cfg/ but `default`) folded to `*`; the first
/// `limit` labels are kept, later ones count as `other`. A worker looks a name up here once per
/// served transfer, and only when it has not seen the name before.
public final class FileLabels: Sendable {
    public static let other = "other"
    public let limit: Int
    private let state = Mutex<(names: [String], indices: [String: Int32])>(([FileLabels.other], [FileLabels.other: 0]))

    public init(limit: Int = 32) {
        self.limit = limit
    }

    /// The label's index (0: `other`).
    public func index(of label: String) -> Int32 {
        state.withLock { state in
            if let index = state.indices[label] { return index }
            guard state.names.count <= limit else { return 0 }
            let index = Int32(state.names.count)
            state.names.append(label)
            state.indices[label] = index
            return index
        }
    }

    public var names: [String] { state.withLock { $0.names } }

    /// The label of a served file name (see the type).
    public static func label(of name: String) -> String {
        var components = name.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        for i in components.indices {
            if i > 0, components[i - 1].lowercased() == "pxelinux.cfg", components[i] != "default" {
                components[i] = "*"
            } else {
                components[i] = folded(components[i])
            }
        }
        let label = components.joined(separator: "/")
        // Printable ASCII only, and not too long: a label is no place for a client's bytes.
        let printable = label.unicodeScalars.map { (0x20..<0x7F).contains($0.value) && $0 != "\"" && $0 != "\\" ? Character($0) : "?" }
        return String(printable.prefix(128))
    }

    /// One path component with its machine-specific runs replaced by `*`.
    static func folded(_ component: String) -> String {
        let bytes = Array(component.utf8)
        var out: [UInt8] = []
        var i = 0
        while i < bytes.count {
            if let length = machineRun(bytes, at: i) {
                if out.last != UInt8(ascii: "*") { out.append(UInt8(ascii: "*")) }
                i += length
            } else {
                out.append(bytes[i])
                i += 1
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The length of a MAC address (`52-54-00-12-34-56`, with `:` or `-`, or 12 hex digits, and
    /// pxelinux's `01-` prefix), a UUID, a dotted IPv4 address or 8 hex digits starting at `i`,
    /// not inside a longer word.
    static func machineRun(_ b: [UInt8], at i: Int) -> Int? {
        func isHex(_ c: UInt8) -> Bool { (48...57).contains(c) || (65...70).contains(c) || (97...102).contains(c) }
        func isDigit(_ c: UInt8) -> Bool { (48...57).contains(c) }
        func isWord(_ c: UInt8) -> Bool { isHex(c) || (71...90).contains(c) || (103...122).contains(c) }
        if i > 0 && isWord(b[i - 1]) { return nil }
        func matches(_ pattern: String) -> Int? {
            let p = Array(pattern.utf8)
            guard i + p.count <= b.count else { return nil }
            for (k, c) in p.enumerated() {
                let x = b[i + k]
                switch c {
                case UInt8(ascii: "h"): if !isHex(x) { return nil }
                case UInt8(ascii: "s"): if x != UInt8(ascii: "-") && x != UInt8(ascii: ":") { return nil }
                default: if x != c { return nil }
                }
            }
            let end = i + p.count
            return end < b.count && isWord(b[end]) ? nil : p.count
        }
        for pattern in ["01shhshhshhshhshhshh", "hhshhshhshhshhshh", "hhhhhhhh-hhhh-hhhh-hhhh-hhhhhhhhhhhh",
                        "hhhhhhhhhhhh", "hhhhhhhh"] {
            if let length = matches(pattern) { return length }
        }
        // A dotted IPv4 address: four runs of 1-3 digits.
        var j = i
        for part in 0..<4 {
            let start = j
            while j < b.count && j - start < 3 && isDigit(b[j]) { j += 1 }
            guard j > start else { return nil }
            if part < 3 {
                guard j < b.count && b[j] == UInt8(ascii: ".") else { return nil }
                j += 1
            }
        }
        return j < b.count && isDigit(b[j]) ? nil : j - i
    }
}
