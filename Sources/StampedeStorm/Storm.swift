import CStampedeSys
import Glibc
import StampedeBase
import StampedeHTTPWire
import StampedeIO
import StampedeProtocol

/// Plays a storm's machines over one backend on one thread: each machine runs the plan's boot
/// profile stage by stage, a socket per transfer, all of them served by one loop with a timer
/// wheel, like the server's worker. A profile's `http` stages run on one TCP connection per
/// machine (Storm+HTTP.swift), whose epoll the backend watches beside its datagrams. `run` drives it to the end;
/// `start` and `turn` let a caller interleave it with a server in one thread (the tests do).
///
/// A storm is not shared: each runs on one thread at a time (the one that made it, or the one it
/// is handed to, which then owns it until joined), hence `@unchecked Sendable`.
public final class Storm<Backend: DatagramBackend>: @unchecked Sendable {
    public let plan: StormPlan
    public let backend: Backend
    public internal(set) var report: StormReport

    /// Per slot: the machine booting in it, its running TFTP transfer and that transfer's socket,
    /// its HTTP connection (kept from one `http` stage to the next, as firmware keeps it).
    var machines: [Machine?]
    private var sessions: [ClientTransfer<SocketAddress>?]
    private var sockets: [SocketHandle?]
    var connections: [HTTPConnection?]
    private var generations: [UInt32]
    private var idle: [Int]
    var wheel: TimerWheel
    /// The HTTP connections' readiness, watched by the backend; nil when no stage is over HTTP.
    var http: HTTPEvents?
    /// The `dhcp` stages' socket and exchanges (Storm+DHCP.swift); nil without such stages, or
    /// when the socket could not be had (`dhcpUnavailable` says why).
    var dhcp: StormDHCP?
    var dhcpUnavailable: Errno?
    private var expired: [Int32] = []
    /// The bytes each name must have (nil: no file to compare with), read once per name.
    private var expected: [String: [UInt8]?]
    private let unknownTransferID = PacketWriter.error(TFTPError(.unknownTransferID, "Unknown transfer ID"))
    private let abortPacket = PacketWriter.error(TFTPError(.notDefined, "storm: transfer abandoned"))
    private let refuseOptionsPacket = PacketWriter.error(TFTPError(.optionNegotiation, "storm: option refused"))
    private let closePacket = PacketWriter.error(TFTPError(.notDefined, "closed"))
    private var ackPacket: [UInt8] = [0, 4, 0, 0]
    private var launched = 0
    /// Machines booting: the slots not idle.
    private var active: Int { machines.count - idle.count }
    private var startedAt: Nanoseconds = 0
    private var launchUntil: Nanoseconds?
    /// The largest DATA any stage may receive: every client socket's buffers fit it.
    private let largestDatagram: Int
    /// Machines booting in every storm of a run (`StormRunner`'s threads), and the most at once.
    private let booting: MachinesBooting
    /// Stopped: a machine whose boot fails now does not start over.
    private var interrupted = false

    /// A machine in the middle of its boot: which stage, which of the stage's names.
    struct Machine {
        var identity: MachineIdentity
        var stage = 0
        var name = 0
        /// `${dir}`: the directory of the name the last `first` stage found.
        var directory = ""
        var bootStarted: Nanoseconds
        var stageStarted: Nanoseconds
        /// The running transfer's request, encoded once (it is resent as it is), and the bytes its
        /// file must have, looked up once per transfer rather than per DATA.
        var request: [UInt8] = []
        var expected: [UInt8]?
        /// Times this machine has started over (the profile's `reboot`), and whether it waits to
        /// power on again (the timer wheel holds when).
        var reboots = 0
        var rebooting = false
        /// A `follow` stage: what its script named and is still to be fetched, what is fetched
        /// now in the stage's name's place, the script being read (nil: not a script), and how
        /// many scripts it has run.
        var following: [IPXEScript.Fetch] = []
        var fetching: String?
        var script: [UInt8]?
        var scripts = 0
    }

