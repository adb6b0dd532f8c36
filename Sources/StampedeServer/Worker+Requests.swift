import CStampedeSys
import Glibc
import Logging
import StampedeIO
import StampedeProtocol

/// RRQ/WRQ on a listener → parse → policy → file cache → negotiation → a transfer slot with its
/// own socket (docs/ARCHITECTURE.md, "One RRQ, from datagram to DATA"). Every refusal is an ERROR from the listener, sourced
/// from the address the request was sent to, and a log line.
extension Worker {
    func handleRequest(_ datagram: Datagram, listener index: Int, now: Nanoseconds) {
        guard index < listeners.count, datagram.error == nil, datagram.peer.port != 0 else { return }
        let listener = listeners[index].socket
        let request: Request
        do {
            request = try Request.parse(datagram.bytes)
        } catch .notARequest {
            // DATA, ACK and ERROR have no business on the listener: stay silent rather than
            // answer (and amplify) stray or spoofed traffic. Unknown opcodes get ERROR 4.
            guard datagram.bytes.count >= 2 else {
                logger.info("\(datagram.peer): ignored a \(datagram.bytes.count)-byte packet on the listener")
                return
            }
            let opcode = UInt16(datagram.bytes[0]) << 8 | UInt16(datagram.bytes[1])
            logger.info("\(datagram.peer): ignored a packet with opcode \(opcode) on the listener")
            if !(3...6).contains(opcode) {
                refuse(datagram, listener, TFTPError(.illegalOperation, "Illegal TFTP operation"), what: "unknown opcode \(opcode)")
            }
            return
        } catch {
            refuse(datagram, listener, TFTPError(.illegalOperation, "Illegal TFTP operation"), what: "malformed request (\(error))")
            return
        }
        let kind: WorkerMetrics.Kind = request.isWrite ? .write : .read
        let name = sanitizedForLog(request.filename)
        var what = "\(request.isWrite ? "WRQ" : "RRQ") \"\(name)\" \(sanitizedForLog(request.mode.utf8, limit: 16))"
        guard let mode = TransferMode(rawValue: request.mode) else {
            refuse(datagram, listener, TFTPError(.illegalOperation, "Unsupported mode"), what: what, kind: kind)
            return
        }
        // No path is longer (PATH_MAX); a longer name costs nothing more, before any rule runs on it.
        guard request.filename.count <= Request.longestFilename else {
            refuse(datagram, listener, Errno(ENAMETOOLONG).tftpError,
                   what: what + " (a name of \(request.filename.count) bytes, more than \(Request.longestFilename))", kind: kind)
            return
        }
        // Limits first: a flood over them costs no file lookups. The place is given back on every
        // way out below that does not start the transfer.
        if let refusal = admission.admit(datagram.peer) {
            refuse(datagram, listener, refusal, what: what, kind: kind)
            return
        }
        var started = false
        defer { if !started { admission.release(datagram.peer) } }
        var filename = request.filename
        if let rules = configuration.remapRules?.current {
            switch remap(filename, with: rules, isWrite: request.isWrite, client: datagram.peer) {
            case .success(let mapped): filename = mapped
            case .failure(let refusal):
                refuse(datagram, listener, refusal, what: what, kind: kind)
                return
            }
        }
        let logName = filename == request.filename ? name : sanitizedForLog(filename)
        if filename != request.filename {
            // Said at -v, as tftpd-hpa does; the transfer's end line has the rest.
            what += " remapped to \"\(logName)\""
            logger.info("\(datagram.peer): \(what)")
        }
        var transfer = Transfer()
        transfer.peer = datagram.peer
        transfer.record = TransferRecord(isWrite: request.isWrite, filename: logName, mode: mode, started: now)
        let size: Int?
        do throws(TFTPError) {
            if request.isWrite {
                let upload = try configuration.policy.openForWriting(filename)
                if mode == .netascii { upload.useNetascii() }
                transfer.upload = upload
                size = nil
            } else {
                let source = try openSource(filename, netascii: mode == .netascii)
                transfer.source = source.source
                size = source.size
            }
        } catch {
            refuse(datagram, listener, error, what: what, kind: kind)
            return
        }
        var largestBlock = maxBlockSize(for: datagram.local)
        // Single-port uploads arrive on the listener, in whatever its receive buffers take.
        if configuration.singlePort && request.isWrite { largestBlock = min(largestBlock, backend.largestListenerDatagram - 4) }
        let negotiation = OptionNegotiation(requested: request.options, isWrite: request.isWrite, fileSize: size,
                                            maxBlockSize: largestBlock, limits: configuration.optionLimits)
        transfer.record.options = negotiation.summary
        if let upload = transfer.upload, let announced = negotiation.options.transferSize {
            do {
                try upload.announce(announced)
            } catch {
                release(&transfer)
                refuse(datagram, listener, error.tftpError, what: what, kind: kind)
                return
            }
        }
        if configuration.singlePort, let running = sharedSessions[datagram.peer] {
            // Same address and port: the client started over (a lost first reply, a reboot).
            finish(Int(running), .superseded, now: now)
        }
        let slot = allocateSlot()
        if configuration.singlePort {
            transfer.socket = listener
            transfer.replyFrom = datagram.local
        } else {
            var local = datagram.local
            local.port = 0
            var refusal: Errno?
            if ownTransferSockets < configuration.ownTransferSocketsPerWorker {
                do {
                    // A reader's client sends ACKs and ERRORs; a writer's sends DATA of the negotiated size.
                    let largest = request.isWrite ? negotiation.options.blockSize + 4 : 516
                    transfer.socket = try backend.openTransfer(local: local, peer: datagram.peer, ports: configuration.portRange,
                                                               largestDatagram: largest, tag: tag(of: slot))
                } catch {
                    refusal = error
                }
            }
            // Out of descriptors, or of ports on this address: share.
            let outOfSockets = refusal.map { $0.rawValue == EMFILE || $0.rawValue == ENFILE || $0.rawValue == EADDRINUSE } ?? true
            if transfer.socket == nil, !request.isWrite, outOfSockets {
                if let running = sharedSessions[datagram.peer] {
                    // Same address and port on a shared socket: the client started over.
                    finish(Int(running), .superseded, now: now)
                }
                if let shared = sharedSocket(for: datagram.peer, local: datagram.local) {
                    transfer.socket = shared
                    transfer.replyFrom = datagram.local
                }
            }
            guard transfer.socket != nil else {
                freeSlots.append(Int32(slot))
                release(&transfer)
                // EMFILE, ENFILE, ENOBUFS, a full port range: the host is busy, not the request wrong.
                let reason = refusal.map { "\($0)" } ?? "no transfer socket left"
                refuse(datagram, listener, TFTPError(.notDefined, "Server out of sockets: \(reason)", busy: true), what: what, kind: kind)
                return
            }
        }
        transfer.generation = table[slot].generation
        if !negotiation.acknowledged.isEmpty { transfer.optionAck = PacketWriter.optionAck(negotiation.acknowledged) }
        var timer = RetransmitTimer(
            base: negotiation.options.timeoutSeconds.map { Nanoseconds($0) * nanosecondsPerSecond } ?? configuration.retransmitTimeout,
            maxRetries: configuration.maxRetries)
        // A negotiated timeout counts once the client has answered: until then, -T's.
        timer.firstAnswerBase = configuration.retransmitTimeout
        // A reader that did not ask for a timeout gets one that follows its round trip.
        if !request.isWrite, negotiation.options.timeoutSeconds == nil, let floor = configuration.adaptiveTimeoutFloor {
            timer.adapt(floor: floor)
        }
        let options = negotiation.options
        if request.isWrite {
            transfer.phase = .receiving
            transfer.receiver = DataReceiver(blockSize: options.blockSize, windowSize: options.windowSize,
                                             sendsOptionAck: !transfer.optionAck.isEmpty, timer: timer)
        } else {
            transfer.phase = .sending
            transfer.sender = DataSender(totalBytes: size ?? 0, blockSize: options.blockSize, windowSize: options.windowSize,
                                         sendsOptionAck: !transfer.optionAck.isEmpty, timer: timer)
        }
        table[slot] = transfer
        if transfer.replyFrom != nil { sharedSessions[datagram.peer] = Int32(slot) }
        activeTransfers += 1
        started = true
        logger.debug("\(datagram.peer): \(what) \(negotiation.summary) accepted on \(listeners[index].address)")
        if request.isWrite {
            let reply = table[slot].receiver!.start(now: now)
            sendReply(slot, reply)
            scheduleTimer(slot)
        } else {
            let action = table[slot].sender!.start(now: now)
            perform(slot, action, now: now)
        }
    }

