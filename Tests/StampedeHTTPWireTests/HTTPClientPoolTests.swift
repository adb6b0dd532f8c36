import Glibc
import StampedeIO
import Synchronization
import Testing
@testable import StampedeHTTPWire

/// A server on loopback that answers each request on a connection with its path as the body,
/// and, as told, closes a connection after some answers or says `Connection: close`.
private final class KeepAliveServer: Sendable {
    let listener: Int32
    let port: UInt16
    let accepted = Atomic<Int>(0)
    /// The connection being served (-1: none), shut at `stop`.
    let serving = Atomic<Int32>(-1)
    /// Answers a connection gets before the server closes it (0: no limit).
    let answersPerConnection: Int
    let sayClose: Bool
    private let thread = Mutex<SystemThread?>(nil)

    init(answersPerConnection: Int = 0, sayClose: Bool = false) {
        self.answersPerConnection = answersPerConnection
        self.sayClose = sayClose
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, length) } }
        listen(listener, 16)
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &length) } }
        self.listener = listener
        port = UInt16(bigEndian: address.sin_port)
    }

    /// Serving on a thread of its own.
    static func started(answersPerConnection: Int = 0, sayClose: Bool = false) -> KeepAliveServer {
        let server = KeepAliveServer(answersPerConnection: answersPerConnection, sayClose: sayClose)
        server.thread.withLock { $0 = SystemThread(named: "keepalive-test") { server.serve() } }
        return server
    }

    func stop() {
        shutdown(listener, Int32(SHUT_RDWR))
        let fd = serving.load(ordering: .acquiring)
        if fd >= 0 { shutdown(fd, Int32(SHUT_RDWR)) }
        thread.withLock { $0?.join() }
        close(listener)
    }

    private func serve() {
        while true {
            let fd = accept(listener, nil, nil)
            guard fd >= 0 else { return }
            accepted.add(1, ordering: .relaxed)
            serving.store(fd, ordering: .releasing)
            var answered = 0
            var pending: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 4096)
            while answersPerConnection == 0 || answered < answersPerConnection {
                let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                guard count > 0 else { break }
                pending += buffer[..<count]
                guard let end = pending.indices.first(where: { pending[$0...].starts(with: Array("\r\n\r\n".utf8)) }) else { continue }
                let line = String(decoding: pending[..<end], as: UTF8.self).split(separator: " ")
                pending.removeFirst(end + 4)
                let body = String(line[1])
                let answer = "HTTP/1.1 200 OK\r\nContent-Length: \(body.utf8.count)\r\n\(sayClose ? "Connection: close\r\n" : "")\r\n\(body)"
                _ = answer.utf8CString.withUnsafeBytes { send(fd, $0.baseAddress, $0.count - 1, Int32(MSG_NOSIGNAL)) }
                answered += 1
                if sayClose { break }
            }
            serving.store(-1, ordering: .releasing)
            close(fd)
        }
    }
}

@Suite struct HTTPClientPool {
    @Test func requestsToOneServerShareAConnection() throws {
        let server = KeepAliveServer.started()
        defer { server.stop() }
        let pool = HTTPClient.Pool(limit: 2)
        for path in ["/v1/boot/a", "/v1/boot/b", "/v1/boot/c"] {
            let answer = try pool.request("http://127.0.0.1:\(server.port)\(path)", timeout: 2)
            #expect(answer.status == 200 && answer.body == Array(path.utf8))
        }
        #expect(server.accepted.load(ordering: .relaxed) == 1)
        #expect(pool.count == 1)
    }

    /// The server closed the idle connection: the request goes again on a new one.
    @Test func aConnectionTheServerClosedIsReplaced() throws {
        let server = KeepAliveServer.started(answersPerConnection: 1)
        defer { server.stop() }
        let pool = HTTPClient.Pool(limit: 2)
        for path in ["/one", "/two", "/three"] {
            let answer = try pool.request("http://127.0.0.1:\(server.port)\(path)", timeout: 2)
            #expect(answer.body == Array(path.utf8))
        }
        #expect(server.accepted.load(ordering: .relaxed) == 3)
    }

    @Test func anAnswerThatSaysCloseIsNotKept() throws {
        let server = KeepAliveServer.started(sayClose: true)
        defer { server.stop() }
        let pool = HTTPClient.Pool(limit: 2)
        #expect(try pool.request("http://127.0.0.1:\(server.port)/x", timeout: 2).body == Array("/x".utf8))
        #expect(pool.count == 0)
        #expect(try HTTPClient.request("http://127.0.0.1:\(server.port)/y", timeout: 2).body == Array("/y".utf8))
    }

    /// An answer larger than the read buffer is read whole, and the kept connection's next
    /// answer after it too.
    @Test func aLargeAnswerIsReadWholeOnAKeptConnection() throws {
        let server = KeepAliveServer.started()
        defer { server.stop() }
        let pool = HTTPClient.Pool(limit: 1)
        let long = "/" + String(repeating: "a", count: 40_000)
        #expect(try pool.request("http://127.0.0.1:\(server.port)\(long)", timeout: 2).body == Array(long.utf8))
        #expect(try pool.request("http://127.0.0.1:\(server.port)/small", timeout: 2).body == Array("/small".utf8))
        #expect(server.accepted.load(ordering: .relaxed) == 1)
    }

    /// The read buffer grows keeping what it holds, and goes back to its first size.
    @Test func aReadBufferGrowsKeepingItsBytesAndShrinksBack() {
        let buffer = HTTPClient.ReadBuffer()
        #expect(buffer.bytes.count == HTTPClient.ReadBuffer.capacity)
        buffer.bytes[0] = 7
        buffer.bytes[100] = 9
        buffer.makeRoom(after: 101, for: 20 << 10)
        #expect(buffer.bytes.count >= 101 + (20 << 10) && buffer.bytes[0] == 7 && buffer.bytes[100] == 9)
        buffer.shrink()
        #expect(buffer.bytes.count == HTTPClient.ReadBuffer.capacity)
    }

    @Test func nothingListeningIsAFailure() {
        let pool = HTTPClient.Pool(limit: 1)
        #expect(throws: HTTPClient.Failure.self) { try pool.request("http://127.0.0.1:1/x", timeout: 1) }
        #expect(throws: HTTPClient.Failure.self) { try pool.request("https://127.0.0.1/x", timeout: 1) }
    }
}
