import CStampedeSys
import Glibc
import Logging
import StampedeBase
import StampedeHTTP
import StampedeIO
import StampedeProtocol
import StampedeServer
import StampedeTestSupport
import Testing

/// A real HTTP loop over loopback, turned in the test's thread beside its client: what the loop
/// does with a connection, from the socket's side.
@Suite struct HTTPLoopOverASocket {
    let dir = ScratchDirectory()

    init() { _ = brokenPipesIgnored }

    /// A loop serving `dir`, and a client connected to it (non-blocking).
    func loopAndClient() throws -> (HTTPServer, Int32) {
        let listen = SocketAddress(parsing: "127.0.0.1:0", defaultPort: 0)!
        let configuration = ServerConfiguration(listenAddresses: [listen], policy: AccessPolicy(root: dir.fd),
                                                logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }))
        let files = FileService(policy: configuration.policy, remapRules: nil, cache: FileCache(), disk: DiskWork())
        let server = try HTTPServer(configuration: configuration, http: HTTPConfiguration(listenAddresses: [listen]), files: files,
                                    fileLabels: FileLabels(), loopCount: 1)
        let client = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = server.boundAddresses[0].storage
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(client, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        try #require(connected == 0)
        _ = fcntl(client, F_SETFL, O_NONBLOCK)
        return (server, client)
    }

    /// Sends `request`, then turns the loop (each turn waiting up to `maxWait`) and reads until
    /// `until` holds of what came, the client sees the connection end, or 5 s pass; what came.
    func exchange(_ loop: HTTPLoop, _ client: Int32, _ request: String, maxWait: Nanoseconds = 1_000_000,
                  until: ([UInt8]) -> Bool) -> (bytes: [UInt8], ended: Bool) {
        _ = Array(request.utf8).withUnsafeBytes { send(client, $0.baseAddress, $0.count, 0) }
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        let deadline = stampede_monotonic_ns() + 5 * nanosecondsPerSecond
        while !until(received) && stampede_monotonic_ns() < deadline {
            loop.turn(now: stampede_monotonic_ns(), maxWait: maxWait)
            let n = buffer.withUnsafeMutableBytes { recv(client, $0.baseAddress, $0.count, 0) }
            if n == 0 { return (received, true) }
            if n > 0 { received += buffer[..<n] }
        }
        return (received, false)
    }

    func text(_ bytes: [UInt8]) -> String { String(decoding: bytes, as: UTF8.self) }

    func offset(of needle: String, in bytes: [UInt8]) -> Int? {
        let needle = Array(needle.utf8)
        guard bytes.count >= needle.count else { return nil }
        return (0...(bytes.count - needle.count)).first { bytes[$0..<($0 + needle.count)].elementsEqual(needle) }
    }

    /// Status lines in what came.
    func answers(_ bytes: [UInt8]) -> Int {
        var count = 0, from = 0
        while let found = offset(of: "HTTP/1.1 ", in: Array(bytes[from...])) {
            count += 1
            from += found + 9
        }
        return count
    }

    /// The first GET of a file misses the cache: the disk thread reads it while the loop waits in
    /// epoll, for as long as the turn allows (here 10 s). Its post wakes the loop (the mailbox's
    /// eventfd), and the answer goes out at once, not at the turn's end nor at the next sweep. (A
    /// body the socket takes whole: a larger one would wait for this thread's client to read.)
    @Test func aFileReadOnTheDiskThreadWakesTheLoop() throws {
        let body = (0..<20_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        dir.write("vmlinuz", body)
        let (server, client) = try loopAndClient()
        defer { close(client) }
        let started = stampede_monotonic_ns()
        let (bytes, _) = exchange(server.loops[0], client, "GET /vmlinuz HTTP/1.1\r\nHost: a\r\n\r\n", maxWait: 10 * nanosecondsPerSecond) {
            $0.count >= body.count
        }
        let elapsed = stampede_monotonic_ns() - started
        #expect(text(Array(bytes.prefix(15))) == "HTTP/1.1 200 OK", "\(bytes.count) bytes: \(text(Array(bytes.prefix(300))))")
        #expect(Array(bytes.suffix(body.count)) == body)
        #expect(elapsed < 900_000_000, "the answer came after \(elapsed / 1_000_000) ms: the loop slept through the read")
    }

    /// Requests sent together (pipelined) are answered in order, each whole, on one connection;
    /// a head that cannot be read is answered 400 and ends the connection.
    @Test func pipelinedRequestsAreAnsweredInOrderAndABadHeadEndsTheConnection() throws {
        dir.write("a.cfg", Array("first\n".utf8))
        dir.write("b.cfg", Array("second\n".utf8))
        let (server, client) = try loopAndClient()
        defer { close(client) }
        let loop = server.loops[0]
        let two = exchange(loop, client, "GET /a.cfg HTTP/1.1\r\nHost: a\r\n\r\nGET /b.cfg HTTP/1.1\r\nHost: a\r\n\r\n") {
            self.text($0).hasSuffix("second\n")
        }
        #expect(answers(two.bytes) == 2 && !two.ended)
        let first = try #require(offset(of: "first\n", in: two.bytes)), second = try #require(offset(of: "second\n", in: two.bytes))
        #expect(first < second)

        let refused = exchange(loop, client, "GET /a.cfg HTTP/1.1\r\nHost: a\r\nBad Header\r\n\r\n") { _ in false }
        #expect(text(refused.bytes).hasPrefix("HTTP/1.1 400 "), "\(text(refused.bytes))")
        #expect(refused.ended)
    }
}
