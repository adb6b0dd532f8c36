import StampedeBase
import StampedeFiles

/// The one body writer, for plain and TLS connections alike (`Transport` says what differs): an
/// answer's head, then its body from where it lives, until the answer is done, the socket is
/// full, or the turn's budget is spent.
extension HTTPLoop {
    enum Written {
        /// The whole answer is out.
        case done
        /// The socket is full: the next readiness goes on.
        case blocked
        /// The turn's budget is spent: the next turn goes on.
        case yielded
        /// An error or a change of the file ended it, and the connection.
        case abandoned
    }

    /// What the next write of an answer is, and how it went.
    enum Step {
        case sent(Transport.Sent, viaSendfile: Bool)
        /// The streamed file changed (or shrank) under the answer: why.
        case fileChanged(String)
        /// The streamed file's next bytes are being read ahead on a disk thread: the loop hears
        /// when (`resumeWaiting`), and writes on.
        case readingAhead
    }

    /// Writes the answer: each write's bytes are a function of the answer's progress alone, so a
    /// write the socket could not take is made again with the same bytes (as TLS requires).
    func write(_ slot: Int, _ connection: Connection, now: Nanoseconds) -> Written {
        let transport = connection.transport
        while let (headLeft, step) = writeOnce(connection, transport) {
            switch step {
            case .fileChanged(let why):
                abandon(slot, "the file changed while it was sent (\(why)): closed before the last byte", .serverError)
                return .abandoned
            case .sent(.bytes(0), _) where headLeft == 0:
                // sendfile found the file shorter than the answer said it is.
                abandon(slot, "the file shrank while it was sent: closed before the last byte", .serverError)
                return .abandoned
            case .sent(.bytes(let sent), let viaSendfile):
                if took(sent, headLeft: headLeft, viaSendfile: viaSendfile, connection, transport, now: now) == .yieldTurn {
                    return .yielded
                }
            case .sent(.filled(let sent), let viaSendfile):
                _ = took(sent, headLeft: headLeft, viaSendfile: viaSendfile, connection, transport, now: now)
                return .blocked
            case .sent(.wouldBlock, _), .readingAhead:
                return .blocked
            case .sent(.interrupted, _):
                runnable.append(slot)  // edge-triggered: no edge would come
                return .blocked
            case .sent(.closed(let why), _):
                abandon(slot, why, .closedByClient)
                return .abandoned
            case .sent(.failed(let why), _):
                abandon(slot, why, .serverError)
                return .abandoned
            }
        }
        return .done
    }

    /// The answer's progress by `sent` bytes (the head's first, then the body's), in place, and
    /// counted: whether the turn's budget is spent with the answer not done.
    private func took(_ sent: Int, headLeft: Int, viaSendfile: Bool, _ connection: Connection, _ transport: Transport,
                      now: Nanoseconds) -> ConnectionState.Action? {
        let fromHead = min(sent, headLeft)
        let bodySent = sent - fromHead
        let (fromFile, isDone): (Bool, Bool) = {
            guard var response = connection.takeResponse() else { return (false, true) }
            defer { connection.response = response }
            response.headSent += fromHead
            response.offset += bodySent
            if case .file = response.body { return (true, response.isDone) }
            return (false, response.isDone)
        }()
        if fromFile { metrics.add(.httpFileBytesSent, bodySent) }
        if let path = transport.bodyPath(viaSendfile: viaSendfile) { metrics.add(path, bodySent) }
        metrics.add(.httpBytesSent, sent)
        let action = connection.state.handle(.wrote(sent), now: now)
        return isDone ? nil : action
    }

    /// The next write of the connection's answer, on the answer in place: the bytes of its head
    /// left before the write, and the write's step; nil: no answer, or all of it written.
    private func writeOnce(_ connection: Connection, _ transport: Transport) -> (headLeft: Int, step: Step)? {
        let source = connection.source
        guard let response = connection.takeResponse() else { return nil }
        defer { connection.response = response }
        if response.isDone { return nil }
        return (response.head.count - response.headSent, next(response, connection, source, transport))
    }

