import CStampedeSys
import Glibc
import Logging
import StampedeBase
import StampedeFiles
import StampedeIO
import StampedeProtocol
import StampedeServing
import Synchronization

/// One event loop on one core: its listeners, its session table, its timer wheel, its backend.
/// Workers share the file service (the cache, the remap rules), the transfer limits
/// (`Admission`) and the disk thread, each behind its own lock; nothing else.
///
/// A worker is not shared either: one thread at a time uses it (the one that made it, then its
/// own while it runs, then the one that joined it), hence `@unchecked Sendable`.
public final class Worker<Backend: DatagramBackend>: @unchecked Sendable {
    public let backend: Backend
    let configuration: ServerConfiguration
    /// Shared by every worker (and HTTP loop) of a server: names to files, and file versions read
    /// on the disk thread.
    public let files: FileService
    var cache: FileCache { files.cache }
    /// Where this worker hears that a file its waiting requests want is read (`parked`), and that
    /// a commit is done: its descriptor wakes the backend's poll (`watch`).
    let loads: LoadMailbox
    /// The backend watches `loads`; false only when no eventfd could be made or watched, and then
    /// a turn waits at most `LoadMailbox.pollInterval` while disk work is pending.
    let woken: Bool
    /// Requests whose file is being read, by ticket, and the ticket of each client address's.
    var parked: [UInt64: IncomingRequest] = [:]
    var parkedByPeer: [SocketAddress: UInt64] = [:]
    /// The requests of the transfers that ended lately: a copy read after its transfer ended is dropped.
    var ended = EndedRequests()
    /// Transfers of streamed files whose next blocks a disk thread reads ahead, by ticket.
    var readingAhead: [UInt64: Tag] = [:]
    /// Requests waiting while the disk thread reads their files.
    public var requestsWaitingForFiles: Int { parked.count }
    /// Requests and transfers waiting for a disk thread (a file's read, a streamed file's read-ahead).
    public var waitingForTheDisk: Int { parked.count + readingAhead.count }
    /// Shared by every worker of a server: the transfer limits.
    let admission: Admission
    /// What this worker counts for the metrics, published once per turn.
    public let metrics = WorkerMetrics(.tftp)
    /// Shared by every worker of a server: the disk thread, for work that may block
    /// (`Worker+Disk.swift`); the uploads' writes and commits this worker handed over and has not
    /// heard back from, and the outcomes the disk thread posts.
    public let disk: DiskWork
    var diskPending = 0
    let diskOutcomes = Mutex<[(tag: Tag, work: UploadWork, failure: Errno?)]>([])
    /// Shared by every worker of a server: the file labels of the duration histogram; served
    /// transfers' durations go to the histogram under their file's label through the recorder.
    let fileLabels: FileLabels
    var durationRecorder: DurationRecorder
    let index: Int
    let logger: Logger
    /// The lines said per request (a refusal's: every "File not found" at -v 0), as bytes.
    let lines: LineLogger
    /// Where such a line is written, kept from one to the next.
    var line = LogLine()

    let table = SessionTable(capacity: 1024)
    var wheel: TimerWheel
    var expired: [Int32] = []
    var listeners: [(socket: SocketHandle, address: SocketAddress)] = []
    /// Shared transfer sockets (`Worker+SharedSockets.swift`).
    var sharedSockets = SharedSocketPools()
    /// False once stopping: single-port listeners stay open for the transfers still running.
    var accepting = true
    public var activeTransfers: Int { table.count }
    public internal(set) var summary = WorkerSummary()
    /// Requests left unanswered while busy, logged as one line a second.
    var unanswered = UnansweredRequests()
    /// A path refused a segmented send: said once, counted at exit.
    var toldOfSegmentationFallback = false
    /// The kernel dropped completions: said each time the count grows.
    var completionsLostSaid = 0

