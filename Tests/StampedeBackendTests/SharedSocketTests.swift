import CStampedeSys
import Glibc
import StampedeIO
import StampedeTestSupport
import Testing

/// A worker's shared transfer sockets (`adoptShared`): they hear many clients, as a listener does,
/// but carry transfers' ACKs, not requests.
@Suite struct SharedSockets {
    /// A shared transfer socket on loopback, as a worker opens one, and the address it got.
    func sharedSocket(_ backend: any DatagramBackend, tag: UInt64, receiveBuffer: Int = 1 << 20) throws -> (socket: SocketHandle, address: SocketAddress) {
        let socket = try backend.adoptShared(UDPSocket.sharedTransfer(local: loopbackAny, ports: nil), receiveBuffer: receiveBuffer, tag: tag)
        return (socket, try #require(backend.localAddress(of: socket)))
    }

    @Test(arguments: BackendKind.allCases)
    func aSharedSocketsDatagramNamesItsPeerAndTheLocalAddress(kind: BackendKind) throws {
        let backend = try kind.make()
        let (socket, bound) = try sharedSocket(backend, tag: 9)
        let client = LoopbackClient()
        defer { close(client.fd) }
        client.send([0, 4, 0, 1], to: bound)
        #expect(backend.poll(deadline: stampede_monotonic_ns() + 2_000_000_000) == 1)
        let d = backend.datagram(0)
        #expect(d.tag == 9 && Array(d.bytes) == [0, 4, 0, 1])
        #expect(d.peer == client.address)
        #expect(d.local.host == "127.0.0.1")
        backend.close(socket)
        _ = backend.poll(deadline: stampede_monotonic_ns())
    }

    /// The shared sockets are read in turn: 64 of them, 8 ACKs each, all heard within the polls
    /// it takes to carry them (two batches' worth), beside a request in every poll.
    @Test(arguments: BackendKind.allCases)
    func everySharedSocketIsHeardBesideRequests(kind: BackendKind) throws {
        let backend = try kind.make()
        let sender = LoopbackClient()
        defer { close(sender.fd) }
        let (listener, requests) = try loopbackListener(backend, tag: 1)
        let shared = try (0..<64).map { try sharedSocket(backend, tag: UInt64(100 + $0)) }
        for socket in shared {
            for _ in 0..<8 { sender.send([0, 4, 0, 2], to: socket.address) }
        }
        var heard = Set<UInt64>()
        for _ in 0..<10 {
            sender.send([0, 1, 0x61, 0, 0x6f, 0x63, 0x74, 0x65, 0x74, 0], to: requests)
            usleep(2_000)
            let count = backend.poll(deadline: stampede_monotonic_ns())
            heard.formUnion((0..<count).map { backend.datagram($0).tag })
        }
        #expect(heard.contains(1))
        #expect(heard.filter { $0 >= 100 }.count == 64, "\(64 - heard.filter { $0 >= 100 }.count) of 64 shared sockets never read")
        for socket in shared { backend.close(socket.socket) }
        backend.close(listener)
        _ = backend.poll(deadline: stampede_monotonic_ns())
    }

    /// What a full shared socket dropped are a transfer's ACKs: counted among the sockets' drops,
    /// not among the requests lost at listeners.
    @Test(arguments: BackendKind.allCases)
    func aSharedSocketsDropsAreNotRequestsLost(kind: BackendKind) throws {
        let backend = try kind.make()
        let (socket, bound) = try sharedSocket(backend, tag: 5, receiveBuffer: 0)
        let sender = LoopbackClient()
        defer { close(sender.fd) }
        for _ in 0..<3000 { sender.send([UInt8](repeating: 7, count: 1472), to: bound) }
        backend.close(socket)
        _ = backend.poll(deadline: stampede_monotonic_ns())
        let drops = backend.statistics.socketQueueDrops
        #expect(drops > 1000 && drops <= 3000, "\(drops)")
        #expect(backend.statistics.listenerQueueDrops == 0)
    }
}
