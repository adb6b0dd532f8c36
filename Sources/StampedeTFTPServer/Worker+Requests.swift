import CStampedeSys
import Glibc
import Logging
import StampedeBase
import StampedeFiles
import StampedeIO
import StampedeProtocol
import StampedeServing

/// RRQ/WRQ on a listener → parse → the repeat policy → limits → the file service (a read that
/// misses the cache parks the request until the disk thread has read the file) → negotiation → a
/// transfer slot and its socket (docs/ARCHITECTURE.md, "One RRQ, from datagram to DATA"). Every
/// refusal is an ERROR from the listener, sourced from the address the request was sent to, and a
/// log line.

/// A request on a listener, on its way to becoming a transfer.
struct IncomingRequest {
    let peer: SocketAddress
    /// The address it was sent to: the transfer answers from there.
    let local: SocketAddress
    let listener: SocketHandle
    let request: Request
    /// Its bytes as they arrived, to tell the same request again from another.
    let bytes: [UInt8]
    /// When the kernel took it (nil where the backend does not say): the same request again that
    /// arrived before its client last made progress is a resend that waited in the queue.
    let received: Nanoseconds?
    let kind: WorkerMetrics.Kind
    var mode = TransferMode.octet
    /// The name to open: the one asked for, through the remap rules.
    var filename: [UInt8] = []
    /// The rules changed the name: the log says what to.
    var remapped = false
    /// Times its file was read for it while it waited: a file that keeps changing under its reads
    /// is refused as busy after a few.
    var reads = 0

    /// What the log says of it: `RRQ "name" octet`, a name too long for any path, and what the
    /// rules made of the name. Written only for a line that is logged.
    func describe(into line: inout LogLine) {
        line.append(request.isWrite ? "WRQ \"" : "RRQ \"")
        line.append(sanitized: request.filename)
        line.append("\" ")
        line.append(sanitized: request.mode, limit: 16)
        if request.filename.count > Request.longestFilename {
            line.append(" (a name of ")
            line.append(request.filename.count)
            line.append(" bytes, more than ")
            line.append(Request.longestFilename)
            line.append(")")
        }
        if remapped {
            line.append(" remapped to \"")
            line.append(sanitized: filename)
            line.append("\"")
        }
    }

    /// `describe(into:)` as a String, for the lines said at -v.
    var what: String { LogLine(describe).text }
}

/// Why a request does not become a transfer.
enum RequestRefusal: Error {
    /// Answered with this ERROR (with silence when it means busy, by default) and logged.
    case error(TFTPError)
    /// A repeat of a running transfer's request, or a stale one: dropped, said at debug level.
    case repeated(String)
}

extension Worker {
    /// parse → the repeat policy → shape → limits → the name → the file and options → socket →
    /// the first reply. Every step either returns what the next needs or throws the refusal; what
    /// the steps took (a place under the limits, a file's lease, an upload's file) is given back on
    /// the way out. A read whose file is being read waits (`parked`) and goes on from `proceed`.
    func handleRequest(_ datagram: Datagram, listener index: Int, now: Nanoseconds) {
        guard datagram.error == nil, datagram.peer.port != 0 else { return }
        let listener = listeners[index].socket
        guard let request = parseRequest(datagram, on: listener) else { return }
        var incoming = IncomingRequest(
            peer: datagram.peer, local: datagram.local, listener: listener, request: request, bytes: Array(datagram.bytes),
            received: datagram.received, kind: request.isWrite ? .write : .read)
        do throws(RequestRefusal) {
            try parkedPolicy(incoming)
            try repeatPolicy(incoming, now: now)
            incoming.mode = try shape(of: incoming)
            // Limits first: a flood over them costs no file lookups.
            if let busy = admission.admit(incoming.peer) { throw .error(TFTPError(busy)) }
            do throws(RequestRefusal) {
                guard try name(&incoming) else { return }
                try proceed(&incoming, now: now)
            } catch {
                admission.release(incoming.peer)
                throw error
            }
        } catch {
            refuse(incoming, error)
        }
    }

