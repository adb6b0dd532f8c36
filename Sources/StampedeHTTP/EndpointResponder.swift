import Glibc
import StampedeBase
import StampedeFiles
import StampedeHTTPWire
import StampedeServing

/// The answers of endpoints that serve paths with bytes made at each request (the metrics'
/// exposition, `/machines`): GET and HEAD of a path (a query ignored), 404 for any other path, 405
/// for any other method, and the engine's refusals (400, 408, 414, 431, 505), each saying itself
/// in a line of text. Nothing is logged: a scraper every few seconds is no event.
final class EndpointResponder: HTTPResponder {
    let endpoints: [Endpoint]
    let loads: LoadMailbox? = nil

    init(_ endpoints: [Endpoint]) {
        self.endpoints = endpoints
    }

    func answer(_ head: RequestHead, on connection: Connection, started: Nanoseconds) -> Bool {
        let paths = endpoints.map(\.path).joined(separator: ", ")
        switch head.method {
        case .other:
            var response = ResponseHead(.methodNotAllowed)
            response.add("Allow", "GET, HEAD")
            respond(connection, response, Array("GET \(paths)\n".utf8), to: head, started: started)
        case .get, .head:
            if let endpoint = endpoints.first(where: { head.path.elementsEqual($0.path.utf8) }) {
                respond(connection, ResponseHead(.ok), endpoint.body(), type: endpoint.contentType, to: head, started: started)
            } else {
                respond(connection, ResponseHead(.notFound), Array("stampede serves \(paths)\n".utf8), to: head, started: started)
            }
        }
        return true
    }

    func resume(_ head: RequestHead, started: Nanoseconds, reads: Int, on connection: Connection, after outcome: LoadOutcome) -> Bool {
        true
    }

    /// Its answers are its own bytes: no file is streamed.
    func readAhead(_ file: StreamedFile, from offset: Int, for connection: Connection) -> Bool { false }

    func refuse(_ status: Status, _ reason: String, withBody: Bool, on connection: Connection, started: Nanoseconds) {
        let text = Array("\(status.rawValue) \(status.reason)\n".utf8)
        respond(connection, ResponseHead(status), text, to: nil, withBody: withBody, started: started)
    }

    func ended(_ response: Response, on connection: Connection, abandoned: (why: String, result: WorkerMetrics.Result)?) {}

    private func respond(_ connection: Connection, _ head: ResponseHead, _ text: [UInt8], type: String = "text/plain; charset=utf-8",
                         to request: RequestHead?, withBody: Bool? = nil, started: Nanoseconds) {
        var head = head
        head.add("Content-Type", text: type)
        head.add("Content-Length", decimal: text.count)
        head.add("Date", date: Int64(time(nil)))
        if connection.state.lastAnswer {
            head.add("Connection", "close")
        } else if request?.isHTTP11 == false {
            head.add("Connection", "keep-alive")
        }
        let sends = withBody ?? (request?.method != .head)
        connection.response = Response(
            head: head.end(), body: sends ? .bytes(text) : .none, range: sends ? 0..<text.count : 0..<0,
            record: .init(kind: .invalid, method: request?.method.name ?? "-", file: request?.path ?? [], status: head.status,
                          result: head.status == .ok ? .served : .protocolError, started: started))
    }
}