    /// Images of transfers that ended this turn, kept mapped until the next flush: a send queued
    /// this turn may still point into them. (Their leases went back to the cache when their
    /// transfers ended; this is only the memory's life.)
    var pinnedUntilFlush: [FileImage] = []
    /// Headers, stream reads and netascii decoding.
    let scratch: UnsafeMutableRawBufferPointer
    var mtuCache: [SocketAddress: (blockSize: Int, expires: Nanoseconds)] = [:]

    /// `admission`, `fileLabels`, `disk`, `files`: shared with the other workers (nil: this worker's
    /// own; a file service of its own reads through `cache` and `disk`).
    public init(backend: Backend, configuration: ServerConfiguration, cache: FileCache, index: Int,
                admission: Admission? = nil, fileLabels: FileLabels? = nil, disk: DiskWork? = nil, files: FileService? = nil) {
        self.backend = backend
        self.configuration = configuration
        // A worker made alone (a test's) reads and commits on one disk thread; `Server` gives its
        // workers two (reads apart from commits).
        let disk = disk ?? DiskWork()
        self.files = files ?? FileService(policy: configuration.policy, remapRules: configuration.remapRules, cache: cache, disk: disk,
                                         generated: configuration.generatedFiles)
        self.admission = admission ?? Admission(configuration)
        self.fileLabels = fileLabels ?? FileLabels()
        self.durationRecorder = DurationRecorder(metrics: metrics, fileLabels: self.fileLabels)
        self.disk = disk
        self.index = index
        var logger = configuration.logger
        logger[metadataKey: "worker"] = "\(index)"
        self.logger = logger
        self.lines = LineLogger(logger)
        self.wheel = TimerWheel(capacity: 1024, now: stampede_monotonic_ns())
        (loads, woken) = Self.mailbox(watchedBy: backend)
        self.scratch = .allocate(byteCount: 65536 + 16, alignment: 16)
        pinnedUntilFlush.reserveCapacity(1024)
        expired.reserveCapacity(1024)
        // Before the first turn too: a scrape (and the exporter's making) sees the backend's figures.
        publishMetrics(now: stampede_monotonic_ns())
    }

    deinit {
        scratch.deallocate()
    }

    /// A mailbox whose posts wake `backend`'s poll; one the worker polls if the kernel gives no
    /// eventfd (EMFILE) or the backend watches something else already.
    private static func mailbox(watchedBy backend: Backend) -> (LoadMailbox, woken: Bool) {
        guard let mailbox = try? LoadMailbox.waking(), let fd = mailbox.wakeDescriptor else { return (LoadMailbox(), false) }
        do throws(Errno) { try backend.watch(fd) } catch { return (LoadMailbox(), false) }
        return (mailbox, true)
    }

    /// Binds this worker's listeners (SO_REUSEPORT: every worker binds the same addresses).
    /// Returns the bound addresses, so that a port 0 can be shared with the other workers.
    @discardableResult
    public func bindListeners(_ addresses: [SocketAddress]) throws(Errno) -> [SocketAddress] {
        try addresses.map { address throws(Errno) in
            addListener(try backend.openListener(address, receiveBuffer: configuration.listenerReceiveBuffer,
                                                 tag: nextListenerTag), else: address)
        }
    }

    /// Takes over inherited sockets (inetd, systemd) as listeners, and ownership of their
    /// descriptors; returns their addresses.
    @discardableResult
    public func adoptListeners(_ fds: [Int32]) throws(Errno) -> [SocketAddress] {
        try fds.map { fd throws(Errno) in
            addListener(try backend.adoptListener(Descriptor(owning: fd), receiveBuffer: configuration.listenerReceiveBuffer,
                                                  tag: nextListenerTag), else: SocketAddress())
        }
    }

    private var nextListenerTag: UInt64 { Tag.listener(listeners.count).rawValue }

    /// Records a listener under the address it is bound to (`fallback` if the kernel does not say).
    private func addListener(_ socket: SocketHandle, else fallback: SocketAddress) -> SocketAddress {
        let address = backend.localAddress(of: socket) ?? fallback
        listeners.append((socket, address))
        return address
    }

