import Glibc
import StampedeServer

/// What a file server needs to know of a file to answer a request for it.
public struct FileFacts: Equatable, Sendable {
    public var size: Int
    /// The modification time, in whole seconds since the epoch (HTTP dates have no more).
    public var modified: Int64
    /// A strong validator of this version of the file: its inode, size and modification and
    /// change times, as the file cache tells versions apart (`FileKey`).
    public var etag: String

    public init(size: Int, modified: Int64, etag: String) {
        self.size = size
        self.modified = modified
        self.etag = etag
    }

    public init(_ key: FileKey) {
        size = key.size
        modified = key.modified / 1_000_000_000
        etag = "\"\(String(key.inode, radix: 16))-\(String(key.size, radix: 16))-\(String(key.modified, radix: 16))-\(String(key.changed, radix: 16))\""
    }
}

/// Which answer a GET or HEAD of a servable file gets (RFC 9110 §13 and §14), decided from its
/// head and the file alone.
public enum Choice: Equatable, Sendable {
    /// 200, the whole file.
    case whole
    /// 206, these bytes.
    case part(Range<Int>)
    /// 304: the client has this version.
    case notModified
    /// 416: no byte of the file is in the range.
    case unsatisfiable

    public init(_ head: RequestHead, _ file: FileFacts) {
        if let tags = head.ifNoneMatch {
            if Self.matches(tags, file.etag) {
                self = .notModified
                return
            }
        } else if let since = head.ifModifiedSince.flatMap(HTTPDate.parse), file.modified <= since {
            self = .notModified
            return
        }
        guard let range = head.range else {
            self = .whole
            return
        }
        // If-Range: the part only if the client's copy is this version; else the whole file.
        if let condition = head.ifRange, condition != file.etag, condition != HTTPDate.format(file.modified) {
            self = .whole
            return
        }
        self = Self.part(range, size: file.size)
    }

    /// One range of "bytes=" (a list of several is answered whole: no multipart bodies, which
    /// no firmware asks for); a malformed one is ignored, as RFC 9110 §14.2 allows.
    static func part(_ header: String, size: Int) -> Choice {
        let text = header.trimmingCharacters(in: " \t")
        guard text.lowercased().hasPrefix("bytes=") else { return .whole }
        let spec = text.dropFirst(6).trimmingCharacters(in: " \t")
        guard !spec.contains(","), let dash = spec.firstIndex(of: "-") else { return .whole }
        let first = spec[..<dash], last = spec[spec.index(after: dash)...]
        func number(_ s: Substring) -> Int? { s.isEmpty || !s.utf8.allSatisfy({ (48...57).contains($0) }) ? nil : Int(s) ?? Int.max }
        if first.isEmpty {
            guard let suffix = number(last) else { return .whole }
            guard suffix > 0, size > 0 else { return .unsatisfiable }
            return .part(max(0, size - suffix)..<size)
        }
        guard let start = number(first) else { return .whole }
        let end: Int
        if last.isEmpty {
            end = size - 1
        } else {
            guard let given = number(last), given >= start else { return .whole }
            end = min(given, size - 1)
        }
        guard start < size else { return .unsatisfiable }
        return .part(start..<(end + 1))
    }

    /// If-None-Match's weak comparison: "*" or any of the listed tags, W/ or not.
    static func matches(_ list: String, _ etag: String) -> Bool {
        for item in list.split(separator: ",") {
            var tag = item.trimmingCharacters(in: " \t")
            if tag == "*" { return true }
            if tag.hasPrefix("W/") { tag.removeFirst(2) }
            if tag == etag { return true }
        }
        return false
    }
}

/// HTTP's one date format (IMF-fixdate, RFC 9110 §5.6.7): "Sun, 06 Nov 1994 08:49:37 GMT".
public enum HTTPDate {
    static let days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
    static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    public static func format(_ seconds: Int64) -> String {
        var time = time_t(seconds)
        var parts = tm()
        gmtime_r(&time, &parts)
        func two(_ n: Int32) -> String { n < 10 ? "0\(n)" : "\(n)" }
        return "\(days[Int(parts.tm_wday)]), \(two(parts.tm_mday)) \(months[Int(parts.tm_mon)]) \(parts.tm_year + 1900) "
            + "\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec)) GMT"
    }

    /// Seconds since the epoch, or nil for anything but an IMF-fixdate (the obsolete formats are
    /// ignored as an invalid date is: the condition does not apply).
    public static func parse(_ text: String) -> Int64? {
        let fields = text.split(separator: " ")
        guard fields.count == 6, fields[0].count == 4, fields[0].hasSuffix(","), fields[5] == "GMT",
              let day = Int32(fields[1]), fields[1].count == 2, let month = months.firstIndex(of: String(fields[2])),
              let year = Int32(fields[3]), fields[3].count == 4 else { return nil }
        let clock = fields[4].split(separator: ":")
        guard fields[4].count == 8, clock.count == 3, let hour = Int32(clock[0]), let minute = Int32(clock[1]),
              let second = Int32(clock[2]), (1...31).contains(day), hour < 24, minute < 60, second < 61 else { return nil }
        var parts = tm()
        parts.tm_year = year - 1900
        parts.tm_mon = Int32(month)
        parts.tm_mday = day
        parts.tm_hour = hour
        parts.tm_min = minute
        parts.tm_sec = second
        return Int64(timegm(&parts))
    }
}

/// A response's head, as bytes: the status line and the headers, every one of them said.
public struct ResponseHead {
    public var status: Status
    public var fields: [(String, String)] = []

    public init(_ status: Status) { self.status = status }

    public mutating func add(_ name: String, _ value: String) { fields.append((name, value)) }

    public var bytes: [UInt8] {
        var text = "HTTP/1.1 \(status.rawValue) \(status.reason)\r\n"
        for (name, value) in fields { text += "\(name): \(value)\r\n" }
        text += "\r\n"
        return Array(text.utf8)
    }

    /// The media type by the name's extension: `application/efi` for a UEFI image (EDK2's HTTP
    /// boot takes it by that), text for scripts and configurations, bytes for the rest.
    public static func contentType(of path: [UInt8]) -> String {
        let name = String(decoding: path.split(separator: UInt8(ascii: "/")).last ?? [], as: UTF8.self).lowercased()
        guard let dot = name.lastIndex(of: ".") else { return "application/octet-stream" }
        switch name[name.index(after: dot)...] {
        case "efi": return "application/efi"
        case "ipxe", "cfg", "conf", "txt", "cmdline", "sh": return "text/plain; charset=utf-8"
        case "iso": return "application/vnd.efi.iso"
        case "img": return "application/vnd.efi.img"
        default: return "application/octet-stream"
        }
    }
}
