import Testing
import StampedeBase
@testable import StampedeProtocol

@Suite struct RetransmitTimerSpec {
    let ms: Nanoseconds = 1_000_000

    @Test func aFixedTimerBacksOffFromTheBaseAndIgnoresRoundTrips() {
        var t = RetransmitTimer(base: second, maxRetries: 5)
        t.sentNew(now: 0)
        t.answered(now: 3 * ms)
        #expect(t.current == second)
        let resent = t.retransmit(now: second)
        #expect(resent && t.current == 2 * second)
        for _ in 0..<3 { _ = t.retransmit(now: 0) }
        #expect(t.current == 8 * second)  // capped at 8 × base
    }

    @Test func aFixedTimerStillMeasuresTheRoundTrip() {
        // Its interval stays the base, but what a duplicate ACK may ask for depends on the round trip.
        var t = RetransmitTimer(base: second, maxRetries: 5)
        #expect(t.roundTripBound == nil)
        t.sentNew(now: 0)
        t.answered(now: 4 * ms)  // twice 4, and 1
        #expect(t.roundTripBound == 9 * ms && t.interval == second)
        t.sentNew(now: second)
        _ = t.retransmit(now: 2 * second)
        t.answered(now: 3 * second)  // Karn: no sample from a resent packet
        #expect(t.roundTripBound == 9 * ms)
    }

    @Test func aSampleHoldingTheClientsOwnTimeoutIsForgottenAtTheNextTrueOne() {
        // The client's first ACK was lost and we heard its repeat 300 ms later: a "round trip" of
        // 301 ms. The next answers take 1 ms: the bound follows them at once, the mean would not.
        var t = RetransmitTimer(base: second, maxRetries: 5)
        t.adapt(floor: 100 * ms)
        t.sentNew(now: 0)
        t.answered(now: 301 * ms)
        #expect(t.roundTripBound == 603 * ms)
        t.sentNew(now: 301 * ms)
        t.answered(now: 302 * ms)
        #expect(t.roundTripBound == 3 * ms)
        #expect(t.interval > 100 * ms)  // the retransmit interval is RFC 6298's, slower to follow
    }

    @Test func beforeAnySampleAnAnswerToAResendBoundsTheRoundTrip() {
        var t = RetransmitTimer(base: second, maxRetries: 5)
        t.adapt(floor: 100 * ms)
        t.sentNew(now: 0)
        _ = t.retransmit(now: second)
        t.answered(now: second + 3 * ms)  // most likely the resend's answer: 3 ms
        #expect(t.roundTripBound == 7 * ms && t.interval == second)  // the interval waits for a true sample
        t.sentNew(now: 2 * second)
        t.answered(now: 2 * second + 2 * ms)
        #expect(t.roundTripBound == 5 * ms)
    }

    /// Issue 11: a spoofed RRQ with timeout 255 held its transfer about 7,900 s. Until the peer
    /// answers, the server's own base applies; a client that answers gets what it negotiated.
    @Test func aNegotiatedTimeoutCountsOnlyOnceThePeerHasAnswered() {
        var t = RetransmitTimer(base: 255 * second, maxRetries: 5)
        t.firstAnswerBase = second
        t.sentNew(now: 0)
        #expect(t.deadline == second)
        #expect(t.fixedPatience == 31 * second)  // 1 + 2 + 4 + 8 + 8 + 8, not 255 × 31
        var now: Nanoseconds = 0
        var resends = 0
        while let deadline = t.deadline {
            now = deadline
            guard t.retransmit(now: now) else { break }
            resends += 1
        }
        #expect(resends == 5 && now == 31 * second)
        var answered = RetransmitTimer(base: 255 * second, maxRetries: 5)
        answered.firstAnswerBase = second
        answered.sentNew(now: 0)
        answered.answered(now: 10 * ms)
        answered.sentNew(now: 10 * ms)
        #expect(answered.deadline == 10 * ms + 255 * second)
    }

    @Test func anAdaptiveTimerFollowsTheRoundTripBetweenFloorAndBase() {
        var t = RetransmitTimer(base: second, maxRetries: 5)
        t.adapt(floor: 5 * ms)
        t.sentNew(now: 0)
        #expect(t.current == second)  // no sample yet: the base
        t.answered(now: 10 * ms)      // first sample: srtt 10, var 5 → 10 + 20
        #expect(t.interval == 30 * ms)
        for step in 1...20 {
            t.sentNew(now: Nanoseconds(step) * second)
            t.answered(now: Nanoseconds(step) * second + 10 * ms)
        }
        #expect(t.interval < 15 * ms && t.interval >= 10 * ms)
        t.sentNew(now: 100 * second)
        #expect(t.deadline == 100 * second + t.interval)
        // Backoff doubles from the estimate, never past 8 × base.
        let resent = t.retransmit(now: 0)
        #expect(resent && t.current == 2 * t.interval)
    }

