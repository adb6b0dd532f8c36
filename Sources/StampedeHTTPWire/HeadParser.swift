/// Reads a request head as its bytes arrive, going on each time from where the last read stopped
/// (nginx's `r->state`): a head sent a byte at a time costs one pass over its bytes, not a pass
/// over all of them per byte. Each line is read once, when its line feed comes; a header the
/// server keeps becomes a String, every other is looked at in place. Pure: bytes in, a head or a
/// refusal out. The head's target and path are written into the arrays of the head before it, so
/// a kept-alive connection's requests allocate nothing (once the head handed out is let go).
///
/// The caller keeps the bytes (a connection's input) and passes all of them, from the head's first
/// byte, each time; after a complete head it drops that head's bytes and calls `reset`.
public struct HeadParser: Sendable {
    public let limits: RequestHead.Limits
    /// Where the line being read begins.
    private var lineStart = 0
    /// Bytes before this hold no line feed of that line: a read goes on from here.
    private var scanned = 0
    /// The head being read; its arrays are kept from one request to the next.
    private var head = RequestHead(method: .get, target: [], path: [], isHTTP11: true, keepAlive: false)
    /// The request line is read: header lines come now.
    private var requestLineRead = false
    private var headers = 0
    private var sawHost = false
    private var connectionClose = false
    private var connectionKeepAlive = false
    private var contentLength: Int?

    public init(limits: RequestHead.Limits = RequestHead.Limits()) {
        self.limits = limits
    }

    /// For the next request of the connection, its bytes starting at offset 0 again.
    public mutating func reset() {
        lineStart = 0
        scanned = 0
        requestLineRead = false
        headers = 0
        sawHost = false
        connectionClose = false
        connectionKeepAlive = false
        contentLength = nil
    }

    /// The head, if `bytes` now hold all of it; `.incomplete` otherwise. Throws the refusal (the
    /// connection answers it and closes).
    public mutating func parse(_ bytes: UnsafeRawBufferPointer) throws(RequestHead.Refusal) -> RequestHead.Parsed {
        do {
            return try readLines(bytes)
        } catch {
            var refusal = error
            refusal.toHead = Self.beginsHEAD(bytes)
            throw refusal
        }
    }

    private mutating func readLines(_ bytes: UnsafeRawBufferPointer) throws(RequestHead.Refusal) -> RequestHead.Parsed {
        while let lineFeed = Grammar.lineFeed(in: bytes, from: max(scanned, lineStart)) {
            guard lineFeed < limits.headBytes else { throw tooLarge }
            let line = lineStart..<Grammar.contentEnd(of: bytes, lineStart: lineStart, lineFeed: lineFeed)
            lineStart = lineFeed + 1
            if !requestLineRead {
                // Empty lines before the request line are passed over (RFC 9112 §2.2).
                guard !line.isEmpty else { continue }
                guard line.count <= limits.lineBytes else { throw lineTooLong }
                try readRequestLine(bytes, line)
                requestLineRead = true
                continue
            }
            if line.isEmpty { return .complete(try finished(), length: lineStart) }
            headers += 1
            guard headers <= limits.headerCount else {
                throw RequestHead.Refusal(.headersTooLarge, "more than \(limits.headerCount) header lines")
            }
            try field(bytes, line)
        }
        scanned = bytes.count
        // No line feed since `lineStart` yet: what cannot end within the limits is refused now.
        // A carriage return last may end the line when its line feed comes: it is not the line's.
        let pending = bytes.count - lineStart - (bytes.count > lineStart && bytes[bytes.count - 1] == 13 ? 1 : 0)
        if !requestLineRead && pending > limits.lineBytes && !Self.allLineBreaks(bytes, from: lineStart) {
            throw lineTooLong
        }
        if bytes.count > limits.headBytes { throw tooLarge }
        return .incomplete
    }

    private var lineTooLong: RequestHead.Refusal {
        RequestHead.Refusal(.uriTooLong, "request line longer than \(limits.lineBytes) bytes")
    }

    private var tooLarge: RequestHead.Refusal {
        RequestHead.Refusal(.headersTooLarge, "head longer than \(limits.headBytes) bytes")
    }

