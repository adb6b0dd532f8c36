import Glibc
import StampedeTestSupport
import Testing
@testable import StampedeTLS

/// A server's and a client's session over a socket pair: how a session ends, and that nothing
/// but `shutdown` ever writes at its end.
@Suite struct TLSSessionTests {
    let scratch = ScratchDirectory()

    init() { _ = brokenPipesIgnored }

    /// A server session and a client session over a nonblocking socket pair, their handshake
    /// done; (server, client, server's fd, client's fd).
    func connected() throws -> (TLSSession, TLSSession, Int32, Int32) {
        let identity = try TLSIdentity(certificate: Fixture.file(Fixture.certificate, in: scratch),
                                       key: Fixture.file(Fixture.key, in: scratch), profile: .firmware, kernelTLS: false)
        let client = try TLSClient(trusting: Fixture.file(Fixture.certificate, in: scratch))
        var fds: [Int32] = [0, 0]
        #expect(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0, &fds) == 0)
        let server = try #require(identity.session(fd: fds[0]))
        let asking = try #require(client.session(fd: fds[1], host: "127.0.0.1"))
        for _ in 0..<100 where !(server.established && asking.established) {
            if !asking.established { #expect(asking.handshake() != .failed("")) }
            if !server.established { _ = server.handshake() }
        }
        #expect(server.established && asking.established)
        return (server, asking, fds[0], fds[1])
    }

    /// Bytes waiting on `fd`, without taking them.
    func waiting(_ fd: Int32) -> Int {
        var byte: UInt8 = 0
        let got = recv(fd, &byte, 1, Int32(MSG_PEEK | MSG_DONTWAIT))
        return got > 0 ? Int(got) : 0
    }

    @Test func anOrderlyShutdownSendsCloseNotify() throws {
        let (server, client, serverFD, clientFD) = try connected()
        defer { close(serverFD); close(clientFD) }
        server.shutdown(orderly: true)
        var buffer = [UInt8](repeating: 0, count: 64)
        let read = buffer.withUnsafeMutableBytes { client.read(into: $0) }
        #expect(read == .closed)
    }

    /// An answer cut short (its file changed) must look cut short: no close_notify, nothing at all.
    @Test func aShutdownThatIsNotOrderlyWritesNothing() throws {
        let (server, _, serverFD, clientFD) = try connected()
        defer { close(serverFD); close(clientFD) }
        server.shutdown(orderly: false)
        #expect(waiting(clientFD) == 0)
    }

    /// The hazard of a close_notify in a deinit: by the time the last reference goes, the socket
    /// may be closed and its number another's (a connection another loop accepted, a file the disk
    /// thread opened). Here a pipe takes the number: dropping the session writes nothing into it.
    @Test func droppingASessionWritesNothingEvenWhenItsDescriptorIsAnothersNow() throws {
        var (server, _, serverFD, clientFD): (TLSSession?, TLSSession, Int32, Int32) = try connected()
        defer { close(clientFD) }
        var pipe: [Int32] = [0, 0]
        #expect(Glibc.pipe(&pipe) == 0 && fcntl(pipe[0], F_SETFL, O_NONBLOCK) == 0)
        // dup2 closes the socket and gives its number to the pipe in one step: a close, then a
        // dup2, left the number free between them, and a test running beside this one took it
        // (a worker's eventfd), which the dup2 then closed under it.
        #expect(dup2(pipe[1], serverFD) == serverFD)
        defer { close(pipe[0]); close(pipe[1]); close(serverFD) }
        server = nil
        var byte: UInt8 = 0
        #expect(read(pipe[0], &byte, 1) == -1 && errno == EAGAIN)
        #expect(server == nil)
    }
}
