import Testing
@testable import StampedeProtocol

let second = nanosecondsPerSecond

func makeSender(bytes: Int, blockSize: Int = 512, window: Int = 1, oack: Bool = false) -> DataSender {
    DataSender(totalBytes: bytes, blockSize: blockSize, windowSize: window, sendsOptionAck: oack,
               timer: RetransmitTimer(base: second, maxRetries: 3))
}

@Suite struct DataSenderSpec {
    @Test func lockstepSendsOneBlockPerAck() {
        var s = makeSender(bytes: 1000)
        #expect(s.start(now: 0) == .sendBlocks(first: 1, count: 1))
        #expect(s.range(ofBlock: 1) == 0..<512)
        #expect(s.receiveAck(1, now: 10) == .sendBlocks(first: 2, count: 1))
        #expect(s.range(ofBlock: 2) == 512..<1000)
        #expect(s.receiveAck(2, now: 20) == .finished)
    }

    @Test func aMultipleOfTheBlockSizeEndsWithAnEmptyBlock() {
        var s = makeSender(bytes: 1024)
        #expect(s.blockCount == 3)
        _ = s.start(now: 0)
        _ = s.receiveAck(1, now: 1)
        #expect(s.receiveAck(2, now: 2) == .sendBlocks(first: 3, count: 1))
        #expect(s.range(ofBlock: 3).isEmpty)
        #expect(s.receiveAck(3, now: 3) == .finished)
    }

    @Test func anEmptyFileIsOneEmptyBlock() {
        var s = makeSender(bytes: 0)
        #expect(s.start(now: 0) == .sendBlocks(first: 1, count: 1))
        #expect(s.range(ofBlock: 1).isEmpty)
        #expect(s.receiveAck(1, now: 1) == .finished)
    }

    @Test func blockNumbersWrapPast65535ToZero() {
        let blocks = 70_000
        var s = makeSender(bytes: blocks * 8 + 3, blockSize: 8)
        var action = s.start(now: 0)
        var wireSeen: [UInt16] = []
        while case .sendBlocks(let first, _) = action {
            let wire = DataSender.wire(first)
            if first >= 65535 && first <= 65537 { wireSeen.append(wire) }
            action = s.receiveAck(wire, now: 1)
        }
        #expect(action == .finished)
        #expect(wireSeen == [65535, 0, 1])
        #expect(s.bytesAcknowledged == blocks * 8 + 3)
    }

    @Test func optionAckWaitsForAckZero() {
        var s = makeSender(bytes: 100, oack: true)
        #expect(s.start(now: 0) == .sendOptionAck)
        #expect(s.receiveAck(1, now: 1) == .none)
        #expect(s.receiveAck(0, now: 2) == .sendBlocks(first: 1, count: 1))
    }

    @Test func optionAckIsResentOnTimeout() {
        var s = makeSender(bytes: 100, oack: true)
        _ = s.start(now: 0)
        #expect(s.timeout(now: second) == .sendOptionAck)
    }

    @Test func windowSendsWBlocksAndAnAckInsideRestartsAfterIt() {
        var s = makeSender(bytes: 512 * 20, window: 4)
        #expect(s.start(now: 0) == .sendBlocks(first: 1, count: 4))
        #expect(s.receiveAck(4, now: 1) == .sendBlocks(first: 5, count: 4))
        // Blocks 7 and 8 were lost: the client ACKs 6; the next window starts at 7.
        #expect(s.receiveAck(6, now: 2) == .sendBlocks(first: 7, count: 4))
    }

    @Test func theLastWindowIsShort() {
        var s = makeSender(bytes: 512 * 5 + 1, window: 4)
        _ = s.start(now: 0)
        #expect(s.receiveAck(4, now: 1) == .sendBlocks(first: 5, count: 2))
        #expect(s.receiveAck(6, now: 2) == .finished)
    }

    @Test func anImmediateDuplicateAckResendsNothing() {
        var s = makeSender(bytes: 5000)
        _ = s.start(now: 0)
        _ = s.receiveAck(1, now: 100)
        // The Sorcerer's Apprentice: a duplicate ACK 1 right after we sent block 2.
        #expect(s.receiveAck(1, now: 200) == .none)
        #expect(s.receiveAck(1, now: 300) == .none)
    }

    @Test func aLateDuplicateAckResendsOnceForALockstepClientThatTimedOut() {
        var s = makeSender(bytes: 5000)
        _ = s.start(now: 0)
        _ = s.receiveAck(1, now: 0)
        #expect(s.receiveAck(1, now: second * 6 / 10) == .sendBlocks(first: 2, count: 1))
        #expect(s.receiveAck(1, now: second * 7 / 10) == .none)
        #expect(s.retransmits == 1)
    }

    @Test func staleAndFutureAcksAreIgnored() {
        var s = makeSender(bytes: 5000, window: 2)
        _ = s.start(now: 0)
        _ = s.receiveAck(2, now: 1)
        #expect(s.receiveAck(9, now: 2) == .none)
        #expect(s.receiveAck(1, now: 3) == .none)
        #expect(s.acknowledged == 2)
    }

    @Test func timeoutsBackOffThenGiveUp() {
        var s = makeSender(bytes: 5000, window: 2)
        _ = s.start(now: 0)
        #expect(s.deadline == second)
        #expect(s.timeout(now: second) == .sendBlocks(first: 1, count: 2))
        #expect(s.deadline == 3 * second)
        #expect(s.timeout(now: 3 * second) == .sendBlocks(first: 1, count: 2))
        #expect(s.deadline == 7 * second)
        #expect(s.timeout(now: 7 * second) == .sendBlocks(first: 1, count: 2))
        #expect(s.timeout(now: 15 * second) == .timedOut)
        #expect(s.retransmits == 3)
    }

    @Test func progressResetsTheBackoff() {
        var s = makeSender(bytes: 5000)
        _ = s.start(now: 0)
        _ = s.timeout(now: second)
        _ = s.receiveAck(1, now: 2 * second)
        #expect(s.deadline == 3 * second)
    }
}
