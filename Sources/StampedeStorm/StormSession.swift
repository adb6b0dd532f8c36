import Glibc
import StampedeIO
import StampedeProtocol

/// Why a storm transfer failed. Each one is counted and reported, never hidden or retried.
public enum StormFailure: Error, Equatable, Sendable, CustomStringConvertible {
    /// No answer within the retries: a lost transfer.
    case timedOut
    /// The server sent ERROR with this code.
    case serverError(code: UInt16)
    /// The first byte that differs from the expected file (`--verify`).
    case corrupted(offset: Int)
    /// The transfer ended with another size than the expected file, or than the tsize announced.
    case wrongSize(expected: Int, received: Int)
    /// The server broke the protocol (an option we did not ask for, a block larger than blksize).
    case protocolError(String)
    /// The client socket could not be opened or reported an error (ECONNREFUSED).
    case socketError(Errno)
    /// The storm was stopped (SIGINT, SIGTERM) while this transfer ran.
    case interrupted

    /// The failure's kind, for counting.
    public var kind: String {
        switch self {
        case .timedOut: return "timed out"
        case .serverError(let code): return "server error \(code)"
        case .corrupted: return "corrupted"
        case .wrongSize: return "wrong size"
        case .protocolError: return "protocol error"
        case .socketError(let errno): return "socket error \(errno)"
        case .interrupted: return "interrupted"
        }
    }

    public var description: String {
        switch self {
        case .corrupted(let offset): return "corrupted: byte \(offset) differs from the expected file"
        case .wrongSize(let expected, let received): return "wrong size: \(received) bytes, expected \(expected)"
        case .protocolError(let what): return "protocol error: \(what)"
        default: return kind
        }
    }
}

/// One storm client's transfer, as a state machine without I/O: the caller sends what a step
/// asks for and arms a timer at `deadline`. RRQ → (OACK → ACK 0) → DATA ... → last ACK, with
/// the same DataReceiver the server and `stampede get` use; every delivered byte is checked.
public struct StormSession {
    public enum Send: Equatable, Sendable {
        case none
        /// The RRQ, to the server's request port.
        case request
        /// An ACK to the server's transfer port.
        case ack(UInt16)
        /// ERROR 5 to the datagram's sender, a stranger to this transfer (RFC 1350 §4).
        case unknownTransferID
        /// ERROR 0 to the server: we gave up on this transfer, it need not retransmit.
        case abort
        /// ERROR 8 to the server: its OACK holds what we cannot accept (RFC 2347).
        case refuseOptions
    }

    public enum End: Equatable, Sendable {
        case ok
        case failed(StormFailure)
    }

    public struct Step: Equatable, Sendable {
        public var send: Send
        public var end: End?
        public init(_ send: Send, _ end: End? = nil) {
            self.send = send
            self.end = end
        }
    }

    public let started: Nanoseconds
    /// The server's request port until its first reply, then its transfer port (TID).
    public private(set) var server: SocketAddress
    private var knowsTransferID = false
    private var requestTimer: RetransmitTimer
    public private(set) var receiver: DataReceiver?
    private var transferSize: Int?
    private var holdUntil: Nanoseconds?
    private var heldAck: UInt16?
    private var acked = false
    /// DATA that did not advance the transfer: the server's retransmissions.
    public private(set) var duplicates = 0

    /// Starts the transfer; the caller sends the request.
    public init(plan: StormPlan, now: Nanoseconds) {
        started = now
        server = plan.server
        // The RRQ is resent at our own interval: a `timeout` option applies only once acknowledged.
        requestTimer = RetransmitTimer(base: plan.retransmit, maxRetries: plan.retries)
        requestTimer.sentNew(now: now)
    }

    static func retransmitBase(_ plan: StormPlan) -> Nanoseconds {
        plan.timeoutSeconds.map { Nanoseconds($0) * Clock.nanosecondsPerSecond } ?? plan.retransmit
    }

    public var deadline: Nanoseconds? { holdUntil ?? (receiver?.deadline ?? requestTimer.deadline) }
    public var bytesReceived: Int { receiver?.bytesReceived ?? 0 }
    public var retransmits: Int { requestTimer.totalRetransmits + (receiver?.retransmits ?? 0) }