    /// The request's file (a lease on it, or an upload's temporary file) and its options, then
    /// its transfer; or it waits while the disk thread reads its file, and comes back here then
    /// (`collectLoads`) with how that read went (`after`).
    func proceed(_ incoming: inout IncomingRequest, after outcome: LoadOutcome? = nil, now: Nanoseconds) throws(RequestRefusal) {
        var transfer = Transfer()
        if incoming.request.isWrite {
            let ticket = loads.nextTicket()
            switch files.write(incoming.filename, waiter: LoadWaiter(mailbox: loads, ticket: ticket), after: outcome) {
            case .ready(let upload):
                transfer.upload = upload
            case .loading:
                park(incoming, ticket: ticket)
                return
            case .refused(let refusal):
                throw .error(TFTPError(refusal))
            }
            if incoming.mode == .netascii { transfer.upload!.useNetascii() }
        } else {
            let ticket = loads.nextTicket()
            switch files.read(incoming.filename, netascii: incoming.mode == .netascii, client: incoming.peer,
                              waiter: LoadWaiter(mailbox: loads, ticket: ticket), after: outcome) {
            case .ready(let lease):
                transfer.lease = consume lease
            case .loading:
                park(incoming, ticket: ticket)
                return
            case .refused(let refusal):
                throw .error(TFTPError(refusal))
            }
        }
        do throws(RequestRefusal) {
            let negotiation = try prepare(&transfer, for: incoming, now: now)
            let slot = table.reserve()
            do throws(RequestRefusal) {
                transfer.socket = try transferSocket(for: incoming, slot: slot, negotiation: negotiation,
                                                     beside: runningTransfer(of: incoming.peer))
            } catch {
                table.abandon(slot)
                throw error
            }
            begin(transfer, in: slot, incoming, negotiation, now: now)
        } catch {
            // The lease goes back with the transfer that never started; an upload's file goes away.
            transfer.upload?.abort()
            throw error
        }
    }

    /// A request from the address and port of a request that waits for its file: the same one
    /// again (a resend) is dropped; another means the client started over, and the waiting one
    /// gives way.
    func parkedPolicy(_ incoming: IncomingRequest) throws(RequestRefusal) {
        guard let ticket = parkedByPeer[incoming.peer], let waiting = parked[ticket] else { return }
        if waiting.bytes == incoming.bytes { throw .repeated("a duplicate of a request waiting for its file") }
        unpark(ticket)
    }

    /// The request waits for the disk thread's read of its file; its place under the limits stays
    /// taken.
    func park(_ incoming: IncomingRequest, ticket: UInt64) {
        parked[ticket] = incoming
        parkedByPeer[incoming.peer] = ticket
        logger.debug("\(incoming.peer): \(incoming.what): waits for the disk")
    }

    /// Gives a waiting request up: its outcome, when it comes, finds nothing.
    @discardableResult
    func unpark(_ ticket: UInt64) -> IncomingRequest? {
        guard let incoming = parked.removeValue(forKey: ticket) else { return nil }
        if parkedByPeer[incoming.peer] == ticket { parkedByPeer[incoming.peer] = nil }
        admission.release(incoming.peer)
        return incoming
    }

    /// The reads the disk thread finished: each waiting request goes on, asking again for its
    /// file (now in the cache, or to be streamed), or is refused.
    func collectLoads(now: Nanoseconds) {
        for (ticket, outcome) in loads.collect() {
            if let tag = readingAhead.removeValue(forKey: ticket) {
                readAheadDone(tag, outcome, now: now)
                continue
            }
            guard var incoming = parked.removeValue(forKey: ticket) else {
                // Given up while its upload's file was made: the file goes, on the disk thread.
                if case .created(let upload) = outcome { disk.submit { upload.abort() } }
                continue
            }
            if parkedByPeer[incoming.peer] == ticket { parkedByPeer[incoming.peer] = nil }
            do throws(RequestRefusal) {
                incoming.reads += 1
                switch outcome {
                case .refused(let refusal): throw .error(TFTPError(refusal))
                case _ where incoming.reads > Self.readsPerRequest:
                    throw .error(TFTPError(.notDefined, "File keeps changing, try again later", busy: true))
                case .remapped: if try name(&incoming, after: outcome) { try proceed(&incoming, now: now) }
                case .loaded, .stream, .opened, .created, .looked, .readAhead: try proceed(&incoming, after: outcome, now: now)
                }
            } catch {
                admission.release(incoming.peer)
                refuse(incoming, error)
            }
        }
    }

