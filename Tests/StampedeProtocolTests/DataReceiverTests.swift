import Testing
import StampedeBase
@testable import StampedeProtocol

func makeReceiver(blockSize: Int = 512, window: Int = 1, oack: Bool = false, rollover: Int = 0) -> DataReceiver {
    DataReceiver(blockSize: blockSize, windowSize: window, numbering: BlockNumbering(rollover: rollover), sendsOptionAck: oack,
                 timer: RetransmitTimer(base: second, maxRetries: 2))
}

@Suite struct DataReceiverSpec {
    @Test func startsWithAckZeroOrTheOptionAck() {
        var plain = makeReceiver()
        #expect(plain.start(now: 0) == .ack(0))
        var negotiated = makeReceiver(oack: true)
        #expect(negotiated.start(now: 0) == .optionAck)
    }

    @Test func lockstepAcksEveryBlockAndAShortBlockEnds() {
        var r = makeReceiver()
        _ = r.start(now: 0)
        #expect(r.receiveData(1, length: 512, now: 1) == .init(deliver: true, reply: .ack(1), finished: false))
        #expect(r.receiveData(2, length: 10, now: 2) == .init(deliver: true, reply: .ack(2), finished: true))
        #expect(r.bytesReceived == 522)
    }

    @Test func anEmptyLastBlockEnds() {
        var r = makeReceiver()
        _ = r.start(now: 0)
        _ = r.receiveData(1, length: 512, now: 1)
        #expect(r.receiveData(2, length: 0, now: 2).finished)
    }

    @Test func aWindowIsAckedAtItsEnd() {
        var r = makeReceiver(window: 3)
        _ = r.start(now: 0)
        #expect(r.receiveData(1, length: 512, now: 1).reply == .none)
        #expect(r.receiveData(2, length: 512, now: 1).reply == .none)
        #expect(r.receiveData(3, length: 512, now: 1).reply == .ack(3))
    }

    @Test func aGapIsAnsweredWithTheLastBlockInOrderOnce() {
        var r = makeReceiver(window: 4)
        _ = r.start(now: 0)
        _ = r.receiveData(1, length: 512, now: 1)
        #expect(r.receiveData(3, length: 512, now: 2) == .init(deliver: false, reply: .ack(1), finished: false))
        #expect(r.receiveData(4, length: 512, now: 3) == .init(deliver: false, reply: .none, finished: false))
        #expect(r.receiveData(2, length: 512, now: 4).deliver)
    }

    @Test func edk2AnswersEveryBlockOutOfOrderAndStartsItsTriesOver() {
        // Mtftp4RrqHandleData: an unexpected block gets an ACK of the block before the one
        // expected, at once; Mtftp4SendPacket starts the tries over with every ACK.
        var r = DataReceiver(blockSize: 512, windowSize: 4, sendsOptionAck: false, answersBlocksOutOfOrder: true,
                             timer: RetransmitTimer(base: second, maxRetries: 2))
        r.startAwaiting(now: 0)
        _ = r.receiveData(1, length: 512, now: 1)
        for (block, now) in [(3, 2), (4, 3), (1, 4)] as [(UInt16, Nanoseconds)] {
            #expect(r.receiveData(block, length: 512, now: now) == .init(deliver: false, reply: .ack(1), finished: false))
        }
        #expect(r.deadline == 4 + second && r.retransmits == 0)
        // A server that keeps sending what cannot be used keeps it waiting, as EDK2 does.
        for step in 1...10 {
            _ = r.receiveData(3, length: 512, now: Nanoseconds(step) * second / 2)
        }
        #expect(r.timeout(now: 6 * second) == .ack(1))
        #expect(r.receiveData(2, length: 512, now: 7 * second).deliver)
    }

    @Test func aDuplicateOfTheFinalBlockIsAckedAgain() {
        var r = makeReceiver()
        _ = r.start(now: 0)
        _ = r.receiveData(1, length: 3, now: 1)
        #expect(r.receiveData(1, length: 3, now: 2) == .init(deliver: false, reply: .ack(1), finished: false))
    }

