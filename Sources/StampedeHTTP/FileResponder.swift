import CStampedeSys
import Glibc
import Logging
import StampedeBase
import StampedeFiles
import StampedeHTTPWire
import StampedeIO
import StampedeServing

/// `--http`'s answers: the root's files, through the same file service as TFTP's reads (the
/// remap rules, the access policy, the cache's images), then the part of the file the head asks
/// for (`Choice`). One per loop, on its thread; it logs each answer and counts it.
final class FileResponder: HTTPResponder {
    let files: FileService
    let logFormat: LogFormat
    let metrics: WorkerMetrics
    var durations: DurationRecorder
    let logger: Logger
    /// Each answer's line, straight to a handler that writes lines.
    let lines: LineLogger
    /// Where the disk thread says a file this loop's answers wait for is read; it wakes the loop.
    let loads: LoadMailbox?
    /// Each answer's log line is written in this memory.
    var line = LogLine()

    init(files: FileService, logFormat: LogFormat, metrics: WorkerMetrics, fileLabels: FileLabels,
         logger: Logger) throws(Errno) {
        loads = try LoadMailbox.waking()
        self.files = files
        self.logFormat = logFormat
        self.metrics = metrics
        durations = DurationRecorder(metrics: metrics, fileLabels: fileLabels)
        self.logger = logger
        lines = LineLogger(logger)
    }

    func answer(_ head: RequestHead, on connection: Connection, started: Nanoseconds) -> Bool {
        answer(head, on: connection, started: started, after: nil)
    }

    /// `outcome`: what the disk thread's last read for this head came to, if it waited for one.
    private func answer(_ head: RequestHead, on connection: Connection, started: Nanoseconds, after outcome: LoadOutcome?) -> Bool {
        let kind: WorkerMetrics.Kind
        switch head.method {
        case .get: kind = .get
        case .head: kind = .head
        case .other(let name):
            // A machine's report (its boot done) is a POST with no body to a name the generated
            // files know; any other is not allowed.
            if name == "POST", let report = files.generated?.report(to: Array(head.path.drop { $0 == UInt8(ascii: "/") }), from: connection.peer) {
                switch report {
                case .success(let said):
                    plain(connection, .ok, to: head, kind: .post, method: name, file: head.path, detail: said, started: started)
                case .failure(let refusal):
                    plain(connection, Status(refusal), to: head, kind: .post, method: name, file: head.path, detail: refusal.message, started: started)
                }
                return true
            }
            plain(connection, .methodNotAllowed, also: ("Allow", "GET, HEAD"), to: head, kind: .invalid, method: name, file: head.target,
                  detail: "method \(name) not allowed", started: started)
            return true
        }
        // The ticket is the connection's epoll tag: its outcome finds the connection by its slot,
        // and not one accepted into the slot since.
        let ticket = HTTPTag.connection(slot: connection.slot, generation: connection.generation).rawValue
        // The name through the rules, kept in the connection's memory for names (the last
        // answer's name let it go) while the answer waits for the disk.
        if outcome == nil || outcome?.isRemapped == true {
            switch name(head, on: connection, kind: kind, started: started, ticket: ticket, after: outcome) {
            case .named: break
            case .waiting: return false
            case .answered: return true
            }
        }
        let name = connection.name
        // GET and HEAD alike take the file's version from the service: the answer is about the
        // bytes a GET sends (a HEAD's read fills the cache for the GET that follows, as EDK2 sends).
        let lease: FileLease
        let asked = outcome?.isRemapped == true ? nil : outcome
        switch files.read(name, netascii: false, client: connection.peer, waiter: LoadWaiter(mailbox: loads!, ticket: ticket), after: asked) {
        case .ready(let ready):
            lease = ready
        case .loading:
            return false
        case .refused(let refusal):
            plain(connection, Status(refusal), to: head, kind: kind, method: head.method.name, file: name, detail: refusal.message,
                  started: started)
            return true
        }
        return answer(head, from: lease, name: name, kind: kind, on: connection, started: started)
    }

    private enum Naming {
        /// The name is in `connection.name`.
        case named
        /// Rules that probe the file system run on a disk thread: the answer waits.
        case waiting
        /// Refused: the refusal is the answer.
        case answered
    }

