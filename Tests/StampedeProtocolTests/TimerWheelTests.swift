import Testing
import StampedeBase
@testable import StampedeProtocol

@Suite struct TimerWheelSpec {
    func expired(_ wheel: inout TimerWheel, at now: Nanoseconds) -> [Int] {
        var out: [Int32] = []
        wheel.expire(now: now, into: &out)
        return out.map(Int.init).sorted()
    }

    @Test func slotsExpireAtTheirDeadlineNotBefore() {
        var wheel = TimerWheel(tick: 1_000_000, buckets: 64, capacity: 8, now: 0)
        wheel.schedule(1, at: 5_000_000)
        wheel.schedule(2, at: 10_000_000)
        #expect(expired(&wheel, at: 4_000_000) == [])
        #expect(expired(&wheel, at: 5_000_000) == [1])
        #expect(expired(&wheel, at: 20_000_000) == [2])
        #expect(wheel.count == 0)
    }

    @Test func cancelledAndRescheduledSlotsDoNotFireTwice() {
        var wheel = TimerWheel(tick: 1_000_000, buckets: 64, capacity: 8, now: 0)
        wheel.schedule(1, at: 5_000_000)
        wheel.schedule(2, at: 5_000_000)
        wheel.cancel(2)
        wheel.schedule(1, at: 30_000_000)
        #expect(expired(&wheel, at: 10_000_000) == [])
        #expect(expired(&wheel, at: 30_000_000) == [1])
    }

    @Test func deadlinesBeyondOneTurnWaitForTheirTurn() {
        var wheel = TimerWheel(tick: 1_000_000, buckets: 16, capacity: 4, now: 0)
        wheel.schedule(3, at: 40_000_000)
        #expect(expired(&wheel, at: 8_000_000) == [])
        #expect(expired(&wheel, at: 24_000_000) == [])
        #expect(expired(&wheel, at: 39_000_000) == [])
        #expect(expired(&wheel, at: 40_000_000) == [3])
    }

    @Test func aLongSleepFiresEverythingDue() {
        var wheel = TimerWheel(tick: 1_000_000, buckets: 16, capacity: 4, now: 0)
        wheel.schedule(0, at: 3_000_000)
        wheel.schedule(1, at: 50_000_000)
        #expect(expired(&wheel, at: 1_000_000_000) == [0, 1])
    }

    @Test func nextDeadlineIsNeverLate() {
        var wheel = TimerWheel(tick: 1_000_000, buckets: 64, capacity: 4, now: 0)
        #expect(wheel.nextDeadline() == nil)
        wheel.schedule(0, at: 7_500_000)
        let next = wheel.nextDeadline()!
        #expect(next <= 8_000_000 && next >= 7_500_000)
    }

    @Test func growingKeepsScheduledSlots() {
        var wheel = TimerWheel(tick: 1_000_000, buckets: 64, capacity: 2, now: 0)
        wheel.schedule(1, at: 2_000_000)
        wheel.grow(to: 100)
        wheel.schedule(99, at: 2_000_000)
        #expect(expired(&wheel, at: 2_000_000) == [1, 99])
    }
}
