import CStampedeSys
import Glibc
import Logging
import StampedeHTTPWire
import StampedeIO
import StampedeProtocol
import StampedeServer

/// `--http`'s answers: the root's files, through the same file service as TFTP's reads (the
/// remap rules, the access policy, the cache's images), then the part of the file the head asks
/// for (`Choice`). One per loop, on its thread; it logs each answer and counts it.
final class FileResponder: HTTPResponder {
    let files: FileService
    let configuration: ServerConfiguration
    let metrics: WorkerMetrics
    var durations: DurationRecorder
    let logger: Logger
    let loads: LoadMailbox? = LoadMailbox()

    init(files: FileService, configuration: ServerConfiguration, metrics: WorkerMetrics, fileLabels: FileLabels, logger: Logger) {
        self.files = files
        self.configuration = configuration
        self.metrics = metrics
        durations = DurationRecorder(metrics: metrics, fileLabels: fileLabels)
        self.logger = logger
    }

    func answer(_ head: RequestHead, on connection: Connection, started: Nanoseconds) -> Bool {
        answer(head, on: connection, started: started, reads: 0, after: nil)
    }

    /// `reads`: how many times the disk thread has read the file for this head already, the last
    /// time with `outcome`.
    private func answer(_ head: RequestHead, on connection: Connection, started: Nanoseconds, reads: Int,
                        after outcome: LoadOutcome?) -> Bool {
        let kind: WorkerMetrics.Kind
        switch head.method {
        case .get: kind = .get
        case .head: kind = .head
        case .other(let name):
            var response = ResponseHead(.methodNotAllowed)
            response.add("Allow", "GET, HEAD")
            plain(connection, response, to: head, kind: .invalid, method: name, file: sanitizedForLog(head.target.utf8),
                  detail: "method \(name) not allowed", started: started)
            return true
        }
        // The path without its leading "/" is the name, as a TFTP client would send it.
        let asked = Array(head.path.dropFirst())
        let name: [UInt8]
        switch files.remap(asked, isWrite: false, client: connection.peer, logger: logger) {
        case .success(let mapped):
            if mapped != asked {
                logger.info("\(connection.peer): \(head.method.name) \"\(sanitizedForLog(asked))\" remapped to \"\(sanitizedForLog(mapped))\"")
            }
            name = mapped
        case .failure(let refusal):
            plain(connection, ResponseHead(Status(refusal)), to: head, kind: kind, method: head.method.name, file: sanitizedForLog(asked),
                  detail: refusal.message, started: started)
            return true
        }
        let file = sanitizedForLog(name)
        // GET and HEAD alike take the file's version from the service: the answer is about the
        // bytes a GET sends (a HEAD's read fills the cache for the GET that follows, as EDK2 sends).
        let lease: FileLease
        let ticket = loads!.nextTicket()
        switch files.read(name, netascii: false, waiter: LoadWaiter(mailbox: loads!, ticket: ticket), after: outcome) {
        case .ready(let ready):
            lease = ready
        case .loading:
            connection.waiting = (ticket, head, started, reads)
            return false
        case .refused(let refusal):
            plain(connection, ResponseHead(Status(refusal)), to: head, kind: kind, method: head.method.name, file: file,
                  detail: refusal.message, started: started)
            return true
        }
        let facts = FileFacts(lease.version)
        var range = 0..<facts.size
        var response: ResponseHead
        var result = WorkerMetrics.Result.served
        switch Choice(head, facts) {
        case .whole:
            response = ResponseHead(.ok)
        case .part(let part):
            response = ResponseHead(.partialContent)
            response.add("Content-Range", "bytes \(part.lowerBound)-\(part.upperBound - 1)/\(facts.size)")
            range = part
        case .notModified:
            response = ResponseHead(.notModified)
            range = 0..<0
            result = .notModified
        case .unsatisfiable:
            var refusal = ResponseHead(.rangeNotSatisfiable)
            refusal.add("Content-Range", "bytes */\(facts.size)")
            plain(connection, refusal, to: head, kind: kind, method: head.method.name, file: file,
                  detail: "range \(head.range ?? "") outside \(facts.size) bytes", started: started)
            return true
        }
        common(&response, connection, keepAliveToken: !head.isHTTP11)
        if response.status != .notModified {
            response.add("Content-Type", ResponseHead.contentType(of: name))
            response.add("Content-Length", "\(range.count)")
            response.add("Accept-Ranges", "bytes")
        }
        response.add("Last-Modified", HTTPDate.format(facts.modified))
        response.add("ETag", facts.etag)
        let sends = kind == .get && !range.isEmpty  // not a HEAD, a 304, an empty file or range
        connection.response = Response(
            head: response.bytes, body: sends ? .file : .none, range: sends ? range : 0..<0,
            record: .init(kind: kind, method: head.method.name, file: file, status: response.status, result: result, started: started))
        // The lease is the answer's while it sends; otherwise it goes back now.
        if sends { connection.lease = consume lease }
        return true
    }

