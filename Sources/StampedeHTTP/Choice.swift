import StampedeFiles
import StampedeHTTPWire

/// What a file server needs to know of a file to answer a request for it.
public struct FileFacts: Equatable, Sendable {
    public var size: Int
    /// The modification time, in whole seconds since the epoch (HTTP dates have no more).
    public var modified: Int64
    /// A strong validator of this version of the file.
    public var etag: EntityTag

    public init(size: Int, modified: Int64, etag: EntityTag) {
        self.size = size
        self.modified = modified
        self.etag = etag
    }

    public init(_ key: FileKey) {
        size = key.size
        modified = key.modified / 1_000_000_000
        etag = EntityTag(inode: key.inode, size: UInt64(key.size), modified: UInt64(bitPattern: key.modified),
                         changed: UInt64(bitPattern: key.changed))
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
            if Self.matches(tags, file.etag.text) {
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
        if let condition = head.ifRange, condition != file.etag.text, condition != HTTPDate.format(file.modified) {
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

extension String {
    func trimmingCharacters(in set: String) -> String {
        var s = Substring(self)
        while let c = s.first, set.contains(c) { s = s.dropFirst() }
        while let c = s.last, set.contains(c) { s = s.dropLast() }
        return String(s)
    }
}

extension Substring {
    func trimmingCharacters(in set: String) -> String { String(self).trimmingCharacters(in: set) }
}
