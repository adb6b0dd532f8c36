import Atomics
import CStampedeSys
import Glibc
import Logging
import StampedeBase
import StampedeFiles
import StampedeHTTPWire
import StampedeIO
import StampedeServing
import StampedeTLS

/// One HTTP event loop: its listeners (SO_REUSEPORT: the kernel spreads connections over the
/// loops), its own epoll, its connections, its responder. It does the I/O and nothing else: each
/// connection's state says what comes next (`ConnectionState`), the responder what the answers
/// are (`HTTPResponder`). Edge-triggered: a connection is read, or written, until the kernel says
/// EAGAIN.
public final class HTTPLoop: @unchecked Sendable {
    let http: HTTPConfiguration
    let responder: any HTTPResponder
    /// Connections open, all the loops of a server together.
    let open: ManagedAtomic<Int>
    /// Connections per client, all the loops of a process together (`--http-max-per-client`).
    let clients: ClientConnections?
    let admission: Admission?
    public let metrics: WorkerMetrics
    var logger: Logger
    /// SIGTERM: how long answers being written may take.
    let shutdownGrace: Nanoseconds
    let epoll: Int32
    /// Its listening sockets: bound by this loop (each loop its own, SO_REUSEPORT), or a
    /// descriptor of a socket systemd passed, which the loops share (`passed`).
    var listeners: [(fd: Int32, passed: Bool)] = []
    /// Accepting waits until then: the process ran out of descriptors (EMFILE, ENFILE) or
    /// memory, and a listener left readable would wake the loop at once, again and again.
    var acceptPausedUntil: Nanoseconds?
    var connections: [Connection?] = []
    /// What its connections' requests in progress hold, reused from one request to the next.
    let exchanges: ExchangePool
    /// Connections accepted since the loop began.
    public private(set) var accepted = 0
    /// Each slot's generation: the next connection in it gets the next one (`HTTPTag`).
    var generations: [UInt32] = []
    var free: [Int] = []
    /// Connections that stopped writing for fairness, not for EAGAIN: written again next turn.
    var runnable: [Int] = []
    let scratch: UnsafeMutableRawBufferPointer
    /// What one epoll_wait reports.
    let readyTags: UnsafeMutablePointer<UInt64>
    static let readyCapacity = 256
    var nextSweep: Nanoseconds = 0
    /// SIGTERM: the listeners are closed; each connection's next answer is its last.
    var stopping = false
    var lastRefusalLog: Nanoseconds = 0

    init(http: HTTPConfiguration, responder: any HTTPResponder, metrics: WorkerMetrics, open: ManagedAtomic<Int>,
         clients: ClientConnections? = nil, admission: Admission?, logger: Logger, shutdownGrace: Nanoseconds) throws(Errno) {
        self.http = http
        self.responder = responder
        self.metrics = metrics
        self.open = open
        self.clients = clients
        self.admission = admission
        self.logger = logger
        self.shutdownGrace = shutdownGrace
        exchanges = ExchangePool(limits: http.limits)
        let ep = stampede_epoll_create()
        if let error = Errno(result: ep) { throw error }
        epoll = ep
        if let wake = responder.loads?.wakeDescriptor, let error = Errno(result: stampede_epoll_add(ep, wake, HTTPTag.mailbox.rawValue)) {
            Glibc.close(ep)
            throw error
        }
        scratch = .allocate(byteCount: 16384, alignment: 16)
        readyTags = .allocate(capacity: Self.readyCapacity)
        // A heartbeat before the first turn, for a watchdog that looks before the thread starts.
        metrics.set(.lastTurn, Int(stampede_monotonic_ns()))
        metrics.publish()
    }

    deinit {
        for listener in listeners { Glibc.close(listener.fd) }
        for slot in connections.indices where connections[slot] != nil { close(slot) }
        Glibc.close(epoll)
        scratch.deallocate()
        readyTags.deallocate()
    }

    // MARK: Listeners

    /// Binds a listener on each address (port 0: the kernel picks; the caller passes the port
    /// chosen to the next loop); returns the addresses bound.
    func bind(_ addresses: [SocketAddress]) throws(Errno) -> [SocketAddress] {
        var bound: [SocketAddress] = []
        for address in addresses {
            var storage = address.storage
            let fd = stampede_tcp_listener(&storage, http.backlog)
            if let error = Errno(result: fd) { throw error }
            bound.append(try listen(on: fd, passed: false))
        }
        return bound
    }

