import Testing
@testable import StampedeProtocol

let second = nanosecondsPerSecond

func makeSender(bytes: Int, blockSize: Int = 512, window: Int = 1, oack: Bool = false, rollover: Int = 0) -> DataSender {
    DataSender(totalBytes: bytes, blockSize: blockSize, windowSize: window, numbering: BlockNumbering(rollover: rollover),
               sendsOptionAck: oack,
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

    /// Past 65535 the numbers wrap to the rollover value (0 by default, 1 by the option); after
    /// a wrap to 1 they run 1...65535 and 0 never comes again, so the second wrap is at 131070.
    @Test(arguments: [(0, [65535, 0, 1], [65535, 0]), (1, [65535, 1, 2], [65535, 1])])
    func blockNumbersWrapPast65535ToTheRolloverValue(rollover: Int, firstWrap: [UInt16], secondWrap: [UInt16]) {
        let blocks = 140_000
        var s = makeSender(bytes: blocks * 8 + 3, blockSize: 8, rollover: rollover)
        var action = s.start(now: 0)
        var wireSeen: [UInt16] = []
        var secondSeen: [UInt16] = []
        while case .sendBlocks(let first, _) = action {
            let wire = s.wire(first)
            if (65535...65537).contains(first) { wireSeen.append(wire) }
            if (131070...131071).contains(first) { secondSeen.append(wire) }
            action = s.receiveAck(wire, now: 1)
        }
        #expect(action == .finished)
        #expect(wireSeen == firstWrap)
        #expect(secondSeen == (rollover == 0 ? [65534, 65535] : secondWrap))
        #expect(s.bytesAcknowledged == blocks * 8 + 3)
    }

    /// A window that spans a wrap to 1: an ACK inside it names the right block, and ACK 0 (a
    /// number the wrap skipped) names none.
    @Test func anAckInAWindowAcrossAWrapToOneNamesItsBlock() {
        var s = makeSender(bytes: 70_000 * 8, blockSize: 8, window: 8, rollover: 1)
        var action = s.start(now: 0)
        while case .sendBlocks(let first, let count) = action, first + count <= 65533 {
            action = s.receiveAck(s.wire(first + count - 1), now: 1)
        }
        #expect(action == .sendBlocks(first: 65529, count: 8))
        #expect(s.receiveAck(0, now: 2) == .none)
        #expect(s.receiveAck(1, now: 2) == .sendBlocks(first: 65537, count: 8))
        #expect(s.acknowledged == 65536)
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
