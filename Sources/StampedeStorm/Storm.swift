import CStampedeSys
import Glibc
import StampedeIO
import StampedeProtocol

/// Plays a storm's clients over one backend on one thread: a socket per client, all of them
/// served by one loop with a timer wheel, like the server's worker. `run` drives it to the end;
/// `start` and `turn` let a caller interleave it with a server in one thread (the tests do).
///
/// A storm is not shared: each runs on one thread at a time (the one that made it, or the one it
/// is handed to, which then owns it until joined), hence `@unchecked Sendable`.
public final class Storm<Backend: DatagramBackend>: @unchecked Sendable {
    public let plan: StormPlan
    public let backend: Backend
    public private(set) var report = StormReport()

    private var sessions: [ClientTransfer<SocketAddress>?]
    private var sockets: [SocketHandle?]
    private var generations: [UInt32]
    private var idle: [Int]
    private var wheel: TimerWheel
    private var expired: [Int32] = []
    private let request: [UInt8]
    private let clientPlan: ClientPlan
    private let unknownTransferID = PacketWriter.error(TFTPError(.unknownTransferID, "Unknown transfer ID"))
    private let abortPacket = PacketWriter.error(TFTPError(.notDefined, "storm: transfer abandoned"))
    private let refuseOptionsPacket = PacketWriter.error(TFTPError(.optionNegotiation, "storm: option refused"))
    private var ackPacket: [UInt8] = [0, 4, 0, 0]
    private let local: SocketAddress
    private var launched = 0
    /// Transfers running: the slots not idle.
    private var active: Int { sessions.count - idle.count }
    private var startedAt: Nanoseconds = 0
    private var launchUntil: Nanoseconds?

    public init(plan: StormPlan, backend: Backend) {
        self.plan = plan
        self.backend = backend
        let slots = max(1, plan.clients)
        sessions = Array(repeating: nil, count: slots)
        sockets = Array(repeating: nil, count: slots)
        generations = Array(repeating: 0, count: slots)
        idle = Array((0..<slots).reversed())
        wheel = TimerWheel(capacity: slots, now: stampede_monotonic_ns())
        expired.reserveCapacity(slots)
        request = plan.request.encoded()
        clientPlan = plan.clientPlan
        local = SocketAddress(parsing: plan.server.isIPv6 ? "[::]:0" : "0.0.0.0:0", defaultPort: 0)!
        report.backend = backend.description
        report.durations.reserveCapacity(plan.plannedTotal ?? 65536)
    }

    public var isFinished: Bool { startedAt != 0 && active == 0 && !mayLaunch(now: stampede_monotonic_ns()) }

    /// Sends the first wave of requests: every client at once, as a rack powering on.
    public func start(now: Nanoseconds) {
        startedAt = now
        launchUntil = plan.duration.map { now + $0 }
        launchAll(now: now)
    }

    /// Runs the storm to its end; `progress` is called about ten times a second. When `stop`
    /// says so, no transfer starts any more and the running ones count as interrupted.
    public func run(progress: ((StormReport, Int) -> Void)? = nil, stop: (() -> Bool)? = nil) -> StormReport {
        start(now: stampede_monotonic_ns())
        var lastProgress = startedAt
        while !isFinished {
            let now = stampede_monotonic_ns()
            if let stop, stop() {
                interrupt(now: now)
                break
            }
            turn(now: now, maxWait: 100_000_000)
            if let progress, now - lastProgress >= 100_000_000 {
                lastProgress = now
                progress(report, active)
            }
        }
        _ = backend.poll(deadline: stampede_monotonic_ns())
        return report
    }

    /// One loop turn: expire timers, flush sends and wait, handle what arrived, start new clients.
    public func turn(now: Nanoseconds, maxWait: Nanoseconds) {
        wheel.expire(now: now, into: &expired)
        for slot in expired where sessions[Int(slot)] != nil {
            let step = sessions[Int(slot)]!.timerFired(now: now)
            apply(step, slot: Int(slot), peer: nil, now: now)
        }
        expired.removeAll(keepingCapacity: true)
        var deadline = now + maxWait
        if let next = wheel.nextDeadline() { deadline = min(deadline, next) }
        let count = backend.poll(deadline: deadline)
        let arrival = stampede_monotonic_ns()
        for i in 0..<count {
            let datagram = backend.datagram(i)
            let slot = Int(datagram.tag & 0xFFFF_FFFF)
            guard slot < sessions.count, sessions[slot] != nil, generations[slot] == UInt32(datagram.tag >> 32) else { continue }
            if let error = datagram.error {
                finish(slot, .failed(.socketError(error)), now: arrival)
                continue
            }
            let step = sessions[slot]!.receive(datagram.bytes, from: datagram.peer, now: arrival)
            apply(step, slot: slot, peer: datagram.peer, now: arrival)
        }
        launchAll(now: arrival)
        report.wall = arrival - startedAt
    }

