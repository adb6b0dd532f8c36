import CStampedeSys
import Glibc
import Logging
import StampedeIO
import StampedeProtocol
import StampedeServer

extension HTTPLoop {
    /// Answers a parsed head: the name through the remap rules and the access policy, as a TFTP
    /// RRQ's; the image from the same cache; then the part of it the head asks for.
    func respond(_ connection: Connection, _ head: RequestHead, started: Nanoseconds) {
        let kind: WorkerMetrics.Kind
        switch head.method {
        case .get: kind = .get
        case .head: kind = .head
        case .other(let name):
            var response = ResponseHead(.methodNotAllowed)
            response.add("Allow", "GET, HEAD")
            answer(connection, response, to: head, kind: .httpInvalid, method: name, file: sanitizedForLog(head.target.utf8),
                   detail: "method \(name) not allowed", started: started)
            return
        }
        // The path without its leading "/" is the name, as a TFTP client would send it.
        var name = Array(head.path.dropFirst())
        if let rules = configuration.remapRules?.current {
            switch configuration.remap(name, with: rules, isWrite: false, client: connection.peer, logger: logger) {
            case .success(let mapped):
                if mapped != name { logger.info("\(connection.peer): \(head.method.name) \"\(sanitizedForLog(name))\" remapped to \"\(sanitizedForLog(mapped))\"") }
                name = mapped
            case .failure(let refusal):
                answer(connection, ResponseHead(Self.status(for: refusal)), to: head, kind: kind, method: head.method.name,
                       file: sanitizedForLog(name), detail: refusal.message, started: started)
                return
            }
        }
        let file = sanitizedForLog(name)
        // A GET takes the image (or the file to stream) as a TFTP RRQ does: the cache may have
        // read a newer version than the one opened, and the answer is about the bytes sent. A
        // HEAD only looks.
        var body: TransferSource?
        let facts: FileFacts
        do throws(TFTPError) {
            if kind == .get {
                let opened = try configuration.openSource(name, netascii: false, cache: cache)
                body = opened.source
                facts = FileFacts(opened.key)
            } else {
                facts = FileFacts(FileKey(try configuration.policy.openForReading(name).info, netascii: false))
            }
        } catch {
            answer(connection, ResponseHead(Self.status(for: error)), to: head, kind: kind, method: head.method.name, file: file,
                   detail: error.message, started: started)
            return
        }
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
            release(body)
            var refusal = ResponseHead(.rangeNotSatisfiable)
            refusal.add("Content-Range", "bytes */\(facts.size)")
            answer(connection, refusal, to: head, kind: kind, method: head.method.name, file: file,
                   detail: "range \(head.range ?? "") outside \(facts.size) bytes", started: started)
            return
        }
        common(&response, connection, keepAliveToken: !head.isHTTP11)
        if response.status != .notModified {
            response.add("Content-Type", ResponseHead.contentType(of: name))
            response.add("Content-Length", "\(range.count)")
            response.add("Accept-Ranges", "bytes")
        }
        response.add("Last-Modified", HTTPDate.format(facts.modified))
        response.add("ETag", facts.etag)
        if body == nil || range.isEmpty {  // a HEAD, a 304, an empty file or range
            release(body)
            body = nil
            range = 0..<0
        }
        connection.response = Response(
            head: response.bytes, body: body, range: range,
            record: .init(kind: kind, method: head.method.name, file: file, status: response.status, result: result, started: started))
    }

    /// Date, Server and the connection's fate, on every response. `keepAliveToken`: the request
    /// was HTTP/1.0, whose connection persists only when the answer says so (RFC 9112 §9.3: a
    /// 1.0 client that asked for keep-alive and hears nothing waits for the close).
    func common(_ response: inout ResponseHead, _ connection: Connection, keepAliveToken: Bool) {
        response.add("Date", HTTPDate.format(Int64(time(nil))))
        response.add("Server", "stampede")
        if connection.closing {
            response.add("Connection", "close")
        } else if keepAliveToken {
            response.add("Connection", "keep-alive")
        }
    }

    /// A response without a file to `request` (nil: one that could not be parsed): a refusal's
    /// status, with a short text saying it, unless the request was a HEAD.
    func answer(_ connection: Connection, _ head: ResponseHead, to request: RequestHead?, withBody: Bool? = nil,
                kind: WorkerMetrics.Kind, method: String, file: String, detail: String, started: Nanoseconds) {
        var head = head
        common(&head, connection, keepAliveToken: request.map { !$0.isHTTP11 } ?? false)
        let text = Array("\(head.status.rawValue) \(head.status.reason)\n".utf8)
        head.add("Content-Type", "text/plain; charset=utf-8")
        head.add("Content-Length", "\(text.count)")
        var bytes = head.bytes
        if withBody ?? (request?.method != .head) { bytes += text }
        connection.response = Response(
            head: bytes, body: nil, range: 0..<0,
            record: .init(kind: kind, method: method, file: file, status: head.status, result: Self.result(for: head.status),
                          started: started, detail: detail))
    }

    /// A head that cannot be answered: its status (without a body to a HEAD), then the
    /// connection closes.
    func refuse(_ connection: Connection, _ status: Status, _ reason: String, withBody: Bool = true, now: Nanoseconds) {
        connection.closing = true
        answer(connection, ResponseHead(status), to: nil, withBody: withBody, kind: .httpInvalid, method: "-", file: "-",
               detail: reason, started: connection.requestStarted ?? now)
    }

    static func status(for error: TFTPError) -> Status {
        if error.isBusy { return .serviceUnavailable }
        switch error.code {
        case .fileNotFound: return .notFound
        case .accessViolation: return .forbidden
        default: return .internalServerError
        }
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

    /// The response's line (7.3's kind, or JSON) and its figures.
    func log(_ connection: Connection, _ response: Response) {
        let record = response.record
        metrics.countRequest(record.kind, record.result)
        // The clock now, not the turn's: a response may take a whole turn to write.
        let duration = stampede_monotonic_ns() - record.started
        if record.result == .served && record.kind == .get { durations.record(record.file, kind: .get, duration) }
        let seconds = Double(duration) / 1e9
        let failed = record.result != .served && record.result != .notModified
        if configuration.logFormat == .json {
            var fields: Logger.Metadata = [
                "event": "transfer", "protocol": "http", "client": "\(connection.peer)", "request": "\(record.kind.label)",
                "file": "\(record.file)", "status": .stringConvertible(record.status.rawValue),
                "bytes": .stringConvertible(response.bodyBytes), "duration_s": .stringConvertible(seconds),
                "outcome": "\(record.result.label)",
            ]
            if let detail = record.detail { fields["detail"] = "\(sanitizedForLog(detail.utf8))" }
            logger.log(level: failed ? .warning : .info, "transfer", metadata: fields)
            return
        }
        // Made only if the level is logged (at -v 0 a served response's line is not).
        logger.log(level: failed ? .warning : .info, """
            \(record.method) \(connection.peer) "\(record.file)" http \(record.status.rawValue) bytes=\(response.bodyBytes) \
            time=\(decimalText(seconds, places: 3))s: \(record.detail.map { sanitizedForLog($0.utf8) } ?? record.result.label)
            """)
    }
}
