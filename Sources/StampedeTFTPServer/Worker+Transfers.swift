import Glibc
import Logging
import StampedeBase
import StampedeFiles
import StampedeIO
import StampedeProtocol

/// Datagrams on transfer sockets → the transfer's state machine → sends and timer changes
/// (docs/ARCHITECTURE.md, "One RRQ, from datagram to DATA"). Nothing here allocates per packet.
extension Worker {
    func handleTransferDatagram(_ datagram: Datagram, slot: Int, now: Nanoseconds) {
        // The disk thread has the upload until its commit is done (`Worker+Disk.swift`): nothing
        // may end it meanwhile; the client's repeats of its last block wait for the ACK.
        guard table[slot].phase != .committing else { return }
        if let error = datagram.error {
            // ECONNREFUSED: the client's port is closed (a Raspberry Pi dropped one of its two
            // RRQs, or the client gave up). Nobody is listening; end quietly.
            finish(slot, .socketError(error), now: now)
            return
        }
        switch TransferPacket(datagram.bytes) {
        case .ack(let block) where table[slot].sender != nil:
            let duplicates = table[slot].sender!.duplicateAcks
            let resends = table[slot].sender!.retransmits
            let action = table[slot].sender!.receiveAck(block, now: now)
            metrics.add(.duplicateAcks, table[slot].sender!.duplicateAcks - duplicates)
            metrics.add(.retransmissions, table[slot].sender!.retransmits - resends)
            perform(slot, action, now: now)
        case .data(let block, let payload) where table[slot].receiver != nil:
            receiveData(slot, block: block, payload: payload, cut: datagram.truncated, now: now)
        case .error(let code, let message):
            let afterOptionAck = (table[slot].sender.map { $0.sentThrough == 0 } ?? false) && !table[slot].optionAck.isEmpty
            if afterOptionAck && code == ErrorCode.optionNegotiation.rawValue && table[slot].askedSize {
                // The UEFI size probe: RRQ with tsize, read the OACK, answer ERROR 8, ask again.
                finish(slot, .sizeProbe, now: now)
            } else if code == ErrorCode.unknownTransferID.rawValue {
                // The client runs another transfer for this request (it sent the request twice,
                // from two ports) and refuses this one's packets.
                finish(slot, .refusedAsDuplicate, now: now)
            } else if code == 0 && message.prefix(while: { $0 != 0 }).elementsEqual("closed".utf8) {
                finish(slot, .closedByClient, now: now)
            } else {
                let text = sanitizedForLog(message.prefix(while: { $0 != 0 }), limit: 128)
                finish(slot, .clientError(code: code, message: text), now: now)
            }
        default:
            // A connected socket only hears the client, and the client sent something that makes
            // no sense here (DATA to a reader, a request to a transfer port): tell it.
            sendError(slot, TFTPError(.illegalOperation, "Illegal TFTP operation"))
            finish(slot, .serverError(TFTPError(.illegalOperation, "unexpected packet from client")), now: now)
        }
    }

    /// `cut`: the DATA was longer than the socket's buffers (then it is larger than the blksize).
    func receiveData(_ slot: Int, block: UInt16, payload: UnsafeRawBufferPointer, cut: Bool, now: Nanoseconds) {
        // Its last block again while the commit runs: the ACK comes when the file is there.
        guard table[slot].phase != .committing else { return }
        guard payload.count <= table[slot].receiver!.blockSize && !cut else {
            sendError(slot, TFTPError(.illegalOperation, "Block larger than the negotiated blksize"))
            finish(slot, .serverError(TFTPError(.illegalOperation, "oversized DATA")), now: now)
            return
        }
        // Past what a client held back by its ACK may send: dropped, as if lost (`Upload.hasRoom`).
        if let upload = table[slot].upload, !upload.hasRoom(for: payload.count) { return }
        let resends = table[slot].receiver!.retransmits
        let receipt = table[slot].receiver!.receiveData(block, length: payload.count, now: now)
        metrics.add(.retransmissions, table[slot].receiver!.retransmits - resends)
        if receipt.timedOut {
            // A client that keeps sending blocks out of order: as if it had gone silent.
            finish(slot, .timedOut, now: now)
            return
        }
        if table[slot].phase == .dallying {
            sendReply(slot, receipt.reply) // our final ACK was lost: say it again, keep the dally timer
            return
        }
        if receipt.deliver, let upload = table[slot].upload {
            guard upload.take(payload.count) else {
                // The temporary file goes with the transfer: nothing of it stays (7.x deletes it).
                let refusal = TFTPError(.accessViolation, "Upload larger than \(upload.limit!.reason)")
                sendError(slot, refusal)
                finish(slot, .serverError(refusal), now: now)
                return
            }
            // Gathered here, written on the disk thread (`Worker+Disk.swift`); with a write
            // running and a window gathered besides, the ACK waits for that write.
            if upload.append(payload, scratch: scratch) && !receipt.finished && !writeGathered(slot, upload) {
                table[slot].ackHeld = true
            }
            if receipt.finished { upload.append(nil, scratch: scratch) }
        }
        if receipt.finished {
            // The last ACK says the file is there: it waits for the commit, off the loop.
            commit(slot, now: now)
            return
        }
        if !table[slot].ackHeld { sendReply(slot, receipt.reply) }
        scheduleTimer(slot)
    }

