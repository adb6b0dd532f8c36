import CStampedeSys
import Glibc
import StampedeBase
import StampedeHTTPWire
import StampedeIO
import StampedeProtocol
import StampedeTLS

/// The storm's HTTP connections' readiness: one epoll (edge-triggered, each connection tagged by
/// its slot) that the backend watches, so that one wait covers datagrams and connections; a
/// scratch buffer every body is read into and compared from; and the connections that stopped at
/// their share of a turn, or were not reached within the turn's, to go on at the next
/// (`HTTPTurnOrder`). The
/// shares keep the datagrams flowing: a turn that read every body for as long as bytes came
/// would leave TFTP's ACKs unsent, and its transfers would time out behind the storm's own reads.
final class HTTPEvents {
    let descriptor: Int32
    /// Why the epoll could not be made or watched: every HTTP stage fails with it.
    let setupError: Errno?
    let scratch: UnsafeMutableRawBufferPointer
    let tags: UnsafeMutablePointer<UInt64>
    let tagCapacity = 256
    /// The slots a turn left with bytes to read, in the order the next reads them.
    var putOff = HTTPTurnOrder()
    var hasPending: Bool { !putOff.isEmpty }
    /// What one connection reads in a turn before the others have their go.
    static let connectionShare = 256 << 10
    /// What all of them read in a turn before the datagrams have theirs: a few milliseconds.
    static let turnShare = 8 << 20
    /// What is left of this turn's share.
    var turnLeft = 0
    /// The most a response head may be (the server's own limit for a request's is 16 KiB).
    static let largestHead = 16 << 10
    /// The receive buffer each connection asks for, as a firmware's TCP would have: iPXE offers
    /// a window of at most 256 KiB (its TCP_MAX_WINDOW_SIZE). Left to Linux's autotuning, 2,000
    /// connections on the server's own host could each grow to tcp_rmem's maximum (32 MiB here)
    /// and push the host into TCP memory pressure, where receive queues drop segments and the
    /// server's retransmissions back off for minutes: a failure of the test, not of the server.
    static let iPXEWindow = 256 << 10
    /// What a storm's connections together ask to hold unread, a share each, so that a storm of
    /// thousands of machines on the server's host stays out of TCP memory pressure: a rack's
    /// firmware each have memory of their own, a storm's share the server's kernel. The storm of
    /// bench-machines (5,000 machines a process, its 256 KiB each: 1.2 GB unread in its queues
    /// when it fell behind) put the host past tcp_mem's pressure mark (1.5 GB here), and a few
    /// initrds a run stopped short: their segments dropped and retransmitted after ever longer
    /// waits, until the server's send timeout.
    static let receiveBudget = 256 << 20

    /// Each connection's receive buffer when a storm runs `slots` machines at once: 256 KiB
    /// (iPXE's window) for up to 1,024, then an equal share of `receiveBudget`, at least 64 KiB
    /// (the kernel books twice that).
    static func receiveBuffer(slots: Int) -> Int32 {
        Int32(min(iPXEWindow, max(64 << 10, receiveBudget / max(1, slots))))
    }

    init<Backend: DatagramBackend>(watchedBy backend: Backend) {
        scratch = .allocate(byteCount: 256 << 10, alignment: 64)
        tags = .allocate(capacity: tagCapacity)
        let epoll = stampede_epoll_create()
        var error = Errno(result: epoll)
        if error == nil {
            do throws(Errno) { try backend.watch(epoll) } catch let refused { error = refused }
        }
        descriptor = epoll
        setupError = error
    }

    deinit {
        if descriptor >= 0 { Glibc.close(descriptor) }
        scratch.deallocate()
        tags.deallocate()
    }
}

