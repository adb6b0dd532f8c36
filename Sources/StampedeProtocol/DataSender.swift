import StampedeBase

/// The sending side of a transfer: the server answering an RRQ, or a client's `put`.
///
/// Blocks are numbered from 1 (absolute, 64-bit); on the wire they wrap past 65535 to 0, or to
/// 1 when the rollover option says so (`BlockNumbering`). A file of N bytes has N / blksize + 1
/// blocks: the last is short, possibly empty. With windowsize W (RFC 7440) up to W blocks are in
/// flight; an ACK acknowledges everything up to its block and the next window starts right after it.
public struct DataSender: Sendable {
    public enum Action: Equatable, Sendable {
        case none
        /// Send the OACK (again).
        case sendOptionAck
        /// Send blocks first ..< first + count.
        case sendBlocks(first: Int, count: Int)
        /// The last block was acknowledged.
        case finished
        /// Retries exhausted.
        case timedOut
    }

    public let totalBytes: Int
    public let blockSize: Int
    public let windowSize: Int
    public let blockCount: Int
    public let numbering: BlockNumbering
    public private(set) var timer: RetransmitTimer

    /// Highest block acknowledged (0 = none, or only the OACK).
    public private(set) var acknowledged = 0
    /// Highest block sent so far.
    public private(set) var sentThrough = 0
    private var awaitingOptionAck: Bool
    public private(set) var isFinished = false
    /// ACKs that repeated the last acknowledged block (a lost DATA, a client's own timeout).
    public private(set) var duplicateAcks = 0
    /// When the last duplicate of the acknowledged block came; nil since the last progress.
    private var lastDuplicate: Nanoseconds?

    public init(totalBytes: Int, blockSize: Int, windowSize: Int, numbering: BlockNumbering = BlockNumbering(),
                sendsOptionAck: Bool, timer: RetransmitTimer) {
        precondition(blockSize >= 8 && windowSize >= 1 && totalBytes >= 0)
        self.numbering = numbering
        self.totalBytes = totalBytes
        self.blockSize = blockSize
        self.windowSize = windowSize
        self.blockCount = totalBytes / blockSize + 1
        self.awaitingOptionAck = sendsOptionAck
        self.timer = timer
    }

    /// Byte range of block `n` (1-based) in the image.
    @inline(__always)
    public func range(ofBlock n: Int) -> Range<Int> {
        let start = (n - 1) * blockSize
        return start..<min(start + blockSize, totalBytes)
    }

    /// Block `n`'s number on the wire.
    @inline(__always)
    public func wire(_ block: Int) -> UInt16 { numbering.wire(block) }

    public var deadline: Nanoseconds? { timer.deadline }
    public var retransmits: Int { timer.totalRetransmits }
    public var bytesAcknowledged: Int { acknowledged == 0 ? 0 : range(ofBlock: acknowledged).upperBound }

    public mutating func start(now: Nanoseconds) -> Action {
        timer.sentNew(now: now)
        return awaitingOptionAck ? .sendOptionAck : nextWindow()
    }

    private mutating func nextWindow() -> Action {
        let first = acknowledged + 1
        let count = min(windowSize, blockCount - acknowledged)
        sentThrough = acknowledged + count
        return .sendBlocks(first: first, count: count)
    }

    public mutating func receiveAck(_ wireBlock: UInt16, now: Nanoseconds) -> Action {
        guard !isFinished else { return .none }
        if awaitingOptionAck {
            // Only ACK 0 answers an OACK; anything else is stale or confused.
            guard wireBlock == 0 else { return .none }
            awaitingOptionAck = false
            lastDuplicate = nil
            timer.answered(now: now)
            timer.sentNew(now: now)
            return nextWindow()
        }
        // The absolute block this ACK names, if it lies in acknowledged...sentThrough.
        guard let block = numbering.block(wireBlock, in: acknowledged, through: sentThrough) else { return .none }
        if block == acknowledged {
            return duplicateAck(now: now)
        }
        acknowledged = block
        lastDuplicate = nil
        if acknowledged == blockCount {
            isFinished = true
            timer.stop()
            return .finished
        }
        // Progress; inside a window this restarts the window right after the ACKed block.
        timer.answered(now: now)
        timer.sentNew(now: now)
        return nextWindow()
    }