    /// The path without its leading "/" (the name, as a TFTP client would send it) through the
    /// remap rules into `connection.name`.
    private func name(_ head: RequestHead, on connection: Connection, kind: WorkerMetrics.Kind, started: Nanoseconds,
                      ticket: UInt64, after outcome: LoadOutcome?) -> Naming {
        connection.name.removeAll(keepingCapacity: true)
        connection.name.append(contentsOf: head.name)
        switch files.remap(connection.name, isWrite: false, client: connection.peer, logger: logger,
                           waiter: LoadWaiter(mailbox: loads!, ticket: ticket), after: outcome) {
        case .named(let mapped):
            if mapped != connection.name {
                logger.info("\(connection.peer): \(head.method.name) \"\(sanitizedForLog(connection.name))\" remapped to \"\(sanitizedForLog(mapped))\"")
                connection.name.removeAll(keepingCapacity: true)
                connection.name.append(contentsOf: mapped)
            }
            return .named
        case .loading:
            return .waiting
        case .refused(let refusal):
            plain(connection, Status(refusal), to: head, kind: kind, method: head.method.name, file: connection.name,
                  detail: refusal.message, started: started)
            return .answered
        }
    }

    /// The answer from the version `lease` holds: the part the head asks for (`Choice`), its head
    /// written into the connection's memory for heads; the lease is the answer's while it sends.
    private func answer(_ head: RequestHead, from lease: consuming FileLease, name: [UInt8], kind: WorkerMetrics.Kind,
                        on connection: Connection, started: Nanoseconds) -> Bool {
        let facts = FileFacts(lease.version)
        let status: Status
        var range = 0..<facts.size
        var result = WorkerMetrics.Result.served
        switch Choice(head, facts) {
        case .whole:
            status = .ok
        case .part(let part):
            status = .partialContent
            range = part
        case .notModified:
            status = .notModified
            range = 0..<0
            result = .notModified
        case .unsatisfiable:
            plain(connection, .rangeNotSatisfiable, also: ("Content-Range", "bytes */\(facts.size)"), to: head, kind: kind,
                  method: head.method.name, file: name, detail: "range \(head.range ?? "") outside \(facts.size) bytes", started: started)
            return true
        }
        var response = ResponseHead(status, memory: &connection.headMemory)
        common(&response, connection, keepAliveToken: !head.isHTTP11)
        if status == .partialContent { response.add("Content-Range", text: "bytes \(range.lowerBound)-\(range.upperBound - 1)/\(facts.size)") }
        if status != .notModified {
            response.add("Content-Type", ResponseHead.contentType(of: name))
            response.add("Content-Length", decimal: range.count)
            response.add("Accept-Ranges", "bytes")
        }
        response.add("Last-Modified", date: facts.modified)
        response.add("ETag", facts.etag)
        let sends = kind == .get && !range.isEmpty  // not a HEAD, a 304, an empty file or range
        connection.response = Response(
            head: response.end(), body: sends ? .file : .none, range: sends ? range : 0..<0,
            record: .init(kind: kind, method: head.method.name, file: name, status: status, result: result, started: started))
        // The lease is the answer's while it sends; otherwise it goes back now.
        if sends { connection.lend(lease) }
        return true
    }

    func resume(_ head: RequestHead, started: Nanoseconds, reads: Int, on connection: Connection, after outcome: LoadOutcome) -> Bool {
        switch outcome {
        case .refused(let refusal):
            plain(connection, Status(refusal), to: head, kind: head.method == .head ? .head : .get, method: head.method.name,
                  file: Array(head.name), detail: refusal.message, started: started)
            return true
        case _ where reads + 1 > Self.readsPerRequest:
            let busy = FileRefusal(.busy, "File keeps changing, try again later")
            plain(connection, Status(busy), to: head, kind: head.method == .head ? .head : .get, method: head.method.name,
                  file: Array(head.name), detail: busy.message, started: started)
            return true
        case .loaded, .stream, .opened, .created, .remapped, .looked, .readAhead:
            return answer(head, on: connection, started: started, after: outcome)
        }
    }

    func readAhead(_ file: StreamedFile, from offset: Int, for connection: Connection) -> Bool {
        guard let loads else { return false }
        let ticket = HTTPTag.connection(slot: connection.slot, generation: connection.generation).rawValue
        return files.readAhead(file, from: offset, waiter: LoadWaiter(mailbox: loads, ticket: ticket))
    }

    /// Reads of its file an answer waits for at most.
    static let readsPerRequest = 4

    func refuse(_ status: Status, _ reason: String, withBody: Bool, on connection: Connection, started: Nanoseconds) {
        plain(connection, status, to: nil, withBody: withBody, kind: .invalid, method: "-", file: Array("-".utf8), detail: reason,
              started: started)
    }

    /// Date, Server and the connection's fate, on every answer. `keepAliveToken`: the request
    /// was HTTP/1.0, whose connection persists only when the answer says so (RFC 9112 §9.3: a
    /// 1.0 client that asked for keep-alive and hears nothing waits for the close).
    func common(_ response: inout ResponseHead, _ connection: Connection, keepAliveToken: Bool) {
        response.add("Date", date: Int64(time(nil)))
        response.add("Server", "stampede")
        if connection.state.lastAnswer {
            response.add("Connection", "close")
        } else if keepAliveToken {
            response.add("Connection", "keep-alive")
        }
    }

