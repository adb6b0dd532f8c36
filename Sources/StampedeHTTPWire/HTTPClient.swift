import CStampedeSys
import Glibc
import StampedeIO

/// Stampede's one HTTP client: a request over plain HTTP, its answer read whole, in at most a
/// given time. The storm's reading of a server's metrics, `stampede machines list`'s of
/// `/machines`, and the site's inventory's answers (`--machines-api`). The answer's head is read
/// with the reader of answers (`ReceivedResponseHead`).
public enum HTTPClient {
    /// Why a request got no answer (or, from `body`, not a 200).
    public struct Failure: Error, CustomStringConvertible {
        public let description: String

        public init(description: String) { self.description = description }
    }

    /// An answer: its status and its body.
    public struct Answer: Sendable {
        public var status: Int
        public var body: [UInt8]

        public init(status: Int, body: [UInt8]) {
            self.status = status
            self.body = body
        }
    }

    /// GET `url` (http://HOST:PORT/PATH), at most `timeout` seconds: its body, when it says 200.
    public static func body(_ url: String, timeout: Int = 5) throws(Failure) -> [UInt8] {
        let answer = try request(url, timeout: timeout)
        guard answer.status == 200 else { throw Failure(description: "\(url): the server answered \(answer.status)") }
        return answer.body
    }

    /// `method` `url` (http://HOST:PORT/PATH, no body), the whole exchange in at most `timeout`
    /// seconds (a server that sends its answer a byte at a time is cut off too).
    public static func request(_ url: String, method: String = "GET", timeout: Int = 5) throws(Failure) -> Answer {
        let deadline = stampede_monotonic_ns() + Int64(timeout) * 1_000_000_000
        guard url.hasPrefix("http://") else { throw Failure(description: "\(url): only http:// URLs") }
        let rest = url.dropFirst("http://".count)
        let authority = rest.prefix { $0 != "/" }
        let path = rest.dropFirst(authority.count)
        var host = String(authority), port = "80"
        if authority.hasPrefix("["), let close = authority.firstIndex(of: "]") {
            host = String(authority[authority.index(after: authority.startIndex)..<close])
            let after = authority[authority.index(after: close)...]
            if after.hasPrefix(":") { port = String(after.dropFirst()) }
        } else if let colon = authority.lastIndex(of: ":") {
            host = String(authority[..<colon])
            port = String(authority[authority.index(after: colon)...])
        }
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var found: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, port, &hints, &found) == 0, let info = found else {
            throw Failure(description: "\(url): cannot resolve \(host):\(port)")
        }
        defer { freeaddrinfo(found) }
        let fd = socket(info.pointee.ai_family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw Failure(description: "\(url): \(Errno.current)") }
        defer { close(fd) }
        var limit = timeval(tv_sec: timeout, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
        // A wait with a timeout (SO_RCVTIMEO, SO_SNDTIMEO) ends in EINTR when anything interrupts
        // it: a signal, or io_uring's task work for a ring on this thread (the storm's, its last
        // completions posted as its connections close). The call goes again; an interrupted
        // connect goes on in the kernel, and connect says EALREADY until it is done (EISCONN).
        var connected = connect(fd, info.pointee.ai_addr, info.pointee.ai_addrlen)
        var waited = 0  // milliseconds, up to `timeout`
        while connected != 0 && (errno == EINTR || errno == EALREADY) && waited < timeout * 1000 {
            usleep(1000)
            waited += 1
            connected = connect(fd, info.pointee.ai_addr, info.pointee.ai_addrlen)
        }
        guard connected == 0 || errno == EISCONN else {
            throw Failure(description: "\(url): cannot connect: \(Errno.current)")
        }
        func again(_ call: () -> Int) -> Int {
            var result = call()
            while result < 0 && errno == EINTR { result = call() }
            return result
        }
        let request = "\(method) \(path.isEmpty ? "/" : path) HTTP/1.1\r\nHost: \(authority)\r\n\(method == "GET" ? "" : "Content-Length: 0\r\n")Connection: close\r\n\r\n"
        let sent = request.utf8CString.withUnsafeBytes { bytes in again { send(fd, bytes.baseAddress, bytes.count - 1, Int32(MSG_NOSIGNAL)) } }
        guard sent == request.utf8.count else { throw Failure(description: "\(url): cannot send the request: \(Errno.current)") }
        // The answer's head is read with the storm's own reader of answers (ReceivedResponseHead);
        // its body is read to its Content-Length, or to the end when it has none.
        var response: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        var head: (ReceivedResponseHead, length: Int)?
        while true {
            if let (parsed, length) = head, let expected = parsed.contentLength, response.count - length >= expected { break }
            guard stampede_monotonic_ns() < deadline else { throw Failure(description: "\(url): no whole answer in \(timeout) s") }
            let count = chunk.withUnsafeMutableBytes { bytes in again { recv(fd, bytes.baseAddress, bytes.count, 0) } }
            if count < 0 { throw Failure(description: "\(url): \(Errno.current)") }
            if count == 0 { break }
            response += chunk[..<count]
            if response.count > 64 << 20 { throw Failure(description: "\(url): the answer is over 64 MiB") }
            if head == nil {
                let read = response.withUnsafeBytes { bytes in Result { () throws(ReceivedResponseHead.Unreadable) in try ReceivedResponseHead.read(bytes) } }
                switch read {
                case .success(let parsed): head = parsed
                case .failure(let unreadable): throw Failure(description: "\(url): not an HTTP answer: \(unreadable.reason)")
                }
            }
        }
        guard let (parsed, length) = head else { throw Failure(description: "\(url): not an HTTP answer") }
        let body = response[length...].prefix(parsed.contentLength ?? Int.max)
        if let expected = parsed.contentLength, body.count < expected {
            throw Failure(description: "\(url): the answer ended after \(body.count) of its \(expected) bytes")
        }
        return Answer(status: Int(parsed.status), body: Array(body))
    }
}