    /// Reads of its file a request waits for at most.
    static var readsPerRequest: Int { 4 }

    /// At a stop: the requests that wait are given up (their clients ask another server, or this
    /// one again when it is back).
    func dropParked() {
        for ticket in Array(parked.keys) { unpark(ticket) }
    }

    /// The request a listener's datagram holds; nil when there is none to serve (refused or
    /// ignored here).
    func parseRequest(_ datagram: Datagram, on listener: SocketHandle) -> Request? {
        // Judged by its length alone, whatever the backend's buffers took of it.
        if datagram.truncated || datagram.bytes.count > Request.largestDatagram, Request.isRequest(datagram.bytes) {
            refuse(datagram, listener, TFTPError(.illegalOperation, "Request too long"), kind: datagram.bytes[1] == 2 ? .write : .read) {
                $0.append(datagram.truncated ? "a request of over " : "a request of ")
                $0.append(datagram.bytes.count)
                $0.append(" bytes, more than ")
                $0.append(Request.largestDatagram)
            }
            return nil
        }
        do {
            return try Request.parse(datagram.bytes)
        } catch .notARequest {
            // DATA, ACK and ERROR have no business on the listener: stay silent rather than
            // answer (and amplify) stray or spoofed traffic. Unknown opcodes get ERROR 4.
            guard datagram.bytes.count >= 2 else {
                logger.info("\(datagram.peer): ignored a \(datagram.bytes.count)-byte packet on the listener")
                return nil
            }
            let opcode = UInt16(datagram.bytes[0]) << 8 | UInt16(datagram.bytes[1])
            logger.info("\(datagram.peer): ignored a packet with opcode \(opcode) on the listener")
            if !(3...6).contains(opcode) {
                refuse(datagram, listener, TFTPError(.illegalOperation, "Illegal TFTP operation")) {
                    $0.append("unknown opcode ")
                    $0.append(Int(opcode))
                }
            }
        } catch {
            refuse(datagram, listener, TFTPError(.illegalOperation, "Illegal TFTP operation")) {
                $0.append("malformed request (")
                $0.append("\(error)")
                $0.append(")")
            }
        }
        return nil
    }