    func resume(_ connection: Connection, after outcome: LoadOutcome) -> Bool {
        guard let (_, head, started, reads) = connection.waiting else { return true }
        connection.waiting = nil
        switch outcome {
        case .refused(let refusal):
            plain(connection, ResponseHead(Status(refusal)), to: head, kind: head.method == .head ? .head : .get,
                  method: head.method.name, file: sanitizedForLog(head.path.dropFirst()), detail: refusal.message, started: started)
            return true
        case _ where reads + 1 > Self.readsPerRequest:
            let busy = FileRefusal(.busy, "File keeps changing, try again later")
            plain(connection, ResponseHead(Status(busy)), to: head, kind: head.method == .head ? .head : .get,
                  method: head.method.name, file: sanitizedForLog(head.path.dropFirst()), detail: busy.message, started: started)
            return true
        case .loaded, .stream:
            return answer(head, on: connection, started: started, reads: reads + 1, after: outcome)
        }
    }

    /// Reads of its file an answer waits for at most.
    static let readsPerRequest = 4

    func refuse(_ status: Status, _ reason: String, withBody: Bool, on connection: Connection, started: Nanoseconds) {
        plain(connection, ResponseHead(status), to: nil, withBody: withBody, kind: .invalid, method: "-", file: "-",
              detail: reason, started: started)
    }

    /// Date, Server and the connection's fate, on every answer. `keepAliveToken`: the request
    /// was HTTP/1.0, whose connection persists only when the answer says so (RFC 9112 §9.3: a
    /// 1.0 client that asked for keep-alive and hears nothing waits for the close).
    func common(_ response: inout ResponseHead, _ connection: Connection, keepAliveToken: Bool) {
        response.add("Date", HTTPDate.format(Int64(time(nil))))
        response.add("Server", "stampede")
        if connection.state.lastAnswer {
            response.add("Connection", "close")
        } else if keepAliveToken {
            response.add("Connection", "keep-alive")
        }
    }

    /// An answer without a file to `request` (nil: one that could not be parsed): a refusal's
    /// status, with a short text saying it, unless the request was a HEAD.
    func plain(_ connection: Connection, _ head: ResponseHead, to request: RequestHead?, withBody: Bool? = nil,
               kind: WorkerMetrics.Kind, method: String, file: String, detail: String, started: Nanoseconds) {
        var head = head
        common(&head, connection, keepAliveToken: request.map { !$0.isHTTP11 } ?? false)
        let text = Array("\(head.status.rawValue) \(head.status.reason)\n".utf8)
        head.add("Content-Type", "text/plain; charset=utf-8")
        head.add("Content-Length", "\(text.count)")
        var bytes = head.bytes
        if withBody ?? (request?.method != .head) { bytes += text }
        connection.response = Response(
            head: bytes, body: .none, range: 0..<0,
            record: .init(kind: kind, method: method, file: file, status: head.status, result: Self.result(for: head.status),
                          started: started, detail: detail))
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
        if configuration.logFormat == .json {
            var fields: Logger.Metadata = [
                "event": "transfer", "protocol": "\(metrics.served.rawValue)", "client": "\(connection.peer)", "request": "\(record.kind.label)",
                "file": "\(record.file)", "status": .stringConvertible(record.status.rawValue),
                "bytes": .stringConvertible(response.bodyBytes), "duration_s": .stringConvertible(seconds),
                "outcome": "\(record.result.label)",
            ]
            if let detail = record.detail { fields["detail"] = "\(sanitizedForLog(detail.utf8))" }
            logger.log(level: failed ? .warning : .info, "transfer", metadata: fields)
            return
        }
        // Made only if the level is logged (at -v 0 a served answer's line is not).
        logger.log(level: failed ? .warning : .info, """
            \(record.method) \(connection.peer) "\(record.file)" \(metrics.served.rawValue) \(record.status.rawValue) bytes=\(response.bodyBytes) \
            time=\(decimalText(seconds, places: 3))s: \(record.detail.map { sanitizedForLog($0.utf8) } ?? record.result.label)
            """)
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
