import Glibc
import enum CoreMetrics.MetricsSystem
import Prometheus
import StampedeDHCP
import StampedeServer
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
    }

    /// Bucket bounds of the transfer-duration histogram: a boot file on a LAN takes milliseconds
    /// alone, seconds in a storm, a minute when something is wrong.
    public static let durationBuckets: [Duration] = [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300]
        .map { Duration.milliseconds(Int64($0 * 1000)) }

    /// `process`: opened before `-s` and `-u` (`ProcessFigures`); `tls`: `--https`'s identity.
    public init(workers: [WorkerMetrics], cache: FileCache, fileLabels: FileLabels, build: BuildInfo,
                process: ProcessFigures = ProcessFigures(), tls: TLSIdentity? = nil) {
        let registry = PrometheusCollectorRegistry()
        self.registry = registry
        self.workers = workers
        self.cache = cache
        self.fileLabels = fileLabels
        self.process = process

        typealias Read = @Sendable ([WorkerMetrics], FileCache.Statistics) -> Int
        var counters: [(Counter, Read, Int)] = []
        var gauges: [(Gauge, Read)] = []
        func sum(_ count: WorkerMetrics.Count) -> Read { { workers, _ in workers.reduce(0) { $0 + $1.value(count) } } }
        func counter(_ name: String, _ help: String, _ labels: [(String, String)] = [], _ read: @escaping Read) {
            counters.append((registry.makeCounter(descriptor: described(name, help), labels: labels), read, 0))
        }
        func gauge(_ name: String, _ help: String, _ read: @escaping Read) {
            gauges.append((registry.makeGauge(descriptor: described(name, help)), read))
        }

        for served in ServedProtocol.allCases {
            for kind in WorkerMetrics.Kind.of(served) {
                for result in WorkerMetrics.Result.allCases {
                    counter("stampede_requests_total",
                            "Requests by protocol (tftp, http, https), kind (rrq, wrq, get, head, invalid) and how they ended.",
                            [("protocol", served.rawValue), ("request", kind.label), ("outcome", result.label)]) { workers, _ in
                        workers.reduce(0) { $0 + ($1.served == served ? $1.requests(kind, result) : 0) }
                    }
                }
            }
        }
        for selector in BootSelector.allCases {
            for offer in [true, false] {
                counter("stampede_boot_answers_total",
                        "proxyDHCP answers (--proxy-dhcp) by the machine's selector and the answer: an offer, or a boot server's ack.",
                        [("selector", selector.rawValue), ("answer", offer ? "offer" : "ack")]) { workers, _ in
                    workers.reduce(0) { $0 + $1.bootAnswers(selector, offer: offer) }
                }
            }
        }
        for reason in BootIgnored.allCases {
            counter("stampede_boot_ignored_total", "DHCP requests the proxy (--proxy-dhcp) left unanswered, by why.",
                    [("reason", reason.label)]) { workers, _ in workers.reduce(0) { $0 + $1.bootIgnored(reason) } }
        }
        gauge("stampede_transfers_running", "Transfers in progress.", sum(.transfersRunning))
        gauge("stampede_transfers_on_shared_sockets",
              "Transfers on a shared socket (out of descriptors, or single-port mode).", sum(.transfersOnSharedSockets))
        counter("stampede_received_datagrams_total", "TFTP datagrams received.", [], sum(.datagramsReceived))
        counter("stampede_received_bytes_total", "TFTP bytes received, headers and repeats included.", [], sum(.bytesReceived))
        counter("stampede_sent_bytes_total", "TFTP bytes sent, headers and retransmissions included.", [], sum(.bytesSent))
        let fileBytes = "File bytes delivered: by finished TFTP transfers (acknowledged), by HTTP responses (taken by the kernel)."
        counter("stampede_file_bytes_total", fileBytes, [("protocol", "tftp"), ("direction", "sent")], sum(.fileBytesSent))
        counter("stampede_file_bytes_total", fileBytes, [("protocol", "tftp"), ("direction", "received")], sum(.fileBytesReceived))
        for served in [ServedProtocol.http, .https] {
            func of(_ count: WorkerMetrics.Count) -> Read {
                { workers, _ in workers.reduce(0) { $0 + ($1.served == served ? $1.value(count) : 0) } }
            }
            counter("stampede_file_bytes_total", fileBytes, [("protocol", served.rawValue), ("direction", "sent")], of(.httpFileBytesSent))
            for (reason, count) in [("server_limit", WorkerMetrics.Count.httpConnectionsRefused),
                                    ("client_limit", .httpConnectionsRefusedPerClient), ("client_handshakes", .httpHandshakesRefusedPerClient)] {
                counter("stampede_http_connections_refused_total",
                        "HTTP connections closed at once (protocol http or https): the server's limit was reached (server_limit), the client held --http-max-per-client (client_limit) or a quarter of it in TLS handshakes (client_handshakes).",
                        [("protocol", served.rawValue), ("reason", reason)], of(count))
            }
            counter("stampede_http_sent_bytes_total", "HTTP bytes sent, heads and bodies (over TLS: before encryption).",
                    [("protocol", served.rawValue)], of(.httpBytesSent))
        }
        gauge("stampede_http_connections", "HTTP and HTTPS connections open.", sum(.httpConnections))
        for (outcome, count) in [("full", WorkerMetrics.Count.tlsHandshakes), ("resumed", .tlsResumed),
                                 ("failed", .tlsHandshakeFailures), ("plain_http", .tlsPlainHTTP)] {
            counter("stampede_tls_handshakes_total",
                    "TLS handshakes of --https: finished in full, finished resuming a session, failed, or plain HTTP sent to the port.",
                    [("outcome", outcome)], sum(count))
        }
        for (path, count) in [("kernel_sendfile", WorkerMetrics.Count.tlsKernelBytes), ("ssl_write", .tlsWrittenBytes)] {
            counter("stampede_tls_body_bytes_total",
                    "HTTPS body bytes by the way they went: encrypted by the kernel from the file image (kernel TLS) or by OpenSSL from its memory.",
                    [("path", path)], sum(count))
        }
        counter("stampede_retransmissions_total", "DATA, OACK and ACK sent again after a timeout or a duplicate ACK.",
                [], sum(.retransmissions))
        counter("stampede_duplicate_acks_total", "ACKs that repeated the last acknowledged block.", [], sum(.duplicateAcks))
        counter("stampede_transfer_durations_dropped_total",
                "Served transfers left out of the duration histogram (its log was full between scrapes).",
                [], sum(.durationsDropped))

        gauge("stampede_cache_images", "File images in the cache.") { _, cache in cache.images }
        gauge("stampede_cache_bytes", "Bytes of file images in the cache.") { _, cache in cache.bytes }
        counter("stampede_cache_hits_total", "Downloads that found their file's image loaded.", []) { _, cache in cache.hits }
        counter("stampede_cache_misses_total", "Downloads that loaded their file.", []) { _, cache in cache.misses }
        counter("stampede_cache_evictions_total", "Unused images dropped to make room.", []) { _, cache in cache.evictions }
        counter("stampede_cache_streamed_total", "Downloads served from the file without an image (too large).", []) { _, cache in
            cache.streamed
        }

        counter("stampede_backend_system_calls_total", "The I/O backends' entries into the kernel.", [], sum(.systemCalls))
        counter("stampede_backend_send_operations_total",
                "Send operations (a sendmmsg message, an io_uring SENDMSG): sent datagrams per operation is their ratio.",
                [], sum(.sendOperations))
        counter("stampede_backend_sent_datagrams_total", "Datagrams the kernel took.", [], sum(.datagramsSent))
        counter("stampede_backend_send_failures_total", "Datagrams the kernel refused to send (a full socket buffer).",
                [], sum(.sendFailures))
        counter("stampede_late_timers_total", "Transfer timers that fired 10 ms or more after their deadline (the loop was busy).",
                [], sum(.lateTimers))
        let queueDrops = "Datagrams the kernel dropped on their way into sockets since closed (a full receive queue): at listeners (requests) or transfer sockets."
        counter("stampede_backend_socket_queue_drops_total", queueDrops, [("socket", "listener")], sum(.listenerQueueDrops))
        counter("stampede_backend_socket_queue_drops_total", queueDrops, [("socket", "transfer")]) { workers, _ in
            workers.reduce(0) { $0 + $1.value(.socketQueueDrops) - $1.value(.listenerQueueDrops) }
        }
        counter("stampede_backend_segmented_sends_total", "Segmented sends (UDP GSO) the kernel took.", [], sum(.segmentedSends))
        counter("stampede_backend_segmentation_fallbacks_total",
                "Segmented sends a path refused, sent again one datagram at a time.", [], sum(.segmentationFallbacks))
        // The backend's own figures are the TFTP workers' (an HTTP loop or the proxy has no backend).
        let backends = workers.filter { $0.served == .tftp }
        if backends.contains(where: { $0.value(.receiveBufferExhausted) >= 0 }) {
            counter("stampede_backend_receive_buffer_exhausted_total",
                    "Receives that found no provided buffer free (io_uring).", []) { workers, _ in
                workers.reduce(0) { $0 + ($1.served == .tftp ? max(0, $1.value(.receiveBufferExhausted)) : 0) }
            }
        }
        if backends.contains(where: { $0.value(.completionsLost) >= 0 }) {
            counter("stampede_backend_completions_lost_total",
                    "Times the kernel dropped completions under memory pressure (io_uring's EBADR).", []) { workers, _ in
                workers.reduce(0) { $0 + ($1.served == .tftp ? max(0, $1.value(.completionsLost)) : 0) }
            }
        }
        gauge("stampede_workers", "TFTP worker threads, one event loop each.") { workers, _ in workers.filter { $0.served == .tftp }.count }
        if let tls {
            // What an operator alerts on: a certificate about to expire, a renewal not taken.
            gauge("stampede_tls_certificate_expiry_timestamp_seconds",
                  "When --https's certificate expires (its notAfter), seconds since the epoch: the one served now.") { _, _ in
                Int(tls.context.notAfter)
            }
            for failed in [false, true] {
                counter("stampede_tls_certificate_reloads_total",
                        "SIGHUP's reloads of --https's certificate and key: loaded, or failed (the certificate loaded before still served).",
                        [("outcome", failed ? "failed" : "loaded")]) { _, _ in failed ? tls.reloadCounts.failed : tls.reloadCounts.loaded }
            }
        }

        registry.makeGauge(descriptor: described("stampede_build_info", "The running build: its version, I/O backend and the kernel features it uses."),
                           labels: [("version", build.version), ("backend", build.backend),
                                    ("features", build.features.joined(separator: ","))]).set(Int64(1))
        registry.makeGauge(descriptor: described("process_start_time_seconds", "Start time of the process since the Unix epoch."))
            .set(Int64(time(nil)))

        state = Mutex(State(
            counters: counters.map { ($0.0, $0.1, $0.2) }, gauges: gauges.map { ($0.0, $0.1) },
            cpu: registry.makeCounter(descriptor: described("process_cpu_seconds_total", "User and system CPU time spent, in seconds.")),
            process: (registry.makeGauge(descriptor: described("process_resident_memory_bytes", "Resident memory size in bytes.")),
                      registry.makeGauge(descriptor: described("process_open_fds", "Open file descriptors.")),
                      registry.makeGauge(descriptor: described("process_max_fds", "The limit on open file descriptors.")))))
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
        }
    }

    /// Moves the served transfers' durations from the workers' logs into the histogram; the
    /// listener calls it every second, so that the logs do not fill between scrapes.
    public func drainDurations() {
        state.withLock { drain(&$0) }
    }

    private func drain(_ state: inout State) {
        var names: [String]?
        for worker in workers {
            worker.durations.drain { entry in
                let key = Int(entry.label) << 5 | entry.kind.rawValue << 2 | (ServedProtocol.allCases.firstIndex(of: worker.served) ?? 0)
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
private func described(_ name: String, _ help: String) -> MetricNameDescriptor {
    MetricNameDescriptor(metricName: name, unitName: "", helpText: help)
}