    /// The head's end: what the whole of it says.
    private mutating func finished() throws(RequestHead.Refusal) -> RequestHead {
        if let contentLength, contentLength != 0 { throw RequestHead.Refusal(.badRequest, "a request body is not accepted") }
        if head.isHTTP11 && !sawHost { throw RequestHead.Refusal(.badRequest, "an HTTP/1.1 request without Host") }
        head.keepAlive = head.isHTTP11 ? !connectionClose : connectionKeepAlive
        return head
    }

    /// One header line: kept when the server reads it, looked at in place otherwise.
    private mutating func field(_ bytes: UnsafeRawBufferPointer, _ line: Range<Int>) throws(RequestHead.Refusal) {
        // A line folded onto the previous one (obs-fold) starts with a space: refused too.
        guard let (name, value) = Grammar.field(bytes, line) else { throw RequestHead.Refusal(.badRequest, "a malformed header line") }
        guard Grammar.allValueBytes(bytes, value) else { throw RequestHead.Refusal(.badRequest, "a control character in a header") }
        func named(_ lowercase: StaticString) -> Bool { Grammar.equalsIgnoringCase(bytes, name, lowercase) }
        if named("host") {
            guard !sawHost else { throw RequestHead.Refusal(.badRequest, "two Host headers") }
            sawHost = true
        } else if named("connection") {
            Grammar.forEachElement(bytes, value) { option in
                if Grammar.equalsIgnoringCase(bytes, option, "close") { connectionClose = true }
                if Grammar.equalsIgnoringCase(bytes, option, "keep-alive") { connectionKeepAlive = true }
            }
        } else if named("content-length") {
            guard let length = Grammar.decimal(bytes, value) else {
                throw RequestHead.Refusal(.badRequest, "Content-Length \"\(Grammar.string(bytes, value).prefix(40))\" is not a number")
            }
            guard contentLength == nil || contentLength == length else { throw RequestHead.Refusal(.badRequest, "two Content-Length headers") }
            contentLength = length
        } else if named("transfer-encoding") {
            throw RequestHead.Refusal(.badRequest, "a request body (Transfer-Encoding) is not accepted")
        } else if named("range") {
            head.range = Grammar.string(bytes, value)
        } else if named("if-range") {
            head.ifRange = Grammar.string(bytes, value)
        } else if named("if-none-match") {
            let tags = Grammar.string(bytes, value)
            head.ifNoneMatch = head.ifNoneMatch.map { $0 + ", " + tags } ?? tags
        } else if named("if-modified-since") {
            head.ifModifiedSince = Grammar.string(bytes, value)
        }
    }