    /// `booting`: shared by the storms of one run, so that the peak is of them all at once.
    public init(plan: StormPlan, backend: Backend, booting: MachinesBooting = MachinesBooting()) {
        self.plan = plan
        self.backend = backend
        self.booting = booting
        let slots = plan.slots
        machines = Array(repeating: nil, count: slots)
        sessions = Array(repeating: nil, count: slots)
        sockets = Array(repeating: nil, count: slots)
        generations = Array(repeating: 0, count: slots)
        idle = Array((0..<slots).reversed())
        wheel = TimerWheel(capacity: slots, now: stampede_monotonic_ns())
        expired.reserveCapacity(slots)
        expected = plan.expected.mapValues { Optional($0) }
        largestDatagram = plan.largestBlock + 4
        connections = Array(repeating: nil, count: plan.profile.usesHTTP ? slots : 0)
        http = plan.profile.usesHTTP ? HTTPEvents(watchedBy: backend) : nil
        report = StormReport(profile: plan.profile)
        report.backend = backend.description
        do { dhcp = try Self.openDHCP(plan: plan, backend: backend) } catch { dhcpUnavailable = error }
        report.durations.reserveCapacity(plan.plannedTotal ?? 65536)
    }

    deinit {
        for connection in connections { if let connection { Glibc.close(connection.descriptor) } }
    }

    public var isFinished: Bool { startedAt != 0 && active == 0 && !mayLaunch(now: stampede_monotonic_ns()) }

    /// Powers on the first machines: all at once, as a rack does, or the first of a ramp.
    public func start(now: Nanoseconds) {
        startedAt = now
        launchUntil = plan.duration.map { now + $0 }
        launchAll(now: now)
    }

