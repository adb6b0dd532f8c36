import StampedeBase

/// The receiving side of a transfer: the server taking a WRQ, or a client's `get`.
///
/// Expects blocks in order; a block shorter than blksize is the last. With windowsize W the
/// receiver ACKs every W-th block and the last; on a gap it ACKs the last in-order block so the
/// sender restarts after it (RFC 7440 §4).
public struct DataReceiver: Sendable {
    public enum Reply: Equatable, Sendable {
        case none
        case ack(UInt16)
        case optionAck
    }

    public struct Receipt: Equatable, Sendable {
        /// The payload is the next in order: write it.
        public var deliver: Bool
        public var reply: Reply
        /// This was the last block.
        public var finished: Bool
        /// The sender kept sending what cannot be used until the patience ran out: the transfer
        /// has failed.
        public var timedOut = false

        public init(deliver: Bool, reply: Reply, finished: Bool, timedOut: Bool = false) {
            self.deliver = deliver
            self.reply = reply
            self.finished = finished
            self.timedOut = timedOut
        }
    }

    public let blockSize: Int
    public let windowSize: Int
    public let numbering: BlockNumbering
    public private(set) var timer: RetransmitTimer
    private let sentOptionAck: Bool
    /// Every block out of order gets an ACK at once, which starts the tries over (EDK2's MTFTP4,
    /// as the storm plays it); otherwise one re-ACK per progress step, then the timer's.
    private let answersBlocksOutOfOrder: Bool

    /// Highest block received in order.
    public private(set) var received = 0
    public private(set) var bytesReceived = 0
    private var lastAcked = 0
    private var reAckedSinceProgress = false
    public private(set) var isFinished = false

    public init(blockSize: Int, windowSize: Int, numbering: BlockNumbering = BlockNumbering(), sendsOptionAck: Bool,
                answersBlocksOutOfOrder: Bool = false, timer: RetransmitTimer) {
        self.blockSize = blockSize
        self.answersBlocksOutOfOrder = answersBlocksOutOfOrder
        self.numbering = numbering
        self.windowSize = windowSize
        self.sentOptionAck = sendsOptionAck
        self.timer = timer
    }

    public var deadline: Nanoseconds? { timer.deadline }
    public var retransmits: Int { timer.totalRetransmits }

    /// The server's first reply to a WRQ: OACK, or ACK 0.
    public mutating func start(now: Nanoseconds) -> Reply {
        timer.sentNew(now: now)
        return sentOptionAck ? .optionAck : .ack(0)
    }

    /// The client side after RRQ: the first DATA is awaited; the RRQ itself is resent by the client.
    public mutating func startAwaiting(now: Nanoseconds) {
        timer.sentNew(now: now)
    }

    public mutating func receiveData(_ wireBlock: UInt16, length: Int, now: Nanoseconds) -> Receipt {
        if wireBlock == numbering.wire(received + 1) && !isFinished {
            timer.answered(now: now)
            received += 1
            bytesReceived += length
            reAckedSinceProgress = false
            let last = length < blockSize
            if last || received - lastAcked >= windowSize {
                lastAcked = received
                if last {
                    isFinished = true
                }
                timer.sentNew(now: now)
                return Receipt(deliver: true, reply: .ack(numbering.wire(received)), finished: last)
            }
            timer.sentNew(now: now)
            return Receipt(deliver: true, reply: .none, finished: false)
        }
        // A duplicate (our ACK was lost) or a block past a gap: ACK the last block in order,
        // once per progress step, or again when the sender has evidently timed out since.
        if isFinished && wireBlock == numbering.wire(received) {
            return Receipt(deliver: false, reply: .ack(wireBlock), finished: false)
        }
        if answersBlocksOutOfOrder {
            lastAcked = received
            timer.sentNew(now: now)
            return Receipt(deliver: false, reply: lastReply, finished: false)
        }
        guard !reAckedSinceProgress || now - timer.lastSent >= timer.current / 2 else {
            return Receipt(deliver: false, reply: .none, finished: false)
        }
        reAckedSinceProgress = true
        lastAcked = received
        guard timer.resentEarly(now: now) else { return Receipt(deliver: false, reply: .none, finished: false, timedOut: true) }
        return Receipt(deliver: false, reply: lastReply, finished: false)
    }

    private var lastReply: Reply {
        received == 0 && sentOptionAck ? .optionAck : .ack(numbering.wire(received))
    }

    /// Our reply went out later than the block arrived (a client holding its ACK on purpose):
    /// the wait for the sender's next block starts now.
    public mutating func replied(now: Nanoseconds) {
        timer.sentNew(now: now)
    }

    /// The timer fired: resend the last ACK (or OACK), or nil when retries are exhausted.
    public mutating func timeout(now: Nanoseconds) -> Reply? {
        guard timer.retransmit(now: now) else { return nil }
        lastAcked = received
        return lastReply
    }
}