    /// Takes listening sockets systemd passed (this loop's own descriptors of them); returns
    /// their addresses.
    func adopt(_ fds: [Int32]) throws(Errno) -> [SocketAddress] {
        var adopted: [SocketAddress] = []
        for fd in fds {
            if let error = Errno(result: stampede_adopt_tcp_listener(fd)) {
                Glibc.close(fd)
                throw error
            }
            adopted.append(try listen(on: fd, passed: true))
        }
        return adopted
    }

    /// Owns `fd` as a listener and watches it; its address.
    private func listen(on fd: Int32, passed: Bool) throws(Errno) -> SocketAddress {
        listeners.append((fd, passed))
        try watch(listener: listeners.count - 1)
        var local = SocketAddress()
        _ = stampede_socket_address(fd, &local.storage)
        return local
    }

    /// A socket every loop watches wakes one of them per connection (EPOLLEXCLUSIVE), not all.
    private func watch(listener index: Int) throws(Errno) {
        let (fd, passed) = listeners[index]
        let tag = HTTPTag.listener(index).rawValue
        if let error = Errno(result: passed ? stampede_epoll_add_exclusive(epoll, fd, tag) : stampede_epoll_add(epoll, fd, tag)) {
            throw error
        }
    }

    // MARK: The loop

    /// Serves until SIGTERM/SIGINT: then no new connection or request; answers being written
    /// may finish within the grace.
    public func run() {
        var stopDeadline: Nanoseconds?
        while true {
            let now = stampede_monotonic_ns()
            if stopDeadline == nil && stampede_stop_requested() != 0 {
                stopDeadline = now + shutdownGrace
                stopListening(now: now)
            }
            if let deadline = stopDeadline {
                if connections.allSatisfy({ $0 == nil }) { break }
                if now >= deadline {
                    for slot in connections.indices where connections[slot] != nil { abandon(slot, "server shutting down", .shutdown) }
                    break
                }
            }
            turn(now: now, maxWait: 250_000_000)
        }
        metrics.publish()
    }

    /// One turn: waits at most `maxWait` (less when a sweep or a connection's next share is due),
    /// serves the connections that are ready, accepts new ones while listening, goes on with
    /// answers whose files the disk thread read (its mailbox wakes the loop), and sweeps out those
    /// past their deadlines once a second. `run` turns it; a test can too.
    public func turn(now: Nanoseconds, maxWait: Nanoseconds) {
        var wait: Nanoseconds = runnable.isEmpty ? min(maxWait, max(0, nextSweep - now)) : 0
        if let until = acceptPausedUntil { wait = min(wait, max(0, until - now)) }
        let count = stampede_epoll_wait(epoll, readyTags, Int32(Self.readyCapacity), wait)
        let now = stampede_monotonic_ns()
        if let until = acceptPausedUntil, now >= until { resumeAccepting() }
        let ready = runnable
        runnable.removeAll(keepingCapacity: true)
        for slot in ready where connections[slot] != nil { service(slot, now: now) }
        for i in 0..<max(0, Int(count)) {
            switch HTTPTag(rawValue: readyTags[i]).kind {
            case .listener(let index)?:
                accept(index, now: now)  // none once stopListening has closed them
            case .connection(let slot, let generation)?:
                guard slot < connections.count, connections[slot]?.generation == generation else { continue }
                service(slot, now: now)
            case .mailbox?:
                resumeWaiting(now: now)
            case nil:
                continue
            }
        }
        if now >= nextSweep {
            sweep(now: now)
            nextSweep = now + nanosecondsPerSecond
        }
        // The watchdog's heartbeat: a loop that stops turning stops the pings (SystemdNotifier).
        metrics.set(.lastTurn, Int(now))
        metrics.publish()
    }

    func stopListening(now: Nanoseconds) {
        for listener in listeners { Glibc.close(listener.fd) }
        listeners.removeAll()
        acceptPausedUntil = nil
        stopping = true
        // No connection closes for the stop itself: an answer being written finishes, and every
        // connection's next request is answered, with Connection: close. Closing one now would
        // fail a request already on its way, or send its client to reopen on an address that
        // still routes here while nothing listens: refused (issue 25's drain). One that asks
        // nothing more goes at the sweep after `drainTimeout`.
        for case let connection? in connections {
            perform(connection.state.handle(.stop, now: now), connection.slot, connection, now: now)
        }
    }

    // MARK: Connections