    // MARK: The loop

    /// Serves until a stop is requested and the running transfers have finished or the grace
    /// period is over.
    public func run() {
        var stopDeadline: Nanoseconds?
        while true {
            let now = stampede_monotonic_ns()
            if stopDeadline == nil, let idle = configuration.idleExit, admission.idleTime(now: now) >= idle {
                if index == 0 { logger.notice("no transfer for \(idle / nanosecondsPerSecond) s (-t): exiting") }
                stampede_request_stop()
            }
            if index == 0 && stampede_reload_requested() != 0 {
                if let problem = configuration.onHangup?() { logger.error("SIGHUP: \(problem)") }
                reloadRemapRules()
            }
            if stopDeadline == nil && stampede_stop_requested() != 0 {
                stopDeadline = now + configuration.shutdownGrace
                stopListening()
            }
            if let deadline = stopDeadline {
                if activeTransfers == 0 { break }
                // Past the grace, what runs is aborted; a commit the disk thread has is waited for.
                if now >= deadline {
                    abortAll(now: now)
                    if diskPending == 0 { break }
                }
            }
            turn(now: now, maxWait: 500_000_000)
        }
        closeListeners()
        // A file made for an upload given up at the stop, heard of since: removed. (One still
        // being made when the process goes is the next start's to sweep.)
        for (_, outcome) in loads.collect() {
            if case .created(let upload) = outcome { upload.abort() }
        }
        for socket in sharedSockets.removeAll() { backend.close(socket) }
        reportUnanswered(now: stampede_monotonic_ns(), force: true)
        _ = backend.poll(deadline: stampede_monotonic_ns())
        pinnedUntilFlush.removeAll(keepingCapacity: true)
        publishMetrics(now: stampede_monotonic_ns())
    }

    /// One loop turn: flush and wait, dispatch what arrived, then expire the timers due when the
    /// turn began. Timers come after the datagrams: under load, an ACK that waited in its socket
    /// while the loop was busy is read before its transfer's timer can resend what it acknowledges
    /// (expired first, a loaded server resent windows already received, and the resends added to
    /// the load).
    public func turn(now: Nanoseconds, maxWait: Nanoseconds) {
        defer { expireTimers(now: now) }
        let pollingDisk = !woken && (diskPending > 0 || loads.isAwaiting)
        var deadline = now + (pollingDisk ? min(maxWait, LoadMailbox.pollInterval) : maxWait)
        if let next = wheel.nextDeadline() { deadline = min(deadline, next) }
        publishMetrics(now: now)
        let count = backend.poll(deadline: deadline)
        // The flush is done: what ended last turn can let go of its memory.
        pinnedUntilFlush.removeAll(keepingCapacity: true)
        // The mailbox first: its collect drains the wake, so that a commit posted after that
        // wakes the next poll, and one posted before is collected now.
        collectLoads(now: stampede_monotonic_ns())
        collectDiskOutcomes(now: stampede_monotonic_ns())
        reportUnanswered(now: now)
        closeSharedSocketsIfIdle(now: now)
        if !toldOfSegmentationFallback && backend.segmentationFallbacks > 0 {
            toldOfSegmentationFallback = true
            logger.warning("""
                a client's path refused a window sent as one segmented send (UDP GSO), most likely a blksize \
                above its MTU: its windows go one datagram at a time (counted at exit)
                """)
        }
        if let lost = backend.statistics.completionsLost, lost > completionsLostSaid {
            completionsLostSaid = lost
            logger.error("""
                the kernel dropped I/O completions (io_uring EBADR: no memory for its overflow list, \
                \(lost) times): a transfer whose socket went deaf ends by its timeout
                """)
        }
        guard count > 0 else { return }
        let arrival = stampede_monotonic_ns()
        metrics.add(.datagramsReceived, count)
        for i in 0..<count {
            let datagram = backend.datagram(i)
            metrics.add(.bytesReceived, datagram.bytes.count)
            switch route(datagram) {
            case .request(let listener): handleRequest(datagram, listener: listener, now: arrival)
            case .transfer(let slot): handleTransferDatagram(datagram, slot: slot, now: arrival)
            case .stranger(let socket): answerStranger(datagram, on: socket)
            case .drop: break
            }
        }
    }

