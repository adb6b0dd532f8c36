import Glibc
import Testing
@testable import StampedeStorm

/// The storm reads its HTTP connections in turn: a turn's share reads 32 connections' shares, and
/// 2,000 connections with bytes waiting are each read within the turns it takes to go round them.
@Suite struct HTTPTurnOrderSpec {
    @Test func thoseATurnDidNotReachGoFirstThenThoseThatReadTheirShare() {
        var order = HTTPTurnOrder()
        #expect(order.isEmpty)
        order.putOff(4, readItsShare: true)
        order.putOff(9, readItsShare: false)
        order.putOff(2, readItsShare: true)
        order.putOff(7, readItsShare: false)
        #expect(!order.isEmpty)
        #expect(order.next() == [9, 7, 4, 2])
        #expect(order.isEmpty && order.next().isEmpty)
    }

    /// The storm's turn, as `serviceHTTP` and `drive` run it for connections whose bodies never
    /// run dry (every one has bytes waiting, the epoll says nothing new): each connection in the
    /// order reads its share while the turn's lasts, and is put off either way.
    @Test func everyConnectionWithBytesWaitingIsReadWithinARoundOfTurns() {
        let connections = 2000
        let perTurn = HTTPEvents.turnShare / HTTPEvents.connectionShare  // 32
        var order = HTTPTurnOrder()
        for slot in 0..<connections { order.putOff(slot, readItsShare: false) }
        var lastRead = [Int](repeating: 0, count: connections)
        var longestWait = 0
        let turns = 4 * connections / perTurn
        for turn in 1...turns {
            var turnLeft = HTTPEvents.turnShare
            for slot in order.next() {
                guard turnLeft > 0 else {
                    order.putOff(slot, readItsShare: false)
                    continue
                }
                turnLeft -= HTTPEvents.connectionShare
                longestWait = max(longestWait, turn - lastRead[slot])
                lastRead[slot] = turn
                order.putOff(slot, readItsShare: true)
            }
        }
        let round = (connections + perTurn - 1) / perTurn  // 63 turns
        #expect(longestWait == round, "a connection waited \(longestWait) turns; a round is \(round)")
        #expect(lastRead.allSatisfy { $0 > turns - round })
    }
}

/// What each storm connection asks the kernel to hold unread.
@Suite struct ReceiveBufferSpec {
    /// iPXE's window for a storm of up to 1,024 machines at once; past it, a share of the
    /// budget, never under 64 KiB.
    @Test func aConnectionsReceiveBufferIsIPXEsWindowOrItsShareOfTheBudget() {
        #expect(HTTPEvents.receiveBuffer(slots: 1) == 256 << 10)
        #expect(HTTPEvents.receiveBuffer(slots: 1024) == 256 << 10)
        #expect(HTTPEvents.receiveBuffer(slots: 2048) == 128 << 10)
        #expect(HTTPEvents.receiveBuffer(slots: 5000) == 64 << 10)
        #expect(HTTPEvents.receiveBuffer(slots: 0) == 256 << 10)
    }
}

/// A fetch whose patience ran out is the storm's lag where the server's bytes wait unread in its
/// socket, the server's silence where none do.
@Suite struct PatienceSpec {
    @Test func unreadBytesInTheSocketSayTheStormFellBehind() throws {
        var pair: [Int32] = [0, 0]
        try #require(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &pair) == 0)
        defer { for fd in pair { close(fd) } }
        #expect(StormFailure.patienceRanOut(on: pair[0]) == .timedOut)
        #expect(write(pair[1], "HTTP/1.1 200 OK\r\n", 17) == 17)
        #expect(StormFailure.patienceRanOut(on: pair[0]) == .stormBehind(unread: 17))
        #expect(StormFailure.patienceRanOut(on: -1) == .timedOut, "a socket that cannot be asked says nothing of the storm")
    }
}
