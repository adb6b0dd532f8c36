import StampedeBase
import StampedeIO
import StampedeProtocol

/// What a storm measured, for the machines and for each stage of their profile. Failures are
/// counted by kind, with the first few described.
public struct StormReport: Sendable {
    /// Machines that booted (ran every stage), and those that did not. Without a profile a
    /// machine is one transfer.
    public var ok = 0
    public var failed = 0
    public var failuresByKind: [String: Int] = [:]
    /// The first few machines' failures described (those that started over are
    /// `rebootExamples`: a rack's thousands of reboots do not hide the one machine lost).
    public var failureExamples: [String] = []
    /// Bytes of the transfers that succeeded.
    public var bytes = 0
    /// Each booted machine's time from its first request to its last byte.
    public var durations: [Nanoseconds] = []
    /// Boots that failed and started over (the profile's `reboot`), why, and the boot times of
    /// the machines that booted after starting over (within `durations` too).
    public var reboots = 0
    public var rebootCausesByKind: [String: Int] = [:]
    public var rebootExamples: [String] = []
    public var rebootedDurations: [Nanoseconds] = []
    /// Requests and ACKs we sent again, and DATA the server sent again (duplicates seen).
    public var retransmits = 0
    public var duplicates = 0
    /// Most transfers open at once.
    public var peakActive = 0
    /// TLS handshakes of http stages over HTTPS, each from the connection's first byte to the
    /// handshake's end (`storm --https`).
    public var handshakes: [Nanoseconds] = []
    /// From the first request to the end of the last transfer.
    public var wall: Nanoseconds = 0
    /// The storm's own CPU time (user + system), set by whoever ran it.
    public var clientCPUSeconds = 0.0
    public var backend = ""
    /// The storm's own backends' figures: where its datagrams were lost on its side (queues full,
    /// sends refused, io_uring's buffers run dry).
    public var network = BackendStatistics()
    /// Transfer timers that fired 10 ms or more after their deadline: the storm's loop was busy.
    public var lateTimers = 0
    /// The profile's name, and what happened at each of its stages.
    public var profile = ""
    public var stages: [StageReport] = []
    /// What the server's own metrics said of the storm (`--metrics`): lines, and a JSON object.
    public var serverView: (text: String, json: String)?

    /// One stage of the profile, over every machine that reached it.
    public struct StageReport: Sendable {
        public var label: String
        public var ok = 0
        public var failed = 0
        /// Names answered "not found" where that is fine (`try`, a `first` search's misses).
        public var notFound = 0
        public var failuresByKind: [String: Int] = [:]
        /// From the stage's first request to its end, for each machine that got through.
        public var durations: [Nanoseconds] = []
        public var retransmits = 0
        public var bytes = 0

        mutating func merge(_ other: StageReport) {
            ok += other.ok
            failed += other.failed
            notFound += other.notFound
            failuresByKind.merge(other.failuresByKind, uniquingKeysWith: +)
            durations += other.durations
            retransmits += other.retransmits
            bytes += other.bytes
        }
    }

    public init() {}

    init(profile: BootProfile) {
        self.profile = profile.name
        stages = profile.stages.map { StageReport(label: $0.label) }
    }

    public var sessions: Int { ok + failed }

    /// A transfer of stage `stage` ended: its retransmissions, duplicates and bytes.
    mutating func record(transfer: ClientTransfer<SocketAddress>, ok: Bool, stage: Int) {
        retransmits += transfer.retransmits
        duplicates += transfer.duplicates
        stages[stage].retransmits += transfer.retransmits
        if ok { record(bytes: transfer.bytesReceived, stage: stage) }
    }

    /// A transfer of stage `stage` delivered a whole file of `count` bytes.
    mutating func record(bytes count: Int, stage: Int) {
        bytes += count
        stages[stage].bytes += count
    }

    /// A machine booted in `time`, after starting over `reboots` times.
    mutating func booted(in time: Nanoseconds, afterReboots reboots: Int = 0) {
        ok += 1
        durations.append(time)
        if reboots > 0 { rebootedDurations.append(time) }
    }

    /// A machine's boot failed at `stage` and starts over: the stage's failure is counted, the
    /// machine's is not (yet).
    mutating func recordReboot(_ failure: StormFailure, stage: Int) {
        reboots += 1
        rebootCausesByKind[failure.kind, default: 0] += 1
        recordStageFailure(failure, stage: stage, rebooted: true)
    }

    /// Transfers of every stage that failed, whether their machine started over or not.
    public var transfersFailed: Int { stages.reduce(0) { $0 + $1.failed } }

