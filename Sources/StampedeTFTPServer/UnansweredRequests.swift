import StampedeBase
import StampedeIO
import StampedeProtocol

/// Requests a busy server left unanswered (`--when-busy silence`), told in one log line a second
/// rather than one each: a rack booting against a full server would otherwise flood the log.
struct UnansweredRequests {
    private var count = 0
    private var reasons: [String: Int] = [:]
    private var since: Nanoseconds = 0

    mutating func note(_ reason: String, now: Nanoseconds) {
        if count == 0 { since = now }
        count += 1
        reasons[reason, default: 0] += 1
    }

    /// The line to log once a second has passed since the first request counted (or at once
    /// with `force`); counting starts over.
    mutating func report(now: Nanoseconds, force: Bool = false) -> String? {
        guard count > 0, force || now - since >= nanosecondsPerSecond else { return nil }
        let causes = reasons.sorted { $0.value > $1.value }.map { "\($0.key): \($0.value)" }.joined(separator: "; ")
        let line = "busy: \(count) requests unanswered in \(decimalText(Double(now - since) / 1e9, places: 1)) s (\(causes)); their clients send them again"
        count = 0
        reasons.removeAll(keepingCapacity: true)
        return line
    }
}