    /// One policy for a request from a client address and port whose transfer is running: the
    /// same request again is a duplicate (a resend that arrived late, or crossed our first reply:
    /// iPXE resends after 250 ms) and is dropped, the transfer goes on; another request supersedes
    /// the running transfer only if the client never answered it (it started over: a lost first
    /// reply). Another request beside a transfer the client has answered is a transfer of its
    /// own; returns that running transfer's slot, since the two cannot share the client's address
    /// and port on one socket (`transferSocket`).
    /// One exception: the same request from a client that answered and has since gone quiet for a
    /// whole retransmit interval is the client starting over (a PXE ROM that reboots and asks
    /// from the same fixed port), not a late copy: the transfer it abandoned gives way. Unless
    /// the request carries a cookie (tftp-hpa 7.2's option): a client that starts over sends a
    /// new one, so the same cookie is always a resend. Nor when the kernel took the request
    /// before the client's last progress was read: a resend sent before the first reply reached
    /// the client, read seconds late from a long queue by a server short of time, while the
    /// client's answers wait unread too and so make it look quiet (at 20,000 machines this
    /// superseded live transfers, and their clients failed on ERROR 5).
    /// A copy of the request of a transfer that ended after the kernel took it (`EndedRequests`)
    /// is dropped too, whether or not another transfer runs from the port now.
    func repeatPolicy(_ incoming: IncomingRequest, now: Nanoseconds) throws(RequestRefusal) {
        if let received = incoming.received {
            ended.heard(received: received, now: now)
            if ended.isLateCopy(incoming.bytes, from: incoming.peer, received: received) {
                throw .repeated("a copy of the request of a transfer that ended after it was sent")
            }
        }
        guard let slot = runningTransfer(of: incoming.peer) else { return }
        let answered = table[slot].clientHasAnswered
        let sentAfterProgress = incoming.received.map { $0 > table[slot].clientProgressed } ?? true
        let startedOver = answered && incoming.request.cookie == nil && sentAfterProgress && table[slot].clientIsQuiet(now: now)
        if table[slot].request == incoming.bytes && !startedOver {
            if !answered, table[slot].sender != nil {
                // Its first answer or the client's reply was lost: the client asks again.
                let resends = table[slot].sender!.retransmits
                let action = table[slot].sender!.requestRepeated(now: now)
                metrics.add(.retransmissions, table[slot].sender!.retransmits - resends)
                perform(slot, action, now: now)
            }
            throw .repeated("a duplicate of the running transfer's request")
        }
        guard !answered || table[slot].request == incoming.bytes else { return }
        finish(slot, .superseded, now: now)
    }

    /// The transfer that runs from this client address and port, unless its upload is being
    /// committed (which nothing may end).
    func runningTransfer(of peer: SocketAddress) -> Int? {
        guard let slot = table.slot(of: peer), table[slot].phase != .committing else { return nil }
        return slot
    }

    /// The mode, and a name no longer than any path.
    func shape(of incoming: IncomingRequest) throws(RequestRefusal) -> TransferMode {
        guard let mode = TransferMode(rawValue: incoming.request.mode) else {
            throw .error(TFTPError(.illegalOperation, "Unsupported mode"))
        }
        // No path is longer (PATH_MAX); a longer name costs nothing more, before any rule runs on it.
        guard incoming.request.filename.count <= Request.longestFilename else { throw .error(Errno(ENAMETOOLONG).tftpError) }
        return mode
    }

    /// The name to open: the one asked for through the remap rules (`-m`), said at -v when they
    /// changed it, as tftpd-hpa does; or the refusal an `a` rule decides. False when the request
    /// waits (parked) while rules that probe the file system (`E`) run on a disk thread; it comes
    /// back here with their outcome (`after`).
    func name(_ incoming: inout IncomingRequest, after outcome: LoadOutcome? = nil) throws(RequestRefusal) -> Bool {
        let request = incoming.request
        let ticket = loads.nextTicket()
        switch files.remap(request.filename, isWrite: request.isWrite, client: incoming.peer, logger: logger,
                           waiter: LoadWaiter(mailbox: loads, ticket: ticket), after: outcome) {
        case .named(let mapped):
            incoming.filename = mapped
        case .loading:
            park(incoming, ticket: ticket)
            return false
        case .refused(let refusal):
            throw .error(TFTPError(refusal))
        }
        if incoming.filename != request.filename {
            // The transfer's end line has the rest.
            incoming.remapped = true
            logger.info("\(incoming.peer): \(incoming.what)")
        }
        return true
    }

