import Prometheus
import StampedeDHCP
import StampedeFiles
import StampedeServing
import StampedeProxyDHCP
import StampedeTLS

/// Every metric the exporter shows, named and described, and where each is read from: the sums
/// of what the loops published (`WorkerMetrics`), the cache's statistics, the certificate. Made
/// once, into the exporter's registry; one area of the server per function.
struct MetricsCatalog {
    typealias Read = @Sendable ([WorkerMetrics], FileCache.Statistics) -> Int

    let registry: PrometheusCollectorRegistry
    /// The loops whose figures are shown (what is made for the backends depends on them).
    let workers: [WorkerMetrics]
    private(set) var counters: [(metric: Counter, read: Read, total: Int)] = []
    private(set) var gauges: [(metric: Gauge, read: Read)] = []

    static let fileBytes = "File bytes delivered: by finished TFTP transfers (acknowledged), by HTTP responses (taken by the kernel)."

    init(registry: PrometheusCollectorRegistry, workers: [WorkerMetrics], tls: TLSIdentity?) {
        self.registry = registry
        self.workers = workers
        requests()
        proxyDHCP()
        tftp()
        http()
        tlsSessions()
        cache()
        backends()
        if let tls { certificate(tls) }
    }

    private func sum(_ count: WorkerMetrics.Count) -> Read { { workers, _ in workers.reduce(0) { $0 + $1.value(count) } } }

    private mutating func counter(_ name: String, _ help: String, _ labels: [(String, String)] = [], _ read: @escaping Read) {
        counters.append((registry.makeCounter(descriptor: described(name, help), labels: labels), read, 0))
    }

    private mutating func gauge(_ name: String, _ help: String, _ read: @escaping Read) {
        gauges.append((registry.makeGauge(descriptor: described(name, help)), read))
    }

    /// Requests of every protocol, by kind and how they ended.
    private mutating func requests() {
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
    }

    /// proxyDHCP's answers and silences.
    private mutating func proxyDHCP() {
        for served in [ServedProtocol.dhcp, .dhcp6] {
            for (index, selector) in WorkerMetrics.countedSelectors.enumerated() {
                for offer in [true, false] {
                    counter("stampede_boot_answers_total",
                            "Boot answers (--proxy-dhcp: protocol dhcp; --proxy-dhcp6: dhcp6) by the machine's selector (arch: every arch:N) and the answer: an offer (DHCPv6: an Advertise), or a boot server's ack (DHCPv6: a Reply).",
                            [("protocol", served.rawValue), ("selector", selector), ("answer", offer ? "offer" : "ack")]) { workers, _ in
                        workers.reduce(0) { $0 + ($1.served == served ? $1.bootAnswers(counted: index, offer: offer) : 0) }
                    }
                }
            }
            for reason in BootIgnored.allCases {
                counter("stampede_boot_ignored_total", "DHCP and DHCPv6 requests the boot responders (--proxy-dhcp, --proxy-dhcp6) left unanswered, by protocol and why.",
                        [("protocol", served.rawValue), ("reason", reason.label)]) { workers, _ in
                    workers.reduce(0) { $0 + ($1.served == served ? $1.bootIgnored(reason) : 0) }
                }
            }
        }
    }

    /// TFTP: transfers, datagrams, bytes, retransmissions.
    private mutating func tftp() {
        gauge("stampede_transfers_running", "Transfers in progress.", sum(.transfersRunning))
        gauge("stampede_transfers_on_shared_sockets",
              "Transfers on a shared socket (out of descriptors, or single-port mode).", sum(.transfersOnSharedSockets))
        counter("stampede_received_datagrams_total", "TFTP datagrams received.", [], sum(.datagramsReceived))
        counter("stampede_received_bytes_total", "TFTP bytes received, headers and repeats included.", [], sum(.bytesReceived))
        counter("stampede_sent_bytes_total", "TFTP bytes sent, headers and retransmissions included.", [], sum(.bytesSent))
        counter("stampede_file_bytes_total", Self.fileBytes, [("protocol", "tftp"), ("direction", "sent")], sum(.fileBytesSent))
        counter("stampede_file_bytes_total", Self.fileBytes, [("protocol", "tftp"), ("direction", "received")], sum(.fileBytesReceived))
        counter("stampede_retransmissions_total", "DATA, OACK and ACK sent again after a timeout or a duplicate ACK.",
                [], sum(.retransmissions))
        counter("stampede_duplicate_acks_total", "ACKs that repeated the last acknowledged block.", [], sum(.duplicateAcks))
        counter("stampede_transfer_durations_dropped_total",
                "Served transfers left out of the duration histogram (its log was full between scrapes).",
                [], sum(.durationsDropped))
    }

    /// HTTP and HTTPS: file bytes, refused connections, bytes sent, connections open.
    private mutating func http() {
        for served in [ServedProtocol.http, .https] {
            func of(_ count: WorkerMetrics.Count) -> Read {
                { workers, _ in workers.reduce(0) { $0 + ($1.served == served ? $1.value(count) : 0) } }
            }
            counter("stampede_file_bytes_total", Self.fileBytes, [("protocol", served.rawValue), ("direction", "sent")], of(.httpFileBytesSent))
            for (reason, count) in [("client_limit", WorkerMetrics.Count.httpConnectionsRefusedPerClient),
                                    ("client_handshakes", .httpHandshakesRefusedPerClient), ("prefix_limit", .httpConnectionsRefusedPerPrefix)] {
                counter("stampede_http_connections_refused_total",
                        "HTTP connections closed at once (protocol http or https): the client held --http-max-per-client (client_limit) or a quarter of it in TLS handshakes (client_handshakes), or the client's IPv6 /64 held --http-max-per-prefix (prefix_limit).",
                        [("protocol", served.rawValue), ("reason", reason)], of(count))
            }
            counter("stampede_http_accept_paused_total",
                    "Times an HTTP event loop stopped accepting (protocol http or https) because the server held --http-max-connections: new connections waited in the listen queue until one closed.",
                    [("protocol", served.rawValue)], of(.httpAcceptsPaused))
            counter("stampede_http_sent_bytes_total", "HTTP bytes sent, heads and bodies (over TLS: before encryption).",
                    [("protocol", served.rawValue)], of(.httpBytesSent))
        }
        gauge("stampede_http_connections", "HTTP and HTTPS connections open.", sum(.httpConnections))
    }

    /// --https's handshakes and the way its bodies went.
    private mutating func tlsSessions() {
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
    }

    /// The file cache.
    private mutating func cache() {
        gauge("stampede_cache_images", "File images in the cache.") { _, cache in cache.images }
        gauge("stampede_cache_bytes", "Bytes of file images in the cache.") { _, cache in cache.bytes }
        counter("stampede_cache_hits_total", "Downloads that found their file's image loaded.", []) { _, cache in cache.hits }
        counter("stampede_cache_misses_total", "Downloads that loaded their file.", []) { _, cache in cache.misses }
        counter("stampede_cache_evictions_total", "Unused images dropped to make room.", []) { _, cache in cache.evictions }
        counter("stampede_cache_streamed_total", "Downloads served from the file without an image (too large).", []) { _, cache in
            cache.streamed
        }
    }

    /// The I/O backends' figures (the TFTP workers').
    private mutating func backends() {
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
    }

    /// --https's certificate: what an operator alerts on, a certificate about to expire, a renewal
    /// not taken.
    private mutating func certificate(_ tls: TLSIdentity) {
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
}
