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

    /// A connection and what its answers are read into, kept together: a kept connection's next
    /// exchange allocates nothing to read into.
    struct Connection: Sendable {
        let fd: Int32
        let buffer: ReadBuffer
    }

    /// A new connection to `target`'s server and the exchange on it; the connection is closed
    /// unless `keepAlive` and the answer left it open (`open`: then the caller's).
    static func exchangeOnNewConnection(_ target: Target, method: String, keepAlive: Bool, deadline: Int64,
                                        timeout: Int) throws(Failure) -> (answer: Answer, open: Connection?) {
        let connection = Connection(fd: try connect(target, timeout: timeout), buffer: ReadBuffer())
        do throws(ExchangeFailure) {
            let done = try exchange(on: connection, target, method: method, keepAlive: keepAlive, deadline: deadline, timeout: timeout)
            if done.reusable { return (done.answer, connection) }
            close(connection.fd)
            return (done.answer, nil)
        } catch {
            close(connection.fd)
            throw error.failure
        }
    }

    /// Bytes read from a connection, in memory of its own that grows as an answer needs (not
    /// zeroed, not an array's: nothing is copied to grow it but what was read). One exchange
    /// uses it at a time: its connection's, which the pool hands to one caller at a time.
    final class ReadBuffer: @unchecked Sendable {
        private(set) var bytes: UnsafeMutableRawBufferPointer
        static let capacity = 16 << 10

        init() { bytes = .allocate(byteCount: Self.capacity, alignment: 16) }

        deinit { bytes.deallocate() }

        /// Room for at least `more` bytes after the first `count`, which are kept.
        func makeRoom(after count: Int, for more: Int) {
            guard bytes.count - count < more else { return }
            let larger = UnsafeMutableRawBufferPointer.allocate(byteCount: max(bytes.count * 2, count + more), alignment: 16)
            larger.copyMemory(from: UnsafeRawBufferPointer(rebasing: bytes[..<count]))
            bytes.deallocate()
            bytes = larger
        }

        /// Back to its first size, when an answer grew it: a kept connection holds no more while
        /// it waits (an API that once answered megabytes leaves none behind).
        func shrink() {
            guard bytes.count > Self.capacity else { return }
            bytes.deallocate()
            bytes = .allocate(byteCount: Self.capacity, alignment: 16)
        }
    }

    /// Connections kept open between requests (HTTP/1.1 keep-alive), for a caller that asks one
    /// server again and again from several threads: a request takes an idle connection to its
    /// server or opens one, and gives it back when the answer left it open. A connection the
    /// server closed while idle is found when its request gets no byte back: the request goes
    /// once more on a new one.
    public final class Pool: Sendable {
        private let idle = Mutex<[(authority: String, connection: Connection)]>([])
        /// Idle connections kept at most (the rest are closed).
        public let limit: Int

        public init(limit: Int) { self.limit = max(1, limit) }

        deinit { idle.withLock { $0.forEach { close($0.connection.fd) } } }

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
                    close(kept.fd)
                    guard error.nothingBack else { throw error.failure }
                }
            }
            let done = try exchangeOnNewConnection(target, method: method, keepAlive: true, deadline: deadline, timeout: timeout)
            if let open = done.open { finish(open, target.authority, reusable: true) }
            return done.answer
        }

        private func take(_ authority: String) -> Connection? {
            idle.withLock { idle in idle.lastIndex { $0.authority == authority }.map { idle.remove(at: $0).connection } }
        }

        private func finish(_ connection: Connection, _ authority: String, reusable: Bool) {
            let kept = reusable && idle.withLock { idle in
                guard idle.count < limit else { return false }
                idle.append((authority, connection))
                return true
            }
            if !kept { close(connection.fd) }
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

    /// The request on `connection` and its answer; `reusable`: the answer left the connection
    /// open, all of it read.
    static func exchange(on connection: Connection, _ target: Target, method: String, keepAlive: Bool, deadline: Int64,
                         timeout: Int) throws(ExchangeFailure) -> (answer: Answer, reusable: Bool) {
        func fail(_ text: String, nothingBack: Bool = false) -> ExchangeFailure {
            ExchangeFailure(failure: Failure(description: "\(target.url): \(text)"), nothingBack: nothingBack)
        }
        func again(_ call: () -> Int) -> Int {
            var result = call()
            while result < 0 && errno == EINTR { result = call() }
            return result
        }
        let fd = connection.fd
        var request = "\(method) \(target.path) HTTP/1.1\r\nHost: \(target.authority)\r\n\(method == "GET" ? "" : "Content-Length: 0\r\n")"
            + (keepAlive ? "\r\n" : "Connection: close\r\n\r\n")
        let sent = request.withUTF8 { bytes in again { send(fd, bytes.baseAddress, bytes.count, Int32(MSG_NOSIGNAL)) } }
        guard sent == request.utf8.count else { throw fail("cannot send the request: \(Errno.current)", nothingBack: true) }
        // The head is read with the reader of answers (ReceivedResponseHead); the body to its
        // Content-Length, or to the end when it has none.
        let buffer = connection.buffer
        var filled = 0
        var head: (ReceivedResponseHead, length: Int)?
        var ended = false
        while true {
            if let (parsed, length) = head, let expected = parsed.contentLength, filled - length >= expected { break }
            guard stampede_monotonic_ns() < deadline else { throw fail("no whole answer in \(timeout) s") }
            buffer.makeRoom(after: filled, for: 4096)
            let room = UnsafeMutableRawBufferPointer(rebasing: buffer.bytes[filled...])
            let count = again { recv(fd, room.baseAddress, room.count, 0) }
            if count < 0 { throw fail("\(Errno.current)", nothingBack: filled == 0 && errno == ECONNRESET) }
            if count == 0 {
                guard filled > 0 else { throw fail("the server closed the connection", nothingBack: true) }
                ended = true
                break
            }
            filled += count
            if filled > 64 << 20 { throw fail("the answer is over 64 MiB") }
            if head == nil {
                do throws(ReceivedResponseHead.Unreadable) {
                    head = try ReceivedResponseHead.read(UnsafeRawBufferPointer(rebasing: buffer.bytes[..<filled]))
                } catch {
                    throw fail("not an HTTP answer: \(error.reason)")
                }
            }
        }
        guard let (parsed, length) = head else { throw fail("not an HTTP answer") }
        let end = parsed.contentLength.map { min(filled, length + $0) } ?? filled
        if let expected = parsed.contentLength, end - length < expected {
            throw fail("the answer ended after \(end - length) of its \(expected) bytes")
        }
        let reusable = keepAlive && !ended && parsed.keepAlive && parsed.contentLength.map { filled - length == $0 } == true
        let answer = Answer(status: Int(parsed.status), body: Array(UnsafeRawBufferPointer(rebasing: buffer.bytes[length..<end])))
        buffer.shrink()
        return (answer, reusable)
    }
}
