import Atomics
import CStampedeSys
import Glibc
import Logging
import StampedeIO
import StampedeProtocol
import StampedeServer

/// One HTTP event loop: its own listeners on the server's addresses (SO_REUSEPORT: the kernel
/// spreads connections over the loops), its own epoll, its connections. Edge-triggered: a
/// connection is read, or written, until the kernel says EAGAIN. Every file it serves comes
/// through the TFTP server's remap rules, access policy and file cache.
public final class HTTPLoop: @unchecked Sendable {
    let configuration: ServerConfiguration
    let http: HTTPConfiguration
    let cache: FileCache
    let open: ManagedAtomic<Int>
    let admission: Admission?
    public let metrics = WorkerMetrics()
    var durations: DurationRecorder
    var logger: Logger
    let epoll: Int32
    /// Its listening sockets: bound by this loop (each loop its own, SO_REUSEPORT), or a
    /// descriptor of a socket systemd passed, which the loops share (`passed`).
    var listeners: [(fd: Int32, passed: Bool)] = []
    /// Accepting waits until then: the process ran out of descriptors (EMFILE, ENFILE) or
    /// memory, and a listener left readable would wake the loop at once, again and again.
    var acceptPausedUntil: Nanoseconds?
    var connections: [Connection?] = []
    var free: [Int] = []
    var generation: UInt32 = 0
    /// Connections that stopped writing for fairness, not for EAGAIN: written again next turn.
    var runnable: [Int] = []
    let scratch: UnsafeMutableRawBufferPointer
    /// What one epoll_wait reports.
    let readyTags: UnsafeMutablePointer<UInt64>
    static let readyCapacity = 256
    var nextSweep: Nanoseconds = 0
    /// SIGTERM: the listeners are closed; each connection's next request is its last.
    var stopping = false
    var lastRefusalLog: Nanoseconds = 0
    /// Bytes one connection may write in a row before the others get a turn.
    static let writeBudget = 4 << 20
    static let listenerBit: UInt64 = 1 << 63

    init(configuration: ServerConfiguration, http: HTTPConfiguration, cache: FileCache, fileLabels: FileLabels,
         open: ManagedAtomic<Int>, admission: Admission?, index: Int) throws(Errno) {
        self.configuration = configuration
        self.http = http
        self.cache = cache
        self.open = open
        self.admission = admission
        durations = DurationRecorder(metrics: metrics, fileLabels: fileLabels)
        logger = configuration.logger
        logger[metadataKey: "http"] = "\(index)"
        let ep = stampede_epoll_create()
        if let error = Errno(result: ep) { throw error }
        epoll = ep
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
        let tag = Self.listenerBit | UInt64(index)
        if let error = Errno(result: passed ? stampede_epoll_add_exclusive(epoll, fd, tag) : stampede_epoll_add(epoll, fd, tag)) {
            throw error
        }
    }

    // MARK: The loop

