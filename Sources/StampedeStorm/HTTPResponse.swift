import StampedeIO

/// Where an `http` stage's request goes, for one machine: the server, the request's path and Host,
/// and the name its bytes are compared under (`--verify-root`): the path without its leading `/`.
struct HTTPTarget: Equatable {
    var server: SocketAddress
    var authority: String
    var path: String
    var name: String

    /// `expanded` is the stage's name with the machine's identity filled in: a path beneath
    /// `server` (the storm's `--http`), or a whole `http://ADDRESS[:PORT]/PATH`. Nil when it is
    /// neither (a URL naming a host, a relative name without a server).
    init?(_ expanded: String, server: SocketAddress?) {
        var name = Substring(expanded)
        if expanded.hasPrefix("http://") {
            let rest = expanded.dropFirst("http://".count)
            let authority = rest.prefix { $0 != "/" }
            guard !authority.isEmpty, let address = SocketAddress(parsing: String(authority), defaultPort: 80) else { return nil }
            self.server = address
            self.authority = String(authority)
            name = rest.dropFirst(authority.count)
        } else {
            guard let server else { return nil }
            self.server = server
            authority = server.description
        }
        while name.hasPrefix("/") { name = name.dropFirst() }
        self.name = String(name)
        path = "/" + Self.percentEncoded(self.name)
    }

    private static let hexDigits = Array("0123456789ABCDEF".utf8)

    /// A path's bytes as a request line carries them: what is not a URI path character is `%XX`.
    static func percentEncoded(_ path: String) -> String {
        var out = ""
        for byte in path.utf8 {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                out.unicodeScalars.append(Unicode.Scalar(byte))
            case _ where "-._~/!$&'()*+,;=:@".utf8.contains(byte):
                out.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                out += "%" + String(decoding: [hexDigits[Int(byte >> 4)], hexDigits[Int(byte & 15)]], as: UTF8.self)
            }
        }
        return out
    }

    /// The request iPXE sends for a file: a GET on a connection it keeps.
    var request: [UInt8] {
        Array("GET \(path) HTTP/1.1\r\nHost: \(authority)\r\nUser-Agent: stampede-storm\r\nConnection: keep-alive\r\n\r\n".utf8)
    }
}

/// The head of a response, as much of it as a firmware reading a file uses.
struct ResponseHead: Equatable {
    var status: Int
    /// Content-Length; nil when the server sent none.
    var contentLength: Int?
    /// Whether the connection serves the next request: HTTP/1.1 unless `Connection: close`,
    /// HTTP/1.0 only with `Connection: keep-alive`.
    var keepAlive: Bool

    init(status: Int, contentLength: Int?, keepAlive: Bool) {
        self.status = status
        self.contentLength = contentLength
        self.keepAlive = keepAlive
    }

    /// Parses a head, from its status line to its last header line (the blank line left out).
    /// Throws, saying why, for what a firmware cannot read a file from: not HTTP/1.x, a bad status
    /// or Content-Length, a chunked (or any other coded) body.
    init(parsing head: ArraySlice<UInt8>) throws(StormFailure) {
        func fail(_ why: String) -> StormFailure { .protocolError("HTTP: \(why)") }
        let lines = head.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).map { line in
            line.last == UInt8(ascii: "\r") ? line.dropLast() : line
        }
        let statusLine = String(decoding: lines.first ?? [], as: UTF8.self)
        let fields = statusLine.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: false)
        guard fields.count >= 2, fields[0] == "HTTP/1.1" || fields[0] == "HTTP/1.0",
              fields[1].count == 3, let status = Int(fields[1]), status >= 100 else {
            throw fail("not a status line: \(statusLine.prefix(80))")
        }
        self.status = status
        var keepAlive = fields[0] == "HTTP/1.1"
        var length: Int?
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: UInt8(ascii: ":")) else { throw fail("a header line without a colon") }
            let name = String(decoding: line[..<colon], as: UTF8.self).lowercased()
            let value = String(decoding: line[(colon + 1)...], as: UTF8.self).trimmingSpaces
            switch name {
            case "content-length":
                guard !value.isEmpty, value.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }), value.count <= 18, let count = Int(value) else {
                    throw fail("Content-Length \(value)")
                }
                guard length == nil || length == count else { throw fail("two Content-Lengths") }
                length = count
            case "transfer-encoding":
                throw fail("Transfer-Encoding \(value): a file's body must have a Content-Length")
            case "connection":
                let tokens = value.lowercased().split(separator: ",").map { String($0).trimmingSpaces }
                if tokens.contains("close") { keepAlive = false } else if tokens.contains("keep-alive") { keepAlive = true }
            default:
                break
            }
        }
        contentLength = length
        self.keepAlive = keepAlive
    }
}

extension String {
    /// Without the spaces and tabs at either end (a header value's optional whitespace).
    fileprivate var trimmingSpaces: String {
        let scalars = unicodeScalars
        guard let first = scalars.firstIndex(where: { $0 != " " && $0 != "\t" }) else { return "" }
        let last = scalars.lastIndex(where: { $0 != " " && $0 != "\t" })!
        return String(scalars[first...last])
    }
}
