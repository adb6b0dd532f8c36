/// An HTTP/1.x request's head (RFC 9112), as much of it as a file server reads: the method, the
/// path, the version, whether the connection stays open, and the headers that choose what part of
/// the file goes back. Parsed from bytes alone: no socket, no clock.
public struct RequestHead: Equatable, Sendable {
    public enum Method: Equatable, Sendable {
        case get, head
        /// Anything else (405): its name, for the log.
        case other(String)

        public var name: String {
            switch self {
            case .get: "GET"
            case .head: "HEAD"
            case .other(let name): name
            }
        }
    }

    public var method: Method
    /// The request target as sent (origin form, or the path of an absolute form), for the log.
    public var target: String
    /// The target's path, percent-decoded, without its query: "/boot/ipxe.efi".
    public var path: [UInt8]
    /// HTTP/1.1 (true) or HTTP/1.0.
    public var isHTTP11: Bool
    /// The connection stays open after the response: 1.1 unless "Connection: close", 1.0 only
    /// with "Connection: keep-alive".
    public var keepAlive: Bool
    public var range: String?
    public var ifRange: String?
    public var ifNoneMatch: String?
    public var ifModifiedSince: String?

    /// The limits a head is read within: a client that sends more is refused before the server
    /// keeps any more of it (a connection costs at most `headBytes`).
    public struct Limits: Sendable {
        /// The request line: longer is 414.
        public var lineBytes = 8192
        /// The whole head, request line and headers: more is 431.
        public var headBytes = 16384
        /// Header lines: more is 431.
        public var headerCount = 100

        public init() {}
    }

    /// Why a head is refused, and with which status; the connection is closed after it.
    public struct Refusal: Error, Equatable, Sendable {
        public var status: Status
        public var reason: String
        /// The request line begins "HEAD ": the answer has no body (RFC 9110 §9.3.2), whatever
        /// else is wrong with the request.
        public var toHead = false

        public init(_ status: Status, _ reason: String, toHead: Bool = false) {
            self.status = status
            self.reason = reason
            self.toHead = toHead
        }
    }

    public enum Parsed: Equatable, Sendable {
        /// Not all of it yet: read more.
        case incomplete
        /// A whole head of `length` bytes; the bytes after it are the next request's (pipelining).
        case complete(RequestHead, length: Int)
    }

    /// Parses the head at the start of `bytes`. Empty lines before the request line are skipped
    /// (RFC 9112 §2.2); a line may end with CR LF or a bare LF.
    public static func parse(_ bytes: UnsafeRawBufferPointer, limits: Limits = Limits()) throws(Refusal) -> Parsed {
        var start = 0
        while start < bytes.count && (bytes[start] == 13 || bytes[start] == 10) { start += 1 }
        do {
            return try parse(bytes, from: start, limits: limits)
        } catch {
            var refusal = error
            refusal.toHead = bytes[start...].starts(with: "HEAD ".utf8)
            throw refusal
        }
    }