    /// Serves until SIGTERM/SIGINT: then no new connection or request; responses being written
    /// may finish within the grace.
    public func run() {
        var stopDeadline: Nanoseconds?
        while true {
            let now = stampede_monotonic_ns()
            if stopDeadline == nil && stampede_stop_requested() != 0 {
                stopDeadline = now + configuration.shutdownGrace
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

    /// One turn: waits at most `maxWait` (less when a sweep or a connection's next share is
    /// due), serves the connections that are ready, accepts new ones while listening, and
    /// sweeps out those past their deadlines once a second. `run` turns it; a test can too.
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
            let tag = readyTags[i]
            if tag & Self.listenerBit != 0 {
                accept(Int(tag & 0xFFFF), now: now)  // none once stopListening has closed them
                continue
            }
            let slot = Int(tag & 0xFFFF_FFFF)
            guard slot < connections.count, let connection = connections[slot],
                  connection.generation == UInt32(tag >> 32) else { continue }
            service(slot, now: now)
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
        // No connection closes for the stop itself: a response being written finishes, and every
        // connection's next request is answered, with Connection: close (`answerInput`). Closing
        // one now would fail a request already on its way, or send its client to reopen on an
        // address that still routes here while nothing listens: refused (issue 25's drain).
        // `sweep` closes a connection that asks nothing for a second.
        for slot in connections.indices where connections[slot]?.response == nil {
            connections[slot]?.lastProgress = now
        }
    }

    func accept(_ listener: Int, now: Nanoseconds) {
        guard listener < listeners.count, acceptPausedUntil == nil else { return }
        for _ in 0..<256 {
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
            guard open.loadThenWrappingIncrement(ordering: .relaxed) < http.maxConnections else {
                open.wrappingDecrement(ordering: .relaxed)
                Glibc.close(fd)
                metrics.add(.httpConnectionsRefused)
                logRefusal("\(peer.unmapped): connection closed: \(http.maxConnections) connections open (--http-max-connections)", now: now)
                continue
            }
            let slot = free.popLast() ?? { connections.append(nil); return connections.count - 1 }()
            generation &+= 1
            let connection = Connection(fd: fd, peer: peer.unmapped, now: now, generation: generation)
            connections[slot] = connection
            metrics.add(.httpConnections)
            admission?.connectionOpened()
            if let error = Errno(result: stampede_epoll_add_edge(epoll, fd, UInt64(connection.generation) << 32 | UInt64(slot))) {
                logger.error("\(connection.peer): cannot watch the connection: \(error)")
                close(slot)
                continue
            }
            // The request may be there already; edge-triggered, it would not be said again.
            service(slot, now: now)
        }
    }

    /// How long accepting waits once the process is out of descriptors or memory, unless a
    /// connection of this loop closes first (nginx waits half a second).
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
    func logRefusal(_ message: String, now: Nanoseconds) {
        guard now - lastRefusalLog >= nanosecondsPerSecond else { return }
        lastRefusalLog = now
        logger.warning("\(message)")
    }

    /// Writes what is due, then reads and answers requests until the socket has nothing more or
    /// a response waits for room.
    func service(_ slot: Int, now: Nanoseconds) {
        guard let connection = connections[slot] else { return }
        while true {
            if connection.response != nil {
                guard write(slot, connection, now: now) else { return }
                if connection.closing {
                    close(slot)
                    return
                }
            }
            // The next request: one already read (pipelined), or more bytes. A response (or a
            // refusal, after which the connection closes) is written at the top of the loop.
            if answerInput(connection, now: now) { continue }
            let read = recv(connection.fd, scratch.baseAddress, scratch.count, 0)
            if read > 0 {
                let bytes = UnsafeRawBufferPointer(rebasing: scratch[..<read])
                connection.lastProgress = now
                if connection.input.isEmpty { connection.requestStarted = now }
                connection.input.append(contentsOf: bytes)
                // A head ends with a line feed: bytes without one cannot complete what was not
                // complete before, and are not parsed again (a client sending a byte at a time
                // would make every byte a parse of all it sent) until the head limit is passed.
                if bytes.contains(10) || connection.input.count > http.limits.headBytes { connection.unparsed = true }
                continue
            }
            if read == 0 || (errno != EAGAIN && errno != EINTR) {
                // The client closed (or reset): what it had not finished asking is dropped.
                close(slot)
                return
            }
            if errno == EINTR { continue }
            return
        }
    }

    /// Parses the next head in the connection's input and sets its response (or its refusal's):
    /// true; false if there is none yet.
    func answerInput(_ connection: Connection, now: Nanoseconds) -> Bool {
        guard connection.unparsed, !connection.closing else { return false }
        connection.unparsed = false
        let limits = http.limits
        let outcome = connection.input.withUnsafeBytes { bytes in
            Result { () throws(RequestHead.Refusal) in try RequestHead.parse(bytes, limits: limits) }
        }
        let parsed: RequestHead.Parsed
        switch outcome {
        case .success(let head): parsed = head
        case .failure(let refusal):
            connection.input = []
            refuse(connection, refusal.status, refusal.reason, withBody: !refusal.toHead, now: now)
            connection.requestStarted = nil
            return true
        }
        guard case .complete(let head, let length) = parsed else { return false }
        connection.input.removeFirst(length)
        // What follows may be another whole request (pipelining).
        connection.unparsed = !connection.input.isEmpty
        let started = connection.requestStarted ?? now
        connection.requestStarted = connection.input.isEmpty ? nil : now
        if !head.keepAlive || stopping { connection.closing = true }
        respond(connection, head, started: started)
        return true
    }

    /// Writes the response until it is done (true) or the socket is full (false: the next
    /// readiness, or the next turn, goes on). An error closes the connection.
    func write(_ slot: Int, _ connection: Connection, now: Nanoseconds) -> Bool {
        var budget = Self.writeBudget
        while var response = connection.response {
            if response.isDone {
                finish(connection, now: now)
                return true
            }
            guard budget > 0 else {
                runnable.append(slot)
                return false
            }
            let bodyLeft = min(response.end - response.offset, budget)
            let sent: Int
            var bodySent = 0
            if response.headSent < response.head.count {
                if response.headSent == 0 && bodyLeft > 0 && response.sendfileSource != nil && !response.corked {
                    stampede_tcp_cork(connection.fd, 1)
                    response.corked = true
                }
                sent = response.head.withUnsafeBytes { head in
                    let rest = UnsafeRawBufferPointer(rebasing: head[response.headSent...])
                    if case .image(let image) = response.body, image.descriptor == nil, bodyLeft > 0 {
                        return sendBoth(connection.fd, rest, image.slice(response.offset..<(response.offset + bodyLeft)))
                    }
                    // Corked: the head goes out with the first bytes sendfile gives.
                    return send(connection.fd, rest.baseAddress, rest.count, Int32(MSG_NOSIGNAL) | (bodyLeft > 0 ? Int32(MSG_MORE) : 0))
                }
                if sent > 0 {
                    let fromHead = min(sent, response.head.count - response.headSent)
                    response.headSent += fromHead
                    bodySent = sent - fromHead
                }
            } else {
                if case .stream(let file) = response.body {
                    // Read as it goes, so a rewrite in place would make a body of two versions:
                    // asked before each send, and the last byte sent only after it is read and
                    // the file found unchanged. A change ends the connection short of its
                    // Content-Length, which the client sees as a failed download.
                    if let change = file.change() {
                        connection.response = response
                        abandon(slot, "the file changed while it was sent (\(change)): closed before the last byte", .serverError)
                        return false
                    }
                    if response.offset == response.end - 1 {
                        sent = lastByte(of: file, at: response.offset, to: connection.fd)
                        if sent == 0 {
                            connection.response = response
                            abandon(slot, "the file changed while it was sent (\(file.change() ?? "shrank")): closed before the last byte",
                                    .serverError)
                            return false
                        }
                    } else {
                        var offset = off_t(response.offset)
                        sent = sendfile(connection.fd, file.descriptor, &offset, min(bodyLeft, response.end - 1 - response.offset))
                    }
                } else if let source = response.sendfileSource {
                    // From the image's memfd: no copy into the socket.
                    var offset = off_t(response.offset)
                    sent = sendfile(connection.fd, source, &offset, bodyLeft)
                } else if case .image(let image) = response.body {
                    let part = image.slice(response.offset..<(response.offset + bodyLeft))
                    sent = send(connection.fd, part.baseAddress, part.count, Int32(MSG_NOSIGNAL))
                } else {
                    sent = 0
                }
                bodySent = max(0, sent)
            }
            if sent == 0 && response.headSent == response.head.count {
                // sendfile found the file shorter than the response said it is.
                connection.response = response
                abandon(slot, "the file shrank while it was sent: closed before the last byte", .serverError)
                return false
            }
            if sent < 0 {
                let error = errno
                connection.response = response
                if error == EINTR { runnable.append(slot) }  // edge-triggered: no edge would come
                if error == EAGAIN || error == EINTR { return false }
                abandon(slot, "\(Errno(error))", error == EPIPE || error == ECONNRESET ? .closedByClient : .serverError)
                return false
            }
            response.offset += bodySent
            metrics.add(.httpFileBytesSent, bodySent)
            metrics.add(.httpBytesSent, sent)
            budget -= sent
            connection.lastProgress = now
            connection.response = response
        }
        return true
    }

    /// A streamed body's last byte: read, then sent only if the file is still the version the
    /// response began with. Returns what send returns, or 0 when the byte cannot be read or the
    /// file changed.
    func lastByte(of file: StreamedFile, at offset: Int, to fd: Int32) -> Int {
        let byte = UnsafeMutableRawBufferPointer(rebasing: scratch[..<1])
        guard (try? file.read(offset..<(offset + 1), into: byte)) == 1, file.change() == nil else { return 0 }
        return send(fd, byte.baseAddress, 1, Int32(MSG_NOSIGNAL))
    }

    /// A head and the start of a body in one sendmsg.
    func sendBoth(_ fd: Int32, _ head: UnsafeRawBufferPointer, _ body: UnsafeRawBufferPointer) -> Int {
        var vectors = (iovec(iov_base: UnsafeMutableRawPointer(mutating: head.baseAddress), iov_len: head.count),
                       iovec(iov_base: UnsafeMutableRawPointer(mutating: body.baseAddress), iov_len: body.count))
        return withUnsafeMutableBytes(of: &vectors) { raw in
            var message = msghdr()
            message.msg_iov = raw.baseAddress!.assumingMemoryBound(to: iovec.self)
            message.msg_iovlen = 2
            return sendmsg(fd, &message, Int32(MSG_NOSIGNAL))
        }
    }

    /// The response is written: its line in the log, its figures, its image given back.
    func finish(_ connection: Connection, now: Nanoseconds) {
        guard let response = connection.response else { return }
        connection.response = nil
        if response.corked { stampede_tcp_cork(connection.fd, 0) }
        release(response.body)
        log(connection, response)
        if connection.input.isEmpty { connection.lastProgress = now }
    }

    /// Gives an image back to the cache (a streamed file closes when its last owner goes).
    func release(_ body: TransferSource?) {
        if case .image(let image) = body { cache.release(image) }
    }

    /// Ends a response before its end (an error, a stall, a stop), and its connection.
    func abandon(_ slot: Int, _ why: String, _ result: WorkerMetrics.Result) {
        guard let connection = connections[slot] else { return }
        if var response = connection.response {
            connection.response = nil
            release(response.body)
            response.record.result = result
            response.record.detail = why
            log(connection, response)
        }
        close(slot)
    }

    func close(_ slot: Int) {
        guard let connection = connections[slot] else { return }
        if let response = connection.response { release(response.body) }
        Glibc.close(connection.fd)
        connections[slot] = nil
        free.append(slot)
        // A descriptor is free again: a paused accept may take it (from the next turn).
        if acceptPausedUntil != nil { acceptPausedUntil = 0 }
        open.wrappingDecrement(ordering: .relaxed)
        metrics.add(.httpConnections, -1)
        admission?.connectionClosed()
    }

    /// Once a second: heads too slow (408), responses the client stopped reading, idle
    /// connections.
    func sweep(now: Nanoseconds) {
        for slot in connections.indices {
            guard let connection = connections[slot] else { continue }
            if connection.response != nil {
                if now - connection.lastProgress > http.sendTimeout {
                    abandon(slot, "no progress for \(http.sendTimeout / nanosecondsPerSecond) s", .timedOut)
                }
            } else if let started = connection.requestStarted {
                if now - started > http.requestTimeout {
                    connection.input = []
                    connection.requestStarted = nil
                    refuse(connection, .requestTimeout, "the head took more than \(http.requestTimeout / nanosecondsPerSecond) s", now: now)
                    // One try to say why; whatever the socket takes, the connection ends.
                    _ = write(slot, connection, now: now)
                    close(slot)
                }
            } else if stopping && now - connection.lastProgress > nanosecondsPerSecond {
                close(slot)  // stopping, and nothing asked for a second
            } else if now - connection.lastProgress > http.idleTimeout {
                logger.debug("\(connection.peer): idle for \(http.idleTimeout / nanosecondsPerSecond) s: connection closed")
                close(slot)
            }
        }
    }
}
