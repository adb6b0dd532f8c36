import enum CoreMetrics.MetricsSystem
import Glibc
import Prometheus
import StampedeDHCP
import StampedeFiles
import StampedeServing
import StampedeTLS
import Synchronization

/// What `stampede_build_info` says.
public struct BuildInfo: Sendable {
    public var version: String
    public var backend: String
    /// The kernel features the server uses: `io_uring`, `provided_buffers`, `udp_gso`...
    public var features: [String]

    public init(version: String, backend: String, features: [String]) {
        self.version = version
        self.backend = backend
        self.features = features
    }
}

/// The server's figures in Prometheus's text format, made on the scraper's thread: each scrape
/// sums what the workers published (`WorkerMetrics`) and moves it into a swift-prometheus registry.
/// The workers are never asked anything and never wait; the registry is this type's alone.
public final class MetricsExporter: Sendable {
    public let registry: PrometheusCollectorRegistry
    private let workers: [WorkerMetrics]
    private let cache: FileCache
    private let fileLabels: FileLabels
    private let process: ProcessFigures
    /// One scrape (or drain) at a time; never taken by a worker.
    private let state: Mutex<State>

    /// The registry's metrics and the totals they were last brought to.
    private struct State {
        var counters: [(metric: Counter, read: @Sendable ([WorkerMetrics], FileCache.Statistics) -> Int, total: Int)] = []
        var gauges: [(metric: Gauge, read: @Sendable ([WorkerMetrics], FileCache.Statistics) -> Int)] = []
        var durations: [Int: DurationHistogram] = [:]
        var cpu: Counter
        var cpuSeconds = 0.0
        var process: (resident: Gauge, openDescriptors: Gauge, maxDescriptors: Gauge)
        /// `stampede_machines{stage}`, with `--machines`.
        var machines: [(stage: String, gauge: Gauge)] = []
        /// `stampede_machines_api_calls_total{outcome}`, with `--machines-api`.
        var apiCalls: [(outcome: String, counter: Counter, total: Int)] = []
        /// `stampede_machines_api_call_seconds` and `stampede_machines_api_wait_seconds`, with `--machines-api`.
        var apiCallTimes: (call: DurationHistogram, waited: DurationHistogram)?
    }

    /// Machines per stage of their boot (`--machines`): the stages, and the count at each now.
    public struct MachineStages: Sendable {
        public var stages: [String]
        public var counts: @Sendable () -> [String: Int]
        /// With `--machines-api`: its calls' outcomes, and the count of each since the start.
        public var apiOutcomes: [String]
        public var apiCalls: @Sendable () -> [String: Int]
        /// With `--machines-api`: how long its calls took (nanoseconds), since they were last taken.
        public var apiCallTimes: @Sendable () -> [(call: Int64, waited: Int64)]

        public init(stages: [String], counts: @escaping @Sendable () -> [String: Int],
                    apiOutcomes: [String] = [], apiCalls: @escaping @Sendable () -> [String: Int] = { [:] },
                    apiCallTimes: @escaping @Sendable () -> [(call: Int64, waited: Int64)] = { [] }) {
            self.stages = stages
            self.counts = counts
            self.apiOutcomes = apiOutcomes
            self.apiCalls = apiCalls
            self.apiCallTimes = apiCallTimes
        }
    }

    private let machines: MachineStages?

    /// Bucket bounds of the transfer-duration histogram: a boot file on a LAN takes milliseconds
    /// alone, seconds in a storm, a minute when something is wrong.
    public static let durationBuckets: [Duration] = [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300]
        .map { Duration.milliseconds(Int64($0 * 1000)) }

    /// Bucket bounds of the machine API's call times: an API on the LAN answers in milliseconds,
    /// one that looks a machine up in a database in tens; a call gives up at 2 s.
    public static let apiCallBuckets: [Duration] = [1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2000]
        .map { Duration.microseconds(Int64($0 * 1000)) }

