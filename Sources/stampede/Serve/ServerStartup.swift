import Atomics
import CStampedeSys
import Glibc
import Logging
import StampedeDHCP
import StampedeFiles
import StampedeHTTP
import StampedeIO
import StampedeMachines
import StampedeMetrics
import StampedeProtocol
import StampedeProxyDHCP
import StampedeServing
import StampedeTFTPServer
import StampedeTLS
import Synchronization

/// What runs once the command line is understood and the plan made: bind, drop privileges,
/// release a waiting parent, serve, report.
struct ServerStartup {
    let plan: ServePlan
    let configuration: ServerConfiguration
    let cache: FileCache
    let account: Account?
    let root: String
    /// Detached (-l without -L): the pipe that tells the waiting parent we serve, and /dev/null,
    /// opened before -s, for fds 0-2.
    struct Detached {
        let ready: Int32
        let null: Int32
    }
    let detached: Detached?
    /// Opened before -s and -u, when there are metrics.
    let processFigures: ProcessFigures?
    let notifier: SystemdNotifier?
    /// `--https`'s certificate and key, loaded.
    let tls: TLSIdentity?
    /// `--machines`: the records, their watch, the bindings, the progress.
    let machines: MachineServing?

    /// Makes every server of the plan (each binds as the starting user), becomes the serving
    /// user, says what serves, and serves until SIGTERM.
    func run<Backend: DatagramBackend>(backendName: String, makeBackend: () throws(Errno) -> Backend) throws {
        let server = try tftp(backendName: backendName, makeBackend: makeBackend)
        let (web, secure) = try webServers(beside: server)
        let webServers = [web, secure].compactMap { $0 }
        let proxy = try proxyDHCP()
        let proxy6 = try proxyDHCP6()
        let listener = try metricsListener(server, webServers, [proxy?.metrics, proxy6?.metrics].compactMap { $0 }, backendName: backendName)
        defer { listener?.stopListening() }
        try account?.become(configuration.logger)
        warnOfUnreadableCertificate()
        removeStaleUploads(server)
        stampede_install_stop_signals()
        if let detached { stampede_detach_done(detached.ready, detached.null) }
        announce(server, web: web, secure: secure, proxy: proxy, proxy6: proxy6, metrics: listener)
        machines?.records.inventory?.start(logger: configuration.logger)
        defer { machines?.records.inventory?.stop() }
        let threads = webServers.flatMap { $0.start() } + (proxy.map { [$0.start()] } ?? []) + (proxy6.map { [$0.start()] } ?? [])
            + (machines.map { [watch($0.watch)] } ?? [])
        defer { for thread in threads { thread.join() } }
        let responders = (proxy.map { [("the proxyDHCP responder", $0.metrics)] } ?? [])
            + (proxy6.map { [("the DHCPv6 responder", $0.metrics)] } ?? [])
        let summary = serve(server, web: web, secure: secure, responders: responders)
        configuration.logger.notice("\(stopped(summary))")
    }

    private func tftp<Backend: DatagramBackend>(backendName: String, makeBackend: () throws(Errno) -> Backend) throws -> Server<Backend> {
        do {
            return try Server(configuration: configuration, workerCount: plan.workerCount, cache: cache, makeBackend: makeBackend)
        } catch {
            guard case .system(let errno) = error else { throw serveFailure("cannot serve: \(error)") }
            let addresses = configuration.inheritedListeners.isEmpty
                ? configuration.listenAddresses.map(\.description).joined(separator: ", ")
                : "the passed sockets (fds \(configuration.inheritedListeners.map(String.init).joined(separator: ", ")))"
            throw serveFailure("cannot listen on \(addresses) with the \(backendName) backend: \(errno)")
        }
    }