    /// The name the remap rules make of a requested one (`-m`), or the refusal they decide:
    /// ERROR 2 with an `a` rule's message, as tftpd-hpa answers. Verbosity 3 traces every rule.
    func remap(_ filename: [UInt8], with rules: RemapRules, isWrite: Bool,
               client: SocketAddress) -> Result<[UInt8], TFTPError> {
        let logger = self.logger
        let trace: ((String) -> Void)? = logger.logLevel <= .trace ? { logger.trace("\(client): \($0)") } : nil
        switch rules.apply(to: filename, isWrite: isWrite, client: client, trace: trace) {
        case .mapped(let mapped):
            return .success(mapped)
        case .refused(let message):
            return .failure(TFTPError(.accessViolation, message.map { String($0.prefix(200)) } ?? "Access violation"))
        case .failed(let failure):
            logger.error("\(client): remapping \"\(sanitizedForLog(filename))\": \(failure)")
            return .failure(TFTPError(.accessViolation, "Remap table failure"))
        }
    }

    /// Opens and checks the file, then takes its image from the cache, or streams it; the size
    /// the transfer sends (after netascii conversion).
    func openSource(_ filename: [UInt8], netascii: Bool) throws(TFTPError) -> (source: TransferSource, size: Int) {
        let file = try configuration.policy.openForReading(filename)
        let cached: FileCache.Source
        do {
            cached = try cache.acquire(fd: file.descriptor.raw, info: file.info, netascii: netascii)
        } catch {
            if error.rawValue == ENOMEM { throw TFTPError(.notDefined, "File too large to serve now", busy: true) }
            if error.rawValue == EFBIG { throw TFTPError(.notDefined, "File too large for netascii") }
            throw error.tftpError
        }
        switch cached {
        case .image(let image):
            return (.image(image), image.count)
        case .stream(let size):
            return (.stream(StreamedFile(file.descriptor, size: size)), size)
        }
    }

