/// An HTTP/1.x request's head (RFC 9112), as much of it as a file server reads: the method, the
/// path, the version, whether the connection stays open, and the headers that choose what part of
/// the file goes back. `HeadParser` reads it from bytes as they arrive.
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
    /// The request target as sent (origin form, or an absolute form), for the log.
    public var target: [UInt8]
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

    public init(method: Method, target: [UInt8], path: [UInt8], isHTTP11: Bool, keepAlive: Bool) {
        self.method = method
        self.target = target
        self.path = path
        self.isHTTP11 = isHTTP11
        self.keepAlive = keepAlive
    }

    /// The target's path without its leading "/": the name a TFTP client would ask for.
    public var name: ArraySlice<UInt8> { path.dropFirst() }

    /// A new request line's head, in this head's arrays (kept when nothing else holds them).
    mutating func start(method: Method, target: UnsafeRawBufferPointer, isHTTP11: Bool) {
        self.method = method
        self.target.removeAll(keepingCapacity: true)
        self.target.append(contentsOf: target)
        path.removeAll(keepingCapacity: true)
        self.isHTTP11 = isHTTP11
        keepAlive = false
        range = nil
        ifRange = nil
        ifNoneMatch = nil
        ifModifiedSince = nil
    }

    /// The limits a head is read within: a client that sends more is refused before the server
    /// keeps any more of it (a connection costs at most `headBytes`).
    public struct Limits: Sendable {
        /// The request line: longer is 414.
        public var lineBytes = 8192
        /// The whole head, empty lines before it, its request line and headers: more is 431.
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

    /// The head at the start of `bytes`, all there is of it (a parser of its own: for tests and
    /// for bytes that arrived whole).
    public static func parse(_ bytes: UnsafeRawBufferPointer, limits: Limits = Limits()) throws(Refusal) -> Parsed {
        var parser = HeadParser(limits: limits)
        return try parser.parse(bytes)
    }
}