    /// What may still refuse a request with an ERROR before the first reply, its file in hand: the
    /// options, with an upload's announced size checked against the disk.
    func prepare(_ transfer: inout Transfer, for incoming: IncomingRequest, now: Nanoseconds) throws(RequestRefusal) -> OptionNegotiation {
        let request = incoming.request
        transfer.peer = incoming.peer
        transfer.request = incoming.bytes
        transfer.askedSize = request.options.contains { $0.name.lowercased() == TFTPOption.tsize.rawValue }
        transfer.record = TransferRecord(isWrite: request.isWrite, filename: incoming.filename, mode: incoming.mode,
                                         started: now)
        let size = transfer.source?.size
        var largestBlock = maxBlockSize(for: incoming.local)
        // Single-port uploads arrive on the listener, in whatever its receive buffers take.
        if configuration.singlePort && request.isWrite { largestBlock = min(largestBlock, backend.largestListenerDatagram - 4) }
        let negotiation = OptionNegotiation(requested: request.options, cookie: request.cookie, isWrite: request.isWrite, fileSize: size,
                                            maxBlockSize: largestBlock, limits: configuration.optionLimits)
        transfer.record.options = negotiation.summary
        if let upload = transfer.upload {
            try limit(upload, announced: negotiation.options.transferSize)
        }
        return negotiation
    }

    /// An upload's bounds, as in.tftpd 7.x sets them: its announced size (tsize) above
    /// `--max-upload` is refused at once (ERROR 2), above the room on the disk too (ERROR 3);
    /// then neither the tsize nor `--max-upload` may be exceeded. A tsize of 0 bounds nothing:
    /// curl announces 0 for a size it does not know (7.3 takes it as 0 bytes).
    func limit(_ upload: Upload, announced: Int?) throws(RequestRefusal) {
        let maximum = configuration.policy.maxUpload
        if let maximum, let announced, announced > maximum {
            throw .error(TFTPError(.accessViolation, "Upload of \(announced) bytes refused: --max-upload is \(maximum)"))
        }
        if let announced, announced > 0 {
            upload.limit = (announced, "its tsize (\(announced) bytes)")  // within --max-upload, just checked
            do { try upload.announce(announced) } catch { throw .error(error.tftpError) }
        } else if let maximum {
            upload.limit = (maximum, "--max-upload (\(maximum) bytes)")
        }
    }

    /// The socket a transfer runs on: the listener in single-port mode; otherwise one of its own,
    /// bound to the address the request came to and connected to the client, or, past the
    /// worker's budget or when the kernel refuses one, a shared one for a read.
    func transferSocket(for incoming: IncomingRequest, slot: Int, negotiation: OptionNegotiation,
                        beside running: Int?) throws(RequestRefusal) -> TransferSocket {
        if configuration.singlePort {
            if running != nil { throw .repeated("a stale request from the port of a running transfer") }
            return .listener(incoming.listener, from: incoming.local)
        }
        var local = incoming.local
        local.port = 0
        var refusal: Errno?
        if table.ownCount < configuration.ownTransferSocketsPerWorker {
            do {
                // A reader's client sends ACKs and ERRORs; a writer's sends DATA of the negotiated size.
                let largest = incoming.request.isWrite ? negotiation.options.blockSize + 4 : 516
                return .own(try backend.openTransfer(local: local, peer: incoming.peer, ports: configuration.portRange,
                                                     largestDatagram: largest, buffers: windowBuffers(negotiation.options, isWrite: incoming.request.isWrite),
                                                     tag: table.tag(of: slot).rawValue))
            } catch {
                refusal = error
            }
        }
        // Out of descriptors, or of ports on this address: share (reads only).
        let reason: String
        switch refusal?.rawValue {
        case nil: reason = "\(table.ownCount) transfers with sockets of their own, the most this worker may hold"
        case EMFILE?, ENFILE?: reason = "the kernel refused a transfer socket (\(refusal!))"
        case EADDRINUSE?: reason = "no free port for a transfer socket (\(refusal!))"
        default:
            // ENOBUFS and the like: the host is busy, not the request wrong.
            throw .error(TFTPError(.notDefined, "Server out of sockets: \(refusal!)", busy: true))
        }
        guard !incoming.request.isWrite else {
            throw .error(TFTPError(.notDefined, "Server out of sockets: \(refusal.map { "\($0)" } ?? "no transfer socket left")", busy: true))
        }
        if let running, table[running].socket!.isShared {
            throw .repeated("a stale request from the port of a running transfer")
        }
        guard let shared = sharedSocket(for: incoming.peer, local: incoming.local, because: reason) else {
            throw .error(TFTPError(.notDefined, "Server out of sockets: \(refusal.map { "\($0)" } ?? "no transfer socket left")", busy: true))
        }
        return .shared(shared, from: incoming.local)
    }

