/// Monotonic time in nanoseconds. The core never reads a clock itself: callers pass `now`.
public typealias Nanoseconds = Int64

public enum Clock {
    public static let nanosecondsPerSecond: Nanoseconds = 1_000_000_000
}

/// Retransmission with exponential backoff and a bounded number of tries (DESIGN: timeouts).
/// The base is the negotiated `timeout` option, else the server's `-T`.
public struct RetransmitTimer: Equatable, Sendable {
    public var base: Nanoseconds
    public var maxRetries: Int
    /// Backoff stops doubling at this multiple of the base.
    public var maxBackoff: Int64 = 8

    public private(set) var retries = 0
    /// Retransmissions done over the transfer's life (for the log line).
    public private(set) var totalRetransmits = 0
    public private(set) var deadline: Nanoseconds?
    public private(set) var lastSent: Nanoseconds = 0

    public init(base: Nanoseconds, maxRetries: Int) {
        self.base = max(base, 1_000_000)
        self.maxRetries = maxRetries
    }

    public var current: Nanoseconds { base * min(Int64(1) << Int64(min(retries, 30)), maxBackoff) }

    /// Something new was sent: the wait starts over at the base interval.
    public mutating func sentNew(now: Nanoseconds) {
        retries = 0
        lastSent = now
        deadline = now + current
    }

    /// The timer fired and we resend: back off, or say the transfer has failed.
    public mutating func retransmit(now: Nanoseconds) -> Bool {
        guard retries < maxRetries else { deadline = nil; return false }
        retries += 1
        totalRetransmits += 1
        lastSent = now
        deadline = now + current
        return true
    }

    /// A resend not caused by the timer (a client that evidently timed out), same backoff state.
    public mutating func resentEarly(now: Nanoseconds) {
        totalRetransmits += 1
        lastSent = now
        deadline = now + current
    }

    /// Keep the slot alive without resending (the final ACK of an upload stays answerable).
    public mutating func wait(until time: Nanoseconds) { deadline = time }

    public mutating func stop() { deadline = nil }
}