    /// Ends every running transfer as interrupted (the server is told) and starts no more.
    public func interrupt(now: Nanoseconds) {
        launchUntil = now
        for slot in sessions.indices where sessions[slot] != nil {
            send(.abort, slot: slot, peer: nil)
            finish(slot, .failed(.interrupted), now: now)
        }
        report.wall = now - startedAt
    }

    private func mayLaunch(now: Nanoseconds) -> Bool {
        if let total = plan.plannedTotal, launched >= total { return false }
        if let until = launchUntil, now >= until { return false }
        return true
    }

    private func launchAll(now: Nanoseconds) {
        while !idle.isEmpty && mayLaunch(now: now) {
            let slot = idle.removeLast()
            launched += 1
            generations[slot] &+= 1
            do {
                sockets[slot] = try backend.openClient(local: local, largestDatagram: (plan.blockSize ?? 512) + 4,
                                                       tag: UInt64(generations[slot]) << 32 | UInt64(slot))
            } catch {
                report.recordFailure(.socketError(error))
                idle.append(slot)
                // Out of sockets or ports: try again next turn (a transfer may have ended by then).
                return
            }
            sessions[slot] = ClientTransfer(plan: clientPlan, server: plan.server, now: now)
            report.peakActive = max(report.peakActive, active)
            apply(sessions[slot]!.start(now: now), slot: slot, peer: nil, now: now)
        }
    }

    /// Does what a client's step says: sends, checks delivered bytes (`--verify`), ends, or waits.
    private func apply(_ step: ClientStep, slot: Int, peer: SocketAddress?, now: Nanoseconds) {
        if let (offset, bytes) = step.delivered, let failure = verify(bytes, at: offset) {
            send(.abort, slot: slot, peer: peer)
            finish(slot, .failed(failure), now: now)
            return
        }
        send(step.send, slot: slot, peer: peer)
        switch step.end {
        case .ok?:
            let received = sessions[slot]!.bytesReceived
            if let expected = plan.expected, expected.count != received {
                finish(slot, .failed(.wrongSize(expected: expected.count, received: received)), now: now)
            } else {
                finish(slot, .ok, now: now)
            }
        case .failed(let failure)?:
            finish(slot, .failed(StormFailure(failure)), now: now)
        case nil:
            if let deadline = sessions[slot]!.deadline { wheel.schedule(slot, at: deadline) } else { wheel.cancel(slot) }
        }
    }

    private func send(_ what: ClientSend, slot: Int, peer: SocketAddress?) {
        let socket = sockets[slot]!
        let server = sessions[slot]!.server
        switch what {
        case .none, .blocks: break  // a storm only downloads
        case .request:
            request.withUnsafeBytes { backend.send(socket, to: plan.server, from: nil, packet: $0) }
        case .ack(let block):
            ackPacket[2] = UInt8(block >> 8)
            ackPacket[3] = UInt8(block & 0xFF)
            ackPacket.withUnsafeBytes { backend.send(socket, to: server, from: nil, packet: $0) }
        case .unknownTransferID:
            if let peer { unknownTransferID.withUnsafeBytes { backend.send(socket, to: peer, from: nil, packet: $0) } }
        case .abort:
            abortPacket.withUnsafeBytes { backend.send(socket, to: server, from: nil, packet: $0) }
        case .refuseOptions:
            refuseOptionsPacket.withUnsafeBytes { backend.send(socket, to: server, from: nil, packet: $0) }
        }
    }

    /// Compares delivered bytes with the expected file; the offset of the first difference.
    private func verify(_ payload: UnsafeRawBufferPointer, at offset: Int) -> StormFailure? {
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

    private func finish(_ slot: Int, _ end: StormEnd, now: Nanoseconds) {
        report.record(end, transfer: sessions[slot]!, now: now)
        sessions[slot] = nil
        wheel.cancel(slot)
        if let socket = sockets[slot] { backend.close(socket) }
        sockets[slot] = nil
        idle.append(slot)
    }
}

/// How a storm transfer ended.
enum StormEnd: Equatable {
    case ok
    case failed(StormFailure)
}