    /// "GET /boot/ipxe.efi HTTP/1.1", read into `head`: its target and path go into the arrays the
    /// last request's head left (a kept-alive connection's heads take no new memory).
    mutating func readRequestLine(_ bytes: UnsafeRawBufferPointer, _ line: Range<Int>) throws(RequestHead.Refusal) {
        let malformed = RequestHead.Refusal(.badRequest, "a malformed request line")
        guard let firstSpace = Grammar.firstIndex(of: 32, in: bytes, line),
              let lastSpace = Grammar.lastIndex(of: 32, in: bytes, (firstSpace + 1)..<line.upperBound) else { throw malformed }
        let method = line.lowerBound..<firstSpace, target = (firstSpace + 1)..<lastSpace, version = (lastSpace + 1)..<line.upperBound
        guard !method.isEmpty, Grammar.allTokens(bytes, method) else { throw malformed }
        // "HTTP/" DIGIT "." DIGIT, and nothing between the three parts but one space each.
        // RFC 9112 §2.3: the name is case-sensitive.
        guard version.count == 8, Grammar.equals(bytes, version.lowerBound..<(version.lowerBound + 5), "HTTP/"),
              bytes[version.lowerBound + 6] == UInt8(ascii: "."), Grammar.isDigit(bytes[version.lowerBound + 5]),
              Grammar.isDigit(bytes[version.lowerBound + 7]), Grammar.firstIndex(of: 32, in: bytes, target) == nil else { throw malformed }
        let major = bytes[version.lowerBound + 5], minor = bytes[version.lowerBound + 7]
        guard major == UInt8(ascii: "1") else { throw RequestHead.Refusal(.versionNotSupported, "HTTP/\(major - 48).\(minor - 48)") }
        let parsedMethod: RequestHead.Method =
            if Grammar.equals(bytes, method, "GET") { .get } else if Grammar.equals(bytes, method, "HEAD") { .head } else {
                .other(Grammar.string(bytes, method))
            }
        guard !target.isEmpty, Grammar.allVisible(bytes, target) else {
            throw RequestHead.Refusal(.badRequest, "a malformed request target")
        }
        head.start(method: parsedMethod, target: UnsafeRawBufferPointer(rebasing: bytes[target]), isHTTP11: minor >= UInt8(ascii: "1"))
        var pathStart = target.lowerBound
        // The absolute form ("http://host/path"), which a proxy-minded client may send.
        func after(_ scheme: StaticString) -> Int? {
            let prefix = target.lowerBound..<min(target.upperBound, target.lowerBound + scheme.utf8CodeUnitCount)
            guard target.count > scheme.utf8CodeUnitCount, Grammar.equalsIgnoringCase(bytes, prefix, scheme) else { return nil }
            return Grammar.firstIndex(of: UInt8(ascii: "/"), in: bytes, prefix.upperBound..<target.upperBound) ?? target.upperBound
        }
        if let path = after("http://") ?? after("https://") { pathStart = path }
        // "OPTIONS *", "CONNECT host:port": refused by method, not as a bad target; no path.
        if case .other = parsedMethod, pathStart == target.lowerBound, bytes[pathStart] != UInt8(ascii: "/") { return }
        guard pathStart == target.upperBound || bytes[pathStart] == UInt8(ascii: "/") else {
            throw RequestHead.Refusal(.badRequest, "a request target that is not a path")
        }
        guard pathStart < target.upperBound else {
            head.path.append(UInt8(ascii: "/"))
            return
        }
        var pathEnd = pathStart
        while pathEnd < target.upperBound && bytes[pathEnd] != UInt8(ascii: "?") && bytes[pathEnd] != UInt8(ascii: "#") { pathEnd += 1 }
        try Self.percentDecode(bytes, pathStart..<pathEnd, into: &head.path)
    }

    /// "%2F" and the like decoded onto `out`; a NUL, or a "%" without two hex digits, is refused.
    static func percentDecode(_ bytes: UnsafeRawBufferPointer, _ range: Range<Int>, into out: inout [UInt8]) throws(RequestHead.Refusal) {
        func hex(_ c: UInt8) -> UInt8? {
            switch c {
            case 48...57: c - 48
            case 65...70: c - 55
            case 97...102: c - 87
            default: nil
            }
        }
        var i = range.lowerBound
        while i < range.upperBound {
            var byte = bytes[i]
            if byte == UInt8(ascii: "%") {
                guard i + 2 < range.upperBound, let high = hex(bytes[i + 1]), let low = hex(bytes[i + 2]) else {
                    throw RequestHead.Refusal(.badRequest, "a malformed percent-encoding in the path")
                }
                byte = high << 4 | low
                i += 2
            }
            guard byte != 0 else { throw RequestHead.Refusal(.badRequest, "a NUL in the path") }
            out.append(byte)
            i += 1
        }
    }

    /// The request line, as far as it came, begins "HEAD " (after empty lines).
    static func beginsHEAD(_ bytes: UnsafeRawBufferPointer) -> Bool {
        // After the empty lines before it: line feeds, each with or without its carriage return
        // (a carriage return alone is the line's).
        var i = 0
        while i < bytes.count {
            if bytes[i] == 10 {
                i += 1
            } else if bytes[i] == 13 && i + 1 < bytes.count && bytes[i + 1] == 10 {
                i += 2
            } else {
                break
            }
        }
        return i + 5 <= bytes.count && Grammar.equals(bytes, i..<(i + 5), "HEAD ")
    }

    /// Only CR and LF from `from`: empty lines still coming before a request line.
    static func allLineBreaks(_ bytes: UnsafeRawBufferPointer, from: Int) -> Bool {
        var i = from
        while i < bytes.count && (bytes[i] == 13 || bytes[i] == 10) { i += 1 }
        return i == bytes.count
    }
}