    /// --http and --https: one engine, each its own loops, the connection limits shared.
    private func webServers<Backend: DatagramBackend>(beside server: Server<Backend>) throws -> (web: HTTPServer?, secure: HTTPServer?) {
        let connections = ManagedAtomic<Int>(0)
        let clients = ClientConnections(maxConnections: plan.options.httpMaxPerClient ?? 64, maxPerPrefix: plan.options.httpMaxPerPrefix ?? 16384,
                                        loopbackUncounted: plan.options.httpMaxPerClient == nil && plan.options.httpMaxPerPrefix == nil)
        func serve(_ http: HTTPConfiguration?, _ name: String) throws -> HTTPServer? {
            do {
                return try http.map { http throws(Errno) in
                    var http = http
                    http.logFormat = configuration.logFormat
                    http.shutdownGrace = configuration.shutdownGrace
                    return try HTTPServer(http: http, files: server.files, fileLabels: server.fileLabels, logger: configuration.logger,
                                          admission: server.admission, loopCount: plan.workerCount, open: connections, clients: clients)
                }
            } catch {
                throw serveFailure("cannot listen for \(name) on \(http!.listenAddresses.map(\.description).joined(separator: ", ")): \(error)")
            }
        }
        var https = plan.https
        https?.tls = tls
        return (try serve(plan.http, "HTTP"), try serve(https, "HTTPS"))
    }

    /// `--machines DIR` reloaded as it changes: said, and a set with a fault refused whole.
    private func watch(_ watch: RecordWatch) -> SystemThread {
        let logger = configuration.logger
        let path = plan.options.machines ?? ""
        return watch.start(stopping: { stampede_stop_requested() != 0 }) { event in
            switch event {
            case .reloaded(.success(let book)):
                logger.notice("--machines \(path): \(book.records.count) records read again")
            case .reloaded(.failure(let faults)):
                for fault in faults.errors { logger.error("--machines: \(fault)") }
                logger.error("--machines \(path): changed records refused, those before kept")
            case .enlisted(let machine, let written):
                let mac = machine.identity.hardwareAddress.hardwareAddressText()
                if let written { logger.notice("--machines: machine \(mac) discovered: its record, which ignores it, written to \(written)") }
            case .markedDone(let mac, .success(let written)):
                logger.notice("--machines: machine \(mac.hardwareAddressText()) done: its next boot is from its disk (\(written))")
            case .markedDone(let mac, .failure(let error)):
                logger.error("--machines \(path): cannot write \(MachineDirectory.doneFile(for: mac)): \(error): the machine is done until the server stops")
            case .enlistFailed(let machine, let error):
                let who = error.rawValue == EACCES && getuid() != 0 ? " (as uid \(getuid()), the -u user: give it the directory)" : ""
                logger.error("--machines \(path): cannot write \(machine.fileName) for a discovered machine: \(error)\(who)")
            }
        }
    }

    /// Its packet and raw sockets need CAP_NET_RAW: made before -u drops it.
    private func proxyDHCP() throws -> ProxyDHCPServer? {
        guard !plan.bootNetworks.isEmpty else { return nil }
        do {
            return try ProxyDHCPServer(networks: plan.bootNetworks, machines: machines?.records, bindings: machines?.bindings, progress: machines?.progress,
                                       pxeVendors: plan.options.pxeVendor, receiveBuffer: configuration.listenerReceiveBuffer,
                                       logger: configuration.logger, json: configuration.logFormat == .json)
        } catch {
            throw serveFailure("--proxy-dhcp: \(error)")
        }
    }

    /// Port 547 and each network's [ADDR]:4011, bound before -u drops the right to.
    private func proxyDHCP6() throws -> ProxyDHCPv6Server? {
        guard !plan.bootNetworks6.isEmpty else { return nil }
        do {
            return try ProxyDHCPv6Server(networks: plan.bootNetworks6, machines: machines?.records, bindings: machines?.bindings, progress: machines?.progress,
                                         pxeVendors: plan.options.pxeVendor, receiveBuffer: configuration.listenerReceiveBuffer,
                                         logger: configuration.logger, json: configuration.logFormat == .json)
        } catch {
            throw serveFailure("--proxy-dhcp6: \(error)")
        }
    }