    /// The queue a transfer's window needs: a download's whole window waits in the send queue
    /// (a full one drops the rest: EAGAIN), an upload's in the receive queue.
    func windowBuffers(_ options: TransferOptions, isWrite: Bool) -> SocketBuffers {
        let bytes = SocketBuffers.holding(options.windowSize, datagramsOf: options.blockSize + 4)
        return isWrite ? SocketBuffers(receive: bytes) : SocketBuffers(send: bytes)
    }

    /// The transfer starts: its state machine, its timer, its first reply.
    func begin(_ transfer: consuming Transfer, in slot: Int, _ incoming: IncomingRequest, _ negotiation: OptionNegotiation, now: Nanoseconds) {
        if !negotiation.acknowledged.isEmpty { transfer.optionAck = PacketWriter.optionAck(negotiation.acknowledged) }
        var timer = RetransmitTimer(
            base: negotiation.options.retransmitTimeout ?? configuration.retransmitTimeout,
            maxRetries: configuration.maxRetries)
        // A negotiated timeout counts once the client has answered: until then, -T's.
        timer.firstAnswerBase = configuration.retransmitTimeout
        // A reader that did not ask for a timeout gets one that follows its round trip.
        if !incoming.request.isWrite, negotiation.options.retransmitTimeout == nil, let floor = configuration.adaptiveTimeoutFloor {
            timer.adapt(floor: floor)
        }
        let options = negotiation.options
        if incoming.request.isWrite {
            transfer.phase = .receiving
            transfer.receiver = DataReceiver(blockSize: options.blockSize, windowSize: options.windowSize, numbering: options.numbering,
                                             sendsOptionAck: !transfer.optionAck.isEmpty, timer: timer)
            transfer.upload?.stage(windowBytes: options.blockSize * options.windowSize)
        } else {
            transfer.phase = .sending
            transfer.sender = DataSender(totalBytes: transfer.source.map(\.size) ?? 0, blockSize: options.blockSize,
                                         windowSize: options.windowSize, numbering: options.numbering,
                                         sendsOptionAck: !transfer.optionAck.isEmpty, timer: timer)
        }
        table.start(transfer, in: slot)
        if wheel.capacity < table.capacity { wheel.grow(to: table.capacity) }
        logger.debug("\(incoming.peer): \(incoming.what) \(negotiation.summary) accepted on \(incoming.local)")
        if incoming.request.isWrite {
            let reply = table[slot].receiver!.start(now: now)
            sendReply(slot, reply)
            scheduleTimer(slot)
        } else {
            let action = table[slot].sender!.start(now: now)
            perform(slot, action, now: now)
        }
    }

    /// A request that does not become a transfer: a repeat is dropped and said at debug level;
    /// a refusal is answered and logged (`refuse(_:to:from:on:kind:what:)`).
    func refuse(_ incoming: IncomingRequest, _ refusal: RequestRefusal) {
        switch refusal {
        case .repeated(let why):
            metrics.countRequest(incoming.kind, .duplicate)
            summary.repeated += 1
            logger.debug("\(incoming.peer): \(incoming.what): ignored, \(why)")
        case .error(let error):
            refuse(error, to: incoming.peer, from: incoming.local, on: incoming.listener, kind: incoming.kind) { incoming.describe(into: &$0) }
        }
    }

    /// Refuses what a listener's datagram asked, which is not a request to describe: `what`
    /// writes what the line says of it, as for a request.
    func refuse(_ datagram: Datagram, _ listener: SocketHandle, _ error: TFTPError, kind: WorkerMetrics.Kind = .invalid,
                what: (inout LogLine) -> Void) {
        refuse(error, to: datagram.peer, from: datagram.local, on: listener, kind: kind, what: what)
    }

