import StampedeBase

/// Retransmission with exponential backoff and a bounded number of tries (docs/ARCHITECTURE.md, "Timeouts").
/// The base is the negotiated `timeout` option, else the server's `-T`. Where the client did not
/// negotiate one, the server may `adapt`: the interval then follows the measured round trip
/// (RFC 6298's smoothed RTT + 4 × variation, Karn's rule: no sample from a resent packet),
/// between a floor and the base, so a lost packet costs a rack a round trip or two, not a second.
public struct RetransmitTimer: Equatable, Sendable {
    public let base: Nanoseconds
    public let maxRetries: Int
    /// Until the peer first answers, the timer runs on at most this base, whatever timeout was
    /// negotiated: a request from a spoofed address, whose "client" never answers, holds its
    /// transfer no longer than an ordinary one would (nil: the base throughout).
    public var firstAnswerBase: Nanoseconds?
    /// The peer has answered once: the negotiated base applies from then on.
    public private(set) var peerHasAnswered = false
    /// Backoff stops doubling at this multiple of the base.
    public var maxBackoff: Int64 = 8
    /// The interval before backoff: the base, or the round-trip estimate when adapting.
    public private(set) var interval: Nanoseconds
    /// Adapting: the least interval; nil when fixed.
    public private(set) var floor: Nanoseconds?
    private var smoothed: Nanoseconds = 0
    private var variation: Nanoseconds = 0
    /// The last four samples (`.max` where none yet), and where the next goes.
    private var recent = SIMD4<Int64>(repeating: .max)
    private var recentCount = 0
    /// Before the first sample: how long the last answer to a resend took.
    private var provisional: Nanoseconds = 0
    /// What was last sent has not been resent, so its answer times a round trip.
    private var unambiguous = false
    /// When the peer last made progress (the last `sentNew`).
    public private(set) var waitingSince: Nanoseconds = 0

    /// The peer has let the whole current interval pass without progress: a resend is due or
    /// made, and nothing answered it.
    public func peerIsQuiet(now: Nanoseconds) -> Bool { now - waitingSince > current }

    public private(set) var retries = 0
    /// Retransmissions done over the transfer's life (for the log line).
    public private(set) var totalRetransmits = 0
    public private(set) var deadline: Nanoseconds?
    public private(set) var lastSent: Nanoseconds = 0

    /// The longest base: RFC 2349's largest timeout. Backoff from it (at most 2^24 times it) still
    /// fits a deadline, whatever a caller passes.
    public static let longestBase: Nanoseconds = 255 * nanosecondsPerSecond

    /// `base` is held to 1 ms ... 255 s, `maxRetries` to 0 or more.
    public init(base: Nanoseconds, maxRetries: Int) {
        self.base = min(max(base, 1_000_000), Self.longestBase)
        self.maxRetries = max(0, maxRetries)
        self.interval = self.base
    }

    /// The base in force: the negotiated one once the peer has answered, else at most firstAnswerBase.
    var effectiveBase: Nanoseconds { peerHasAnswered ? base : min(base, firstAnswerBase ?? base) }

    /// The wait before the next resend: the interval doubled per retry, at most maxBackoff × base.
    /// (A shift of at most 24 cannot overflow: the interval is at most the base, ≤ 255 s.)
    public var current: Nanoseconds {
        let base = effectiveBase
        return min(min(interval, base) << Int64(min(retries, 24)), base * maxBackoff)
    }

    /// How long the fixed timer waits in all before it gives up: base × (1 + 2 + 4 + ...), capped.
    public var fixedPatience: Nanoseconds {
        let base = effectiveBase
        return (0...maxRetries).reduce(0) { $0 + base * min(Int64(1) << Int64(min($1, 24)), maxBackoff) }
    }

    /// Follows the round trip from now on, never below `floor` nor above the base.
    public mutating func adapt(floor: Nanoseconds) {
        self.floor = min(max(floor, 1_000_000), base)
    }

    /// The peer answered what we last sent: a round-trip sample (RFC 6298 §2), which the
    /// interval follows when adapting.
    public mutating func answered(now: Nanoseconds) {
        peerHasAnswered = true
        guard now > lastSent else { return }
        guard unambiguous else {
            // Karn: no sample. But until there is one, the time since the resend is what the
            // round trip most likely was (it answers the resend unless the round trip is longer
            // than the wait was): the bound of a round trip makes do with it.
            if recentCount == 0 { provisional = now - lastSent }
            return
        }
        let sample = now - lastSent
        recent[recentCount & 3] = sample
        recentCount += 1
        if smoothed == 0 {
            smoothed = sample
            variation = sample / 2
        } else {
            variation = (3 * variation + abs(smoothed - sample)) / 4
            smoothed = (7 * smoothed + sample) / 8
        }
        guard let floor else { return }
        interval = min(max(smoothed + max(4 * variation, 1_000_000), floor), base)
    }

    /// The longest a round trip is expected to take now: twice the least of the last four
    /// samples, and 1 ms (before the first sample, twice the time an answer to a resend took);
    /// nil before any answer. An answer that comes sooner than this after a send was on its way
    /// before that send arrived. The least of a few, not the smoothed mean: a sample may hold a
    /// client's own timeout (its first ACK was lost, we heard the repeat), which would hold the
    /// mean up for dozens of round trips, while the least recent one follows the path as it is.
    public var roundTripBound: Nanoseconds? {
        if recentCount > 0 { return 2 * recent.min() + 1_000_000 }
        return provisional > 0 ? 2 * provisional + 1_000_000 : nil
    }

    /// Something new was sent: the wait starts over at the base interval.
    public mutating func sentNew(now: Nanoseconds) {
        retries = 0
        unambiguous = true
        waitingSince = now
        lastSent = now
        deadline = now + current
    }

    /// What was last sent went only now (its bytes had to come from the disk first): its round
    /// trip and the next deadline count from now. The patience does not start over.
    public mutating func sentLate(now: Nanoseconds) {
        lastSent = now
        if deadline != nil { deadline = now + current }
    }

    /// The timer fired and we resend: back off, or say the transfer has failed.
    public mutating func retransmit(now: Nanoseconds) -> Bool {
        resend(now: now)
    }

    /// A resend the peer provoked (a duplicate ACK, a block out of order), not the timer: it
    /// counts against the patience as the timer's do, or a peer that keeps sending what cannot
    /// be used would push the deadline on for ever. False when the patience is spent: the
    /// transfer has failed.
    public mutating func resentEarly(now: Nanoseconds) -> Bool {
        resend(now: now)
    }

    private mutating func resend(now: Nanoseconds) -> Bool {
        // The patience is the retries and the time the fixed timer takes to spend them: a transfer
        // fails when both are spent. Adapting shortens the waits, and a busy peer provokes resends
        // faster than the timer makes them; neither gives up sooner than a silent peer would have
        // (EDK2 likewise starts its count over on every ACK it sends).
        guard retries < maxRetries || now - waitingSince < fixedPatience else {
            deadline = nil
            return false
        }
        retries += 1
        totalRetransmits += 1
        unambiguous = false
        lastSent = now
        deadline = now + current
        return true
    }

    public mutating func stop() { deadline = nil }
}
