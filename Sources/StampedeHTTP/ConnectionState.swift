import StampedeBase
import StampedeHTTPWire

/// The life of one HTTP connection as named states and the events that move them, apart from
/// its socket (as swift-nio's HTTPServerPipelineHandler keeps its state, and nginx a handler per
/// phase): the loop reads and writes (`HTTPLoop`), this says what comes next and when the
/// connection must go, and its phases hold what they are about (the head being answered, the
/// reads its file took); the bytes and the answer being written are the exchange's (`Connection`).
/// Every transition is a function of the state, the event and `now`.
struct ConnectionState: Equatable {
    struct Limits: Equatable, Sendable {
        /// From a head's first byte to its end: past it, 408 and the connection closes.
        var requestTimeout: Nanoseconds
        /// With no request in progress: past it, the connection closes without a word.
        var idleTimeout: Nanoseconds
        /// An answer the client stops reading: past it with no byte taken, abandoned.
        var sendTimeout: Nanoseconds
        /// Bytes one connection may write in a turn before the others get theirs.
        var writeBudget: Int
        /// A connection older than this says Connection: close with its next answer (nil: any age).
        var lifetime: Nanoseconds?
        /// Once the server stops, how long a connection that asks nothing more is kept.
        var drainTimeout: Nanoseconds = nanosecondsPerSecond
    }

    enum Phase: Equatable {
        /// TLS (`--https`): the handshake is under way, since the connection was accepted; the
        /// request deadline bounds it.
        case handshaking(since: Nanoseconds)
        /// Between requests, nothing of the next one read: since when.
        case idle(since: Nanoseconds)
        /// A head has begun (or the next of a pipeline is buffered): since its first byte.
        case readingHead(since: Nanoseconds)
        /// A head was parsed and is being answered (its answer not ready yet); its first byte
        /// came at `started`.
        case answering(RequestHead, started: Nanoseconds)
        /// The answer to the head waits for its file, which a disk thread reads (since then);
        /// `reads`: the reads of it done before this one (a file that changes while it is read is
        /// read again, a few times at most).
        case waitingForFile(RequestHead, started: Nanoseconds, since: Nanoseconds, reads: Int)
        /// The answer goes out; the last write that moved bytes was then.
        case writing(lastProgress: Nanoseconds)
        case closed
    }

    enum Event: Equatable {
        /// TLS: the handshake finished; requests may come.
        case handshakeDone
        /// TLS: the handshake failed, or the client closed before it finished.
        case handshakeFailed
        /// The loop serves the connection (its socket is ready, or its turn came): its write
        /// budget starts afresh. `inputLeft`: bytes of a next request are read already.
        case serviceBegins(inputLeft: Bool)
        /// Bytes of a request arrived.
        case bytesRead
        /// What was read is not a whole head yet.
        case headIncomplete
        /// A whole head was parsed (its first byte came at `started`); it asked to keep the
        /// connection (`RequestHead.keepAlive`) or not.
        case headParsed(RequestHead, started: Nanoseconds)
        /// The head could not be parsed: its refusal is the answer, and the last.
        case headRefused
        /// The answer (head and body) is ready to write.
        case answerReady
        /// The answer waits for its file (again, when it was read and must be read once more).
        case fileLoading
        /// Bytes of the answer went out.
        case wrote(Int)
        /// The whole answer went out; the next request's bytes are already read (`inputLeft`).
        case answerWritten(inputLeft: Bool)
        /// The client closed its side, or the socket broke.
        case peerGone
        /// Once a second: the deadlines.
        case tick
        /// The server stops: each connection's next answer is its last.
        case stop
    }

    enum Action: Equatable {
        /// Nothing until the socket, the disk thread or the tick says more.
        case none
        /// TLS: go on with the handshake.
        case handshake
        /// Read what the client sent.
        case read
        /// Parse the head in what was read (a new one, or the next of a pipeline).
        case parseNext
        /// Ask the responder for the answer to the head just parsed (the phase holds it).
        case answer
        case write
        /// The turn's budget is spent: go on writing at the next turn.
        case yieldTurn
        /// The head took too long: answer 408 if the socket takes it, then close.
        case answerTimeoutThenClose
        case close(Reason)
    }