    /// Answers a request that does not become a transfer with its ERROR, and logs it: `what`
    /// writes what the line says of the request, only when the line is logged. A busy server
    /// (`TFTPError.isBusy`) answers nothing by default: a firmware that gets ERROR 0 fails its
    /// boot, one that hears nothing sends its request again a few seconds later.
    func refuse(_ error: TFTPError, to peer: SocketAddress, from local: SocketAddress, on listener: SocketHandle,
                kind: WorkerMetrics.Kind, what: (inout LogLine) -> Void) {
        metrics.countRequest(kind, WorkerMetrics.Result(error))
        if error.isBusy && configuration.whenBusy == .silence {
            unanswered.note(error.message, now: stampede_monotonic_ns())
            summary.unanswered += 1
            logger.debug("\(peer): \(LogLine(what).text): unanswered, busy: \(error.message)")
            return
        }
        let count = PacketWriter.error(error.code.rawValue, message: error.message, into: scratch)
        backend.send(listener, to: peer, from: local, packet: UnsafeRawBufferPointer(rebasing: scratch[..<count]))
        metrics.add(.bytesSent, count)
        summary.refused += 1
        if error.code == .fileNotFound { summary.notFound += 1 }
        guard lines.logs(.warning) else { return }
        // A remap rule's message carries the client's name (\0, \1...): sanitised like every name.
        if configuration.logFormat == .json {
            logger.warning("refused", metadata: [
                "event": "refused", "client": "\(peer)", "request": "\(kind.label)", "what": "\(LogLine(what).text)",
                "error_code": .stringConvertible(Int(error.code.rawValue)), "error": "\(sanitizedForLog(error.message.utf8))",
                "outcome": "\(WorkerMetrics.Result(error).label)",
            ])
            return
        }
        // Every "File not found" at -v 0 (a dozen per PXELINUX's config search): written as its
        // bytes, with no String made, in one access to the worker's line (each append to a
        // class's property on its own would pay an exclusivity check).
        Self.describe(error, to: peer, what: what, into: &line)
        lines.log(line, level: .warning)
    }

    /// A refusal's line: `10.0.0.7:2070: RRQ "pxelinux.cfg/default" octet: refused: error 1 "File not found"`.
    static func describe(_ error: TFTPError, to peer: SocketAddress, what: (inout LogLine) -> Void, into line: inout LogLine) {
        line.start()
        line.append(peer)
        line.append(": ")
        what(&line)
        line.append(": refused: error ")
        line.append(Int(error.code.rawValue))
        line.append(" \"")
        line.append(sanitized: error.message)
        line.append("\"")
    }

    /// The largest blksize that crosses this address's interface unfragmented (reference quirk 4):
    /// MTU minus IP, UDP and TFTP headers, unless `-B` says otherwise.
    func maxBlockSize(for local: SocketAddress) -> Int {
        if let configured = configuration.optionLimits.maxBlockSize { return configured }
        let now = stampede_monotonic_ns()
        if let cached = mtuCache[local], cached.expires > now { return cached.blockSize }
        var storage = local.storage
        let mtu = stampede_interface_mtu(&storage)
        let headers = local.isIPv6 ? 40 + 8 + 4 : 20 + 8 + 4
        // No IP datagram is longer than 65,535 bytes, whatever loopback's MTU says (65,536);
        // `-B mtu-SLACK` takes SLACK more off, never below RFC 1350's 512, as in.tftpd 7.3.
        let room = min(Int(mtu), 65_535) - headers - configuration.blockSizeSlack
        let blockSize = mtu > 0 ? max(512, min(room, TFTPOption.blksize.range.upperBound)) : 1468
        if mtuCache.count > 1024 { mtuCache.removeAll() }
        mtuCache[local] = (blockSize, now + 60 * nanosecondsPerSecond)
        return blockSize
    }
}
