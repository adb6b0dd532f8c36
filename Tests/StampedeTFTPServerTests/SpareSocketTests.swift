import CStampedeSys
import Glibc
import StampedeBase
import StampedeIO
import StampedeProtocol
@testable import StampedeTFTPServer
import StampedeTestSupport
import Testing

@Suite struct SpareTransferSocketsSpec {
    let a = SocketAddress(parsing: "10.0.0.1:0", defaultPort: 0)!
    let b = SocketAddress(parsing: "10.0.0.2:0", defaultPort: 0)!
    let client = SocketAddress(parsing: "10.0.1.1:2070", defaultPort: 0)!
    let other = SocketAddress(parsing: "10.0.1.2:2070", defaultPort: 0)!

    @Test func theLastKeptForAnAddressIsTakenFirstAndOnlyForThatAddress() {
        var spares = SpareTransferSockets(limit: 8)
        let kept = [spares.keep(SocketHandle(1), local: a, peer: client, now: 0), spares.keep(SocketHandle(2), local: a, peer: client, now: 1),
                    spares.keep(SocketHandle(3), local: b, peer: client, now: 2)]
        #expect(kept == [true, true, true])
        // The port a request came to does not matter: the socket's own port is its own.
        var a69 = a
        a69.port = 69
        let taken = [spares.take(for: a69, peer: other), spares.take(for: a, peer: other), spares.take(for: a, peer: other)]
        #expect(taken.map { $0?.socket } == [SocketHandle(2), SocketHandle(1), nil])
        #expect(taken[0]?.peer == client)
        #expect(spares.count == 1)
        let any = [spares.takeAny(), spares.takeAny()]
        #expect(any == [SocketHandle(3), nil] && spares.isEmpty)
    }

    /// The same client (a PXE ROM asking again from its fixed port) never gets the socket it was
    /// served on: both ends' ports would be the old transfer's, its late packets the new one's.
    @Test func theClientASocketServedLastNeverGetsItBack() {
        var spares = SpareTransferSockets(limit: 8)
        _ = spares.keep(SocketHandle(1), local: a, peer: other, now: 0)
        _ = spares.keep(SocketHandle(2), local: a, peer: client, now: 1)
        let forClient = [spares.take(for: a, peer: client), spares.take(for: a, peer: client)]
        #expect(forClient.map { $0?.socket } == [SocketHandle(1), nil])
        let forOther = spares.take(for: a, peer: other)
        #expect(forOther?.socket == SocketHandle(2) && spares.isEmpty)
    }

    @Test func noMoreThanTheLimitAreKept() {
        var spares = SpareTransferSockets(limit: 2)
        let kept = [spares.keep(SocketHandle(1), local: a, peer: client, now: 0), spares.keep(SocketHandle(2), local: b, peer: client, now: 0),
                    spares.keep(SocketHandle(3), local: a, peer: client, now: 0)]
        #expect(kept == [true, true, false])
        #expect(spares.count == 2)
        let all = spares.removeAll()
        #expect(Set(all) == [SocketHandle(1), SocketHandle(2)])
        #expect(spares.isEmpty)
    }

    @Test func socketsKeptTheirLifetimeExpireOldestFirst() {
        var spares = SpareTransferSockets(limit: 8, lifetime: 100)
        _ = spares.keep(SocketHandle(1), local: a, peer: client, now: 0)
        _ = spares.keep(SocketHandle(2), local: a, peer: client, now: 50)
        _ = spares.keep(SocketHandle(3), local: b, peer: client, now: 60)
        let expired = [spares.removeExpired(now: 99), spares.removeExpired(now: 100), spares.removeExpired(now: 160)]
        #expect(expired[0].isEmpty && expired[1] == [SocketHandle(1)])
        #expect(Set(expired[2]) == [SocketHandle(2), SocketHandle(3)])
        #expect(spares.isEmpty)
        // An address's list, emptied, takes sockets again.
        _ = spares.keep(SocketHandle(4), local: a, peer: client, now: 200)
        let again = spares.take(for: a, peer: other)
        #expect(again?.socket == SocketHandle(4))
    }
}

/// A completed read's socket serves the next read to the same address (`Worker+SpareSockets.swift`).
@Suite struct SpareSocketsInTheWorker {
    let first = SocketAddress(parsing: "127.0.0.1:40000", defaultPort: 0)!
    let second = SocketAddress(parsing: "127.0.0.1:40001", defaultPort: 0)!

    /// `first` reads "g" (one DATA) to its end; returns its socket.
    func completedRead(_ rig: RoutingRig) throws -> SocketHandle {
        _ = rig.deliver(rig.rrq("g"), from: first, tag: rig.listener())
        let slot = try #require(rig.worker.table.slot(of: first))
        let socket = rig.worker.table[slot].socket!.handle
        _ = rig.deliver([0, 4, 0, 1], from: first, tag: try rig.transferTag(of: first))
        #expect(rig.worker.activeTransfers == 0)
        return socket
    }