    /// The transfers whose timers were due by `now`, each told (`timerFired`); one fired 10 ms
    /// or more after its deadline is counted late.
    func expireTimers(now: Nanoseconds) {
        wheel.expire(now: now, into: &expired)
        for slot in expired {
            if let due = table[Int(slot)].sender?.deadline ?? table[Int(slot)].receiver?.deadline,
               now - due >= TimerWheel.lateness {
                summary.lateTimers += 1
                metrics.add(.lateTimers, 1)
            }
            timerFired(Int(slot), now: now)
        }
        expired.removeAll(keepingCapacity: true)
    }

    /// Where a datagram goes (docs/ARCHITECTURE.md, "Routing"), by the tag of the socket it came
    /// to and, for a socket transfers share, by the client's address and port.
    enum Route: Equatable {
        /// A request, or what is to be answered as one, on this listener.
        case request(listener: Int)
        /// The running transfer in this slot.
        case transfer(Int)
        /// On a shared transfer socket from no transfer's client: ERROR 5.
        case stranger(SocketHandle)
        /// Nothing to do: a late datagram of an ended transfer or a closed socket, a request to a
        /// worker that is stopping.
        case drop
    }

    func route(_ datagram: Datagram) -> Route {
        switch Tag(rawValue: datagram.tag).kind {
        case .listener(let index)?:
            guard index < listeners.count else { return .drop }
            // Single-port mode alone runs transfers on the listener: only there may a datagram to
            // port 69 reach one, and only one running on this very listener.
            if configuration.singlePort, !Request.isRequest(datagram.bytes), let slot = table.slot(of: datagram.peer),
               case .listener(let socket, _)? = table[slot].socket, socket == listeners[index].socket {
                return .transfer(slot)
            }
            return accepting ? .request(listener: index) : .drop
        case .shared(let pool, let index)?:
            guard let shared = sharedSockets.socket(pool: pool, index: index) else { return .drop }
            if let slot = table.slot(of: datagram.peer), case .shared(let socket, _)? = table[slot].socket, socket == shared {
                return .transfer(slot)
            }
            return .stranger(shared)
        case .transfer?:
            guard let slot = table.slot(for: Tag(rawValue: datagram.tag)) else { return .drop }
            return .transfer(slot)
        case nil:
            return .drop
        }
    }

    /// What this turn counted, for the scrape (`WorkerMetrics`).
    func publishMetrics(now: Nanoseconds) {
        metrics.set(.transfersRunning, activeTransfers)
        metrics.set(.transfersOnSharedSockets, table.sharedCount)
        metrics.set(.lastTurn, Int(now))
        metrics.setBackend(backend.statistics)
        metrics.publish()
    }

    func reportUnanswered(now: Nanoseconds, force: Bool = false) {
        if let line = unanswered.report(now: now, force: force) { logger.warning("\(line)") }
    }

    func stopListening() {
        accepting = false
        dropParked()
        if !configuration.singlePort { closeListeners() }
        logger.notice("stopping: no new requests; \(activeTransfers) transfers finishing")
    }

    /// SIGHUP: the -m file again. A file that no longer parses keeps the rules in force.
    func reloadRemapRules() {
        guard let set = configuration.remapRules else {
            logger.notice("SIGHUP: no remap rules (-m) to reload")
            return
        }
        do {
            let rules = try set.reloadNow()
            logger.notice("SIGHUP: remap rules reloaded (\(rules.count) rules)")
        } catch {
            logger.error("SIGHUP: remap rules not reloaded, the old ones stay: \(error)")
        }
    }

    func closeListeners() {
        for listener in listeners { backend.close(listener.socket) }
        listeners.removeAll()
    }