    /// An answer without a file to `request` (nil: one that could not be parsed): a refusal's
    /// status (and `also`, a header that goes with it), with a short text saying it, unless the
    /// request was a HEAD.
    func plain(_ connection: Connection, _ status: Status, also extra: (name: StaticString, value: String)? = nil, to request: RequestHead?,
               withBody: Bool? = nil, kind: WorkerMetrics.Kind, method: String, file: [UInt8], detail: String, started: Nanoseconds) {
        var head = ResponseHead(status, memory: &connection.headMemory)
        if let extra { head.add(extra.name, text: extra.value) }
        common(&head, connection, keepAliveToken: request.map { !$0.isHTTP11 } ?? false)
        connection.response = Response(
            head: head.endWithStatusText(withBody: withBody ?? (request?.method != .head)), body: .none, range: 0..<0,
            record: .init(kind: kind, method: method, file: file, status: status, result: Self.result(for: status), started: started,
                          detail: detail))
    }

    static func result(for status: Status) -> WorkerMetrics.Result {
        switch status {
        case .ok, .partialContent: .served
        case .notModified: .notModified
        case .notFound: .notFound
        case .forbidden: .accessDenied
        case .serviceUnavailable: .busy
        case .requestTimeout: .timedOut
        case .internalServerError: .serverError
        default: .protocolError
        }
    }

    /// The answer's line (7.3's kind, or JSON) and its figures.
    func ended(_ response: Response, on connection: Connection, abandoned: (why: String, result: WorkerMetrics.Result)?) {
        var record = response.record
        if let abandoned {
            record.result = abandoned.result
            record.detail = abandoned.why
        }
        metrics.countRequest(record.kind, record.result)
        // The clock now, not the turn's: an answer may take a whole turn to write.
        let duration = stampede_monotonic_ns() - record.started
        if record.result == .served && record.kind == .get { durations.record(record.file, kind: .get, duration) }
        let seconds = Double(duration) / 1e9
        let failed = record.result != .served && record.result != .notModified
        // The machine the client is (--machines), told what it took.
        let machine = files.generated?.took(record.kind == .get ? response.bodyBytes : 0, client: connection.peer)
        if logFormat == .json {
            var fields: Logger.Metadata = [
                "event": "transfer", "protocol": "\(metrics.served.rawValue)", "client": "\(connection.peerText)", "request": "\(record.kind.label)",
                "file": "\(sanitizedForLog(record.file))", "status": .stringConvertible(record.status.rawValue),
                "bytes": .stringConvertible(response.bodyBytes), "duration_s": .stringConvertible(seconds),
                "outcome": "\(record.result.label)",
            ]
            if let machine { fields["machine"] = "\(machine)" }
            if let detail = record.detail { fields["detail"] = "\(sanitizedForLog(detail.utf8))" }
            logger.log(level: failed ? .warning : .info, "transfer", metadata: fields)
            return
        }
        // Made only if the level is logged (at -v 0 a served answer's line is not), in the
        // memory of the last one.
        let level: Logger.Level = failed ? .warning : .info
        guard lines.logs(level) else { return }
        // One access to the line for all of it: each append to a class's property on its own
        // would pay an exclusivity check.
        Self.describe(record, response, client: connection.peerText, machine: machine, served: metrics.served, seconds: seconds, into: &line)
        lines.log(line, level: level)
    }

    /// An answer's line: `GET 10.0.0.7:4711 "pxelinux.cfg/default" http 200 bytes=512 time=0.000s: served`
    /// (`GET 10.0.0.7:4711 [52:54:00:12:34:56] ...` when the client is a machine of the records).
    static func describe(_ record: Response.Record, _ response: Response, client: String, machine: String? = nil, served: ServedProtocol,
                         seconds: Double, into line: inout LogLine) {
        line.start()
        line.append(record.method)
        line.append(" ")
        line.append(client)
        if let machine {
            line.append(" [")
            line.append(machine)
            line.append("]")
        }
        line.append(" \"")
        line.append(sanitized: record.file)
        line.append("\" ")
        line.append(served.rawValue)
        line.append(" ")
        line.append(record.status.rawValue)
        line.append(" bytes=")
        line.append(response.bodyBytes)
        line.append(" time=")
        line.append(seconds, places: 3)
        line.append("s: ")
        if let detail = record.detail { line.append(sanitized: detail) } else { line.append(record.result.label) }
    }
}

extension Status {
    /// A file refusal as HTTP says it.
    init(_ refusal: FileRefusal) {
        switch refusal.reason {
        case .notFound: self = .notFound
        case .denied: self = .forbidden
        case .busy: self = .serviceUnavailable
        case .diskFull, .exists, .failed: self = .internalServerError
        }
    }
}