    /// `process`: opened before `-s` and `-u` (`ProcessFigures`); `tls`: `--https`'s identity.
    public init(workers: [WorkerMetrics], cache: FileCache, fileLabels: FileLabels, build: BuildInfo,
                process: ProcessFigures = ProcessFigures(), tls: TLSIdentity? = nil, machines: MachineStages? = nil) {
        let registry = PrometheusCollectorRegistry()
        self.registry = registry
        self.machines = machines
        self.workers = workers
        self.cache = cache
        self.fileLabels = fileLabels
        self.process = process

        let catalog = MetricsCatalog(registry: registry, workers: workers, tls: tls)
        registry.makeGauge(descriptor: described("stampede_build_info", "The running build: its version, I/O backend and the kernel features it uses."),
                           labels: [("version", build.version), ("backend", build.backend),
                                    ("features", build.features.joined(separator: ","))]).set(Int64(1))
        registry.makeGauge(descriptor: described("process_start_time_seconds", "Start time of the process since the Unix epoch."))
            .set(Int64(time(nil)))

        state = Mutex(State(
            counters: catalog.counters, gauges: catalog.gauges,
            cpu: registry.makeCounter(descriptor: described("process_cpu_seconds_total", "User and system CPU time spent, in seconds.")),
            process: (registry.makeGauge(descriptor: described("process_resident_memory_bytes", "Resident memory size in bytes.")),
                      registry.makeGauge(descriptor: described("process_open_fds", "Open file descriptors.")),
                      registry.makeGauge(descriptor: described("process_max_fds", "The limit on open file descriptors."))),
            machines: (machines?.stages ?? []).map { stage in
                (stage, registry.makeGauge(descriptor: described("stampede_machines", "Machines (--machines) by how far their boot got: left alone, DHCP answered, boot file, script, kernel, initrd, done."),
                                           labels: [("stage", stage)]))
            },
            apiCalls: (machines?.apiOutcomes ?? []).map { outcome in
                (outcome, registry.makeCounter(descriptor: described("stampede_machines_api_calls_total", "Calls to the machine API (--machines-api) by outcome: listed, not_listed (4xx), refused (an answer not used), unreachable (no answer, a 5xx), overflow (too many machines waiting)."),
                                               labels: [("outcome", outcome)]), 0)
            },
            apiCallTimes: (machines?.apiOutcomes ?? []).isEmpty ? nil : (
                registry.makeDurationHistogram(
                    descriptor: described("stampede_machines_api_call_seconds", "Time from a call's request to the machine API (--machines-api) to its answer read or its failure, as the server saw it."),
                    buckets: Self.apiCallBuckets),
                registry.makeDurationHistogram(
                    descriptor: described("stampede_machines_api_wait_seconds", "Time from a machine's ask to the machine API (--machines-api) queued to its answer: the call, and the wait for a free caller before it."),
                    buckets: Self.apiCallBuckets))))
    }

    /// Makes swift-metrics report into this registry, so that a library instrumented with
    /// swift-metrics shows in the same exposition. Once per process. Stampede's own metrics are
    /// made on the registry itself: they carry help text, which swift-metrics' API cannot, and
    /// which Prometheus's linter (`promtool check metrics`) requires.
    public func bootstrapMetricsSystem() {
        MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: registry))
    }

    /// The exposition, brought up to date.
    public func scrape() -> [UInt8] {
        update()
        return registry.emitToBuffer()
    }

    /// Brings the registry up to what the workers published.
    public func update() {
        let cacheStatistics = cache.statistics
        state.withLock { state in
            drain(&state)
            for i in state.counters.indices {
                let total = state.counters[i].read(workers, cacheStatistics)
                if total > state.counters[i].total {
                    state.counters[i].metric.increment(by: Int64(total - state.counters[i].total))
                    state.counters[i].total = total
                }
            }
            for gauge in state.gauges { gauge.metric.set(Int64(gauge.read(workers, cacheStatistics))) }
            var usage = rusage()
            getrusage(RUSAGE_SELF.rawValue, &usage)
            let cpu = Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
            if cpu > state.cpuSeconds {
                state.cpu.increment(by: cpu - state.cpuSeconds)
                state.cpuSeconds = cpu
            }
            state.process.resident.set(Int64(process.residentBytes))
            state.process.openDescriptors.set(Int64(process.openDescriptors))
            var limit = rlimit()
            getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
            state.process.maxDescriptors.set(Int64(clamping: limit.rlim_cur))
            if let counts = machines?.counts() {
                for (stage, gauge) in state.machines { gauge.set(Int64(counts[stage] ?? 0)) }
            }
            if let calls = machines?.apiCalls() {
                for i in state.apiCalls.indices {
                    let total = calls[state.apiCalls[i].outcome] ?? 0
                    if total > state.apiCalls[i].total {
                        state.apiCalls[i].counter.increment(by: Int64(total - state.apiCalls[i].total))
                        state.apiCalls[i].total = total
                    }
                }
            }
        }
    }

    /// Moves the served transfers' durations from the workers' logs into the histogram (and the
    /// machine API's call times into theirs); the listener calls it every second, so that the logs
    /// do not fill between scrapes.
    public func drainDurations() {
        state.withLock { drain(&$0) }
    }

    private func drain(_ state: inout State) {
        if let histograms = state.apiCallTimes, let times = machines?.apiCallTimes() {
            for time in times {
                histograms.call.recordNanoseconds(time.call)
                histograms.waited.recordNanoseconds(time.waited)
            }
        }
        var names: [String]?
        for worker in workers {
            worker.durations.drain { entry in
                let key = Int(entry.label) << 6 | entry.kind.rawValue << 3 | (ServedProtocol.allCases.firstIndex(of: worker.served) ?? 0)
                if state.durations[key] == nil {
                    if names == nil { names = fileLabels.names }
                    let file = Int(entry.label) < names!.count ? names![Int(entry.label)] : FileLabels.other
                    state.durations[key] = registry.makeDurationHistogram(
                        descriptor: described("stampede_transfer_duration_seconds",
                                              "Time from request to the last acknowledgement (TFTP) or the last byte taken by the kernel (HTTP) of served transfers, by file (machine-specific names folded)."),
                        labels: [("file", file), ("protocol", worker.served.rawValue), ("request", entry.kind.label)],
                        buckets: Self.durationBuckets)
                }
                state.durations[key]!.recordNanoseconds(entry.nanoseconds)
            }
        }
    }
}

/// A metric's name and help text, as swift-prometheus takes them (the unit is part of the name).
func described(_ name: String, _ help: String) -> MetricNameDescriptor {
    MetricNameDescriptor(metricName: name, unitName: "", helpText: help)
}