    /// Bound as the starting user (a port below 1024 needs root), served on a thread of its own.
    private func metricsListener<Backend: DatagramBackend>(_ server: Server<Backend>, _ webServers: [HTTPServer], _ responders: [WorkerMetrics],
                                          backendName: String) throws -> MetricsListener? {
        try plan.options.metrics.map { address in
            let exporter = MetricsExporter(workers: server.workers.map(\.metrics) + webServers.flatMap(\.metrics) + responders,
                                           cache: cache,
                                           fileLabels: server.fileLabels,
                                           build: buildInfo(backendName, server.workers[0].backend),
                                           process: processFigures ?? ProcessFigures(), tls: tls, machines: machineStages)
            exporter.bootstrapMetricsSystem()
            do {
                var view: (@Sendable () -> [UInt8])?
                if let progress = machines?.progress { view = { progress.json() } }
                return try MetricsListener(host: address.host, port: address.port, exporter: exporter, machines: view, logger: configuration.logger)
            } catch {
                throw serveFailure("cannot serve metrics on \(address): \(error)")
            }
        }
    }

    /// `stampede_machines{stage}`, with `--machines`.
    private var machineStages: MetricsExporter.MachineStages? {
        machines.map { serving in
            MetricsExporter.MachineStages(stages: MachineProgress.Stage.allCases.map(\.label), counts: {
                Dictionary(uniqueKeysWithValues: serving.progress.counts.map { ($0.key.label, $0.value) })
            }, apiOutcomes: serving.records.inventory == nil ? [] : MachineInventory.Outcome.allCases.map(\.label), apiCalls: {
                Dictionary(uniqueKeysWithValues: (serving.records.inventory?.counts ?? [:]).map { ($0.key.label, $0.value) })
            }, apiCallTimes: { (serving.records.inventory?.takeCallTimes() ?? []).map { ($0.call, $0.waited) } })
        }
    }

    private func warnOfUnreadableCertificate() {
        guard let tls, !tls.unreadableForReload.isEmpty else { return }
        configuration.logger.warning("""
            --https: SIGHUP cannot load the certificate again: as \(account?.name ?? "this user")\(plan.options.secure ? " in the chroot" : ""), \
            \(tls.unreadableForReload.joined(separator: "; ")) (give the serving user read access, as Debian's ssl-cert group does)
            """)
    }

    /// As the serving user, who wrote them: what a killed server's uploads left behind. A walk
    /// of the whole tree, on the disk thread while the server serves: only files older than
    /// this start, which no upload of this server can have made.
    private func removeStaleUploads<Backend: DatagramBackend>(_ server: Server<Backend>) {
        let rootFD = configuration.policy.root
        let startedAt = FileCache.realTime()
        let logger = configuration.logger
        server.disk.submit {
            let stale = Upload.removeStale(beneath: rootFD, changedBefore: startedAt)
            if stale > 0 { logger.notice("removed \(stale) temporary files of interrupted uploads") }
        }
    }

    /// What serves, where, and how: a line per server.
    private func announce<Backend: DatagramBackend>(_ server: Server<Backend>, web: HTTPServer?, secure: HTTPServer?, proxy: ProxyDHCPServer?,
                                   proxy6: ProxyDHCPv6Server?, metrics listener: MetricsListener?) {
        let logger = configuration.logger
        logger.notice("""
            serving \(root)\(plan.options.secure ? " (chroot)" : "") on \(server.boundAddresses.map(\.description).joined(separator: ", ")) \
            with \(plan.workerCount) workers, backend \(server.workers[0].backend) (\(plan.backendReason)), \(server.workers[0].backend.segmentation)
            """)
        if let listener { logger.notice("metrics on http://\(listener.address)/metrics") }
        if let web, let http = plan.http {
            let urls = web.boundAddresses.map { "http://\($0)/" }.joined(separator: ", ")
            logger.notice("serving \(root) over HTTP on \(urls) with \(web.loops.count) event loops, at most \(http.maxConnections) connections")
        }
        if let secure, let tls {
            let urls = secure.boundAddresses.map { "https://\($0)/" }.joined(separator: ", ")
            let context = tls.context
            logger.notice("""
                serving \(root) over HTTPS on \(urls) with \(secure.loops.count) event loops: certificate for \(context.names) \
                (\(context.key), expires \(TLSContext.date(context.notAfter))), profile \(tls.profile.summary); \(plan.options.tlsKernel ? KernelTLS.probe().bodyPath : KernelTLS.off)
                """)
        }
        for network in proxy?.networks ?? [] {
            let menu = network.menu.listing.map { "\($0.selector.name) \($0.target)" }
            logger.notice("""
                answering network-boot DHCP as a proxy for \(network.interface.name) (boot server \(network.address)): its \
                broadcasts, and what is sent to \(network.address) on ports 67 and 4011 from any interface (relays): \(menu.joined(separator: ", "))
                """)
        }
        for network in proxy6?.networks ?? [] {
            let menu = network.menu.listing.map { "\($0.selector.name) \($0.target)" }
            logger.notice("""
                answering network-boot DHCPv6 for \(network.interface.name) (boot server \(network.address.host), DUID \
                \(proxy6!.serverID.bytes.hardwareAddressText())): ff02::1:2 and [\(network.address.host)]:4011: \(menu.joined(separator: ", "))
                """)
        }
    }

