import StampedeBase
import StampedeFiles
import StampedeHTTPWire
import StampedeIO
import StampedeServing
import StampedeTLS

/// One client's TCP connection, owned by the event loop that accepted it: its socket, where its
/// life is (`ConnectionState`), and while a request is in progress its `Exchange` (the bytes of
/// requests not answered yet, the head being read, the answer being written, the file lent to it).
/// A connection that waits for its next request holds no exchange: what an idle connection costs
/// is this object alone (docs/ARCHITECTURE.md, "What a connection holds").
final class Connection {
    let fd: Int32
    let peer: SocketAddress
    /// The peer as log lines say it, made for the first line and kept for the others (a
    /// kept-alive connection's answers each make one at --verbosity 1, and each refusal at 0).
    lazy var peerText = "\(peer)"
    /// Its place in its loop's connections, and the slot's generation when it was accepted: its
    /// epoll tag says both (`HTTPTag`), and so does the ticket of a file it waits for.
    let slot: Int
    let generation: UInt32
    var state: ConnectionState
    /// `--https`: the TLS session every byte goes through; shut down before the socket closes.
    var tls: TLSSession?
    /// Its handshake holds one of its client's places among handshakes (`ClientConnections`),
    /// until the handshake ends.
    var inHandshake = false
    /// The cap on its socket's unsent bytes, as last set (`HTTPLoop.capUnsent`); nil: none.
    var unsentLimit: Int32?
    /// The request in progress, from its loop's `ExchangePool` when its first bytes come; given
    /// back when its answer is written and nothing more was asked (`release`).
    private var exchange: Exchange?
    private let pool: ExchangePool

    init(fd: Int32, peer: SocketAddress, slot: Int, generation: UInt32, pool: ExchangePool, state: ConnectionState) {
        self.fd = fd
        self.peer = peer
        self.slot = slot
        self.generation = generation
        self.pool = pool
        self.state = state
    }


    /// The exchange, taken from the pool if the connection holds none.
    private var work: Exchange {
        if let exchange { return exchange }
        let taken = pool.take()
        exchange = taken
        return taken
    }

    /// Whether a request is in progress on it (it holds an exchange).
    var holdsExchange: Bool { exchange != nil }

    /// Gives the exchange back to the pool when nothing is in progress (no bytes unanswered, no
    /// answer, no file, no read awaited), or always (`force`: the connection closes; what is in
    /// progress is dropped, its file given back).
    func release(force: Bool = false) {
        guard let exchange, force || exchange.isIdle else { return }
        self.exchange = nil
        pool.give(exchange)
    }

    /// Bytes read and not answered yet: a head in progress, or the next requests of a pipeline.
    /// Never more than the head limit plus one read.
    var input: [UInt8] {
        get { exchange?.input ?? [] }
        _modify { yield &work.input }
    }
    /// Whether bytes wait to be answered (asks without taking an exchange).
    var hasInput: Bool { exchange.map { !$0.input.isEmpty } ?? false }
    /// Reads the head in `input` as it comes, from where it stopped.
    var parser: HeadParser {
        get { work.parser }
        _modify { yield &work.parser }
    }
    /// The answer being written; requests behind it wait in `input`.
    var response: Response? {
        _read {
            // Read in place: a `get` would copy the answer (its head, record and body) at each look.
            if let exchange { yield exchange.response } else { yield nil }
        }
        _modify { yield &work.response }
    }

    /// The answer, taken out of the connection (which holds none after).
    func takeResponse() -> Response? { exchange?.response.take() }
    /// The memory the next answer's head is written into: the last answer's, given back when it
    /// ended (a kept-alive connection's answers take no new memory).
    var headMemory: [UInt8] {
        get { work.headMemory }
        _modify { yield &work.headMemory }
    }
    /// The name the answer is for, kept from one request to the next for the same reason.
    var name: [UInt8] {
        get { work.name }
        _modify { yield &work.name }
    }
    /// Lends the answer the file its body is read from (`Response.Body.file`): given back when
    /// the answer ends (`endLease`), or with the connection.
    func lend(_ lease: consuming FileLease) {
        work.lease = consume lease
    }

    /// The answer's file goes back.
    func endLease() {
        exchange?.lease = nil
    }

    /// What the answer's body is read from, when it is a file.
    var source: TransferSource? {
        guard let exchange else { return nil }
        switch exchange.lease {
        case .some(let lease): return lease.source
        case .none: return nil
        }
    }
}

/// What a request in progress holds, apart from its connection: taken from the loop's pool when
/// the request's first bytes come and given back, its memory kept for the next (no allocation per
/// request), when its answer is written.
final class Exchange {
    var input: [UInt8] = []
    var parser: HeadParser
    var response: Response?
    var headMemory: [UInt8] = []
    var name: [UInt8] = []
    var lease: FileLease?

    init(limits: RequestHead.Limits) {
        parser = HeadParser(limits: limits)
    }

    var isIdle: Bool { input.isEmpty && response == nil && lease == nil }

    /// Made ready for another connection's request: what was in progress dropped, the memory kept
    /// unless a read grew it past `keptInput`.
    func reset(keptInput: Int) {
        if input.capacity > keptInput { input = [] } else { input.removeAll(keepingCapacity: true) }
        parser.reset()
        response = nil
        lease = nil
    }
}

/// A loop's exchanges not in use: what its connections take when a request begins and give back
/// when it is answered. It keeps at most `kept` (the loop's busiest moment beyond it frees the
/// rest), so that the memory of a burst does not stay with connections gone idle.
final class ExchangePool {
    private var free: [Exchange] = []
    private let limits: RequestHead.Limits
    let kept: Int

    init(limits: RequestHead.Limits, kept: Int = 1024) {
        self.limits = limits
        self.kept = kept
    }

    func take() -> Exchange { free.popLast() ?? Exchange(limits: limits) }

    /// Exchanges kept for the next requests.
    var count: Int { free.count }

    func give(_ exchange: Exchange) {
        exchange.reset(keptInput: limits.headBytes + 16384)
        if free.count < kept { free.append(exchange) }
    }
}

/// An answer being written: its head, then its body, by sendfile from a file image's memfd (or,
/// for a file the cache does not hold, from the file), out of a small image's memory, or from
/// bytes of its own.
struct Response {
    enum Body {
        case none
        /// From the connection's lease.
        case file
        case bytes([UInt8])
    }

    var head: [UInt8]
    var headSent = 0
    var body: Body
    /// Where the body starts in its source, the next byte to send, and the end.
    let start: Int
    var offset: Int
    let end: Int
    var record: Record

    init(head: [UInt8], body: Body, range: Range<Int>, record: Record) {
        self.head = head
        self.body = body
        start = range.lowerBound
        offset = range.lowerBound
        end = range.upperBound
        self.record = record
    }

    /// Body bytes the kernel took.
    var bodyBytes: Int { offset - start }

    var isDone: Bool { headSent == head.count && offset == end }

    /// What the log line and the metrics say of it.
    struct Record {
        var kind: WorkerMetrics.Kind
        var method: String
        /// The name served (after -m), for the log and the duration histogram; sanitized when
        /// it is logged.
        var file: [UInt8]
        var status: Status
        var result: WorkerMetrics.Result
        var started: Nanoseconds
        var detail: String?
    }
}
