import StampedeBase

/// A peer's address as a client machine needs it: comparable, with a port that a reply may change
/// (the server's transfer port replaces its request port). Socket addresses are one.
public protocol PeerAddress: Equatable, Sendable {
    var port: UInt16 { get set }
}

/// What a client transfer asks for, and how patient it is.
public struct ClientPlan: Sendable {
    /// The RRQ or WRQ, with the options asked.
    public var request: Request
    /// Our retransmit interval when no `timeout` is negotiated, and how often we retry.
    public var retransmit: Nanoseconds
    public var retries: Int
    /// An upload's bytes (after netascii encoding, if any).
    public var uploadSize = 0
    /// A download holds its first ACK this long: with a long enough hold every transfer of a
    /// storm is open at once, as with a rack of slow firmware.
    public var holdFirstAck: Nanoseconds = 0
    /// Backoff stops doubling the retransmit interval at this multiple of it (1: a fixed
    /// interval, as EDK2's PXE keeps).
    public var maxBackoff: Int64 = 8
    /// A download answers every block out of order at once, and every ACK starts the tries over
    /// (EDK2); otherwise as `DataReceiver` does by default.
    public var answersBlocksOutOfOrder = false
    /// A size probe (EDK2's): once the OACK arrives, refuse it with ERROR 8 and end, successfully.
    public var probeOnly = false
    /// Read this many bytes, then close the transfer with ERROR 0 "closed" (GRUB closing a file
    /// early), successfully; nil reads the whole file.
    public var closeAfter: Int?

    public init(request: Request, retransmit: Nanoseconds = nanosecondsPerSecond, retries: Int = 5) {
        self.request = request
        self.retransmit = retransmit
        self.retries = retries
    }
}

/// What a client transfer's step asks its caller to send.
public enum ClientSend: Equatable, Sendable {
    case none
    /// The request, to the server's request port.
    case request
    /// A download's ACK, to the server's transfer port.
    case ack(UInt16)
    /// An upload's DATA for blocks first ..< first + count (`range(ofBlock:)` gives the bytes).
    case blocks(first: Int, count: Int)
    /// ERROR 5 to the datagram's sender, a stranger to this transfer.
    case unknownTransferID
    /// ERROR 0 to the server: we gave up on this transfer, it need not retransmit.
    case abort
    /// ERROR 8 to the server: its OACK holds what we cannot accept (RFC 2347), or a size probe
    /// has what it asked for.
    case refuseOptions
    /// ERROR 0 "closed" to the server: we read what we wanted and close the file early.
    case close
}

/// Why a client transfer failed, as far as the protocol tells.
public enum ClientFailure: Error, Equatable, Sendable, CustomStringConvertible {
    /// No answer within the retries.
    case timedOut
    /// The server sent ERROR with this code and message.
    case serverError(code: UInt16, message: String)
    /// A download ended with another size than the tsize the server announced.
    case wrongSize(expected: Int, received: Int)
    /// The server broke the protocol (an option we did not ask for, a block larger than blksize).
    case protocolError(String)

    public var description: String {
        switch self {
        case .timedOut: return "timed out"
        case .serverError(let code, let message): return "server error \(code): \(message)"
        case .wrongSize(let expected, let received): return "wrong size: \(received) bytes, expected \(expected)"
        case .protocolError(let what): return "protocol error: \(what)"
        }
    }
}

public enum ClientEnd: Equatable, Sendable {
    case ok
    case failed(ClientFailure)
}

/// What a client transfer says after each event: what to send, what arrived, whether it ended.
public struct ClientStep: Equatable {
    public var send: ClientSend
    /// A download's new bytes: a slice of the datagram just handed over (valid as long as it
    /// is), at this offset of the file.
    public var delivered: (offset: Int, bytes: UnsafeRawBufferPointer)?
    public var end: ClientEnd?

    public init(_ send: ClientSend, _ end: ClientEnd? = nil, delivered: (offset: Int, bytes: UnsafeRawBufferPointer)? = nil) {
        self.send = send
        self.end = end
        self.delivered = delivered
    }

    public static func == (a: ClientStep, b: ClientStep) -> Bool {
        a.send == b.send && a.end == b.end && a.delivered?.offset == b.delivered?.offset
            && a.delivered?.bytes.count == b.delivered?.bytes.count
    }
}

/// One transfer as a TFTP client runs it, without I/O: the caller sends what each step asks for,
/// hands over every datagram that arrives with its sender, and calls `timerFired` at `deadline`.
/// `stampede get`, `put` and `storm` all run their transfers through it.
///
/// A download is RRQ → (OACK → ACK 0) → DATA ... → the last ACK, received by a DataReceiver; an
/// upload is WRQ → (OACK | ACK 0) → DATA ... → the last ACK, sent by a DataSender. The server's
/// first reply names its transfer port (TID); a datagram from any other port gets ERROR 5 and
/// changes nothing (RFC 1350 §4). An OACK holding what was not asked is refused with ERROR 8.
public struct ClientTransfer<Address: PeerAddress> {
    public typealias Plan = ClientPlan
    public typealias Step = ClientStep