    @Test func theNextReadGetsTheKeptSocketConnectedToItsClient() throws {
        let rig = try RoutingRig(.ownSockets)
        let socket = try completedRead(rig)
        #expect(!rig.backend.closed.contains(socket))
        #expect(rig.worker.spareSockets.count == 1)
        let opened = rig.backend.tags.count
        let sent = rig.deliver(rig.rrq("f"), from: second, tag: rig.listener())
        #expect(rig.backend.tags.count == opened)
        #expect(rig.backend.reconnected.map(\.socket) == [socket] && rig.backend.reconnected.map(\.peer) == [second])
        #expect(sent.map(\.socket) == [socket] && RoutingRig.heads(sent) == [[0, 3, 0, 1]])
        // The old client's late ACK, on the socket now the new transfer's: not the new client's.
        let tag = try rig.transferTag(of: second)
        #expect(rig.deliver([0, 4, 0, 1], from: first, tag: tag).isEmpty)
        #expect(RoutingRig.heads(rig.deliver([0, 4, 0, 1], from: second, tag: tag)) == [[0, 3, 0, 2]])
    }

    @Test func theSameClientAskingAgainFromItsPortGetsAFreshSocket() throws {
        let rig = try RoutingRig(.ownSockets)
        let socket = try completedRead(rig)
        let sent = rig.deliver(rig.rrq("f"), from: first, tag: rig.listener())
        #expect(sent.count == 1 && sent[0].socket != socket && rig.backend.reconnected.isEmpty)
        #expect(rig.worker.spareSockets.count == 1)
    }

    @Test func aSocketWithASendStillQueuedStaysKeptAndTheReadOpensItsOwn() throws {
        let rig = try RoutingRig(.ownSockets)
        let socket = try completedRead(rig)
        rig.backend.reconnectError = Errno(EBUSY)
        let sent = rig.deliver(rig.rrq("f"), from: second, tag: rig.listener())
        #expect(sent.count == 1 && sent[0].socket != socket)
        #expect(!rig.backend.closed.contains(socket) && rig.worker.spareSockets.count == 1)
    }

    @Test func aSocketThatCannotBeConnectedIsClosed() throws {
        let rig = try RoutingRig(.ownSockets)
        let socket = try completedRead(rig)
        rig.backend.reconnectError = Errno(ENETUNREACH)
        let sent = rig.deliver(rig.rrq("f"), from: second, tag: rig.listener())
        #expect(sent.count == 1 && sent[0].socket != socket)
        #expect(rig.backend.closed.contains(socket) && rig.worker.spareSockets.isEmpty)
    }

    @Test func anUploadNeverTakesAKeptSocketNorLeavesOne() throws {
        let rig = try RoutingRig(.ownSockets, allowCreate: true)
        let socket = try completedRead(rig)
        let wrq = Request(isWrite: true, filename: Array("up".utf8), mode: "octet").encoded()
        let ack = rig.deliver(wrq, from: second, tag: rig.listener())
        #expect(ack.count == 1 && ack[0].socket != socket && rig.backend.reconnected.isEmpty)
        let upload = ack[0].socket
        // The client gives up: the upload ends, and its socket closes.
        _ = rig.deliver([0, 5, 0, 0] + [UInt8]("stop") + [0], from: second, tag: try rig.transferTag(of: second))
        #expect(rig.worker.activeTransfers == 0)
        #expect(rig.backend.closed.contains(upload) && rig.worker.spareSockets.count == 1)
    }

    @Test func keptSocketsCloseAfterTwoSecondsAndWhenTheBudgetNeedsTheirRoom() throws {
        let rig = try RoutingRig(.ownSockets)
        let socket = try completedRead(rig)
        rig.worker.closeExpiredSpareSockets(now: stampede_monotonic_ns() + 2 * nanosecondsPerSecond)
        #expect(rig.backend.closed.contains(socket) && rig.worker.spareSockets.isEmpty)
    }

    @Test func aKeptSocketCountsInTheDescriptorBudget() throws {
        // One own socket at most: the kept one closes so that a read on another address has its own.
        let rig = try RoutingRig(.ownSockets, ownSocketBudget: 4)
        let socket = try completedRead(rig)
        #expect(rig.worker.spareSockets.count == 1)
        let elsewhere = SocketAddress(parsing: "127.0.0.2:69", defaultPort: 0)!
        var opened: [SocketHandle] = []
        for port in 0..<4 {
            let client = SocketAddress(parsing: "127.0.0.1:\(41000 + port)", defaultPort: 0)!
            opened += rig.deliver(rig.rrq("f"), from: client, tag: rig.listener(), to: elsewhere).map(\.socket)
        }
        #expect(rig.backend.closed.contains(socket) && rig.worker.spareSockets.isEmpty)
        #expect(rig.worker.table.ownCount == 4 && !opened.contains(socket))
    }
}
