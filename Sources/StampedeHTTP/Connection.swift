import StampedeIO
import StampedeProtocol
import StampedeServer

/// One client's TCP connection, owned by the event loop that accepted it.
final class Connection {
    let fd: Int32
    let peer: SocketAddress
    /// Bytes read and not parsed yet: a head in progress, or the next requests of a pipeline.
    /// Never more than the head limit plus one read.
    var input: [UInt8] = []
    /// The response being written; requests behind it wait in `input`.
    var response: Response?
    /// `input` has bytes not parsed since they came (a line's end, or the head limit passed), or
    /// a whole request after the last one (pipelining).
    var unparsed = false
    /// When the head in `input` began to arrive (nil: none is in progress).
    var requestStarted: Nanoseconds?
    /// The last read or write that moved bytes.
    var lastProgress: Nanoseconds
    /// Close once the response is written (Connection: close, HTTP/1.0, a refused head, a stop).
    var closing = false
    let generation: UInt32

    init(fd: Int32, peer: SocketAddress, now: Nanoseconds, generation: UInt32) {
        self.fd = fd
        self.peer = peer
        self.lastProgress = now
        self.generation = generation
    }
}

/// A response being written: its head, then its body, by sendfile from a file image's memfd (or,
/// for a file the cache does not hold, from the file), or out of a small image's memory.
struct Response {
    var head: [UInt8]
    var headSent = 0
    /// The image the cache lent (given back when the response ends) or the file streamed (closed
    /// with it); nil: no body.
    var body: TransferSource?
    /// Where the body starts in the file, the next byte to send, and the end.
    let start: Int
    var offset: Int
    let end: Int
    var record: Record
    /// TCP_CORK is on for this response (a body sent by sendfile), to come off at its end.
    var corked = false

    init(head: [UInt8], body: TransferSource?, range: Range<Int>, record: Record) {
        self.head = head
        self.body = body
        start = range.lowerBound
        offset = range.lowerBound
        end = range.upperBound
        self.record = record
    }

    /// What sendfile reads the body from: the streamed file, or the image's memfd; nil: an
    /// image in anonymous memory, sent with send (or no body).
    var sendfileSource: Int32? {
        switch body {
        case .stream(let file): file.descriptor
        case .image(let image): image.descriptor
        case nil: nil
        }
    }

    /// Body bytes the kernel took.
    var bodyBytes: Int { offset - start }

    /// What the log line and the metrics say of it.
    struct Record {
        var kind: WorkerMetrics.Kind
        var method: String
        /// The name served (after -m), for the log and the duration histogram.
        var file: String
        var status: Status
        var result: WorkerMetrics.Result
        var started: Nanoseconds
        var detail: String?
    }

    var isDone: Bool { headSent == head.count && offset == end }
}