    /// `parse` from the request line's first byte.
    static func parse(_ bytes: UnsafeRawBufferPointer, from start: Int, limits: Limits) throws(Refusal) -> Parsed {
        guard let lineEnd = Self.lineEnd(bytes, from: start, within: limits.lineBytes) else {
            if bytes.count - start > limits.lineBytes { throw Refusal(.uriTooLong, "request line longer than \(limits.lineBytes) bytes") }
            return .incomplete
        }
        var head = try requestLine(UnsafeRawBufferPointer(rebasing: bytes[start..<lineEnd.content]))
        var cursor = lineEnd.next
        var headers = 0
        var host = false
        var connection: [String] = []
        var contentLength: String?
        while true {
            guard let end = Self.lineEnd(bytes, from: cursor, within: limits.headBytes - cursor) else {
                if bytes.count > limits.headBytes { throw Refusal(.headersTooLarge, "head longer than \(limits.headBytes) bytes") }
                return .incomplete
            }
            if end.content == cursor {
                cursor = end.next
                break
            }
            headers += 1
            guard headers <= limits.headerCount else { throw Refusal(.headersTooLarge, "more than \(limits.headerCount) header lines") }
            let line = UnsafeRawBufferPointer(rebasing: bytes[cursor..<end.content])
            cursor = end.next
            let (name, value) = try field(line)
            switch name {
            case "host":
                guard !host else { throw Refusal(.badRequest, "two Host headers") }
                host = true
            case "connection":
                connection += value.lowercased().split(separator: ",").map { $0.trimmingCharacters(in: " \t") }
            case "content-length":
                guard contentLength == nil || contentLength == value else { throw Refusal(.badRequest, "two Content-Length headers") }
                contentLength = value
            case "transfer-encoding":
                throw Refusal(.badRequest, "a request body (Transfer-Encoding) is not accepted")
            case "range": head.range = value
            case "if-range": head.ifRange = value
            case "if-none-match": head.ifNoneMatch = head.ifNoneMatch.map { $0 + ", " + value } ?? value
            case "if-modified-since": head.ifModifiedSince = value
            default: break
            }
        }
        if let contentLength {
            guard !contentLength.isEmpty, contentLength.utf8.allSatisfy({ (48...57).contains($0) }) else {
                throw Refusal(.badRequest, "Content-Length \"\(contentLength)\" is not a number")
            }
            guard contentLength.utf8.allSatisfy({ $0 == 48 }) else { throw Refusal(.badRequest, "a request body is not accepted") }
        }
        if head.isHTTP11 && !host { throw Refusal(.badRequest, "an HTTP/1.1 request without Host") }
        head.keepAlive = head.isHTTP11 ? !connection.contains("close") : connection.contains("keep-alive")
        return .complete(head, length: cursor)
    }

    /// The end of the line starting at `from` (its content's end, and where the next starts), if
    /// it ends within `within` bytes.
    static func lineEnd(_ bytes: UnsafeRawBufferPointer, from: Int, within: Int) -> (content: Int, next: Int)? {
        let limit = min(bytes.count, from + max(0, within))
        var i = from
        while i < limit {
            if bytes[i] == 10 { return (i > from && bytes[i - 1] == 13 ? i - 1 : i, i + 1) }
            i += 1
        }
        return nil
    }

    /// "GET /boot/ipxe.efi HTTP/1.1"
    static func requestLine(_ line: UnsafeRawBufferPointer) throws(Refusal) -> RequestHead {
        let parts = line.split(separator: 32, omittingEmptySubsequences: false)
        guard parts.count == 3, !parts[0].isEmpty, parts[0].allSatisfy(isToken) else {
            throw Refusal(.badRequest, "a malformed request line")
        }
        let version = Array(parts[2])
        guard version.count == 8, version.starts(with: Array("HTTP/".utf8)), version[6] == UInt8(ascii: "."),
              (48...57).contains(version[5]), (48...57).contains(version[7]) else {
            throw Refusal(.badRequest, "a malformed request line")
        }
        guard version[5] == UInt8(ascii: "1") else { throw Refusal(.versionNotSupported, "HTTP/\(version[5] - 48).\(version[7] - 48)") }
        let methodName = String(decoding: parts[0], as: UTF8.self)
        let method: Method = switch methodName {
        case "GET": .get
        case "HEAD": .head
        default: .other(methodName)
        }
        let rawTarget = Array(parts[1])
        guard !rawTarget.isEmpty, rawTarget.allSatisfy({ $0 > 32 && $0 < 127 }) else {
            throw Refusal(.badRequest, "a malformed request target")
        }
        var target = rawTarget[...]
        // The absolute form ("http://host/path"), which a proxy-minded client may send.
        for scheme in ["http://", "https://"] where target.count > scheme.utf8.count
            && String(decoding: target.prefix(scheme.utf8.count), as: UTF8.self).lowercased() == scheme {
            let authority = target.dropFirst(scheme.utf8.count)
            target = authority.firstIndex(of: UInt8(ascii: "/")).map { authority[$0...] } ?? [UInt8(ascii: "/")][...]
        }
        if case .other = method, target.first != UInt8(ascii: "/") {
            // "OPTIONS *", "CONNECT host:port": refused by method, not as a bad target.
            return RequestHead(method: method, target: String(decoding: rawTarget, as: UTF8.self), path: [], isHTTP11: version[7] >= 49,
                               keepAlive: false)
        }
        guard target.first == UInt8(ascii: "/") else { throw Refusal(.badRequest, "a request target that is not a path") }
        let pathEnd = target.firstIndex { $0 == UInt8(ascii: "?") || $0 == UInt8(ascii: "#") } ?? target.endIndex
        let path = try percentDecoded(target[..<pathEnd])
        return RequestHead(method: method, target: String(decoding: rawTarget, as: UTF8.self), path: path,
                           isHTTP11: version[7] >= 49, keepAlive: false)
    }