    /// The next write of `response`: the rest of its head (with the start of a body held in
    /// memory, where the transport joins them), then its body: from a file read as it goes, by
    /// sendfile from an image's memfd, or from memory (a small image's, or the answer's own bytes).
    func next(_ response: Response, _ connection: Connection, _ source: TransferSource?, _ transport: Transport) -> Step {
        let budget = http.connectionLimits.writeBudget
        let bodyLeft = response.end - response.offset
        let headLeft = response.head.count - response.headSent
        if headLeft > 0 {
            let joined = transport.joined(headLeft: headLeft, bodyLeft: bodyLeft, budget: budget)
            return .sent(response.head.withUnsafeBytes { head in
                let rest = UnsafeRawBufferPointer(rebasing: head[response.headSent...])
                let together = joined == 0 ? nil : withMemoryBody(response, source, transport, count: joined) { body in
                    transport.write(head: rest, body: body, scratch: scratch)
                }
                return together ?? transport.write(head: rest, more: bodyLeft > 0)
            }, viaSendfile: false)
        }
        if case .file = response.body, case .stream(let file)? = source {
            return streamed(file, response, connection, transport, count: min(bodyLeft, transport.memoryChunk(budget: budget)))
        }
        if case .file = response.body, transport.sendsFiles, case .image(let image)? = source, let fd = image.descriptor {
            // From the image's memfd: no copy into the socket (or into OpenSSL).
            return .sent(transport.sendfile(from: fd, offset: response.offset, count: min(bodyLeft, budget)), viaSendfile: true)
        }
        let count = min(bodyLeft, transport.memoryChunk(budget: budget))
        return .sent(withMemoryBody(response, source, transport, count: count) { transport.write($0) } ?? .failed("no body to send"),
                     viaSendfile: false)
    }

    /// A body read from its file as it goes, so that a rewrite in place would make a body of two
    /// versions: the file is asked before each sendfile and after each read, and the last byte
    /// goes only once it is read and the file found unchanged. A change ends the connection short
    /// of its Content-Length, which the client sees as a failed download. By sendfile where the transport sends files
    /// (all but the last byte), else read into the scratch buffer, `count` bytes at a time. Only
    /// bytes a disk thread has read ahead are sent (a read of a cold disk on the loop would hold
    /// every connection of it): the next read-ahead is asked while half of the last one is still
    /// to send, and an answer that catches up with it waits for it.
    func streamed(_ file: StreamedFile, _ response: Response, _ connection: Connection, _ transport: Transport, count: Int) -> Step {
        if file.readyThrough < response.end && file.readyThrough - response.offset < FileService.readAheadBytes / 2 {
            // Bytes the page cache holds are ready at once; others are read on a disk thread.
            _ = responder.readAhead(file, from: max(file.readyThrough, response.offset), for: connection)
        }
        let ready = file.readyThrough
        // No read-ahead could be asked (no descriptor left for it): the bytes are sent as read.
        if ready <= response.offset && file.readingAhead { return .readingAhead }
        let warm = ready > response.offset ? min(response.end, ready) - response.offset : response.end - response.offset
        let last = response.offset == response.end - 1
        if transport.sendsFiles && !last {
            if let change = file.change() { return .fileChanged(change) }
            let upTo = min(response.end - 1 - response.offset, http.connectionLimits.writeBudget, warm)
            return .sent(transport.sendfile(from: file.descriptor, offset: response.offset, count: upTo), viaSendfile: true)
        }
        let length = last ? 1 : min(count, warm)
        let chunk = UnsafeMutableRawBufferPointer(rebasing: scratch[..<length])
        let read = try? file.read(response.offset..<(response.offset + length), into: chunk)
        if let change = file.change() { return .fileChanged(change) }
        guard read == length else { return .fileChanged("shrank") }
        return .sent(transport.write(UnsafeRawBufferPointer(chunk)), viaSendfile: false)
    }

    /// Calls `write` with the next `count` bytes of a body held in memory: a file image's
    /// (mapped, memfd or not, where the transport does not send it by sendfile) or the answer's
    /// own bytes. Nil for a body that is not in memory.
    func withMemoryBody(_ response: Response, _ source: TransferSource?, _ transport: Transport, count: Int,
                        _ write: (UnsafeRawBufferPointer) -> Transport.Sent) -> Transport.Sent? {
        let range = response.offset..<(response.offset + count)
        switch (response.body, source) {
        case (.file, .image(let image)?) where image.descriptor == nil || !transport.sendsFiles:
            return write(image.slice(range))
        case (.bytes(let bytes), _):
            return bytes.withUnsafeBytes { write(UnsafeRawBufferPointer(rebasing: $0[range])) }
        default:
            return nil
        }
    }
}