/// A machine's HTTP connection, and the request it runs, if one does.
struct HTTPConnection {
    var descriptor: Int32
    var server: SocketAddress
    /// A response was read on it before: a close before the next response's first byte is the
    /// server ending an idle connection, and the request goes again on a new one, as iPXE does.
    var reused = false
    var phase = Phase.idle
    var request: [UInt8] = []
    var sent = 0
    var head: [UInt8] = []
    var response: ReceivedResponseHead?
    /// Body bytes read so far.
    var received = 0
    var lastHeard: Nanoseconds = 0
    /// Put off to the next turn (`HTTPEvents.putOff`).
    var isPending = false
    /// HTTPS: the connection's TLS session, and when the connection was opened (the handshake's
    /// time is from then to its end).
    var tls: TLSSession?
    var opened: Nanoseconds = 0

    enum Phase {
        /// Kept alive between requests.
        case idle
        /// HTTPS: connecting, or the handshake under way.
        case handshaking
        /// Connecting, or the request not wholly written.
        case sending
        case head
        case body
    }
}

extension Storm {
    func isFetching(_ slot: Int) -> Bool {
        slot < connections.count && connections[slot] != nil && connections[slot]!.phase != .idle
    }

    /// Starts the machine's `http` stage: on its kept connection when that goes to the same
    /// server, else on a new one. False when no connection could be had (the machine fails).
    func startFetch(_ slot: Int, now: Nanoseconds) -> Bool {
        let machine = machines[slot]!
        let stage = plan.profile.stages[machine.stage]
        guard let http else { preconditionFailure("an http stage without HTTPEvents") }
        if let error = http.setupError {
            machineEnded(slot, .failed(.socketError(error)), now: now)
            return false
        }
        let name = machine.fetching ?? machine.identity.expand(stage.names[0])
        guard let target = HTTPTarget(name, server: plan.httpServer, secureServer: plan.httpSecure) else {
            machineEnded(slot, .failed(.protocolError("\(name): no HTTP server to ask (storm --http)")), now: now)
            return false
        }
        if target.secure && plan.tls == nil {
            machineEnded(slot, .failed(.protocolError("\(name): HTTPS needs the CA to trust (storm --tls-ca)")), now: now)
            return false
        }
        beginFetch(slot, of: target.name)
        if let kept = connections[slot], kept.server != target.server || (kept.tls != nil) != target.secure { closeConnection(slot) }
        if connections[slot] == nil {
            do throws(Errno) {
                try openConnection(slot, to: target.server, from: plan.ownSource(of: machine.identity.number), secure: target.secure,
                                   now: now)
            } catch {
                machineEnded(slot, .failed(.socketError(error)), now: now)
                return false
            }
        }
        connections[slot]!.request = target.request
        begin(slot, now: now)
        wheel.schedule(slot, at: now + stage.patience)
        drive(slot, now: now)
        return true
    }

    /// The connection's request from its start: nothing sent, no response read.
    private func begin(_ slot: Int, now: Nanoseconds) {
        // The head is empty here: a new connection's, or emptied when the last one was read.
        let handshaken = connections[slot]!.tls?.established ?? true
        connections[slot]!.phase = handshaken ? .sending : .handshaking
        connections[slot]!.sent = 0
        connections[slot]!.response = nil
        connections[slot]!.received = 0
        connections[slot]!.lastHeard = now
    }

