/// A response's head as a client reads it (the storm's machines), as much as a firmware reading a
/// file uses: the status, Content-Length, whether the connection serves the next request. Read
/// with the grammar the server reads requests with (`Grammar`).
public struct ReceivedResponseHead: Equatable, Sendable {
    public var status: Int
    /// Content-Length; nil when the server sent none.
    public var contentLength: Int?
    /// HTTP/1.1 unless `Connection: close`, HTTP/1.0 only with `Connection: keep-alive`.
    public var keepAlive: Bool

    public init(status: Int, contentLength: Int?, keepAlive: Bool) {
        self.status = status
        self.contentLength = contentLength
        self.keepAlive = keepAlive
    }

    /// What a client cannot read a file from: not HTTP/1.x, a bad status or Content-Length, a
    /// chunked (or any other coded) body.
    public struct Unreadable: Error, Equatable, Sendable {
        public var reason: String
    }

    /// The head at the start of `bytes` and its length (blank line included), or nil while its
    /// blank line has not come.
    public static func read(_ bytes: UnsafeRawBufferPointer) throws(Unreadable) -> (ReceivedResponseHead, length: Int)? {
        var lineStart = 0
        var head: ReceivedResponseHead?
        while let lineFeed = Grammar.lineFeed(in: bytes, from: lineStart) {
            let line = lineStart..<Grammar.contentEnd(of: bytes, lineStart: lineStart, lineFeed: lineFeed)
            lineStart = lineFeed + 1
            guard var parsed = head else {
                head = try statusLine(bytes, line)
                continue
            }
            if line.isEmpty { return (parsed, lineStart) }
            guard let (name, value) = Grammar.field(bytes, line) else { throw Unreadable(reason: "a malformed header line") }
            if Grammar.equalsIgnoringCase(bytes, name, "content-length") {
                guard let count = Grammar.decimal(bytes, value) else {
                    throw Unreadable(reason: "Content-Length \(Grammar.string(bytes, value).prefix(40))")
                }
                guard parsed.contentLength == nil || parsed.contentLength == count else { throw Unreadable(reason: "two Content-Lengths") }
                parsed.contentLength = count
            } else if Grammar.equalsIgnoringCase(bytes, name, "transfer-encoding") {
                throw Unreadable(reason: "Transfer-Encoding \(Grammar.string(bytes, value).prefix(40)): a file's body must have a Content-Length")
            } else if Grammar.equalsIgnoringCase(bytes, name, "connection") {
                var close = false, keep = false
                Grammar.forEachElement(bytes, value) { option in
                    if Grammar.equalsIgnoringCase(bytes, option, "close") { close = true }
                    if Grammar.equalsIgnoringCase(bytes, option, "keep-alive") { keep = true }
                }
                if close { parsed.keepAlive = false } else if keep { parsed.keepAlive = true }
            }
            head = parsed
        }
        return nil
    }

    /// "HTTP/1.1 200 OK"
    static func statusLine(_ bytes: UnsafeRawBufferPointer, _ line: Range<Int>) throws(Unreadable) -> ReceivedResponseHead {
        let text = Grammar.string(bytes, line)
        let fields = text.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: false)
        guard fields.count >= 2, fields[0] == "HTTP/1.1" || fields[0] == "HTTP/1.0",
              fields[1].count == 3, fields[1].utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }), let status = Int(fields[1]), status >= 100 else {
            throw Unreadable(reason: "not a status line: \(text.prefix(80))")
        }
        return ReceivedResponseHead(status: status, contentLength: nil, keepAlive: fields[0] == "HTTP/1.1")
    }
}
