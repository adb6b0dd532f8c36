import StampedeBase
import StampedeFiles
import StampedeHTTPWire
import StampedeIO
import StampedeServing
import StampedeTLS

/// One client's TCP connection, owned by the event loop that accepted it: its socket, the bytes
/// of requests not answered yet, where its life is (`ConnectionState`), the answer being written
/// and the file lent to it.
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
    /// Bytes read and not answered yet: a head in progress, or the next requests of a pipeline.
    /// Never more than the head limit plus one read.
    var input: [UInt8] = []
    /// Reads the head in `input` as it comes, from where it stopped.
    var parser: HeadParser
    var state: ConnectionState
    /// The answer being written; requests behind it wait in `input`.
    var response: Response?
    /// The memory the next answer's head is written into: the last answer's, given back when it
    /// ended (a kept-alive connection's answers take no new memory).
    var headMemory: [UInt8] = []
    /// The name the answer is for, kept from one request to the next for the same reason.
    var name: [UInt8] = []
    /// The file the answer's body is read from (`Response.Body.file`): given back when the answer
    /// ends, or with the connection.
    var lease: FileLease?
    /// The head whose file the disk thread reads (its outcome comes under the connection's tag):
    /// when the head began, and how many reads it has waited for.
    var waiting: (head: RequestHead, started: Nanoseconds, reads: Int)?
    /// `--https`: the TLS session every byte goes through; shut down before the socket closes.
    var tls: TLSSession?
    /// Its handshake holds one of its client's places among handshakes (`ClientConnections`),
    /// until the handshake ends.
    var inHandshake = false
    /// The cap on its socket's unsent bytes, as last set (`HTTPLoop.capUnsent`); nil: none.
    var unsentLimit: Int32?

    init(fd: Int32, peer: SocketAddress, slot: Int, generation: UInt32, limits: RequestHead.Limits, state: ConnectionState) {
        self.fd = fd
        self.peer = peer
        self.slot = slot
        self.generation = generation
        parser = HeadParser(limits: limits)
        self.state = state
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