    /// The grace period is over: what still runs is aborted, with an ERROR to its client; an
    /// upload already committed and waiting only to ACK a lost last block again has succeeded; one
    /// the disk thread is committing ends when its commit does.
    func abortAll(now: Nanoseconds) {
        for slot in table.running {
            switch table[slot].phase {
            case .dallying:
                finish(slot, .completed, now: now)
            case .committing:
                continue
            default:
                sendError(slot, TFTPError(.notDefined, "Server shutting down"))
                finish(slot, .shutdown, now: now)
            }
        }
    }

    /// Ends a transfer: one log line, its own socket closed, its file's lease given back (its
    /// image kept mapped until the flush), its place under the limits given back.
    func finish(_ slot: Int, _ outcome: Outcome, now: Nanoseconds) {
        precondition(table[slot].phase != .committing, "a transfer ended while the disk thread commits its upload")
        log(slot, outcome, now: now)
        wheel.cancel(slot)
        let transfer = table.end(slot)
        ended.note(transfer.peer, request: transfer.request, at: now)
        if case .own(let socket)? = transfer.socket { backend.close(socket) }
        if case .image(let image)? = transfer.source { pinnedUntilFlush.append(image) }
        // An upload that did not commit: its temporary file goes, on the disk thread.
        if let upload = transfer.upload, upload.holdsTemporaryFile { disk.submit { upload.abort() } }
        admission.release(transfer.peer)
    }

    func log(_ slot: Int, _ outcome: Outcome, now: Nanoseconds) {
        guard !table[slot].record.logged else { return }
        table[slot].record.logged = true
        let (record, peer, sender, receiver, upload) = (table[slot].record, table[slot].peer, table[slot].sender,
                                                        table[slot].receiver, table[slot].upload)
        let bytes = sender?.bytesAcknowledged ?? upload?.bytesTaken ?? receiver?.bytesReceived ?? 0
        let retransmits = (sender?.retransmits ?? 0) + (receiver?.retransmits ?? 0)
        let duration = now - record.started
        let seconds = Double(duration) / 1e9
        summary.transfers += 1
        summary.bytes += bytes
        if outcome.isFailure { summary.failed += 1 }
        let kind: WorkerMetrics.Kind = record.isWrite ? .write : .read
        let result = outcome.result
        metrics.countRequest(kind, result)
        metrics.add(record.isWrite ? .fileBytesReceived : .fileBytesSent, bytes)
        if result == .served { durationRecorder.record(record.filename, kind: kind, duration) }
        // The machine the client is (--machines), told what it took.
        let machine = files.generated?.took(record.isWrite ? 0 : bytes, client: peer)
        if configuration.logFormat == .json {
            var fields: Logger.Metadata = [
                "event": "transfer", "client": "\(peer)", "request": "\(kind.label)", "file": "\(sanitizedForLog(record.filename))",
                "mode": "\(record.mode.rawValue)", "options": "\(record.options)", "bytes": .stringConvertible(bytes),
                "duration_s": .stringConvertible(seconds), "retransmits": .stringConvertible(retransmits),
                "outcome": "\(result.label)",
            ]
            if let machine { fields["machine"] = "\(machine)" }
            if outcome != .completed { fields["detail"] = "\(outcome.text)" }
            logger.log(level: outcome.isFailure ? .warning : .info, "transfer", metadata: fields)
            return
        }
        // Made only if the level is logged (at -v 0 a served transfer's line is not).
        logger.log(level: outcome.isFailure ? .warning : .info, """
            \(record.isWrite ? "WRQ" : "RRQ") \(peer)\(machine.map { " [\($0)]" } ?? "") "\(sanitizedForLog(record.filename))" \(record.mode.rawValue)\
            \(record.options.isEmpty ? "" : " " + record.options) bytes=\(bytes) \
            time=\(decimalText(seconds, places: 3))s retransmits=\(retransmits): \(outcome.text)
            """)
    }

}