    /// The upload is committed: its last ACK goes out, and the transfer stays a while to send it
    /// again if it is lost (the client would otherwise resend its last block into a closed port
    /// and report a failure).
    func committed(_ slot: Int, now: Nanoseconds) {
        let receiver = table[slot].receiver!
        sendReply(slot, .ack(receiver.numbering.wire(receiver.received)))
        log(slot, .completed, now: now)
        table[slot].phase = .dallying
        let rto = table[slot].receiver!.timer.current
        wheel.schedule(slot, at: now + rto * 2)
    }

    func timerFired(_ slot: Int, now: Nanoseconds) {
        switch table[slot].phase {
        case .sending:
            let resends = table[slot].sender!.retransmits
            let action = table[slot].sender!.timeout(now: now)
            metrics.add(.retransmissions, table[slot].sender!.retransmits - resends)
            perform(slot, action, now: now)
        case .receiving:
            let resends = table[slot].receiver!.retransmits
            guard let reply = table[slot].receiver!.timeout(now: now) else {
                finish(slot, .timedOut, now: now)
                return
            }
            // A held ACK stays held: the client's patience, and ours, run as if it were lost.
            if !table[slot].ackHeld {
                metrics.add(.retransmissions, table[slot].receiver!.retransmits - resends)
                sendReply(slot, reply)
            }
            scheduleTimer(slot)
        case .dallying:
            finish(slot, .completed, now: now)
        case .committing, .free:
            break
        }
    }

    func perform(_ slot: Int, _ action: DataSender.Action, now: Nanoseconds) {
        switch action {
        case .none:
            return
        case .sendOptionAck:
            sendOptionAck(slot)
        case .sendBlocks(let first, let count):
            if count > 1, case .image(let image) = table[slot].source {
                sendWindow(slot, image: image, first: first, count: count)
                break
            }
            blocks: for block in first..<(first + count) {
                switch sendBlock(slot, block) {
                case .sent:
                    continue
                case .onDisk:
                    readAhead(slot, from: block)
                    break blocks
                case .failed(let refusal):
                    sendError(slot, refusal)
                    finish(slot, .serverError(refusal), now: now)
                    return
                }
            }
        case .finished:
            finish(slot, .completed, now: now)
            return
        case .timedOut:
            // A client that vanished (or the Pi's abandoned duplicate RRQ): end without a word.
            finish(slot, .timedOut, now: now)
            return
        }
        scheduleTimer(slot)
    }

    func scheduleTimer(_ slot: Int) {
        let deadline = table[slot].sender?.deadline ?? table[slot].receiver?.deadline
        if let deadline { wheel.schedule(slot, at: deadline) } else { wheel.cancel(slot) }
    }

    /// How often a streamed file is asked whether it changed, besides before its last block.
    static var streamCheckInterval: Int { 1 << 20 }

    /// How a block's send went.
    enum BlockSend {
        case sent
        /// A streamed file's block whose bytes are not in the page cache: not sent (a read of
        /// them would wait for the disk on the loop).
        case onDisk
        /// A streamed file's block that cannot be read, or the file is no longer the version the
        /// transfer started with.
        case failed(TFTPError)
    }

    /// DATA = 4-byte header + a slice of the shared image, gathered by the backend; a streamed
    /// file's block is read from the page cache.
    func sendBlock(_ slot: Int, _ block: Int) -> BlockSend {
        let sender = table[slot].sender!
        let range = sender.range(ofBlock: block)
        let headerLength = PacketWriter.dataHeader(block: sender.wire(block), into: scratch)
        switch table[slot].source {
        case .image(let image):
            transmit(slot, header: UnsafeRawBufferPointer(rebasing: scratch[..<headerLength]), payload: image.slice(range))
        case .stream(let file):
            // Read after the header; the backend copies it. A file that shrank under us sends a
            // short block: the client sees the end, never garbage. One that cannot be read (EIO)
            // ends the transfer with an ERROR, never with a short block taken for the end.
            // Bytes read ahead are read as they are (a read-ahead that met an error, EIO, finds it
            // here, once); the others from the page cache alone.
            let read: Int
            let into = UnsafeMutableRawBufferPointer(rebasing: scratch[headerLength...])
            do {
                if range.upperBound <= file.readyThrough {
                    read = try file.read(range, into: into)
                } else if let cached = try file.readCached(range, into: into) {
                    read = cached
                } else {
                    return .onDisk
                }
            } catch {
                return .failed(TFTPError(.notDefined, "Cannot read the file: \(error)"))
            }
            // A file rewritten in place would send a mix of two versions: asked every MiB, and
            // after the last block is read and before it goes, so a transfer completes only with
            // bytes of the version it opened (every block the client took was sent before that).
            if range.upperBound == file.size || range.lowerBound % Self.streamCheckInterval < sender.blockSize,
               let change = file.change() {
                return .failed(TFTPError(.notDefined, "File changed while it was sent (\(change))"))
            }
            transmit(slot, header: UnsafeRawBufferPointer(rebasing: scratch[..<(headerLength + read)]),
                     payload: UnsafeRawBufferPointer(start: nil, count: 0))
        case nil:
            preconditionFailure("a download without a source")
        }
        return .sent
    }

