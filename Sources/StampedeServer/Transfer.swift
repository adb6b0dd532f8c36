import Glibc
import StampedeIO
import StampedeProtocol

/// One slot of a worker's session table: a transfer in progress, or a free slot.
/// Plain data plus what it reads from or writes to; the generation tells a reused slot from its past.
struct Transfer {
    enum Phase { case free, sending, receiving, dallying }

    var generation: UInt32 = 0
    var phase = Phase.free
    /// Its own socket, or in single-port mode the listener's (then `replyFrom` is set).
    var socket: SocketHandle?
    var peer = SocketAddress()
    /// Single-port mode: `socket` is the listener's, and sends go to `peer` from this address.
    var replyFrom: SocketAddress?
    var sender: DataSender?
    var receiver: DataReceiver?
    /// What a download sends; nil for an upload.
    var source: TransferSource?
    var upload: Upload?
    var optionAck: [UInt8] = []
    var record = TransferRecord()
}

/// Where a download's bytes come from.
enum TransferSource {
    /// A cached image: DATA payloads are slices of it.
    case image(FileImage)
    /// A file too large to cache: each block is read when it is sent.
    case stream(StreamedFile)
}

/// A file served without an image (over --cache-file-limit or the budget), owning its descriptor.
final class StreamedFile {
    private let file: Descriptor
    /// The size the transfer announced (tsize) and sends: a file that shrinks sends a short block.
    let size: Int

    init(_ file: consuming Descriptor, size: Int) {
        self.file = file
        self.size = size
    }

    /// Reads `range` into `buffer`; returns how many bytes were there (fewer if the file shrank).
    func read(_ range: Range<Int>, into buffer: UnsafeMutableRawBufferPointer) throws(Errno) -> Int {
        try readFully(file.raw, into: UnsafeMutableRawBufferPointer(rebasing: buffer[..<range.count]), at: range.lowerBound)
    }
}

/// What the log line of a finished transfer says.
struct TransferRecord {
    var isWrite = false
    var filename = ""
    var mode = TransferMode.octet
    var options = ""
    var started: Nanoseconds = 0
    var logged = false
}

/// How a transfer ended.
enum Outcome: Equatable {
    case completed
    /// The client answered our OACK with an ERROR (the UEFI tsize probe): not a failure.
    case endedByClientAfterOptionAck(code: UInt16)
    case clientError(code: UInt16, message: String)
    /// GRUB closed the file early (ERROR 0 "closed": it read a header, or seeks back and opens it
    /// again): what it wanted, not a failure.
    case closedByClient
    /// A socket error on the transfer: ECONNREFUSED means the client's port is gone.
    case socketError(Errno)
    case timedOut
    case serverError(TFTPError)
    case shutdown
    /// Single-port mode: a new request came from the same address and port (the client started over).
    case superseded

    var isFailure: Bool {
        switch self {
        case .completed, .endedByClientAfterOptionAck, .closedByClient, .superseded: return false
        default: return true
        }
    }

    /// Its class for the metrics and the JSON log.
    var result: WorkerMetrics.Result {
        switch self {
        case .completed: .served
        case .endedByClientAfterOptionAck: .probe
        case .closedByClient: .closedByClient
        case .clientError: .clientError
        case .socketError(let error) where error.meansPeerUnreachable: .unreachable
        case .socketError: .serverError
        case .timedOut: .timedOut
        case .serverError(let error): WorkerMetrics.Result(error)
        case .shutdown: .shutdown
        case .superseded: .superseded
        }
    }

    var text: String {
        switch self {
        case .completed: return "ok"
        case .endedByClientAfterOptionAck(let code): return "ended by client after OACK (error \(code))"
        case .clientError(let code, let message): return "client error \(code) \"\(message)\""
        case .closedByClient: return "closed early by the client"
        case .socketError(let error) where error.rawValue == ECONNREFUSED: return "client port unreachable"
        case .socketError(let error): return "socket error: \(error)"
        case .timedOut: return "timed out"
        case .serverError(let error): return "error \(error.code.rawValue) \"\(sanitizedForLog(error.message.utf8))\""
        case .shutdown: return "aborted by shutdown"
        case .superseded: return "superseded by a new request from the same port"
        }
    }
}
