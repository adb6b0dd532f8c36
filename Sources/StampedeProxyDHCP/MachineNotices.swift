import StampedeBase

/// What the operator is told of one machine the proxy cannot answer (an architecture no
/// selector names, a selector with no boot file): once per machine and reason in each `interval`,
/// with how many of its requests were not said since, so that a machine asking every second (or
/// a flood of one MAC) is a line a minute, not a line a request. State alone: the responder asks
/// it, with the time, before it logs.
struct MachineNotices {
    struct Key: Hashable {
        var machine: [UInt8]
        var reason: String
    }

    static let interval: Nanoseconds = 60 * nanosecondsPerSecond
    /// Machines remembered at most; past it, those last told of an interval ago are forgotten.
    static let capacity = 16_384

    private var told: [Key: (at: Nanoseconds, unsaid: Int)] = [:]

    /// Machines remembered now.
    var remembered: Int { told.count }

    /// Whether to say `reason` for `machine` at `now`: nil when it was said within the interval
    /// (this one is counted), else how many went unsaid since the last time.
    mutating func tell(_ machine: [UInt8], _ reason: String, now: Nanoseconds) -> Int? {
        let key = Key(machine: machine, reason: reason)
        if let last = told[key], now - last.at < Self.interval {
            told[key] = (last.at, last.unsaid + 1)
            return nil
        }
        if told.count >= Self.capacity {
            told = told.filter { now - $0.value.at < Self.interval }
            // As many machines as the table holds, each within the interval: the oldest half goes.
            if told.count >= Self.capacity * 3 / 4 {
                let cut = told.values.map(\.at).sorted()[Self.capacity / 2]
                told = told.filter { $0.value.at >= cut }
            }
        }
        let unsaid = told[key]?.unsaid ?? 0
        told[key] = (now, 0)
        return unsaid
    }
}