    /// A streamed file's `block` is on the disk: it and the rest of its window wait while a disk
    /// thread reads the next bytes ahead (`FileService.readAhead`), and go when the worker hears
    /// so (`readAheadDone`). While one is under way, it is the one that sends them; when the page
    /// cache turns out to hold them after all, the timer or the client's next ACK does.
    func readAhead(_ slot: Int, from block: Int) {
        guard case .stream(let file) = table[slot].source else { return }
        table[slot].unsentBlock = min(block, table[slot].unsentBlock ?? block)
        let ticket = loads.nextTicket()
        let offset = table[slot].sender!.range(ofBlock: block).lowerBound
        if files.readAhead(file, from: offset, waiter: LoadWaiter(mailbox: loads, ticket: ticket)) {
            readingAhead[ticket] = table.tag(of: slot)
        }
    }

    /// A disk thread read a streamed file's next bytes ahead: the blocks that waited for them go.
    func readAheadDone(_ tag: Tag, _ outcome: LoadOutcome, now: Nanoseconds) {
        guard case .readAhead(let through) = outcome, let slot = table.slot(for: tag), table[slot].phase == .sending,
              case .stream(let file) = table[slot].source else { return }
        file.readAhead(done: through)
        guard let unsent = table[slot].unsentBlock else { return }
        table[slot].unsentBlock = nil
        perform(slot, table[slot].sender!.sendLate(from: unsent, now: now), now: now)
    }

    /// Blocks first ..< first + count of a cached image: their headers side by side and one slice
    /// of the image, which the backend sends as segmented sends (UDP GSO) or one by one.
    func sendWindow(_ slot: Int, image: FileImage, first: Int, count: Int) {
        let sender = table[slot].sender!
        let perCall = scratch.count / 4
        var start = first
        while start < first + count {
            let end = min(first + count, start + perCall)
            for block in start..<end {
                _ = PacketWriter.dataHeader(block: sender.wire(block),
                                            into: UnsafeMutableRawBufferPointer(rebasing: scratch[(4 * (block - start))...]))
            }
            let bytes = sender.range(ofBlock: start).lowerBound..<sender.range(ofBlock: end - 1).upperBound
            let socket = table[slot].socket!
            backend.sendWindow(socket.handle, to: socket.isShared ? table[slot].peer : nil, from: socket.replyFrom,
                               headers: UnsafeRawBufferPointer(rebasing: scratch[..<(4 * (end - start))]),
                               payload: image.slice(bytes), blockSize: sender.blockSize)
            metrics.add(.bytesSent, 4 * (end - start) + bytes.count)
            start = end
        }
    }

    func sendOptionAck(_ slot: Int) {
        table[slot].optionAck.withUnsafeBytes { bytes in
            transmit(slot, header: bytes, payload: UnsafeRawBufferPointer(start: nil, count: 0))
        }
    }

    func sendReply(_ slot: Int, _ reply: DataReceiver.Reply) {
        switch reply {
        case .none:
            break
        case .optionAck:
            sendOptionAck(slot)
        case .ack(let block):
            let count = PacketWriter.ack(block: block, into: scratch)
            transmit(slot, header: UnsafeRawBufferPointer(rebasing: scratch[..<count]),
                         payload: UnsafeRawBufferPointer(start: nil, count: 0))
        }
    }

    /// On the transfer's own connected socket, or from a shared one (or the listener) to the client.
    func transmit(_ slot: Int, header: UnsafeRawBufferPointer, payload: UnsafeRawBufferPointer) {
        metrics.add(.bytesSent, header.count + payload.count)
        let socket = table[slot].socket!
        if let local = socket.replyFrom {
            backend.send(socket.handle, to: table[slot].peer, from: local, header: header, payload: payload)
        } else {
            backend.send(socket.handle, header: header, payload: payload)
        }
    }

    func sendError(_ slot: Int, _ error: TFTPError) {
        let count = PacketWriter.error(error.code.rawValue, message: error.message, into: scratch)
        transmit(slot, header: UnsafeRawBufferPointer(rebasing: scratch[..<count]),
                     payload: UnsafeRawBufferPointer(start: nil, count: 0))
    }
}