    /// Undoes what a request took before it became a transfer.
    func release(_ transfer: inout Transfer) {
        if case .image(let image) = transfer.source { cache.release(image) }
        transfer.upload?.abort()
        transfer = Transfer()
    }

    /// Answers a request that does not become a transfer with its ERROR, and logs it. A busy
    /// server (`TFTPError.isBusy`) answers nothing by default: a firmware that gets ERROR 0 fails
    /// its boot, one that hears nothing sends its request again a few seconds later.
    func refuse(_ datagram: Datagram, _ listener: SocketHandle, _ error: TFTPError, what: String,
                kind: WorkerMetrics.Kind = .invalid) {
        metrics.countRequest(kind, WorkerMetrics.Result(error))
        if error.isBusy && configuration.whenBusy == .silence {
            unanswered.note(error.message, now: stampede_monotonic_ns())
            summary.unanswered += 1
            logger.debug("\(datagram.peer): \(what): unanswered, busy: \(error.message)")
            return
        }
        let count = PacketWriter.error(error.code.rawValue, message: error.message, into: scratch)
        backend.send(listener, to: datagram.peer, from: datagram.local,
                     packet: UnsafeRawBufferPointer(rebasing: scratch[..<count]))
        metrics.add(.bytesSent, count)
        summary.transfers += 1
        summary.failed += 1
        // A remap rule's message carries the client's name (\0, \1...): sanitised like every name.
        let message = sanitizedForLog(error.message.utf8)
        if configuration.logFormat == .json {
            logger.warning("refused", metadata: [
                "event": "refused", "client": "\(datagram.peer)", "request": "\(kind.label)", "what": "\(what)",
                "error_code": .stringConvertible(Int(error.code.rawValue)), "error": "\(message)",
                "outcome": "\(WorkerMetrics.Result(error).label)",
            ])
            return
        }
        logger.warning("\(datagram.peer): \(what): refused: error \(error.code.rawValue) \"\(message)\"")
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
        let blockSize = mtu > 0 ? max(512, min(Int(mtu) - headers, TFTPOption.blksize.range.upperBound)) : 1468
        if mtuCache.count > 1024 { mtuCache.removeAll() }
        mtuCache[local] = (blockSize, now + 60 * nanosecondsPerSecond)
        return blockSize
    }
}