    func accept(_ listener: Int, now: Nanoseconds) {
        guard listener < listeners.count, acceptPausedUntil == nil else { return }
        for _ in 0..<256 {
            // At the server's limit a new connection waits in the listen queue (the kernel has
            // made it; the client sees a slow answer) until one closes, instead of being closed: a
            // machine of a rack larger than the limit boots a moment later rather than failing.
            // (Loops asking at once may each take one: at most one over the limit per loop.)
            guard http.closesAtLimit || open.load(ordering: .relaxed) < http.maxConnections else {
                pauseAccepting(now: now)
                metrics.add(.httpAcceptsPaused)
                logRefusal("""
                    \(http.maxConnections) connections open (--http-max-connections): new connections wait in the listen \
                    queue until one closes
                    """, now: now)
                return
            }
            var peer = SocketAddress()
            let fd = stampede_tcp_accept(listeners[listener].fd, &peer.storage)
            if fd < 0 {
                if fd == -EMFILE || fd == -ENFILE || fd == -ENOBUFS || fd == -ENOMEM {
                    // The connection stays in the backlog; the listener stays readable. Asked
                    // again at once it would spin the loop (and starve the TFTP workers): wait.
                    pauseAccepting(now: now)
                    logRefusal("""
                        cannot accept a connection: \(Errno(-fd)): accepting again in \(Self.acceptPause / 1_000_000) ms \
                        (\(open.load(ordering: .relaxed)) connections open)
                        """, now: now)
                } else if fd != -EAGAIN && fd != -EINTR && fd != -ECONNABORTED {
                    logRefusal("cannot accept a connection: \(Errno(-fd))", now: now)
                }
                return
            }
            guard admit(peer.unmapped, now: now) else {
                Glibc.close(fd)
                continue
            }
            // With the certificate of now: a reload (SIGHUP) changes the next handshakes only.
            var session: TLSSession?
            if let tls = http.tls {
                session = tls.session(fd: fd)
                guard session != nil else {
                    open.wrappingDecrement(ordering: .relaxed)
                    clients?.closed(peer.unmapped, inHandshake: true)
                    Glibc.close(fd)
                    logRefusal("\(peer.unmapped): connection closed: no memory for its TLS session", now: now)
                    continue
                }
            }
            let slot = free.popLast() ?? {
                connections.append(nil)
                generations.append(0)
                return connections.count - 1
            }()
            generations[slot] = HTTPTag.next(after: generations[slot])
            let connection = Connection(fd: fd, peer: peer.unmapped, slot: slot, generation: generations[slot], pool: exchanges,
                                        state: ConnectionState(limits: http.connectionLimits, opened: now, handshake: http.tls != nil))
            connections[slot] = connection
            connection.tls = session
            connection.inHandshake = session != nil
            capUnsent(connection)
            accepted += 1
            metrics.add(.httpConnections)
            admission?.connectionOpened()
            let tag = HTTPTag.connection(slot: slot, generation: connection.generation).rawValue
            if let error = Errno(result: stampede_epoll_add_edge(epoll, fd, tag)) {
                logger.error("\(connection.peer): cannot watch the connection: \(error)")
                close(slot)
                continue
            }
            // The request may be there already; edge-triggered, it would not be said again.
            if stopping { perform(connection.state.handle(.stop, now: now), slot, connection, now: now) }
            service(slot, now: now)
        }
    }

    /// Whether a new connection from `peer` fits its client's limits (its connections and
    /// handshakes, its /64's connections): counted in if so; counted and said (once a second) if
    /// not, and the caller closes it. (The server's limit is `accept`'s: past it none is taken,
    /// unless the limit closes, `closesAtLimit`.)
    func admit(_ peer: SocketAddress, now: Nanoseconds) -> Bool {
        let before = open.loadThenWrappingIncrement(ordering: .relaxed)
        if http.closesAtLimit && before >= http.maxConnections {
            open.wrappingDecrement(ordering: .relaxed)
            logRefusal("\(peer): connection closed: \(http.maxConnections) connections open", now: now)
            return false
        }
        guard let clients, let refusal = clients.open(peer, handshake: http.tls != nil) else { return true }
        open.wrappingDecrement(ordering: .relaxed)
        switch refusal {
        case .connections:
            metrics.add(.httpConnectionsRefusedPerClient)
            logRefusal("""
                \(peer): connection closed: \(clients.maxConnections) connections open from this client \
                (--http-max-per-client)
                """, now: now)
        case .handshakes:
            metrics.add(.httpHandshakesRefusedPerClient)
            logRefusal("""
                \(peer): connection closed: \(clients.maxHandshakes) TLS handshakes under way from this client \
                (a quarter of --http-max-per-client)
                """, now: now)
        case .network:
            metrics.add(.httpConnectionsRefusedPerPrefix)
            logRefusal("""
                \(peer): connection closed: \(clients.maxPerPrefix) connections open from this client's /64 \
                (--http-max-per-prefix)
                """, now: now)
        }
        return false
    }