    public let plan: Plan
    public let started: Nanoseconds
    /// The server's request port until its first reply, then its transfer port (TID).
    public private(set) var server: Address
    private var knowsTransferID = false
    private var requestTimer: RetransmitTimer
    public private(set) var receiver: DataReceiver?
    public private(set) var sender: DataSender?
    /// The size a download's OACK announced (tsize).
    public private(set) var transferSize: Int?
    private var holdUntil: Nanoseconds?
    private var heldAck: UInt16?
    private var acked = false
    /// DATA (or ACKs) that did not advance the transfer: the server's retransmissions.
    public private(set) var duplicates = 0

    public init(plan: Plan, server: Address, now: Nanoseconds) {
        self.plan = plan
        self.started = now
        self.server = server
        // The request is resent at our own interval: a `timeout` option applies only once acknowledged.
        requestTimer = RetransmitTimer(base: plan.retransmit, maxRetries: plan.retries)
        requestTimer.maxBackoff = plan.maxBackoff
    }

    /// Sends the request.
    public mutating func start(now: Nanoseconds) -> Step {
        requestTimer.sentNew(now: now)
        return Step(.request)
    }

    public var isWrite: Bool { plan.request.isWrite }
    public var deadline: Nanoseconds? { holdUntil ?? (receiver?.deadline ?? sender?.deadline ?? requestTimer.deadline) }
    public var bytesReceived: Int { receiver?.bytesReceived ?? 0 }
    public var bytesAcknowledged: Int { sender?.bytesAcknowledged ?? 0 }
    public var retransmits: Int { requestTimer.totalRetransmits + (receiver?.retransmits ?? 0) + (sender?.retransmits ?? 0) }
    /// The bytes of an upload's block `n`.
    public func range(ofBlock n: Int) -> Range<Int> { sender!.range(ofBlock: n) }
    /// An upload's block `n` as its DATA numbers it.
    public func wire(_ n: Int) -> UInt16 { sender!.wire(n) }

    private func timer(_ options: TransferOptions) -> RetransmitTimer {
        var timer = RetransmitTimer(base: options.retransmitTimeout ?? plan.retransmit,
                                    maxRetries: plan.retries)
        timer.maxBackoff = plan.maxBackoff
        return timer
    }

    /// The timer at `deadline` fired.
    public mutating func timerFired(now: Nanoseconds) -> Step {
        if let hold = holdUntil {
            guard now >= hold else { return Step(.none) }
            holdUntil = nil
            receiver?.replied(now: now)
            let ack = heldAck
            heldAck = nil
            return Step(ack.map(ClientSend.ack) ?? .none)
        }
        if receiver != nil {
            guard let reply = receiver!.timeout(now: now) else { return Step(.abort, .failed(.timedOut)) }
            if case .ack(let block) = reply { return Step(.ack(block)) }
            return Step(.none)
        }
        if sender != nil { return sending(sender!.timeout(now: now)) }
        guard requestTimer.retransmit(now: now) else { return Step(.none, .failed(.timedOut)) }
        return Step(.request)
    }

    /// A datagram from `peer` arrived on this transfer's socket.
    public mutating func receive(_ bytes: UnsafeRawBufferPointer, from peer: Address, now: Nanoseconds) -> Step {
        if !knowsTransferID {
            // The first reply names the server's transfer port; it must come from the server's
            // host, and it may be no DATA but block 1 and no ACK but 0 (a server answers a request
            // so). Another is a datagram of an earlier transfer to the port this socket now has
            // (its server resending its last blocks to a client that had them all and moved on):
            // taken as the first reply, it would tie this transfer to that one's.
            var host = peer
            host.port = server.port
            guard host == server, Self.mayAnswerARequest(TransferPacket(bytes)) else { return Step(.none) }
            server = peer
            knowsTransferID = true
        } else if peer != server {
            return Step(.unknownTransferID)
        }
        switch TransferPacket(bytes) {
        case .optionAck(let body):
            return optionAck(body, now: now)
        case .data(let block, let payload) where !isWrite:
            if receiver == nil {
                // A size probe needs the OACK's tsize: a server that ignores options fails it.
                if plan.probeOnly { return Step(.abort, .failed(.protocolError("DATA where the size probe needs an OACK"))) }
                startReceiving(TransferOptions(), now: now)  // no OACK: RFC 1350's defaults
            }
            return data(block, payload, now: now)
        case .ack(let block) where isWrite:
            if sender == nil {
                guard block == 0 else { return Step(.abort, .failed(.protocolError("ACK \(block) before any DATA"))) }
                return startSending(TransferOptions(), now: now)  // no OACK: RFC 1350's defaults
            }
            return sending(sender!.receiveAck(block, now: now))
        case .error(let code, let message):
            return Step(.none, .failed(.serverError(code: code, message: sanitizedForLog(message.prefix(while: { $0 != 0 }),
                                                                                          limit: 200))))
        default:
            return Step(.abort, .failed(.protocolError("unexpected packet")))
        }
    }