    enum Reason: Equatable {
        /// Its last answer is written (Connection: close, HTTP/1.0, a refusal, a stop, its age).
        case answeredLast
        case peerGone
        /// Idle past the idle timeout.
        case idle
        /// The server stops and the connection asked nothing for `drainTimeout`.
        case drained
        /// The client took no byte of the answer for the send timeout.
        case stalled
        /// TLS: the handshake did not finish within the request deadline.
        case handshakeTimedOut
        /// TLS: the handshake failed.
        case handshakeFailed
    }

    let limits: Limits
    let opened: Nanoseconds
    private(set) var phase: Phase
    /// The answer being made or written is the connection's last: it says Connection: close.
    private(set) var lastAnswer = false
    private(set) var stopping = false
    private var writtenThisTurn = 0

    /// `handshake`: the connection begins with TLS's handshake (`--https`).
    init(limits: Limits, opened: Nanoseconds, handshake: Bool = false) {
        self.limits = limits
        self.opened = opened
        phase = handshake ? .handshaking(since: opened) : .idle(since: opened)
    }

    /// What `event` at `now` leads to.
    mutating func handle(_ event: Event, now: Nanoseconds) -> Action {
        switch event {
        case .serviceBegins(let inputLeft):
            writtenThisTurn = 0
            switch phase {
            case .handshaking: return .handshake
            case .idle, .readingHead: return inputLeft ? .parseNext : .read
            case .writing: return .write
            case .answering, .waitingForFile, .closed: return .none
            }
        case .handshakeDone:
            guard case .handshaking = phase else { return .none }
            phase = .idle(since: now)
            return .read
        case .handshakeFailed:
            phase = .closed
            return .close(.handshakeFailed)
        case .bytesRead:
            if case .idle = phase { phase = .readingHead(since: now) }
            return .parseNext
        case .headIncomplete:
            return .read
        case .headParsed(let head, let started):
            // A stopping server, or a connection past its lifetime, answers this one and closes.
            let aged = limits.lifetime.map { now - opened >= $0 } ?? false
            lastAnswer = !head.keepAlive || stopping || aged
            phase = .answering(head, started: started)
            return .answer
        case .headRefused:
            lastAnswer = true
            phase = .writing(lastProgress: now)
            return .write
        case .fileLoading:
            switch phase {
            case .answering(let head, let started):
                phase = .waitingForFile(head, started: started, since: now, reads: 0)
            case .waitingForFile(let head, let started, _, let reads):
                phase = .waitingForFile(head, started: started, since: now, reads: reads + 1)
            default:
                break
            }
            return .none
        case .answerReady:
            phase = .writing(lastProgress: now)
            return .write
        case .wrote(let bytes):
            phase = .writing(lastProgress: now)
            writtenThisTurn += bytes
            return writtenThisTurn >= limits.writeBudget ? .yieldTurn : .write
        case .answerWritten(let inputLeft):
            if lastAnswer {
                phase = .closed
                return .close(.answeredLast)
            }
            phase = inputLeft ? .readingHead(since: now) : .idle(since: now)
            return inputLeft ? .parseNext : .read
        case .peerGone:
            phase = .closed
            return .close(.peerGone)
        case .tick:
            return deadline(now: now)
        case .stop:
            stopping = true
            // A connection between requests gets `drainTimeout` from now to ask its last one.
            if case .idle = phase { phase = .idle(since: now) }
            return .none
        }
    }

    private mutating func deadline(now: Nanoseconds) -> Action {
        switch phase {
        case .handshaking(let since) where now - since > limits.requestTimeout:
            phase = .closed
            return .close(.handshakeTimedOut)
        case .readingHead(let since) where now - since > limits.requestTimeout:
            phase = .closed
            return .answerTimeoutThenClose
        case .writing(let progress) where now - progress > limits.sendTimeout:
            phase = .closed
            return .close(.stalled)
        case .idle(let since) where stopping && now - since > limits.drainTimeout:
            phase = .closed
            return .close(.drained)
        case .idle(let since) where now - since > limits.idleTimeout:
            phase = .closed
            return .close(.idle)
        default:
            return .none
        }
    }

    /// Whether an answer is being written (the loop writes before it reads).
    var isWriting: Bool {
        if case .writing = phase { return true }
        return false
    }

    /// Whether a head is in progress (for a stop: one on its way is still answered).
    var isReadingHead: Bool {
        if case .readingHead = phase { return true }
        return false
    }
}