    /// How long accepting waits once the process is out of descriptors or memory, or the server
    /// holds its limit of connections, unless a connection of this loop closes first (nginx waits
    /// half a second).
    static let acceptPause: Nanoseconds = 100_000_000

    func pauseAccepting(now: Nanoseconds) {
        guard acceptPausedUntil == nil else { return }
        acceptPausedUntil = now + Self.acceptPause
        for listener in listeners { _ = stampede_epoll_remove(epoll, listener.fd) }
    }

    func resumeAccepting() {
        guard acceptPausedUntil != nil else { return }
        acceptPausedUntil = nil
        for index in listeners.indices { try? watch(listener: index) }
    }

    /// Refusals of connections, said at most once a second: a flood is one line, not thousands.
    /// The message is made only when it is said (a flood's refusals make no String each).
    func logRefusal(_ message: @autoclosure () -> String, now: Nanoseconds) {
        guard now - lastRefusalLog >= nanosecondsPerSecond else { return }
        lastRefusalLog = now
        logger.warning("\(message())")
    }

    /// Serves a connection whose socket is ready, or whose turn came: what its state says.
    func service(_ slot: Int, now: Nanoseconds) {
        guard let connection = connections[slot] else { return }
        perform(connection.state.handle(.serviceBegins(inputLeft: connection.hasInput), now: now), slot, connection, now: now)
    }

    /// Does what the connection's state says (`ConnectionState.Action`), and what each step
    /// leads to, until it waits for the socket, a file or the next turn, or closes.
    func perform(_ first: ConnectionState.Action, _ slot: Int, _ connection: Connection, now: Nanoseconds) {
        var action = first
        while true {
            switch action {
            case .none:
                return
            case .handshake:
                action = handshake(connection, now: now)
            case .read:
                switch receive(connection) {
                case .bytes(let read):
                    connection.input.append(contentsOf: UnsafeRawBufferPointer(rebasing: scratch[..<read]))
                    action = connection.state.handle(.bytesRead, now: now)
                case .wouldBlock:
                    return
                case .gone:
                    // The client closed (or reset): what it had not finished asking is dropped.
                    action = connection.state.handle(.peerGone, now: now)
                }
            case .parseNext:
                action = parse(connection, now: now)
            case .answer:
                // The head the state holds: the responder answers it now, or once its file is read.
                guard case .answering(let head, let started) = connection.state.phase else { return }
                let ready = responder.answer(head, on: connection, started: started)
                action = connection.state.handle(ready ? .answerReady : .fileLoading, now: now)
            case .write:
                switch write(slot, connection, now: now) {
                case .blocked, .abandoned:
                    return
                case .yielded:
                    action = .yieldTurn
                case .done:
                    endResponse(connection, abandoned: nil)
                    action = connection.state.handle(.answerWritten(inputLeft: connection.hasInput), now: now)
                    // Nothing more asked: the connection waits for its next request without an exchange.
                    connection.release()
                }
            case .yieldTurn:
                runnable.append(slot)
                return
            case .answerTimeoutThenClose:
                timeOut(slot, connection, now: now)
                return
            case .close:
                close(slot)
                return
            }
        }
    }

    enum Received {
        case bytes(Int)
        case wouldBlock
        /// Closed, reset, or (TLS) broken.
        case gone
    }

    /// Reads what the connection has into the scratch buffer: from the socket, or decrypted.
    func receive(_ connection: Connection) -> Received {
        if let tls = connection.tls {
            switch tls.read(into: scratch) {
            case .bytes(let count): return .bytes(count)
            case .wouldBlock: return .wouldBlock
            case .closed: return .gone
            case .failed(let why):
                logger.debug("\(connection.peer): TLS: \(why): connection closed")
                return .gone
            }
        }
        while true {
            let read = recv(connection.fd, scratch.baseAddress, scratch.count, 0)
            if read > 0 { return .bytes(read) }
            if read < 0 && errno == EINTR { continue }
            return read < 0 && errno == EAGAIN ? .wouldBlock : .gone
        }
    }

    /// Reads the head in the connection's input, from where the last read of it stopped; when
    /// it is whole (or refused), has it answered. What comes next.
    func parse(_ connection: Connection, now: Nanoseconds) -> ConnectionState.Action {
        let started: Nanoseconds
        if case .readingHead(let since) = connection.state.phase { started = since } else { started = now }
        let outcome: Result<RequestHead.Parsed, RequestHead.Refusal> = connection.input.withUnsafeBytes { bytes in
            do throws(RequestHead.Refusal) { return .success(try connection.parser.parse(bytes)) } catch { return .failure(error) }
        }
        switch outcome {
        case .success(.incomplete):
            return connection.state.handle(.headIncomplete, now: now)
        case .success(.complete(let head, let length)):
            connection.input.removeFirst(length)
            connection.parser.reset()
            // The state decides first whether the answer is the connection's last (it says so),
            // then the loop answers it (`.answer`).
            return connection.state.handle(.headParsed(head, started: started), now: now)
        case .failure(let refusal):
            connection.input = []
            connection.parser.reset()
            let next = connection.state.handle(.headRefused, now: now)
            responder.refuse(refusal.status, refusal.reason, withBody: !refusal.toHead, on: connection, started: started)
            return next
        }
    }