    @Test func theFloorAndTheBaseBoundIt() {
        var fast = RetransmitTimer(base: second, maxRetries: 5)
        fast.adapt(floor: 100 * ms)
        fast.sentNew(now: 0)
        fast.answered(now: 1 * ms)
        #expect(fast.interval == 100 * ms)
        var slow = RetransmitTimer(base: second, maxRetries: 5)
        slow.adapt(floor: 100 * ms)
        slow.sentNew(now: 0)
        slow.answered(now: 3 * second)
        #expect(slow.interval == second)
    }

    /// Runs the timer to the end: how many resends, and when it gave up.
    func exhaust(_ timer: inout RetransmitTimer) -> (resends: Int, gaveUp: Nanoseconds) {
        var resends = 0
        while let deadline = timer.deadline {
            if !timer.retransmit(now: deadline) { return (resends, deadline) }
            resends += 1
        }
        return (resends, 0)
    }

    @Test func adaptingNeverGivesUpSoonerThanTheFixedTimer() {
        var fixed = RetransmitTimer(base: second, maxRetries: 5)
        fixed.sentNew(now: 0)
        let f = exhaust(&fixed)
        // Resends at 1, 3, 7, 15, 23 s; gives up at 31 s.
        #expect(f.resends == 5 && f.gaveUp == 31 * second && fixed.fixedPatience == 31 * second)

        var adaptive = RetransmitTimer(base: second, maxRetries: 5)
        adaptive.adapt(floor: 100 * ms)
        adaptive.sentNew(now: 0)
        adaptive.answered(now: 1 * ms)
        adaptive.sentNew(now: 1 * ms)
        let a = exhaust(&adaptive)
        // Sooner and more resends, but as much patience.
        #expect(a.resends > f.resends)
        #expect(a.gaveUp - 1 * ms >= 31 * second && a.gaveUp < 40 * second)
    }

    @Test func anAnswerToAResentPacketIsNoSample() {
        var t = RetransmitTimer(base: second, maxRetries: 5)
        t.adapt(floor: 1 * ms)
        t.sentNew(now: 0)
        let resent = t.retransmit(now: second)
        #expect(resent)
        t.answered(now: second + 2 * ms)  // Karn: which send does it answer? Not sampled.
        #expect(t.interval == second)
        t.sentNew(now: 2 * second)
        t.answered(now: 2 * second + 2 * ms)
        #expect(t.interval == 6 * ms)
    }

    @Test func aServerDownloadAdaptsButANegotiatedTimeoutIsKept() {
        var s = DataSender(totalBytes: 5000, blockSize: 512, windowSize: 1, sendsOptionAck: false,
                           timer: { var t = RetransmitTimer(base: second, maxRetries: 3); t.adapt(floor: 1 * ms); return t }())
        _ = s.start(now: 0)
        _ = s.receiveAck(1, now: 4 * ms)
        #expect(s.timer.interval == 12 * ms)
        #expect(s.deadline == 4 * ms + 12 * ms)
    }
}

/// Issue 21, defect 5: `--retries -1` trapped at the first retransmission (`0...-1`), and a -T of
/// 99,999,999,999 µs shifted its backoff into deadlines in the past.
@Suite struct RetransmitTimerLimits {
    @Test func aNegativeRetryCountGivesUpAtTheFirstTimeoutWithoutTrapping() {
        var timer = RetransmitTimer(base: nanosecondsPerSecond, maxRetries: -1)
        timer.sentNew(now: 0)
        #expect(timer.fixedPatience == nanosecondsPerSecond)
        #expect(timer.retransmit(now: nanosecondsPerSecond) == false)
    }

    @Test func aHugeBaseIsHeldToTheLongestTimeoutAndEveryDeadlineLiesAhead() {
        var timer = RetransmitTimer(base: 99_999_999_999 * 1000, maxRetries: 100)
        #expect(timer.base == RetransmitTimer.longestBase)
        timer.sentNew(now: 0)
        while let now = timer.deadline, timer.retransmit(now: now) {
            #expect(timer.deadline! > now)
        }
        #expect(timer.retries == 100)
    }
}
