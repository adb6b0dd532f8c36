import StampedeBase

/// How often one machine is answered: once per `interval` for each kind of request it sends (a
/// DISCOVER, a boot server REQUEST), so that a machine, or a forger with its MAC, that sends a
/// flood gets one answer in each interval, while a firmware that lost an answer and asks again
/// (EDK2 after 4 s, iPXE after 1 s at the soonest) is answered again. State alone: the responder
/// asks it, with the time, before each answer.
struct BootAnswerLimit {
    struct Key: Hashable {
        /// `DHCPMessage.machine`: the MAC, or what stands for it where there is none (IPoIB).
        var machine: [UInt8]
        var request: UInt8
        var bootServerPort: Bool
    }

    static let interval: Nanoseconds = 500_000_000
    /// Machines remembered at most; past it, those answered more than an interval ago are forgotten.
    static let capacity = 65_536

    private var lastAnswered: [Key: Nanoseconds] = [:]

    /// Machines remembered now.
    var remembered: Int { lastAnswered.count }

    /// Whether `key` may be answered at `now`; if so, it counts as answered then.
    mutating func allow(_ key: Key, now: Nanoseconds) -> Bool {
        if let last = lastAnswered[key], now - last < Self.interval { return false }
        if lastAnswered.count >= Self.capacity {
            lastAnswered = lastAnswered.filter { now - $0.value < Self.interval }
            // A flood of distinct machines within one interval: the oldest half goes, so that
            // each pass over the table frees a quarter of it at least.
            if lastAnswered.count >= Self.capacity * 3 / 4 {
                let cut = lastAnswered.values.sorted()[Self.capacity / 2]
                lastAnswered = lastAnswered.filter { $0.value >= cut }
            }
        }
        lastAnswered[key] = now
        return true
    }
}