    /// The files that answers waited for, read: those answers are made and written. Each outcome
    /// comes under its connection's tag; one closed meanwhile (its slot empty, or another's) is
    /// passed over.
    func resumeWaiting(now: Nanoseconds) {
        guard let loads = responder.loads else { return }
        for (ticket, outcome) in loads.collect() {
            guard case .connection(let slot, let generation)? = HTTPTag(rawValue: ticket).kind, slot < connections.count,
                  let connection = connections[slot], connection.generation == generation else {
                continue
            }
            if case .readAhead(let through) = outcome {
                // Its streamed file's next bytes are in the page cache: the answer writes on.
                if case .stream(let file)? = connection.source { file.readAhead(done: through) }
                service(slot, now: now)
                continue
            }
            guard case .waitingForFile(let head, let started, _, let reads) = connection.state.phase else { continue }
            let ready = responder.resume(head, started: started, reads: reads, on: connection, after: outcome)
            perform(connection.state.handle(ready ? .answerReady : .fileLoading, now: now), slot, connection, now: now)
        }
    }

    /// The answer ended, written whole or not: its file goes back (a sendfile already queued
    /// holds its pages), the responder logs and counts it.
    func endResponse(_ connection: Connection, abandoned: (why: String, result: WorkerMetrics.Result)?) {
        guard let response = connection.takeResponse() else { return }
        connection.headMemory = response.head
        connection.endLease()
        responder.ended(response, on: connection, abandoned: abandoned)
    }

    /// Ends an answer before its end (an error, a stall, a stop), and its connection: over TLS
    /// with no close_notify, so that the client sees a short answer (as nginx leaves it).
    func abandon(_ slot: Int, _ why: String, _ result: WorkerMetrics.Result) {
        guard let connection = connections[slot] else { return }
        endResponse(connection, abandoned: (why, result))
        close(slot, orderly: false)
    }

    /// The one close path: the TLS session's last word (close_notify when `orderly`) while the
    /// socket is still this connection's, then the socket.
    func close(_ slot: Int, orderly: Bool = true) {
        guard let connection = connections[slot] else { return }
        connection.tls?.shutdown(orderly: orderly)
        connection.tls = nil
        connection.release(force: true)
        Glibc.close(connection.fd)
        clients?.closed(connection.peer, inHandshake: connection.inHandshake)
        connections[slot] = nil
        free.append(slot)
        open.wrappingDecrement(ordering: .relaxed)
        metrics.add(.httpConnections, -1)
        admission?.connectionClosed()
        // A descriptor is free again: a paused accept may take it (from the next turn).
        if acceptPausedUntil != nil { acceptPausedUntil = 0 }
    }

    /// A head not whole within the request deadline: 408, one try to say it (whatever the socket
    /// takes), and the connection ends.
    func timeOut(_ slot: Int, _ connection: Connection, since: Nanoseconds? = nil, now: Nanoseconds) {
        connection.input = []
        responder.refuse(.requestTimeout, "the head took more than \(http.requestTimeout / nanosecondsPerSecond) s",
                         withBody: true, on: connection, started: since ?? now)
        _ = write(slot, connection, now: now)
        endResponse(connection, abandoned: nil)
        close(slot)
    }

    /// Once a second: each connection's deadlines (`ConnectionState`).
    func sweep(now: Nanoseconds) {
        for slot in connections.indices {
            guard let connection = connections[slot] else { continue }
            capUnsent(connection)
            let since: Nanoseconds? = if case .readingHead(let since) = connection.state.phase { since } else { nil }
            switch connection.state.handle(.tick, now: now) {
            case .answerTimeoutThenClose:
                timeOut(slot, connection, since: since, now: now)
            case .close(.stalled):
                abandon(slot, "no progress for \(http.sendTimeout / nanosecondsPerSecond) s", .timedOut)
            case .close(.idle):
                logger.debug("\(connection.peer): idle for \(http.idleTimeout / nanosecondsPerSecond) s: connection closed")
                close(slot)
            case .close:
                close(slot)
            default:
                break
            }
        }
    }
}