    /// Serves until SIGTERM; under systemd, says READY and pings the watchdog while every loop turns.
    private func serve<Backend: DatagramBackend>(_ server: Server<Backend>, web: HTTPServer?, secure: HTTPServer?,
                                                responders: [(String, WorkerMetrics)]) -> WorkerSummary {
        guard let notifier else { return server.run() }
        notifier.notify("READY=1\nSTATUS=serving \(root)\nMAINPID=\(getpid())")
        let done = Done()
        let loops: [(String, WorkerMetrics)] = (web?.loops ?? []).enumerated().map { ("HTTP loop \($0.offset)", $0.element.metrics) }
            + (secure?.loops ?? []).enumerated().map { ("HTTPS loop \($0.offset)", $0.element.metrics) }
        let heartbeats = server.workers.enumerated().map { ("worker \($0.offset)", $0.element.metrics) } + loops + responders
        let logger = configuration.logger
        let supervisor = SystemThread(named: "watchdog") { notifier.supervise(heartbeats: heartbeats, logger: logger) { done.flag.load(ordering: .acquiring) } }
        let summary = server.run()
        done.flag.store(true, ordering: .releasing)
        supervisor.join()
        return summary
    }

    /// The last line: what the server did.
    private func stopped(_ summary: WorkerSummary) -> String {
        """
        stopped after \(summary.transfers) transfers (\(summary.failed) failed, \(summary.bytes) bytes); \
        \(summary.refused) requests refused (\(summary.notFound) of them for a file not there), \
        \(summary.unanswered) requests unanswered while busy, \(summary.repeated) repeats of a running or ended transfer's request dropped, \
        \(summary.lateTimers) timers fired 10 ms or more late; \
        \(summary.backend.sendFailures) datagrams the kernel would not send, \
        \(summary.backend.socketQueueDrops) dropped on their way in (full socket queues; \(summary.backend.listenerQueueDrops) of them at the listeners), \
        \(summary.backend.receiveBufferExhausted.map { "\($0) receives that found no buffer, " } ?? "")\
        \(summary.backend.segmentedSends) segmented sends\
        \(summary.backend.segmentationFallbacks > 0 ? ", \(summary.backend.segmentationFallbacks) sent again one datagram at a time where the path refused GSO" : "")
        """
    }
}

/// Tells the systemd supervisor thread that the server has stopped.
private final class Done: Sendable {
    let flag = Atomic<Bool>(false)
}

/// What `stampede_build_info` says of this server: the kernel features its backend uses.
private func buildInfo<Backend: DatagramBackend>(_ name: String, _ backend: Backend) -> BuildInfo {
    var features = name == "uring" ? ["io_uring", "provided_buffer_rings", "multishot_recvmsg"] : ["epoll", "recvmmsg", "sendmmsg"]
    if backend.segmentation == .on { features.append("udp_gso") }
    return BuildInfo(version: Stampede.version, backend: name, features: features)
}
