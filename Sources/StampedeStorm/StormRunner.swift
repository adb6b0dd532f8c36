import CStampedeSys
import Glibc
import Synchronization
import StampedeIO
import StampedeProtocol

/// Runs a storm on `threads` threads, each a Storm with its own backend and its share of the
/// clients, and merges their reports. The storm's CPU time (the whole process's) is included, so
/// a reader can see whether the load generator, not the server, was the limit.
public enum StormRunner {
    public static func run<Backend: DatagramBackend>(
        plan: StormPlan, threads: Int, makeBackend: () throws(Errno) -> Backend,
        progress: (@Sendable (StormReport, Int) -> Void)? = nil, stop: (@Sendable () -> Bool)? = nil
    ) throws(Errno) -> StormReport {
        let parts = max(1, min(threads, plan.clients))
        var storms: [Storm<Backend>] = []
        let booting = MachinesBooting()
        for part in 0..<parts {
            storms.append(Storm(plan: plan.share(part, of: parts), backend: try makeBackend(), booting: booting))
        }
        let board = ProgressBoard(parts: parts, progress: progress)
        let cpuBefore = processCPUSeconds()
        let others = storms.enumerated().dropFirst().map { index, storm in
            SystemThread(named: "storm-\(index)") { _ = storm.run(progress: { board.post(index, $0, $1) }, stop: stop) }
        }
        var report = storms[0].run(progress: { board.post(0, $0, $1) }, stop: stop)
        for thread in others { thread.join() }
        for storm in storms.dropFirst() { report.merge(storm.report) }
        report.peakActive = booting.peak
        report.clientCPUSeconds = processCPUSeconds() - cpuBefore
        return report
    }

    /// User + system CPU of this process so far.
    public static func processCPUSeconds() -> Double {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        func seconds(_ t: timeval) -> Double { Double(t.tv_sec) + Double(t.tv_usec) / 1e6 }
        return seconds(usage.ru_utime) + seconds(usage.ru_stime)
    }
}

/// The threads' latest counts, summed for one progress line.
final class ProgressBoard: Sendable {
    private let latest: Mutex<[(report: StormReport, active: Int)]>
    private let progress: (@Sendable (StormReport, Int) -> Void)?

    init(parts: Int, progress: (@Sendable (StormReport, Int) -> Void)?) {
        latest = Mutex(Array(repeating: (StormReport(), 0), count: parts))
        self.progress = progress
    }

    func post(_ index: Int, _ report: StormReport, _ active: Int) {
        guard let progress else { return }
        var slim = report
        slim.durations = []
        let (total, running) = latest.withLock { latest in
            latest[index] = (slim, active)
            var total = StormReport()
            var running = 0
            for entry in latest {
                total.merge(entry.report)
                running += entry.active
            }
            return (total, running)
        }
        if index == 0 { progress(total, running) }
    }
}

/// Machines booting across the storms of a run, and the most that were at once: counted when a
/// machine powers on and when it ends (not per packet), so that a run's peak is the peak of all
/// its threads together, not the sum of theirs.
public final class MachinesBooting: Sendable {
    private let count = Atomic<Int>(0)
    private let most = Atomic<Int>(0)

    public init() {}

    /// One more machine booting; returns the most at once so far.
    func started() -> Int {
        let now = count.wrappingAdd(1, ordering: .relaxed).newValue
        return most.max(now, ordering: .relaxed).newValue
    }

    func ended() { count.wrappingSubtract(1, ordering: .relaxed) }

    public var peak: Int { most.load(ordering: .relaxed) }
}