    /// A duplicate ACK asks for what follows it again, when it was sent after what we last sent
    /// should have arrived: a client that timed out (every client resends its last ACK), or one
    /// that saw a gap in a window (EDK2 ACKs the block before every one out of order). One that
    /// comes sooner crossed our send on the way, and answering it would double every block from
    /// then on: the Sorcerer's Apprentice (RFC 1123 §4.2.3.1). So a duplicate resends only when
    /// a round trip (`RetransmitTimer.roundTripBound`), and at least `duplicateAckFloor`, has
    /// passed since the window was last sent; as often as the client asks, no more.
    /// Before any answer, half the timer's interval stands in for the round trip.
    ///
    /// The bound can outgrow the client's own period: it is twice the least of a few samples,
    /// and a transfer's first sample holds whatever delayed the first answer (a busy server, a
    /// client reading hundreds of sockets). Then every retry of a client that asks each 300 ms
    /// would be taken for a crossing, and the client gives up while its block is still lost. So
    /// a duplicate is also answered when it is the second since our last send, and came at least
    /// `clientRetryFloor` after the first: a client asking again on its own timer. A crossing
    /// comes once per send; the duplicates a window's gap or a duplicating path brings come
    /// together, closer than that.
    private mutating func duplicateAck(now: Nanoseconds) -> Action {
        duplicateAcks += 1
        var isRetry = false
        if let previous = lastDuplicate { isRetry = previous >= timer.lastSent && now - previous >= Self.clientRetryFloor }
        lastDuplicate = now
        // A retry came a retry period after our last send at least: no round trip left to wait.
        let wait = isRetry ? 0 : timer.roundTripBound.map { max($0, Self.duplicateAckFloor) } ?? timer.current / 2
        return resendAsked(after: wait, now: now)
    }

    /// The client sent its request again before it answered anything: our first answer (the
    /// OACK, or the first window) or its own reply was lost. A client repeats its request on its
    /// own timer, never in answer to what we send, so each repeat gets the answer again (no
    /// more often than `duplicateAckFloor`), up to the retries: as many chances as a client
    /// gives itself, and no more than the timer would send to a forged address that repeats.
    public mutating func requestRepeated(now: Nanoseconds) -> Action {
        guard !isFinished, acknowledged == 0, timer.retries < timer.maxRetries else { return .none }
        return resendAsked(after: Self.duplicateAckFloor, now: now)
    }

    /// What was last sent, again, if `wait` has passed since it went.
    private mutating func resendAsked(after wait: Nanoseconds, now: Nanoseconds) -> Action {
        guard now - timer.lastSent >= wait else { return .none }
        guard timer.resentEarly(now: now) else { return .timedOut }
        if awaitingOptionAck { return .sendOptionAck }
        return .sendBlocks(first: acknowledged + 1, count: sentThrough - acknowledged)
    }

    /// The least time between a send and a resend a duplicate ACK asks for: no client's timeout
    /// is shorter, and a flood of duplicates gets a window at most this often.
    public static let duplicateAckFloor: Nanoseconds = 10_000_000

    /// The least time between two duplicates that makes the second a client's retry, not part of
    /// one burst: no client repeats its ACK sooner (busybox, the quickest, waits 100 ms first),
    /// and a burst of gap reports or duplicated datagrams arrives within a few milliseconds.
    public static let clientRetryFloor: Nanoseconds = 50_000_000

    /// Blocks from `first` of what was last handed out (`sendBlocks`) could not go then (a
    /// streamed file's bytes were still on the disk) and go now: the blocks to send, those of
    /// them not yet acknowledged, with the timer counting from now (`RetransmitTimer.sentLate`).
    public mutating func sendLate(from first: Int, now: Nanoseconds) -> Action {
        let first = max(first, acknowledged + 1)
        guard !isFinished, !awaitingOptionAck, first <= sentThrough else { return .none }
        timer.sentLate(now: now)
        return .sendBlocks(first: first, count: sentThrough - first + 1)
    }

    public mutating func timeout(now: Nanoseconds) -> Action {
        guard !isFinished else { return .none }
        guard timer.retransmit(now: now) else { return .timedOut }
        if awaitingOptionAck { return .sendOptionAck }
        return .sendBlocks(first: acknowledged + 1, count: max(1, sentThrough - acknowledged))
    }
}