    /// A machine's boot failed (at `stage`, when it got that far).
    mutating func recordFailure(_ failure: StormFailure, stage: Int? = nil) {
        failed += 1
        failuresByKind[failure.kind, default: 0] += 1
        recordStageFailure(failure, stage: stage, rebooted: false)
    }

    /// Examples kept of each list.
    static let examplesKept = 5

    /// A transfer of `stage` failed: counted there, and described if it is among the first few
    /// of its machine's kind (one that started over, or one that failed).
    private mutating func recordStageFailure(_ failure: StormFailure, stage: Int?, rebooted: Bool) {
        if let stage {
            stages[stage].failed += 1
            stages[stage].failuresByKind[failure.kind, default: 0] += 1
        }
        guard (rebooted ? rebootExamples : failureExamples).count < Self.examplesKept else { return }
        let described = (stages.count > 1 ? stage.map { "\(stages[$0].label): " } ?? "" : "") + failure.description
        if rebooted { rebootExamples.append(described) } else { failureExamples.append(described) }
    }

    /// Adds another thread's report; the wall time is the longest.
    public mutating func merge(_ other: StormReport) {
        ok += other.ok
        failed += other.failed
        failuresByKind.merge(other.failuresByKind, uniquingKeysWith: +)
        failureExamples += other.failureExamples.prefix(max(0, Self.examplesKept - failureExamples.count))
        rebootExamples += other.rebootExamples.prefix(max(0, Self.examplesKept - rebootExamples.count))
        reboots += other.reboots
        rebootCausesByKind.merge(other.rebootCausesByKind, uniquingKeysWith: +)
        rebootedDurations += other.rebootedDurations
        bytes += other.bytes
        durations += other.durations
        retransmits += other.retransmits
        duplicates += other.duplicates
        peakActive = max(peakActive, other.peakActive)  // a run's storms share one count
        handshakes += other.handshakes
        network += other.network
        lateTimers += other.lateTimers
        wall = max(wall, other.wall)
        if stages.isEmpty {
            profile = other.profile
            stages = other.stages
        } else {
            for i in stages.indices where i < other.stages.count { stages[i].merge(other.stages[i]) }
        }
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

    /// p50, p99 and max of `times` in milliseconds, from one sort.
    static func milliseconds(of times: [Nanoseconds]) -> (p50: String, p99: String, max: String) {
        let sorted = times.sorted()
        func ms(_ p: Double) -> String { decimalText(percentile(p, ofSorted: sorted) * 1000, places: 1) }
        return (ms(50), ms(99), ms(100))
    }

    /// Counts by kind, `3 timed out, 1 wrong size`, or as the members of a JSON object.
    static func countsText(_ counts: [String: Int]) -> String {
        counts.sorted { $0.key < $1.key }.map { "\($0.value) \($0.key)" }.joined(separator: ", ")
    }

    static func countsJSON(_ counts: [String: Int]) -> String {
        counts.sorted { $0.key < $1.key }.map { "\(jsonString($0.key)): \($0.value)" }.joined(separator: ", ")
    }

    /// A few lines for people.
    public var text: String {
        let latency = Self.milliseconds(of: durations)
        let booting = stages.count > 1
        let kinds = Self.countsText(failuresByKind)
        var lines = [
            (booting ? "machines: \(ok) booted" : "sessions: \(ok) ok") + ", \(failed) failed" + (failed == 0 ? "" : " (\(kinds))"),
            "data: \(bytes) bytes in \(decimalText(seconds, places: 3)) s: \(decimalText(megabytesPerSecond, places: 1)) MB/s, \(decimalText(sessionsPerSecond, places: 1)) sessions/s",
            "transfer time: p50 \(latency.p50) ms, p99 \(latency.p99) ms, max \(latency.max) ms",
            "retransmissions: \(retransmits) sent by us, \(duplicates) duplicate DATA from the server; peak \(peakActive) open at once",
            "storm CPU: \(decimalText(clientCPUSeconds, places: 2)) s on the \(backend) backend; " + lostHere,
        ]
        if booting {
            lines[2] = "boot time: p50 \(latency.p50) ms, p99 \(latency.p99) ms, max \(latency.max) ms (first request to last byte)"
            lines.insert("profile \(profile), by stage:", at: 3)
            lines.insert(contentsOf: stages.map(\.text), at: 4)
        }
        if reboots > 0 {
            let rebooted = Self.milliseconds(of: rebootedDurations)
            lines.append("""
                reboots: \(reboots) (\(Self.countsText(rebootCausesByKind))); \(rebootedDurations.count) machines booted \
                after starting over: p50 \(rebooted.p50) ms, p99 \(rebooted.p99) ms, max \(rebooted.max) ms
                """)
        }
        if !handshakes.isEmpty {
            let time = Self.milliseconds(of: handshakes)
            lines.append("TLS handshakes: \(handshakes.count), p50 \(time.p50) ms, p99 \(time.p99) ms, max \(time.max) ms")
        }
        lines += failureExamples.map { "  failure: \($0)" } + rebootExamples.map { "  failure (rebooted): \($0)" }
        if let serverView { lines.append(serverView.text) }
        return lines.joined(separator: "\n")
    }


    /// What the storm's side lost before reading it or sending it.
    private var lostHere: String {
        let buffers = network.receiveBufferExhausted.map { ", \($0) receives without a buffer" } ?? ""
        return "lost on the storm's side: \(network.socketQueueDrops) in full socket queues, \(network.sendFailures) sends refused"
            + buffers + "; \(lateTimers) timers fired 10 ms or more late"
    }

    /// One JSON object (field names are stable: `make bench` reads them).
    public var json: String {
        let latency = Self.milliseconds(of: durations)
        let examples = failureExamples.map(jsonString).joined(separator: ", ")
        let rebootExamples = rebootExamples.map(jsonString).joined(separator: ", ")
        let rebooted = Self.milliseconds(of: rebootedDurations)
        let handshake = Self.milliseconds(of: handshakes)
        return """
            {"ok": \(ok), "failed": \(failed), "failures": {\(Self.countsJSON(failuresByKind))}, "failure_examples": [\(examples)], \
            "bytes": \(bytes), "seconds": \(decimalText(seconds, places: 6)), "mb_per_s": \(decimalText(megabytesPerSecond, places: 3)), \
            "sessions_per_s": \(decimalText(sessionsPerSecond, places: 3)), "p50_ms": \(latency.p50), "p99_ms": \(latency.p99), \
            "max_ms": \(latency.max), "retransmits": \(retransmits), "duplicates": \(duplicates), \
            "peak_active": \(peakActive), "client_cpu_s": \(decimalText(clientCPUSeconds, places: 3)), "backend": \(jsonString(backend)), \
            "reboots": \(reboots), "reboot_causes": {\(Self.countsJSON(rebootCausesByKind))}, "reboot_examples": [\(rebootExamples)], \
            "rebooted_ok": \(rebootedDurations.count), "rebooted_p50_ms": \(rebooted.p50), "rebooted_p99_ms": \(rebooted.p99), \
            "transfers_failed": \(transfersFailed), \
            "socket_queue_drops": \(network.socketQueueDrops), "send_failures": \(network.sendFailures), \
            "receive_buffer_exhausted": \(network.receiveBufferExhausted ?? 0), "late_timers": \(lateTimers), \
            "tls_handshakes": \(handshakes.count), "tls_handshake_p50_ms": \(handshake.p50), "tls_handshake_p99_ms": \(handshake.p99), \
            "profile": \(jsonString(profile)), "stages": [\(stages.map(\.json).joined(separator: ", "))], \
            "boot_ms": [\(durations.map { decimalText(Double($0) / 1e6, places: 3) }.joined(separator: ", "))]\
            \(serverView.map { ", \"server\": \($0.json)" } ?? "")}
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

extension StormReport.StageReport {

    /// `  uefi probe ipxe.efi: 2000 ok, 0 failed; p50 1.2 ms, p99 3.4 ms, max 5.0 ms; 0 retransmissions`
    var text: String {
        let time = StormReport.milliseconds(of: durations)
        let kinds = StormReport.countsText(failuresByKind)
        return "  \(label): \(ok) ok, \(failed) failed" + (kinds.isEmpty ? "" : " (\(kinds))")
            + (notFound > 0 ? ", \(notFound) names not found (as expected)" : "")
            + "; p50 \(time.p50) ms, p99 \(time.p99) ms, max \(time.max) ms; \(retransmits) retransmissions"
    }

    var json: String {
        let time = StormReport.milliseconds(of: durations)
        return """
            {"stage": \(jsonString(label)), "ok": \(ok), "failed": \(failed), "not_found": \(notFound), \
            "failures": {\(StormReport.countsJSON(failuresByKind))}, \
            "bytes": \(bytes), "p50_ms": \(time.p50), "p99_ms": \(time.p99), "max_ms": \(time.max), "retransmits": \(retransmits)}
            """
    }
}
