import StampedeIO
import StampedeProtocol


/// What a storm measured. Failures are counted by kind, with the first few described.
public struct StormReport: Sendable {
    public var ok = 0
    public var failed = 0
    public var failuresByKind: [String: Int] = [:]
    public var failureExamples: [String] = []
    /// Bytes of the transfers that succeeded.
    public var bytes = 0
    /// Time from first request to last ACK of each successful transfer.
    public var durations: [Nanoseconds] = []
    /// Requests and ACKs we sent again, and DATA the server sent again (duplicates seen).
    public var retransmits = 0
    public var duplicates = 0
    /// Most transfers open at once.
    public var peakActive = 0
    /// From the first request to the end of the last transfer.
    public var wall: Nanoseconds = 0
    /// The storm's own CPU time (user + system), set by whoever ran it.
    public var clientCPUSeconds = 0.0
    public var backend = ""

    public init() {}

    public var sessions: Int { ok + failed }

    mutating func record(_ end: StormEnd, transfer: ClientTransfer<SocketAddress>, now: Nanoseconds) {
        retransmits += transfer.retransmits
        duplicates += transfer.duplicates
        switch end {
        case .ok:
            ok += 1
            bytes += transfer.bytesReceived
            durations.append(now - transfer.started)
        case .failed(let failure):
            recordFailure(failure)
        }
    }

    mutating func recordFailure(_ failure: StormFailure) {
        failed += 1
        failuresByKind[failure.kind, default: 0] += 1
        if failureExamples.count < 5 { failureExamples.append(failure.description) }
    }

    /// Adds another thread's report; the wall time is the longest.
    public mutating func merge(_ other: StormReport) {
        ok += other.ok
        failed += other.failed
        failuresByKind.merge(other.failuresByKind, uniquingKeysWith: +)
        failureExamples += other.failureExamples.prefix(max(0, 5 - failureExamples.count))
        bytes += other.bytes
        durations += other.durations
        retransmits += other.retransmits
        duplicates += other.duplicates
        peakActive += other.peakActive
        wall = max(wall, other.wall)
    }

    var seconds: Double { max(Double(wall) / 1e9, 1e-9) }
    public var megabytesPerSecond: Double { Double(bytes) / 1e6 / seconds }
    public var sessionsPerSecond: Double { Double(ok) / seconds }

    /// The p-th percentile (0...100) of successful transfer times, in seconds; 0 when none.
    public func percentile(_ p: Double) -> Double { Self.percentile(p, ofSorted: durations.sorted()) }

    static func percentile(_ p: Double, ofSorted sorted: [Nanoseconds]) -> Double {
        guard !sorted.isEmpty else { return 0 }
        let rank = Int((p / 100 * Double(sorted.count)).rounded(.up)) - 1
        return Double(sorted[min(max(rank, 0), sorted.count - 1)]) / 1e9
    }

    /// p50, p99 and max in milliseconds, from one sort.
    private var latencyMilliseconds: (p50: String, p99: String, max: String) {
        let sorted = durations.sorted()
        func ms(_ p: Double) -> String { decimalText(Self.percentile(p, ofSorted: sorted) * 1000, places: 1) }
        return (ms(50), ms(99), ms(100))
    }

    /// A few lines for people.
    public var text: String {
        let latency = latencyMilliseconds
        var lines = [
            "sessions: \(ok) ok, \(failed) failed" + (failed == 0 ? "" : " (" + failuresByKind.sorted { $0.key < $1.key }
                .map { "\($0.value) \($0.key)" }.joined(separator: ", ") + ")"),
            "data: \(bytes) bytes in \(decimalText(seconds, places: 3)) s: \(decimalText(megabytesPerSecond, places: 1)) MB/s, \(decimalText(sessionsPerSecond, places: 1)) sessions/s",
            "transfer time: p50 \(latency.p50) ms, p99 \(latency.p99) ms, max \(latency.max) ms",
            "retransmissions: \(retransmits) sent by us, \(duplicates) duplicate DATA from the server; peak \(peakActive) open at once",
            "storm CPU: \(decimalText(clientCPUSeconds, places: 2)) s on the \(backend) backend",
        ]
        lines += failureExamples.map { "  failure: \($0)" }
        return lines.joined(separator: "\n")
    }


    /// One JSON object (field names are stable: `make bench` reads them).
    public var json: String {
        let latency = latencyMilliseconds
        let kinds = failuresByKind.sorted { $0.key < $1.key }.map { "\(jsonString($0.key)): \($0.value)" }.joined(separator: ", ")
        let examples = failureExamples.map(jsonString).joined(separator: ", ")
        return """
            {"ok": \(ok), "failed": \(failed), "failures": {\(kinds)}, "failure_examples": [\(examples)], \
            "bytes": \(bytes), "seconds": \(decimalText(seconds, places: 6)), "mb_per_s": \(decimalText(megabytesPerSecond, places: 3)), \
            "sessions_per_s": \(decimalText(sessionsPerSecond, places: 3)), "p50_ms": \(latency.p50), "p99_ms": \(latency.p99), \
            "max_ms": \(latency.max), "retransmits": \(retransmits), "duplicates": \(duplicates), \
            "peak_active": \(peakActive), "client_cpu_s": \(decimalText(clientCPUSeconds, places: 3)), "backend": \(jsonString(backend))}
            """
    }
}

func jsonString(_ text: String) -> String {
    var out = "\""
    for scalar in text.unicodeScalars {
        switch scalar {
        case "\"": out += "\\\""
        case "\\": out += "\\\\"
        case _ where scalar.value < 0x20: out += "\\u00" + (scalar.value < 16 ? "0" : "") + String(scalar.value, radix: 16)
        default: out.unicodeScalars.append(scalar)
        }
    }
    return out + "\""
}
