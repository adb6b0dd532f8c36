import Testing
import StampedeBase
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

    /// Issue 57: blocks of a window that could not go (a streamed file's bytes on the disk) go
    /// later, from the first not sent and not acknowledged; the timer counts from then, and its
    /// patience does not start over.
    @Test func blocksThatWentLateAreSentFromTheFirstUnsentAndTheTimerCountsFromThen() {
        var s = makeSender(bytes: 8 * 512 + 10, window: 4, oack: true)
        #expect(s.sendLate(from: 1, now: 1) == .none)  // the OACK is not answered yet
        #expect(s.start(now: 0) == .sendOptionAck)
        #expect(s.receiveAck(0, now: 10) == .sendBlocks(first: 1, count: 4))
        // Blocks 3 and 4 waited for the disk; 1 and 2 went, and the client acknowledged 2 meanwhile.
        #expect(s.receiveAck(2, now: 20) == .sendBlocks(first: 3, count: 4))
        let deadline = s.deadline!
        #expect(s.sendLate(from: 3, now: 500_000_000) == .sendBlocks(first: 3, count: 4))
        #expect(s.deadline! == deadline + 500_000_000 - 20)
        #expect(s.timer.retries == 0)
        // From a block already acknowledged: from the first that is not.
        #expect(s.receiveAck(4, now: 500_000_100) == .sendBlocks(first: 5, count: 4))
        #expect(s.sendLate(from: 3, now: 500_000_200) == .sendBlocks(first: 5, count: 4))
        // Past what was handed out, or when finished: nothing.
        #expect(s.sendLate(from: 9, now: 500_000_300) == .none)
        #expect(s.receiveAck(8, now: 500_000_400) == .sendBlocks(first: 9, count: 1))
        #expect(s.receiveAck(9, now: 500_000_500) == .finished)
        #expect(s.sendLate(from: 9, now: 500_000_600) == .none)
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

    @Test func aDuplicateAckThatCrossedOurSendResendsNothing() {
        var s = makeSender(bytes: 5000)
        _ = s.start(now: 0)
        _ = s.receiveAck(1, now: 2_000_000)  // a round trip of 2 ms: block 2 sent now
        // The Sorcerer's Apprentice: ACK 1 again within a round trip of block 2's send was on its
        // way before block 2 arrived (the answer to a duplicate block 1); resending would double.
        #expect(s.receiveAck(1, now: 3_000_000) == .none)
        #expect(s.receiveAck(1, now: 9_000_000) == .none)
        #expect(s.retransmits == 0 && s.duplicateAcks == 2)
    }

    @Test func aClientThatTimesOutGetsTheBlockAgainEachTimeItAsks() {
        // An impatient client (300 ms) whose DATA keeps being lost: every repeat of its ACK,
        // well over a round trip after our last send, gets the block again, not only the first.
        var s = makeSender(bytes: 5000)
        _ = s.start(now: 0)
        _ = s.receiveAck(1, now: 1_000_000)
        let ms: Nanoseconds = 1_000_000
        for ask in 1...3 {
            #expect(s.receiveAck(1, now: (1 + 300 * Nanoseconds(ask)) * ms) == .sendBlocks(first: 2, count: 1))
        }
        #expect(s.retransmits == 3)
        // An answer that crosses the third resend changes nothing.
        #expect(s.receiveAck(1, now: 902 * ms) == .none)
        #expect(s.receiveAck(2, now: 903 * ms) == .sendBlocks(first: 3, count: 1))
    }

    @Test func aClientsRetriesAreAnsweredWhenTheRoundTripBoundOutgrowsItsPeriod() {
        // The first answer took 700 ms (a busy start): the bound is 1.4 s, longer than the
        // client's 300 ms period. Its first retry may have crossed our send; the second, 300 ms
        // after the first and both after our send, is its own timer: answered, and each after it.
        let ms: Nanoseconds = 1_000_000
        var s = makeSender(bytes: 5000, oack: true)
        _ = s.start(now: 0)
        #expect(s.receiveAck(0, now: 700 * ms) == .sendBlocks(first: 1, count: 1))
        #expect(s.receiveAck(0, now: 1000 * ms) == .none)
        #expect(s.receiveAck(0, now: 1300 * ms) == .sendBlocks(first: 1, count: 1))
        #expect(s.receiveAck(0, now: 1600 * ms) == .sendBlocks(first: 1, count: 1))
        #expect(s.retransmits == 2)
        // Progress starts over: the next block's first duplicate is judged by the bound again.
        #expect(s.receiveAck(1, now: 1700 * ms) == .sendBlocks(first: 2, count: 1))
        #expect(s.receiveAck(1, now: 2000 * ms) == .none)
        #expect(s.receiveAck(1, now: 2300 * ms) == .sendBlocks(first: 2, count: 1))
    }

    @Test func duplicatesInABurstOrBeforeOurLastSendAreNoRetry() {
        // EDK2, window 8, the bound long: a gap brings duplicates 1 ms apart for 40 ms. None is a
        // client's retry; none is answered.
        let ms: Nanoseconds = 1_000_000
        var s = makeSender(bytes: 50_000, window: 8, oack: true)
        _ = s.start(now: 0)
        #expect(s.receiveAck(0, now: 700 * ms) == .sendBlocks(first: 1, count: 8))
        let burst = (701...740).filter { s.receiveAck(0, now: Nanoseconds($0) * ms) != .none }
        #expect(burst.isEmpty)
        // The timer resends (its interval, held to the base: 1 s). A duplicate that came before
        // that send says nothing of it: the next one is judged by the bound...
        #expect(s.timeout(now: 1700 * ms) == .sendBlocks(first: 1, count: 8))
        #expect(s.receiveAck(0, now: 1750 * ms) == .none)
        // ...and the one after it, a retry period later, is answered.
        #expect(s.receiveAck(0, now: 2050 * ms) == .sendBlocks(first: 1, count: 8))
        #expect(s.retransmits == 2)
    }

    @Test func aFloodOfDuplicatesGetsAWindowAtMostOncePerFloor() {
        var s = makeSender(bytes: 50_000, window: 8)
        _ = s.start(now: 0)
        _ = s.receiveAck(8, now: 100_000)  // a round trip of 0.1 ms: the floor rules
        var resends = 0
        for t in stride(from: 200_000, to: 100_000_000, by: 100_000) where s.receiveAck(8, now: Nanoseconds(t)) != .none {
            resends += 1
        }
        // 100 ms of duplicates every 0.1 ms: one resend per 10 ms at most.
        #expect(resends >= 8 && resends <= 10)
    }

    @Test func aWindowsGapAcksCrossingTheResentWindowAreIgnored() {
        // EDK2, window 4: block 6 lost; block 7 makes it ACK 5 at once (progress: 6...9 go out),
        // then block 8 makes it ACK 5 again before the new window has arrived.
        var s = makeSender(bytes: 50_000, window: 4)
        _ = s.start(now: 0)
        #expect(s.receiveAck(4, now: 1_000_000) == .sendBlocks(first: 5, count: 4))
        #expect(s.receiveAck(5, now: 2_000_000) == .sendBlocks(first: 6, count: 4))
        #expect(s.receiveAck(5, now: 2_100_000) == .none)
        #expect(s.receiveAck(9, now: 3_000_000) == .sendBlocks(first: 10, count: 4))
        #expect(s.retransmits == 0)
    }

    @Test func aRepeatedRequestBeforeAnyAnswerResendsTheFirstAnswer() {
        // The OACK was lost: the client (300 ms) sends its RRQ again, on its own timer; each
        // repeat gets the OACK again (a flood of them, once per 10 ms at most).
        let ms: Nanoseconds = 1_000_000
        var oack = makeSender(bytes: 5000, oack: true)
        #expect(oack.start(now: 0) == .sendOptionAck)
        #expect(oack.requestRepeated(now: 5 * ms) == .none)
        #expect(oack.requestRepeated(now: 300 * ms) == .sendOptionAck)
        #expect(oack.requestRepeated(now: 305 * ms) == .none)
        #expect(oack.requestRepeated(now: 600 * ms) == .sendOptionAck)
        #expect(oack.retransmits == 2)
        // ACK 0, 10 ms after the last OACK (which one it answers, Karn cannot say), then ACK 0 for
        // the other OACK, which crossed block 1: not a reason to send block 1 twice.
        #expect(oack.receiveAck(0, now: 610 * ms) == .sendBlocks(first: 1, count: 1))
        #expect(oack.receiveAck(0, now: 612 * ms) == .none)
        // Answered: a repeat is now stale, whatever the time.
        _ = oack.receiveAck(1, now: 620 * ms)
        #expect(oack.requestRepeated(now: 5 * second) == .none)
        // No options: block 1 was the first answer.
        var plain = makeSender(bytes: 5000, window: 2)
        _ = plain.start(now: 0)
        #expect(plain.requestRepeated(now: 300 * ms) == .sendBlocks(first: 1, count: 2))
        // A flood of repeats (a forged address's?) gets no more than the retries (3 here).
        var flooded = makeSender(bytes: 5000, oack: true)
        _ = flooded.start(now: 0)
        let answered = (1...1000).filter { flooded.requestRepeated(now: Nanoseconds($0) * 20 * ms) != .none }.count
        #expect(answered == 3)
    }

    @Test func beforeAnyRoundTripHalfTheIntervalStandsInForIt() {
        var s = makeSender(bytes: 5000)
        _ = s.start(now: 0)
        _ = s.receiveAck(1, now: 0)  // no sample: no time passed
        #expect(s.receiveAck(1, now: second * 4 / 10) == .none)
        #expect(s.receiveAck(1, now: second * 6 / 10) == .sendBlocks(first: 2, count: 1))
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
