import StampedeBase

/// A hashed timing wheel over transfer slot indices: schedule, cancel and expiry are O(1) and
/// allocate nothing (the links are arrays indexed by slot, grown only with the session table).
///
/// Time is cut into ticks; a deadline lands in bucket (tick % buckets). Deadlines further than one
/// turn of the wheel stay in their bucket and are skipped until their turn comes round.
public struct TimerWheel: Sendable {
    public let tick: Nanoseconds
    /// A timer that fires this long after its deadline or later fired late: its loop was busy
    /// (what the server's and the storm's reports count; five default ticks).
    public static let lateness: Nanoseconds = 10_000_000
    private let bucketMask: Int
    private var heads: [Int32]
    private var next: [Int32] = []
    private var previous: [Int32] = []
    private var deadlineTick: [Int64] = []
    /// The last tick processed; buckets after it are in the future.
    private var currentTick: Int64
    public private(set) var count = 0

    private static let none: Int32 = -1
    private static let unscheduled: Int64 = -1

    /// - Parameters:
    ///   - tick: resolution (default 2 ms: far below any TFTP timeout).
    ///   - buckets: a power of two; one turn is tick × buckets.
    public init(tick: Nanoseconds = 2_000_000, buckets: Int = 2048, capacity: Int = 0, now: Nanoseconds) {
        precondition(buckets > 0 && buckets & (buckets - 1) == 0)
        self.tick = tick
        self.bucketMask = buckets - 1
        self.heads = Array(repeating: Self.none, count: buckets)
        self.currentTick = now / tick
        grow(to: capacity)
    }

    public var capacity: Int { next.count }

    public mutating func grow(to capacity: Int) {
        guard capacity > next.count else { return }
        let extra = capacity - next.count
        next += repeatElement(Self.none, count: extra)
        previous += repeatElement(Self.none, count: extra)
        deadlineTick += repeatElement(Self.unscheduled, count: extra)
    }

    /// (Re)schedules `slot` to expire at `deadline`, rounded up to the tick.
    public mutating func schedule(_ slot: Int, at deadline: Nanoseconds) {
        cancel(slot)
        let t = max((deadline + tick - 1) / tick, currentTick + 1)
        deadlineTick[slot] = t
        let bucket = Int(t) & bucketMask
        let head = heads[bucket]
        next[slot] = head
        previous[slot] = Self.none
        if head != Self.none { previous[Int(head)] = Int32(slot) }
        heads[bucket] = Int32(slot)
        count += 1
    }

    public mutating func cancel(_ slot: Int) {
        guard deadlineTick[slot] != Self.unscheduled else { return }
        let bucket = Int(deadlineTick[slot]) & bucketMask
        let n = next[slot], p = previous[slot]
        if p != Self.none { next[Int(p)] = n } else { heads[bucket] = n }
        if n != Self.none { previous[Int(n)] = p }
        deadlineTick[slot] = Self.unscheduled
        count -= 1
    }

    /// Removes every slot whose deadline is at or before `now` and appends it to `expired`
    /// (a caller-owned array, so handling a timer may reschedule or cancel freely afterwards).
    public mutating func expire(now: Nanoseconds, into expired: inout [Int32]) {
        let target = now / tick
        guard target > currentTick else { return }
        // More than a whole turn behind: every bucket is due for a look, once.
        let steps = min(target - currentTick, Int64(bucketMask + 1))
        var t = target - steps + 1
        while t <= target {
            var slot = heads[Int(t) & bucketMask]
            while slot != Self.none {
                let s = Int(slot)
                slot = next[s]
                if deadlineTick[s] <= target {
                    cancel(s)
                    expired.append(Int32(s))
                }
            }
            t += 1
        }
        currentTick = target
    }

    /// The earliest time worth waking for: the start of the first non-empty bucket's tick
    /// (which may hold deadlines of a later turn, so this can be early, never late).
    public func nextDeadline() -> Nanoseconds? {
        guard count > 0 else { return nil }
        var t = currentTick + 1
        let end = currentTick + Int64(bucketMask + 1)
        while t <= end {
            if heads[Int(t) & bucketMask] != Self.none { return t * tick }
            t += 1
        }
        return end * tick
    }
}