    /// A non-blocking TCP connection from the machine's own address, if it has one of the
    /// server's family, to `server`, in the epoll; `secure`: with a TLS session (`plan.tls`) that
    /// checks the certificate names the server's address.
    private func openConnection(_ slot: Int, to server: SocketAddress, from source: SocketAddress?, secure: Bool,
                                now: Nanoseconds) throws(Errno) {
        let fd = socket(server.family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw Errno.current }
        var receiveBuffer = HTTPEvents.receiveBuffer(slots: plan.slots)
        _ = setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &receiveBuffer, socklen_t(MemoryLayout<Int32>.size))
        let length = socklen_t(server.isIPv6 ? MemoryLayout<sockaddr_in6>.size : MemoryLayout<sockaddr_in>.size)
        do throws(Errno) {
            if let source, source.family == server.family {
                var local = source.storage
                let bound = withUnsafePointer(to: &local) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) }
                }
                guard bound == 0 else { throw Errno.current }
            }
            var remote = server.storage
            let connected = withUnsafePointer(to: &remote) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, length) }
            }
            guard connected == 0 || errno == EINPROGRESS else { throw Errno.current }
            // Tagged by its slot alone: an event of a closed connection read in the same batch only
            // has the next one try a read or write that finds nothing to do.
            if let error = Errno(result: stampede_epoll_add_edge(http!.descriptor, fd, UInt64(slot))) { throw error }
        } catch {
            Glibc.close(fd)
            throw error
        }
        var connection = HTTPConnection(descriptor: fd, server: server)
        connection.opened = stampede_monotonic_ns()
        if secure {
            guard let session = plan.tls?.session(fd: fd, host: server.host) else {
                Glibc.close(fd)
                throw Errno(ENOMEM)
            }
            connection.tls = session
        }
        connections[slot] = connection
    }

    /// Closes the slot's connection, if it has one (its TLS session first: its close_notify goes
    /// out on the socket).
    func closeConnection(_ slot: Int) {
        guard slot < connections.count, let connection = connections[slot] else { return }
        connections[slot] = nil
        // Its close_notify while the descriptor is still its own (the session's deinit writes nothing).
        connection.tls?.shutdown(orderly: true)
        Glibc.close(connection.descriptor)
    }

    /// The connections left with more to read last turn, then those the epoll says are ready,
    /// until the turn's share is read (the rest wait for the next turn, in order).
    func serviceHTTP(now: Nanoseconds) {
        guard let http else { return }
        http.turnLeft = HTTPEvents.turnShare
        for slot in http.putOff.next() where slot < connections.count && connections[slot] != nil {
            connections[slot]!.isPending = false
            drive(slot, now: now)
        }
        while true {
            let ready = Int(stampede_epoll_wait(http.descriptor, http.tags, Int32(http.tagCapacity), 0))
            for i in 0..<max(0, ready) {
                let slot = Int(http.tags[i])
                guard slot < connections.count, connections[slot] != nil else { continue }
                drive(slot, now: now)
            }
            if ready < http.tagCapacity || http.turnLeft <= 0 { break }
        }
    }

    /// Leaves the slot's connection for the next turn (edge-triggered: the epoll will not say
    /// again that it is ready): at its end when it read its share (`served`), else at its start.
    private func postpone(_ slot: Int, served: Bool) {
        guard !connections[slot]!.isPending else { return }
        connections[slot]!.isPending = true
        http!.putOff.putOff(slot, readItsShare: served)
    }

    /// Writes the request and reads the response as far as the socket allows (up to a turn's
    /// share), ending the stage when the response is whole or the connection fails.
    func drive(_ slot: Int, now: Nanoseconds) {
        guard let http else { return }
        var share = HTTPEvents.connectionShare
        // The phase and descriptor are read afresh each time round: a stage that ends may start the
        // next on this connection, or on a new one.
        while let phase = connections[slot]?.phase {
            let descriptor = connections[slot]!.descriptor
            switch phase {
            case .idle:
                return  // an event on a kept connection: its close shows at the next request
            case .handshaking:
                switch connections[slot]!.tls!.handshake() {
                case .done:
                    // The clock read now, not the turn's: the turn's time was read before its wait,
                    // and a handshake that ends in it would be timed short (0 ms under load).
                    report.handshakes.append(stampede_monotonic_ns() - connections[slot]!.opened)
                    connections[slot]!.phase = .sending
                case .wouldBlock:
                    return
                case .closed, .plainHTTP:
                    connectionFailed(slot, nil, now: now)
                    return
                case .failed(let why):
                    fetchFailed(slot, .protocolError("TLS: \(why)"), now: now)
                    return
                }
            case .sending:
                // A request is small: it goes whatever is left of the turn's share.
                let (sent, total) = (connections[slot]!.sent, connections[slot]!.request.count)
                let written: Int
                if let tls = connections[slot]!.tls {
                    let outcome = connections[slot]!.request.withUnsafeBytes { bytes in
                        tls.write(UnsafeRawBufferPointer(rebasing: bytes[sent...]))
                    }
                    guard let count = moved(outcome, slot, now: now) else { return }
                    written = count
                } else {
                    written = connections[slot]!.request.withUnsafeBytes { bytes in
                        send(descriptor, bytes.baseAddress! + sent, total - sent, Int32(MSG_NOSIGNAL))
                    }
                    if written < 0 {
                        if errno == EAGAIN { return }
                        connectionFailed(slot, Errno.current, now: now)
                        return
                    }
                }
                connections[slot]!.sent += written
                if sent + written == total { connections[slot]!.phase = .head }
            case .head, .body:
                guard share > 0, http.turnLeft > 0 else {
                    postpone(slot, served: share < HTTPEvents.connectionShare)
                    return
                }
                let buffer = UnsafeMutableRawBufferPointer(rebasing: http.scratch[..<min(http.scratch.count, share)])
                let count: Int
                if let tls = connections[slot]!.tls {
                    guard let read = moved(tls.read(into: buffer), slot, now: now) else { return }
                    count = read
                } else {
                    count = recv(descriptor, buffer.baseAddress, buffer.count, 0)
                    if count < 0 {
                        if errno == EAGAIN { return }
                        connectionFailed(slot, Errno.current, now: now)
                        return
                    }
                    if count == 0 {
                        connectionFailed(slot, nil, now: now)
                        return
                    }
                }
                share -= count
                http.turnLeft -= count
                connections[slot]!.lastHeard = now
                consume(UnsafeRawBufferPointer(rebasing: http.scratch[..<count]), slot: slot, now: now)
            }
        }
    }

    /// What a TLS read or write on the connection came to: its bytes, or nil when it waits for the
    /// socket or ended (a close or a broken session, handled here as a plain socket's are).
    private func moved(_ outcome: TLSSession.Outcome, _ slot: Int, now: Nanoseconds) -> Int? {
        switch outcome {
        case .bytes(let count):
            return count
        case .wouldBlock:
            return nil
        case .closed:
            connectionFailed(slot, nil, now: now)
            return nil
        case .failed(let why):
            fetchFailed(slot, .protocolError("TLS: \(why)"), now: now)
            return nil
        }
    }

    /// Bytes read on the connection: the head, then the body, compared as it comes.
    private func consume(_ bytes: UnsafeRawBufferPointer, slot: Int, now: Nanoseconds) {
        var body = bytes
        if connections[slot]!.phase == .head {
            // The head is kept until its blank line, never more of the body than fits with it.
            let before = connections[slot]!.head.count
            connections[slot]!.head.append(contentsOf: bytes.prefix(max(0, HTTPEvents.largestHead + 4 - before)))
            let read = connections[slot]!.head.withUnsafeBytes { head in
                Result { () throws(ReceivedResponseHead.Unreadable) in try ReceivedResponseHead.read(head) }
            }
            let response: ReceivedResponseHead
            let length: Int
            switch read {
            case .success(let whole?):
                (response, length) = whole
            case .success(nil):
                if connections[slot]!.head.count > HTTPEvents.largestHead {
                    fetchFailed(slot, .protocolError("HTTP: a response head over 16 KiB"), now: now)
                }
                return
            case .failure(let unreadable):
                fetchFailed(slot, .protocolError("HTTP: \(unreadable.reason)"), now: now)
                return
            }
            guard response.status == 200 || response.contentLength != nil else {
                fetchFailed(slot, response.status == 200 ? .protocolError("HTTP: 200 without Content-Length") : .httpStatus(response.status), now: now)
                return
            }
            if response.status == 200, let whole = machines[slot]!.expected, whole.count != response.contentLength! {
                fetchFailed(slot, .wrongSize(expected: whole.count, received: response.contentLength!), now: now)
                return
            }
            connections[slot]!.response = response
            connections[slot]!.phase = .body
            if machines[slot]!.script != nil { machines[slot]!.script = [] }  // a request sent again: its answer from the start
            connections[slot]!.reused = true
            connections[slot]!.head = []
            body = UnsafeRawBufferPointer(rebasing: bytes[(length - before)...])
        }
        let response = connections[slot]!.response!
        let length = response.contentLength!
        let offset = connections[slot]!.received
        guard offset + body.count <= length else {
            fetchFailed(slot, .protocolError("HTTP: more bytes than its Content-Length (\(length))"), now: now)
            return
        }
        if response.status == 200, let failure = verify(body, at: offset, slot: slot) {
            fetchFailed(slot, failure, now: now)
            return
        }
        connections[slot]!.received += body.count
        if response.status == 200, machines[slot]!.script != nil {
            guard machines[slot]!.script!.count + body.count <= Self.scriptBytes else {
                fetchFailed(slot, .protocolError("HTTP: a script over \(Self.scriptBytes) bytes"), now: now)
                return
            }
            machines[slot]!.script!.append(contentsOf: body)
        }
        guard offset + body.count == length else { return }
        // Whole: the connection waits for the machine's next request, unless the server closes it.
        // Timed now, not at the turn's start: a turn may read for milliseconds.
        let now = stampede_monotonic_ns()
        connections[slot]!.phase = .idle
        if !response.keepAlive { closeConnection(slot) }
        if response.status == 200 {
            report.record(bytes: length, stage: machines[slot]!.stage)
            transferEnded(slot, .ok, now: now)
        } else {
            transferEnded(slot, .failed(.httpStatus(response.status)), now: now)
        }
    }

    /// The connection closed (`error` nil) or broke. A kept connection the server closed before
    /// answering is opened again once, and the request sent again; otherwise the stage fails.
    private func connectionFailed(_ slot: Int, _ error: Errno?, now: Nanoseconds) {
        let connection = connections[slot]!
        let machine = machines[slot]!
        if connection.reused, connection.phase == .sending || connection.phase == .head && connection.head.isEmpty {
            let request = connection.request
            closeConnection(slot)
            do throws(Errno) {
                try openConnection(slot, to: connection.server, from: plan.ownSource(of: machine.identity.number),
                                   secure: connection.tls != nil, now: now)
            } catch {
                fetchFailed(slot, .socketError(error), now: now)
                return
            }
            connections[slot]!.request = request
            begin(slot, now: now)
            return  // drive's loop goes on with the new connection
        }
        let failure: StormFailure
        switch (error, connection.phase) {
        case (let error?, _): failure = .socketError(error)
        case (nil, .body): failure = .protocolError("HTTP: closed after \(connection.received) of \(connection.response!.contentLength!) body bytes")
        default: failure = .protocolError("HTTP: closed before a whole response")
        }
        fetchFailed(slot, failure, now: now)
    }

    /// The stage failed: the connection (in an unknown state) is closed.
    private func fetchFailed(_ slot: Int, _ failure: StormFailure, now: Nanoseconds) {
        closeConnection(slot)
        transferEnded(slot, .failed(failure), now: now)
    }

    /// The wheel's timer for a running request: it fails when the server has sent nothing for
    /// the firmware's patience, and is set again otherwise. Where the server's bytes wait unread
    /// in the socket, the storm fell behind: said as such, not as the server's silence.
    func fetchTimerFired(_ slot: Int, now: Nanoseconds) {
        let patience = plan.profile.stages[machines[slot]!.stage].patience
        let quietSince = connections[slot]!.lastHeard
        if now - quietSince >= patience {
            fetchFailed(slot, .patienceRanOut(on: connections[slot]!.descriptor), now: now)
        } else {
            wheel.schedule(slot, at: quietSince + patience)
        }
    }
}

extension StormFailure {
    /// Why a fetch on `descriptor` ran out of patience: the server's silence, or the storm's own
    /// lag where the server's bytes wait unread in the socket (FIONREAD).
    static func patienceRanOut(on descriptor: Int32) -> StormFailure {
        var unread: Int32 = 0
        let asked = ioctl(descriptor, UInt(FIONREAD), &unread)
        return asked == 0 && unread > 0 ? .stormBehind(unread: Int(unread)) : .timedOut
    }
}