    /// "%2F" and the like decoded; a NUL, or a "%" without two hex digits, is refused.
    static func percentDecoded(_ bytes: ArraySlice<UInt8>) throws(Refusal) -> [UInt8] {
        func hex(_ c: UInt8) -> UInt8? {
            switch c {
            case 48...57: c - 48
            case 65...70: c - 55
            case 97...102: c - 87
            default: nil
            }
        }
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var i = bytes.startIndex
        while i < bytes.endIndex {
            var byte = bytes[i]
            if byte == UInt8(ascii: "%") {
                guard i + 2 < bytes.endIndex, let high = hex(bytes[i + 1]), let low = hex(bytes[i + 2]) else {
                    throw Refusal(.badRequest, "a malformed percent-encoding in the path")
                }
                byte = high << 4 | low
                i += 2
            }
            guard byte != 0 else { throw Refusal(.badRequest, "a NUL in the path") }
            out.append(byte)
            i += 1
        }
        return out
    }

    /// "Name: value": the name lower-cased, the value without the spaces around it.
    static func field(_ line: UnsafeRawBufferPointer) throws(Refusal) -> (String, String) {
        guard let colon = line.firstIndex(of: UInt8(ascii: ":")), colon > 0,
              line[..<colon].allSatisfy(isToken) else {
            // A line folded onto the previous one (obs-fold) starts with a space: refused too.
            throw Refusal(.badRequest, "a malformed header line")
        }
        var value = line[(colon + 1)...]
        while let first = value.first, first == 32 || first == 9 { value = value.dropFirst() }
        while let last = value.last, last == 32 || last == 9 { value = value.dropLast() }
        guard value.allSatisfy({ $0 >= 32 || $0 == 9 }), !value.contains(127) else {
            throw Refusal(.badRequest, "a control character in a header")
        }
        return (String(decoding: line[..<colon], as: UTF8.self).lowercased(), String(decoding: value, as: UTF8.self))
    }

    /// RFC 9110's tchar.
    static func isToken(_ c: UInt8) -> Bool {
        switch c {
        case 48...57, 65...90, 97...122: true
        default: Array("!#$%&'*+-.^_`|~".utf8).contains(c)
        }
    }
}

/// The statuses the server answers with.
public enum Status: Int, Sendable {
    case ok = 200
    case partialContent = 206
    case notModified = 304
    case badRequest = 400
    case forbidden = 403
    case notFound = 404
    case methodNotAllowed = 405
    case requestTimeout = 408
    case uriTooLong = 414
    case rangeNotSatisfiable = 416
    case headersTooLarge = 431
    case internalServerError = 500
    case serviceUnavailable = 503
    case versionNotSupported = 505

    public var reason: String {
        switch self {
        case .ok: "OK"
        case .partialContent: "Partial Content"
        case .notModified: "Not Modified"
        case .badRequest: "Bad Request"
        case .forbidden: "Forbidden"
        case .notFound: "Not Found"
        case .methodNotAllowed: "Method Not Allowed"
        case .requestTimeout: "Request Timeout"
        case .uriTooLong: "URI Too Long"
        case .rangeNotSatisfiable: "Range Not Satisfiable"
        case .headersTooLarge: "Request Header Fields Too Large"
        case .internalServerError: "Internal Server Error"
        case .serviceUnavailable: "Service Unavailable"
        case .versionNotSupported: "HTTP Version Not Supported"
        }
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
