import Glibc
import StampedeBase
import StampedeFiles
import StampedeIO
import StampedeProtocol
import StampedeServing

/// One slot of a worker's session table (`SessionTable`): a transfer in progress, or a free slot.
/// Plain data plus what it reads from or writes to. Noncopyable, as the file it sends is lent to
/// it alone (`FileLease`): the transfer's end gives it back.
struct Transfer: ~Copyable {
    enum Phase {
        case free, sending, receiving
        /// An upload's last block is written; the disk thread commits it.
        case committing
        /// Done; the last ACK may be asked for again.
        case dallying
    }

    var phase = Phase.free
    var socket: TransferSocket?
    var peer = SocketAddress()
    /// The request as it arrived: the same bytes again from the same port are a duplicate.
    var request: [UInt8] = []
    /// Whether the request asked for tsize (EDK2's size probe does, and ends with ERROR 8).
    var askedSize = false
    var sender: DataSender?
    var receiver: DataReceiver?
    /// What a download sends, lent by the file service; nil for an upload.
    var lease: FileLease?
    var upload: Upload?
    var optionAck: [UInt8] = []
    /// A streamed file's block that could not go because its bytes were still on the disk: it and
    /// the rest of its window go when a disk thread has read them ahead (`Worker.readAhead`).
    var unsentBlock: Int?
    /// An upload's ACK withheld while the disk thread writes its blocks and the next window has
    /// gathered (`Worker+Disk.swift`): no ACK goes out, not even a repeat, until that write is done.
    var ackHeld = false
    var record = TransferRecord()

    /// What the download's blocks are read from.
    var source: TransferSource? {
        switch lease {
        case .some(let lease): lease.source
        case .none: nil
        }
    }

    /// The client has answered (ACK 0 or DATA 1, or later): it knows this transfer, so a request
    /// from its port can no longer be the one that started it over.
    var clientHasAnswered: Bool {
        sender?.timer.peerHasAnswered ?? receiver?.timer.peerHasAnswered ?? false
    }

    /// When the client's last progress was read (its last ACK or DATA that moved the transfer on).
    var clientProgressed: Nanoseconds {
        sender?.timer.waitingSince ?? receiver?.timer.waitingSince ?? 0
    }

    /// The client has let a whole retransmit interval pass without progress.
    func clientIsQuiet(now: Nanoseconds) -> Bool {
        sender?.timer.peerIsQuiet(now: now) ?? receiver?.timer.peerIsQuiet(now: now) ?? false
    }
}

/// The socket a transfer sends from and hears its client on.
enum TransferSocket: Equatable {
    /// Its own, on a fresh port, connected to the client: closed when the transfer ends.
    case own(SocketHandle)
    /// One of the worker's shared transfer sockets (`SharedSocketPools`): unconnected, so every
    /// send names the client, from the address the request came to.
    case shared(SocketHandle, from: SocketAddress)
    /// The listener the request came to (`--single-port`), from the address it came to.
    case listener(SocketHandle, from: SocketAddress)

    var handle: SocketHandle {
        switch self {
        case .own(let socket), .shared(let socket, _), .listener(let socket, _): socket
        }
    }

    /// Where sends come from on an unconnected socket; nil on the transfer's own.
    var replyFrom: SocketAddress? {
        switch self {
        case .own: nil
        case .shared(_, let local), .listener(_, let local): local
        }
    }

    /// A socket other transfers hear on too: its datagrams find their transfer by the client's
    /// address and port (`SessionTable.slot(of:)`), not by the socket's tag.
    var isShared: Bool { replyFrom != nil }
}

/// What the log line of a finished transfer says.
struct TransferRecord {
    var isWrite = false
    /// The name served (after -m), as the client's bytes: sanitized when it is logged, the
    /// duration histogram's key as it is.
    var filename: [UInt8] = []
    var mode = TransferMode.octet
    var options = ""
    var started: Nanoseconds = 0
    var logged = false
}

/// How a transfer ended.
enum Outcome: Equatable {
    case completed
    /// The client read the OACK's tsize and ended with ERROR 8 (EDK2's size probe): not a failure.
    case sizeProbe
    /// The client answered ERROR 5: it runs another transfer for the same request (sent twice,
    /// from two ports) and refuses this one. Not a failure.
    case refusedAsDuplicate
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
        case .completed, .sizeProbe, .refusedAsDuplicate, .closedByClient, .superseded: return false
        default: return true
        }
    }

    /// Its class for the metrics and the JSON log.
    var result: WorkerMetrics.Result {
        switch self {
        case .completed: .served
        case .sizeProbe: .probe
        case .refusedAsDuplicate: .duplicate
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
        case .sizeProbe: return "ended by client after OACK (error 8): a size probe"
        case .refusedAsDuplicate: return "refused by the client (error 5): a duplicate of a transfer it runs"
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