    @Test(arguments: [0, 1])
    func blockNumbersWrap(rollover: Int) {
        var r = makeReceiver(blockSize: 8, rollover: rollover)
        let numbering = BlockNumbering(rollover: rollover)
        _ = r.start(now: 0)
        for block in 1...65537 {
            let receipt = r.receiveData(numbering.wire(block), length: 8, now: 1)
            #expect(receipt.deliver)
        }
        #expect(r.received == 65537)
        // The number the other rollover would send next is a gap, not a block.
        #expect(!r.receiveData(BlockNumbering(rollover: 1 - rollover).wire(65538), length: 8, now: 2).deliver)
    }

    @Test func timeoutResendsTheLastReplyThenGivesUp() {
        var r = makeReceiver(oack: true)
        _ = r.start(now: 0)
        #expect(r.timeout(now: second) == .optionAck)
        #expect(r.timeout(now: 3 * second) == .optionAck)
        #expect(r.timeout(now: 7 * second) == nil)
    }
}

/// Issue 21, defect 12: a re-ACK for a block that cannot be used moved the deadline a whole
/// timeout on without counting a retry, so a sender resending it for ever was never given up.
@Suite struct UselessBlocks {
    @Test func aSenderThatKeepsResendingAReceivedBlockIsGivenUpAfterTheRetries() {
        var r = makeReceiver()  // 1 s, 2 retries
        _ = r.start(now: 0)
        _ = r.receiveData(1, length: 512, now: 1)
        var now: Nanoseconds = 1
        var receipts: [DataReceiver.Receipt] = []
        // Block 1 again, every 0.6 s: each provokes a re-ACK at most, each counts, and the
        // receiver gives up once the retries and the fixed timer's time (1 + 2 + 4 s) are spent.
        while now < 60 * second, receipts.last?.timedOut != true {
            now += 600_000_000
            receipts.append(r.receiveData(1, length: 512, now: now))
        }
        #expect(receipts.last?.timedOut == true)
        #expect(receipts.filter { $0.reply == .ack(1) }.count >= 2)
        #expect(now >= 7 * second && now < 10 * second)
    }

    @Test func aBlockFromFarAheadIsAsUseless() {
        var r = makeReceiver()
        _ = r.start(now: 0)
        var now: Nanoseconds = 0
        var receipt = DataReceiver.Receipt(deliver: false, reply: .none, finished: false)
        while !receipt.timedOut && now < 60 * second {
            now += 300_000_000
            receipt = r.receiveData(7, length: 512, now: now)
            #expect(!receipt.deliver)
        }
        #expect(receipt.timedOut && now < 10 * second)
    }
}

@Suite struct ProvokedResends {
    @Test func aResendTheCounterpartProvokedCountsAgainstThePatience() {
        var timer = RetransmitTimer(base: second, maxRetries: 2)
        timer.sentNew(now: 0)
        let early = [timer.resentEarly(now: 1), timer.resentEarly(now: 2)]
        #expect(early == [true, true] && timer.retries == 2)
        let spent = timer.resentEarly(now: 7 * second)
        #expect(spent == false)
        #expect(timer.deadline == nil)
    }

    /// A busy peer provokes resends faster than the timer makes them (EDK2 resets its count on
    /// every ACK it sends): the transfer is given up no sooner than a silent peer's would be.
    @Test func provokedResendsGiveUpNoSoonerThanTheTimerWould() {
        var timer = RetransmitTimer(base: second, maxRetries: 2)
        timer.sentNew(now: 0)
        let early = (1...5).map { timer.resentEarly(now: Nanoseconds($0) * 100_000_000) }
        let beforeThePatience = timer.retransmit(now: 6 * second)
        let atThePatience = timer.retransmit(now: timer.fixedPatience)
        #expect(early == [true, true, true, true, true])
        #expect(beforeThePatience && !atThePatience)
    }

    /// Without provoked resends, the timer alone gives up exactly where it always did.
    @Test func theTimerAloneGivesUpAfterItsRetries() {
        var timer = RetransmitTimer(base: second, maxRetries: 2)
        timer.sentNew(now: 0)
        var fired: [Bool] = []
        while let deadline = timer.deadline { fired.append(timer.retransmit(now: deadline)) }
        #expect(fired == [true, true, false])
        #expect(timer.fixedPatience == 7 * second)
    }
}
