import CStampedeSys
import Glibc
import StampedeIO
import Synchronization

/// Stampede's one HTTP client: a request over plain HTTP, its answer read whole, in at most a
/// given time. The storm's reading of a server's metrics, `stampede machines list`'s of
/// `/machines`, and the site's inventory's answers (`--machines-api`, through a `Pool` that keeps
/// its connections open between calls). The answer's head is read with the reader of answers
/// (`ReceivedResponseHead`).
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
    /// seconds (a server that sends its answer a byte at a time is cut off too), on a connection
    /// of its own.
    public static func request(_ url: String, method: String = "GET", timeout: Int = 5) throws(Failure) -> Answer {
        let target = try Target(url)
        let deadline = stampede_monotonic_ns() + Int64(timeout) * 1_000_000_000
        return try exchangeOnNewConnection(target, method: method, keepAlive: false, deadline: deadline, timeout: timeout).answer
    }

    /// A new connection to `target`'s server and the exchange on it; the connection is closed
    /// unless `keepAlive` and the answer left it open (`open`: then the caller's).
    static func exchangeOnNewConnection(_ target: Target, method: String, keepAlive: Bool, deadline: Int64,
                                        timeout: Int) throws(Failure) -> (answer: Answer, open: Int32?) {
        let fd = try connect(target, timeout: timeout)
        do throws(ExchangeFailure) {
            let done = try exchange(on: fd, target, method: method, keepAlive: keepAlive, deadline: deadline, timeout: timeout)
            if done.reusable { return (done.answer, fd) }
            close(fd)
            return (done.answer, nil)
        } catch {
            close(fd)
            throw error.failure
        }
    }

    /// Connections kept open between requests (HTTP/1.1 keep-alive), for a caller that asks one
    /// server again and again from several threads: a request takes an idle connection to its
    /// server or opens one, and gives it back when the answer left it open. A connection the
    /// server closed while idle is found when its request gets no byte back: the request goes
    /// once more on a new one.
    public final class Pool: Sendable {
        private let idle = Mutex<[(authority: String, fd: Int32)]>([])
        /// Idle connections kept at most (the rest are closed).
        public let limit: Int

        public init(limit: Int) { self.limit = max(1, limit) }

        deinit { idle.withLock { $0.forEach { close($0.fd) } } }

        /// Connections idle now.
        public var count: Int { idle.withLock { $0.count } }

        public func request(_ url: String, method: String = "GET", timeout: Int = 5) throws(Failure) -> Answer {
            let target = try Target(url)
            let deadline = stampede_monotonic_ns() + Int64(timeout) * 1_000_000_000
            if let kept = take(target.authority) {
                do throws(ExchangeFailure) {
                    let done = try exchange(on: kept, target, method: method, keepAlive: true, deadline: deadline, timeout: timeout)
                    finish(kept, target.authority, reusable: done.reusable)
                    return done.answer
                } catch {
                    close(kept)
                    guard error.nothingBack else { throw error.failure }
                }
            }
            let done = try exchangeOnNewConnection(target, method: method, keepAlive: true, deadline: deadline, timeout: timeout)
            if let open = done.open { finish(open, target.authority, reusable: true) }
            return done.answer
        }

        private func take(_ authority: String) -> Int32? {
            idle.withLock { idle in idle.lastIndex { $0.authority == authority }.map { idle.remove(at: $0).fd } }
        }

        private func finish(_ fd: Int32, _ authority: String, reusable: Bool) {
            let kept = reusable && idle.withLock { idle in
                guard idle.count < limit else { return false }
                idle.append((authority, fd))
                return true
            }
            if !kept { close(fd) }
        }
    }

    /// An http:// URL read for a request.
    struct Target {
        let url: String
        let host: String
        let port: String
        /// `HOST[:PORT]` as the URL writes it: the Host field, and which connections serve it.
        let authority: String
        let path: String

        init(_ url: String) throws(Failure) {
            guard url.hasPrefix("http://") else { throw Failure(description: "\(url): only http:// URLs") }
            let rest = url.dropFirst("http://".count)
            let authority = rest.prefix { $0 != "/" }
            var host = String(authority), port = "80"
            if authority.hasPrefix("["), let close = authority.firstIndex(of: "]") {
                host = String(authority[authority.index(after: authority.startIndex)..<close])
                let after = authority[authority.index(after: close)...]
                if after.hasPrefix(":") { port = String(after.dropFirst()) }
            } else if let colon = authority.lastIndex(of: ":") {
                host = String(authority[..<colon])
                port = String(authority[authority.index(after: colon)...])
            }
            let path = rest.dropFirst(authority.count)
            (self.url, self.host, self.port, self.authority, self.path) = (url, host, port, String(authority), path.isEmpty ? "/" : String(path))
        }
    }

    /// A connection to `target`'s server, its reads and writes bounded by `timeout`.
    static func connect(_ target: Target, timeout: Int) throws(Failure) -> Int32 {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var found: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(target.host, target.port, &hints, &found) == 0, let info = found else {
            throw Failure(description: "\(target.url): cannot resolve \(target.host):\(target.port)")
        }
        defer { freeaddrinfo(found) }
        let fd = socket(info.pointee.ai_family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw Failure(description: "\(target.url): \(Errno.current)") }
        var limit = timeval(tv_sec: timeout, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
        // A wait with a timeout (SO_RCVTIMEO, SO_SNDTIMEO) ends in EINTR when anything interrupts
        // it: a signal, or io_uring's task work for a ring on this thread (the storm's, its last
        // completions posted as its connections close). The call goes again; an interrupted
        // connect goes on in the kernel, and connect says EALREADY until it is done (EISCONN).
        var connected = Glibc.connect(fd, info.pointee.ai_addr, info.pointee.ai_addrlen)
        var waited = 0  // milliseconds, up to `timeout`
        while connected != 0 && (errno == EINTR || errno == EALREADY) && waited < timeout * 1000 {
            usleep(1000)
            waited += 1
            connected = Glibc.connect(fd, info.pointee.ai_addr, info.pointee.ai_addrlen)
        }
        guard connected == 0 || errno == EISCONN else {
            let error = Errno.current
            close(fd)
            throw Failure(description: "\(target.url): cannot connect: \(error)")
        }
        return fd
    }

    /// Why an exchange failed, and whether the server sent nothing back (on a kept connection:
    /// it had closed it, and the request may go again on a new one).
    struct ExchangeFailure: Error {
        let failure: Failure
        let nothingBack: Bool
    }

    /// The request on `fd` and its answer; `reusable`: the answer left the connection open, all of
    /// it read.
    static func exchange(on fd: Int32, _ target: Target, method: String, keepAlive: Bool, deadline: Int64,
                         timeout: Int) throws(ExchangeFailure) -> (answer: Answer, reusable: Bool) {
        func fail(_ text: String, nothingBack: Bool = false) -> ExchangeFailure {
            ExchangeFailure(failure: Failure(description: "\(target.url): \(text)"), nothingBack: nothingBack)
        }
        func again(_ call: () -> Int) -> Int {
            var result = call()
            while result < 0 && errno == EINTR { result = call() }
            return result
        }
        let request = "\(method) \(target.path) HTTP/1.1\r\nHost: \(target.authority)\r\n\(method == "GET" ? "" : "Content-Length: 0\r\n")"
            + (keepAlive ? "\r\n" : "Connection: close\r\n\r\n")
        let sent = request.utf8CString.withUnsafeBytes { bytes in again { send(fd, bytes.baseAddress, bytes.count - 1, Int32(MSG_NOSIGNAL)) } }
        guard sent == request.utf8.count else { throw fail("cannot send the request: \(Errno.current)", nothingBack: true) }
        // The head is read with the reader of answers (ReceivedResponseHead); the body to its
        // Content-Length, or to the end when it has none.
        var response: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16 << 10)
        var head: (ReceivedResponseHead, length: Int)?
        var ended = false
        while true {
            if let (parsed, length) = head, let expected = parsed.contentLength, response.count - length >= expected { break }
            guard stampede_monotonic_ns() < deadline else { throw fail("no whole answer in \(timeout) s") }
            let count = chunk.withUnsafeMutableBytes { bytes in again { recv(fd, bytes.baseAddress, bytes.count, 0) } }
            if count < 0 { throw fail("\(Errno.current)", nothingBack: response.isEmpty && errno == ECONNRESET) }
            if count == 0 {
                guard !response.isEmpty else { throw fail("the server closed the connection", nothingBack: true) }
                ended = true
                break
            }
            response += chunk[..<count]
            if response.count > 64 << 20 { throw fail("the answer is over 64 MiB") }
            if head == nil {
                let read = response.withUnsafeBytes { bytes in Result { () throws(ReceivedResponseHead.Unreadable) in try ReceivedResponseHead.read(bytes) } }
                switch read {
                case .success(let parsed): head = parsed
                case .failure(let unreadable): throw fail("not an HTTP answer: \(unreadable.reason)")
                }
            }
        }
        guard let (parsed, length) = head else { throw fail("not an HTTP answer") }
        let body = response[length...].prefix(parsed.contentLength ?? Int.max)
        if let expected = parsed.contentLength, body.count < expected {
            throw fail("the answer ended after \(body.count) of its \(expected) bytes")
        }
        let reusable = keepAlive && !ended && parsed.keepAlive && parsed.contentLength.map { response.count - length == $0 } == true
        return (Answer(status: Int(parsed.status), body: Array(body)), reusable)
    }
}