    /// The timer at `deadline` fired.
    public mutating func timerFired(now: Nanoseconds) -> Step {
        if let hold = holdUntil {
            guard now >= hold else { return Step(.none) }
            holdUntil = nil
            receiver?.replied(now: now)
            let ack = heldAck
            heldAck = nil
            return Step(ack.map(Send.ack) ?? .none)
        }
        if receiver != nil {
            guard let reply = receiver!.timeout(now: now) else { return Step(.abort, .failed(.timedOut)) }
            if case .ack(let block) = reply { return Step(.ack(block)) }
            return Step(.none)
        }
        guard requestTimer.retransmit(now: now) else { return Step(.none, .failed(.timedOut)) }
        return Step(.request)
    }

    /// A datagram from `peer` arrived on this client's socket.
    public mutating func receive(_ bytes: UnsafeRawBufferPointer, from peer: SocketAddress, now: Nanoseconds,
                                 plan: StormPlan) -> Step {
        if !knowsTransferID {
            // The first reply names the server's transfer port; it must come from the server's host.
            var host = peer
            host.port = plan.server.port
            guard host == plan.server else { return Step(.none) }
            server = peer
            knowsTransferID = true
        } else if peer != server {
            return Step(.unknownTransferID)
        }
        switch TransferPacket(bytes) {
        case .optionAck(let body):
            guard receiver == nil else {
                // Our ACK 0 was lost and the server resent its OACK.
                duplicates += 1
                return Step(receiver!.received == 0 && holdUntil == nil ? .ack(0) : .none)
            }
            do {
                let options = try TransferOptions(optionAck: body, asked: plan.requestOptions)
                transferSize = options.transferSize
                receiver = DataReceiver(blockSize: options.blockSize, windowSize: options.windowSize, sendsOptionAck: false,
                                        timer: RetransmitTimer(base: Self.retransmitBase(plan), maxRetries: plan.retries))
                receiver!.startAwaiting(now: now)
                requestTimer.stop()
                return Step(.ack(0))
            } catch {
                return Step(.refuseOptions, .failed(.protocolError(error.description)))
            }
        case .data(let block, let payload):
            if receiver == nil {
                // No OACK: the server runs RFC 1350's defaults.
                receiver = DataReceiver(blockSize: 512, windowSize: 1, sendsOptionAck: false,
                                        timer: RetransmitTimer(base: Self.retransmitBase(plan), maxRetries: plan.retries))
                receiver!.startAwaiting(now: now)
                requestTimer.stop()
            }
            return data(block, payload, now: now, plan: plan)
        case .error(let code, _):
            return Step(.none, .failed(.serverError(code: code)))
        default:
            return Step(.abort, .failed(.protocolError("unexpected packet")))
        }
    }

    private mutating func data(_ block: UInt16, _ payload: UnsafeRawBufferPointer, now: Nanoseconds, plan: StormPlan) -> Step {
        guard payload.count <= receiver!.blockSize else {
            return Step(.abort, .failed(.protocolError("a block of \(payload.count) bytes, blksize is \(receiver!.blockSize)")))
        }
        if holdUntil != nil && block != DataSender.wire(receiver!.received + 1) {
            // The server resends while we hold our ACK on purpose: nothing to answer yet.
            duplicates += 1
            return Step(.none)
        }
        let receipt = receiver!.receiveData(block, length: payload.count, now: now)
        if receipt.deliver {
            if let failure = verify(payload, at: receiver!.bytesReceived - payload.count, plan: plan) {
                return Step(.abort, .failed(failure))
            }
        } else {
            duplicates += 1
        }
        if receipt.finished {
            let received = receiver!.bytesReceived
            if let size = plan.expected?.count ?? transferSize, size != received {
                return Step(.ack(block), .failed(.wrongSize(expected: size, received: received)))
            }
            return Step(.ack(block), .ok)
        }
        guard case .ack(let number) = receipt.reply else { return Step(.none) }
        if holdUntil != nil {
            heldAck = number
            return Step(.none)
        }
        if !acked && plan.hold > 0 {
            acked = true
            holdUntil = now + plan.hold
            heldAck = number
            return Step(.none)
        }
        acked = true
        return Step(.ack(number))
    }

    /// Compares a delivered block with the expected file; the offset of the first difference.
    private func verify(_ payload: UnsafeRawBufferPointer, at offset: Int, plan: StormPlan) -> StormFailure? {
        guard let expected = plan.expected, payload.count > 0 else { return nil }
        guard offset + payload.count <= expected.count else {
            return .wrongSize(expected: expected.count, received: offset + payload.count)
        }
        return expected.withUnsafeBytes { whole in
            guard memcmp(whole.baseAddress! + offset, payload.baseAddress!, payload.count) != 0 else { return nil }
            let first = (0..<payload.count).first { whole[offset + $0] != payload[$0] }!
            return .corrupted(offset: offset + first)
        }
    }
}