    /// Whether `packet` may be a server's first reply to a request: anything but a DATA of
    /// another block than 1 or an ACK of another than 0.
    static func mayAnswerARequest(_ packet: TransferPacket) -> Bool {
        switch packet {
        case .data(let block, _): block == 1
        case .ack(let block): block == 0
        default: true
        }
    }

    private mutating func optionAck(_ body: UnsafeRawBufferPointer, now: Nanoseconds) -> Step {
        guard receiver == nil && sender == nil else {
            // Our reply to it was lost and the server sent its OACK again.
            duplicates += 1
            if isWrite { return Step(.none) }
            return Step(receiver!.received == 0 && holdUntil == nil ? .ack(0) : .none)
        }
        let options: TransferOptions
        do {
            options = try TransferOptions(optionAck: body, asked: plan.request.options)
        } catch {
            return Step(.refuseOptions, .failed(.protocolError("\(error.description); refused with ERROR 8")))
        }
        if isWrite { return startSending(options, now: now) }
        transferSize = options.transferSize
        if plan.probeOnly {
            requestTimer.stop()
            // The probe is for the size: an OACK without it fails the firmware's boot (EDK2).
            guard options.transferSize != nil else { return Step(.refuseOptions, .failed(.protocolError("a size probe's OACK without tsize"))) }
            return Step(.refuseOptions, .ok)
        }
        startReceiving(options, now: now)
        return Step(.ack(0))
    }

    private mutating func startReceiving(_ options: TransferOptions, now: Nanoseconds) {
        receiver = DataReceiver(blockSize: options.blockSize, windowSize: options.windowSize, numbering: options.numbering,
                                sendsOptionAck: false, answersBlocksOutOfOrder: plan.answersBlocksOutOfOrder,
                                timer: timer(options))
        receiver!.startAwaiting(now: now)
        requestTimer.stop()
    }

    private mutating func startSending(_ options: TransferOptions, now: Nanoseconds) -> Step {
        sender = DataSender(totalBytes: plan.uploadSize, blockSize: options.blockSize, windowSize: options.windowSize,
                            numbering: options.numbering,
                            sendsOptionAck: false, timer: timer(options))
        requestTimer.stop()
        return sending(sender!.start(now: now))
    }

    private mutating func sending(_ action: DataSender.Action) -> Step {
        switch action {
        case .none, .sendOptionAck:
            if isWrite && sender != nil { duplicates += 1 }
            return Step(.none)
        case .sendBlocks(let first, let count): return Step(.blocks(first: first, count: count))
        case .finished: return Step(.none, .ok)
        case .timedOut: return Step(.abort, .failed(.timedOut))
        }
    }

    private mutating func data(_ block: UInt16, _ payload: UnsafeRawBufferPointer, now: Nanoseconds) -> Step {
        guard payload.count <= receiver!.blockSize else {
            return Step(.abort, .failed(.protocolError("a block of \(payload.count) bytes, blksize is \(receiver!.blockSize)")))
        }
        if holdUntil != nil && block != receiver!.numbering.wire(receiver!.received + 1) {
            // The server resends while we hold our ACK on purpose: nothing to answer yet.
            duplicates += 1
            return Step(.none)
        }
        let receipt = receiver!.receiveData(block, length: payload.count, now: now)
        if receipt.timedOut { return Step(.abort, .failed(.timedOut)) }
        let delivered = receipt.deliver ? (offset: receiver!.bytesReceived - payload.count, bytes: payload) : nil
        if !receipt.deliver { duplicates += 1 }
        if receipt.finished {
            let received = receiver!.bytesReceived
            if let size = transferSize, size != received {
                return Step(.ack(block), .failed(.wrongSize(expected: size, received: received)), delivered: delivered)
            }
            return Step(.ack(block), .ok, delivered: delivered)
        }
        if let limit = plan.closeAfter, receiver!.bytesReceived >= limit {
            return Step(.close, .ok, delivered: delivered)
        }
        guard case .ack(let number) = receipt.reply else { return Step(.none, delivered: delivered) }
        if holdUntil != nil {
            heldAck = number
            return Step(.none, delivered: delivered)
        }
        if !acked && plan.holdFirstAck > 0 {
            acked = true
            holdUntil = now + plan.holdFirstAck
            heldAck = number
            return Step(.none, delivered: delivered)
        }
        acked = true
        return Step(.ack(number), delivered: delivered)
    }
}