    /// Runs the storm to its end; `progress` is called about ten times a second. When `stop`
    /// says so, no machine starts any more and the running ones count as interrupted.
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
        report.network = backend.statistics
        return report
    }

    /// One loop turn: expire timers, flush sends and wait, handle what arrived, start new machines.
    public func turn(now: Nanoseconds, maxWait: Nanoseconds) {
        wheel.expire(now: now, into: &expired)
        for expiredSlot in expired {
            let slot = Int(expiredSlot)
            if sessions[slot] != nil {
                if let due = sessions[slot]!.deadline, now - due >= TimerWheel.lateness { report.lateTimers += 1 }
                apply(sessions[slot]!.timerFired(now: now), slot: slot, peer: nil, now: now)
            } else if isFetching(slot) {
                fetchTimerFired(slot, now: now)
            } else if isAskingDHCP(slot) {
                dhcpTimerFired(slot, now: now)
            } else if machines[slot]?.rebooting == true {
                machines[slot]!.rebooting = false
                machines[slot]!.stageStarted = now
                _ = startTransfer(slot, now: now)
            }
        }
        expired.removeAll(keepingCapacity: true)
        var deadline = now + maxWait
        if let next = wheel.nextDeadline() { deadline = min(deadline, next) }
        if let next = nextPowerOn, !idle.isEmpty { deadline = min(deadline, max(next, now)) }
        if http?.hasPending == true { deadline = now }
        let count = backend.poll(deadline: deadline)
        let arrival = stampede_monotonic_ns()
        for i in 0..<count {
            let datagram = backend.datagram(i)
            if datagram.tag == StormDHCP.tag {
                receiveDHCP(datagram, now: arrival)
                continue
            }
            let slot = Int(datagram.tag & 0xFFFF_FFFF)
            guard slot < sessions.count, sessions[slot] != nil, generations[slot] == UInt32(datagram.tag >> 32) else { continue }
            if let error = datagram.error {
                transferEnded(slot, .failed(.socketError(error)), now: arrival)
                continue
            }
            var host = datagram.peer
            host.port = plan.server.port
            if datagram.truncated && host == plan.server {
                // Longer than the largest block asked for, which the socket's buffers hold: no
                // packet a server of this transfer should send.
                send(.abort, slot: slot, peer: datagram.peer)
                transferEnded(slot, .failed(.protocolError("a datagram of more than \(datagram.bytes.count) bytes")), now: arrival)
                continue
            }
            let step = sessions[slot]!.receive(datagram.bytes, from: datagram.peer, now: arrival)
            apply(step, slot: slot, peer: datagram.peer, now: arrival)
        }
        serviceHTTP(now: arrival)
        launchAll(now: arrival)
        report.wall = arrival - startedAt
    }

    /// Ends every running transfer as interrupted (the server is told) and starts no more.
    public func interrupt(now: Nanoseconds) {
        launchUntil = now
        interrupted = true
        for slot in sessions.indices where sessions[slot] != nil {
            send(.abort, slot: slot, peer: nil)
            transferEnded(slot, .failed(.interrupted), now: now)
        }
        for slot in connections.indices where isFetching(slot) {
            closeConnection(slot)
            transferEnded(slot, .failed(.interrupted), now: now)
        }
        for slot in machines.indices where isAskingDHCP(slot) {
            dhcpEnded(slot, .failed(.interrupted), now: now)
        }
        for slot in machines.indices where machines[slot]?.rebooting == true {
            wheel.cancel(slot)
            machineEnded(slot, .failed(.interrupted), now: now)
        }
        report.wall = now - startedAt
    }

    private func mayLaunch(now: Nanoseconds) -> Bool {
        if let total = plan.plannedTotal, launched >= total { return false }
        if let until = launchUntil, now >= until { return false }
        return true
    }

    /// When the next machine powers on, if a ramp holds it back.
    private var nextPowerOn: Nanoseconds? {
        guard plan.ramp > 0, startedAt != 0, mayLaunch(now: startedAt) else { return nil }
        return startedAt + plan.powerOn(plan.machineNumber(launched))
    }

    private func launchAll(now: Nanoseconds) {
        while !idle.isEmpty && mayLaunch(now: now) {
            let number = plan.machineNumber(launched)
            guard now >= startedAt + plan.powerOn(number) else { return }
            let slot = idle.removeLast()
            launched += 1
            machines[slot] = Machine(identity: plan.identity(of: number), bootStarted: now, stageStarted: now)
            report.peakActive = max(report.peakActive, booting.started())
            guard startTransfer(slot, now: now) else { return }
        }
    }

    /// Opens a socket and sends the request for the machine's current stage and name. False when
    /// no socket could be had (the machine's boot fails: counted, never retried behind its back).
    func startTransfer(_ slot: Int, now: Nanoseconds) -> Bool {
        generations[slot] &+= 1
        let machine = machines[slot]!
        let stage = plan.profile.stages[machine.stage]
        if stage.overHTTP || machine.fetching.map(HTTPTarget.isURL) == true { return startFetch(slot, now: now) }
        if stage.dhcp != nil { return startDHCP(slot, now: now) }
        // A followed script's file: its path beneath the server, as iPXE asks it (no leading `/`).
        let clientPlan = machine.fetching.map { stage.plan(named: HTTPLocation.path(of: $0), hold: plan.hold) }
            ?? stage.plan(name: machine.name, for: machine.identity, directory: machine.directory, hold: plan.hold)
        do {
            sockets[slot] = try backend.openClient(local: plan.source(of: machine.identity.number), largestDatagram: largestDatagram,
                                                   buffers: .receiving(clientPlan.request),
                                                   tag: UInt64(generations[slot]) << 32 | UInt64(slot))
        } catch {
            machineEnded(slot, .failed(.socketError(error)), now: now)
            return false
        }
        machines[slot]!.request = clientPlan.request.encoded()
        beginFetch(slot, of: String(decoding: clientPlan.request.filename, as: UTF8.self))
        sessions[slot] = ClientTransfer(plan: clientPlan, server: plan.server, now: now)
        apply(sessions[slot]!.start(now: now), slot: slot, peer: nil, now: now)
        return true
    }

    /// Does what a client's step says: sends, checks delivered bytes, ends, or waits.
    private func apply(_ step: ClientStep, slot: Int, peer: SocketAddress?, now: Nanoseconds) {
        if let (offset, bytes) = step.delivered, let failure = verify(bytes, at: offset, slot: slot) ?? keepScript(bytes, at: offset, slot: slot) {
            send(.abort, slot: slot, peer: peer)
            transferEnded(slot, .failed(failure), now: now)
            return
        }
        send(step.send, slot: slot, peer: peer)
        switch step.end {
        case .ok?:
            // What a probe read is the OACK's tsize; a whole read, its bytes; a read closed early
            // (GRUB's header) has nothing to compare.
            let session = sessions[slot]!
            let size = session.plan.probeOnly ? session.transferSize : session.plan.closeAfter == nil ? session.bytesReceived : nil
            if let size, let whole = machines[slot]!.expected, whole.count != size {
                transferEnded(slot, .failed(.wrongSize(expected: whole.count, received: size)), now: now)
            } else {
                transferEnded(slot, .ok, now: now)
            }
        case .failed(let failure)?:
            transferEnded(slot, .failed(StormFailure(failure)), now: now)
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
            machines[slot]!.request.withUnsafeBytes { backend.send(socket, to: plan.server, from: nil, packet: $0) }
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
        case .close:
            closePacket.withUnsafeBytes { backend.send(socket, to: server, from: nil, packet: $0) }
        }
    }

    /// The bytes the file `name` must have, if the storm knows them: `--verify`'s file, or the
    /// file of that name under `--verify-root`, read once (a name found nowhere is kept as nil,
    /// so a machine-specific name that a search misses is not looked up again). Without a root,
    /// nothing new is kept, however many names the machines ask for.
    func expectedBytes(of name: String) -> [UInt8]? {
        if let known = expected[name] { return known }
        guard let root = plan.verifyRoot else { return nil }
        let bytes = name.split(separator: "/").contains("..") ? nil : try? readWholeFile(root + "/" + name)
        expected[name] = .some(bytes)
        return bytes
    }

    /// A fetch of the machine's stage begins, over TFTP or HTTP, of `name` beneath the root: a
    /// `follow` stage's own name is its first script; and the bytes it must have, but for a
    /// script a machine of records (storm --machines) gets written for it, checked against its
    /// record when read, not against the root's file of that name.
    func beginFetch(_ slot: Int, of name: String) {
        if plan.profile.stages[machines[slot]!.stage].follows && machines[slot]!.fetching == nil {
            machines[slot]!.script = []
            machines[slot]!.scripts = 1
        }
        let written = machines[slot]!.script != nil && !plan.machineList.isEmpty
        machines[slot]!.expected = written ? nil : expectedBytes(of: name)
    }

    /// Names whose expected bytes the storm keeps (tests: bounded without a root).
    public var knownFiles: Int { expected.count }

    /// A followed script's bytes, kept to be read when it has come whole; a failure past
    /// `scriptBytes`.
    private func keepScript(_ bytes: UnsafeRawBufferPointer, at offset: Int, slot: Int) -> StormFailure? {
        guard let script = machines[slot]!.script, offset == script.count else { return nil }
        guard offset + bytes.count <= Self.scriptBytes else { return .protocolError("a script over \(Self.scriptBytes) bytes") }
        machines[slot]!.script!.append(contentsOf: bytes)
        return nil
    }

    /// Compares delivered bytes with the expected file; the offset of the first difference.
    func verify(_ payload: UnsafeRawBufferPointer, at offset: Int, slot: Int) -> StormFailure? {
        guard payload.count > 0, let expected = machines[slot]!.expected else { return nil }
        guard offset + payload.count <= expected.count else {
            return .wrongSize(expected: expected.count, received: offset + payload.count)
        }
        return expected.withUnsafeBytes { whole in
            guard memcmp(whole.baseAddress! + offset, payload.baseAddress!, payload.count) != 0 else { return nil }
            let first = (0..<payload.count).first { whole[offset + $0] != payload[$0] }!
            return .corrupted(offset: offset + first)
        }
    }

    /// A transfer ended (a TFTP one's socket is closed here; an HTTP one has given back its
    /// connection): the machine goes on to its next name or stage, boots, or fails.
    func transferEnded(_ slot: Int, _ end: StormEnd, now: Nanoseconds) {
        let machine = machines[slot]!
        let stage = plan.profile.stages[machine.stage]
        if let session = sessions[slot] {
            report.record(transfer: session, ok: end == .ok, stage: machine.stage)
            sessions[slot] = nil
            if let socket = sockets[slot] { backend.close(socket) }
            sockets[slot] = nil
        }
        wheel.cancel(slot)
        switch end {
        case .failed(let failure) where failure.isNotFound && stage.notFoundIsFine && machine.fetching == nil:
            report.stages[machine.stage].notFound += 1
            if stage.action == .first {
                guard machine.name + 1 < stage.names.count else {
                    machineEnded(slot, end, now: now)
                    return
                }
                machines[slot]!.name += 1
                _ = startTransfer(slot, now: now)
                return
            }
            nextStage(slot, now: now)
        case .ok:
            if stage.follows, follow(slot, now: now) { return }
            if stage.action == .first {
                let found = machine.identity.expand(stage.names[machine.name], directory: machine.directory)
                machines[slot]!.directory = found.lastIndex(of: "/").map { String(found[...$0]) } ?? ""
            }
            // A script run to its end booted what it named: iPXE does not go on to what the
            // profile says next (its own DHCP after an autoexec.ipxe).
            nextStage(slot, now: now, booted: stage.follows && machines[slot]!.scripts > 0)
        case .failed:
            machineEnded(slot, end, now: now)
        }
    }

    /// Scripts a machine runs in one `follow` stage at most (a chain that loops fails).
    static var scriptLimit: Int { 8 }
    /// The most of a script read (a script is a few lines).
    static var scriptBytes: Int { 64 << 10 }

    /// A `follow` stage's fetch ended well: a script is read, and the next file it names (or
    /// the first of a chained script's) is fetched; true when one is. A script that says `exit`,
    /// or that names other files than the machine's record (`storm --machines`), fails it.
    private func follow(_ slot: Int, now: Nanoseconds) -> Bool {
        let machine = machines[slot]!
        if let text = machine.script {
            let location = machine.fetching ?? machine.identity.expand(plan.profile.stages[machine.stage].names[0])
            let script: IPXEScript
            do { script = try IPXEScript(text, from: location) } catch {
                machineEnded(slot, .failed(.protocolError("\(location): \(error)")), now: now)
                return true
            }
            if script.exits {
                machineEnded(slot, .failed(.protocolError("\(location) says exit: not booted from the network")), now: now)
                return true
            }
            if let failure = plan.machineBoots[machine.identity.mac]?.differs(from: script) {
                machineEnded(slot, .failed(.protocolError("\(location): \(failure)")), now: now)
                return true
            }
            machines[slot]!.following = script.fetches
            machines[slot]!.script = nil
        }
        guard !machines[slot]!.following.isEmpty else { return false }
        let next = machines[slot]!.following.removeFirst()
        switch next {
        case .kernel(let location), .initrd(let location):
            machines[slot]!.fetching = location
        case .chain(let location):
            guard machine.scripts < Self.scriptLimit else {
                machineEnded(slot, .failed(.protocolError("\(location): more than \(Self.scriptLimit) scripts chained")), now: now)
                return true
            }
            machines[slot]!.fetching = location
            machines[slot]!.script = []
            machines[slot]!.scripts += 1
        }
        _ = startTransfer(slot, now: now)
        return true
    }

    /// The machine got through its stage (a `try` that found nothing does): on to the next, or
    /// the machine has booted (`booted`: whatever stages follow).
    private func nextStage(_ slot: Int, now: Nanoseconds, booted: Bool = false) {
        let machine = machines[slot]!
        report.stages[machine.stage].ok += 1
        report.stages[machine.stage].durations.append(now - machine.stageStarted)
        guard !booted && machine.stage + 1 < plan.profile.stages.count else {
            machineEnded(slot, .ok, now: now)
            return
        }
        machines[slot]!.stage += 1
        machines[slot]!.name = 0
        machines[slot]!.stageStarted = now
        (machines[slot]!.following, machines[slot]!.fetching, machines[slot]!.script, machines[slot]!.scripts) = ([], nil, nil, 0)
        _ = startTransfer(slot, now: now)
    }

    /// The machine booted or failed: counted, and its slot takes the next machine. A failed
    /// machine with reboots left starts over instead, from its first stage, after the profile's
    /// delay (its connection gone, as a reset takes it).
    func machineEnded(_ slot: Int, _ end: StormEnd, now: Nanoseconds) {
        let machine = machines[slot]!
        closeConnection(slot)
        switch end {
        case .ok: report.booted(in: now - machine.bootStarted, afterReboots: machine.reboots)
        case .failed(let failure) where machine.reboots < plan.reboots && !interrupted:
            report.recordReboot(failure, stage: machine.stage)
            var next = Machine(identity: machine.identity, bootStarted: machine.bootStarted, stageStarted: now)
            next.reboots = machine.reboots + 1
            next.rebooting = true
            machines[slot] = next
            wheel.schedule(slot, at: now + plan.profile.rebootDelay)
            return
        case .failed(let failure): report.recordFailure(failure, stage: machine.stage)
        }
        machines[slot] = nil
        idle.append(slot)
        booting.ended()
    }
}

/// How a storm transfer ended.
enum StormEnd: Equatable {
    case ok
    case failed(StormFailure)
}
