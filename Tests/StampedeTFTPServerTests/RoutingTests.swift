import CStampedeSys
import Glibc
import Logging
import StampedeFiles
import StampedeIO
import StampedeProtocol
@testable import StampedeTFTPServer
import StampedeTestSupport
import Testing

/// The worker's socket tag (Swift Testing has a `Tag` of its own).
typealias Tag = StampedeTFTPServer.Tag

/// A worker on the fake backend, its transfers hearing their clients in one of the three ways.
final class RoutingRig {
    enum Mode: String, CaseIterable, CustomTestStringConvertible {
        /// Each transfer on a socket of its own, connected to its client.
        case ownSockets
        /// Every read on the worker's shared transfer sockets (`--max-transfer-sockets 0`).
        case sharedSockets
        /// Every transfer on the listener (`--single-port`).
        case singlePort
        var testDescription: String { rawValue }
    }

    let dir = ScratchDirectory()
    let backend = FakeBackend()
    let worker: Worker<FakeBackend>
    let local = SocketAddress(parsing: "127.0.0.1:69", defaultPort: 0)!

    let log = LogLines()

    init(_ mode: Mode, listeners: [SocketAddress]? = nil, transferSocketError: Errno? = nil, allowCreate: Bool = false) throws {
        var configuration = ServerConfiguration(listenAddresses: [local], policy: AccessPolicy(root: dir.fd, allowCreate: allowCreate),
                                                logger: log.logger())
        backend.transferSocketError = transferSocketError
        configuration.optionLimits.maxBlockSize = 1468
        configuration.singlePort = mode == .singlePort
        if mode == .sharedSockets { configuration.ownTransferSocketsPerWorker = 0 }
        worker = Worker(backend: backend, configuration: configuration, cache: FileCache(), index: 0)
        try worker.bindListeners(listeners ?? [local])
        dir.write("f", (0..<5000).map { UInt8(truncatingIfNeeded: $0) })
        dir.write("g", [UInt8]("another file"))
    }

    func listener(_ index: Int = 0) -> UInt64 { backend.tags[index] }

    /// What the worker sends in the turn that takes `bytes` from `peer` on the socket tagged `tag`.
    @discardableResult
    func deliver(_ bytes: [UInt8], from peer: SocketAddress, tag: UInt64, to local: SocketAddress? = nil,
                 received: Int64? = nil) -> [(socket: SocketHandle, bytes: [UInt8], to: SocketAddress?)] {
        backend.sent = []
        backend.inbox.append((tag, bytes, peer, local ?? self.local))
        backend.received = received
        worker.turnSettling(now: stampede_monotonic_ns(), maxWait: 0)
        return backend.sent
    }

    func rrq(_ name: String) -> [UInt8] { Request(isWrite: false, filename: Array(name.utf8), mode: "octet").encoded() }

    /// The tag of the socket `peer`'s running transfer hears on: its own, a shared one, the listener.
    func transferTag(of peer: SocketAddress) throws -> UInt64 {
        let slot = try #require(worker.table.slot(of: peer))
        return backend.tags[Int(worker.table[slot].socket!.handle.index)]
    }

    /// The first four bytes of each packet sent: opcode and block (or error code).
    static func heads(_ sent: [(socket: SocketHandle, bytes: [UInt8], to: SocketAddress?)]) -> [[UInt8]] {
        sent.map { Array($0.bytes.prefix(4)) }
    }
}

/// `Worker.route` and the one policy for a repeated request, on every kind of transfer socket,
/// with the forged packets an attacker off the path could send (issue 21, defects 2-4).
@Suite struct RoutingSpec {
    let client = SocketAddress(parsing: "127.0.0.1:40000", defaultPort: 0)!

    @Test(arguments: RoutingRig.Mode.allCases)
    func aLateDuplicateOfTheRequestDoesNotDisturbTheRunningTransfer(mode: RoutingRig.Mode) throws {
        let rig = try RoutingRig(mode)
        #expect(RoutingRig.heads(rig.deliver(rig.rrq("f"), from: client, tag: rig.listener())) == [[0, 3, 0, 1]])
        let tag = try rig.transferTag(of: client)
        #expect(RoutingRig.heads(rig.deliver([0, 4, 0, 1], from: client, tag: tag)) == [[0, 3, 0, 2]])
        #expect(RoutingRig.heads(rig.deliver([0, 4, 0, 2], from: client, tag: tag)) == [[0, 3, 0, 3]])
        // iPXE's resend of its request, delivered late: dropped, nothing answered, nothing opened.
        let sockets = rig.backend.tags.count
        #expect(rig.deliver(rig.rrq("f"), from: client, tag: rig.listener()).isEmpty)
        #expect(rig.backend.tags.count == sockets)
        #expect(rig.worker.activeTransfers == 1)
        #expect(RoutingRig.heads(rig.deliver([0, 4, 0, 3], from: client, tag: tag)) == [[0, 3, 0, 4]])
        #expect(rig.worker.summary.repeated == 1)
        rig.worker.publishMetrics(now: stampede_monotonic_ns())
        #expect(rig.worker.metrics.requests(.read, .duplicate) == 1)
    }

    /// A PXE ROM that reboots asks again from the same fixed port, with the same request: the
    /// transfer it abandoned has heard nothing for a whole retransmit interval, and gives way.
    @Test(arguments: RoutingRig.Mode.allCases)
    func theSameRequestFromAClientGoneQuietStartsOver(mode: RoutingRig.Mode) throws {
        let rig = try RoutingRig(mode)
        _ = rig.deliver(rig.rrq("f"), from: client, tag: rig.listener())
        let tag = try rig.transferTag(of: client)
        #expect(RoutingRig.heads(rig.deliver([0, 4, 0, 1], from: client, tag: tag)) == [[0, 3, 0, 2]])
        usleep(300_000)  // past the adaptive interval (100 ms at least), no ACK
        // The turn reads the request before the transfer's due timer: the file starts over, and
        // DATA 2 is not resent to a client that asked again. The kernel took it just now: after
        // the client's last ACK.
        let sent = rig.deliver(rig.rrq("f"), from: client, tag: rig.listener(), received: stampede_monotonic_ns())
        #expect(RoutingRig.heads(sent) == [[0, 3, 0, 1]])
        #expect(rig.worker.activeTransfers == 1 && rig.worker.summary.repeated == 0)
        #expect(rig.log.all.contains { $0.contains("superseded by a new request from the same port") })
    }

    /// At 20,000 machines a resend of a request waited seconds in the listener's queue behind the
    /// one that started its transfer; by the time it was read the client had answered and its
    /// next ACKs waited unread too, so it looked quiet: the copy superseded the live transfer.
    /// The kernel's receive time tells the copy: it came before the client's last progress.
    @Test(arguments: RoutingRig.Mode.allCases)
    func aResendReadLateFromTheQueueNeverEndsTheTransfer(mode: RoutingRig.Mode) throws {
        let rig = try RoutingRig(mode)
        let queued = stampede_monotonic_ns()
        _ = rig.deliver(rig.rrq("f"), from: client, tag: rig.listener(), received: queued)
        let tag = try rig.transferTag(of: client)
        #expect(RoutingRig.heads(rig.deliver([0, 4, 0, 1], from: client, tag: tag)) == [[0, 3, 0, 2]])
        usleep(300_000)  // quiet, as far as the server has read
        let sent = rig.deliver(rig.rrq("f"), from: client, tag: rig.listener(), received: queued + 1_000)
        #expect(!RoutingRig.heads(sent).contains([0, 3, 0, 1]))
        #expect(rig.worker.activeTransfers == 1 && rig.worker.summary.repeated == 1)
        #expect(!rig.log.all.contains { $0.contains("superseded") })
        // The transfer goes on where it was.
        #expect(RoutingRig.heads(rig.deliver([0, 4, 0, 2], from: client, tag: tag)) == [[0, 3, 0, 3]])
    }

    /// Under load a resend waited in the listener's queue while its transfer was answered,
    /// served and ended (a small file's three packets): read then, it started a transfer of its
    /// own to a client that had moved on. Taken by the kernel before the transfer ended, it is a
    /// copy and is dropped; the same request taken after the end is a client asking again, and
    /// one whose time the backend does not say is served as before.
    @Test(arguments: RoutingRig.Mode.allCases)
    func aCopyOfAnEndedTransfersRequestIsDropped(mode: RoutingRig.Mode) throws {
        let rig = try RoutingRig(mode)
        let queued = stampede_monotonic_ns()
        #expect(RoutingRig.heads(rig.deliver(rig.rrq("g"), from: client, tag: rig.listener(), received: queued)) == [[0, 3, 0, 1]])
        let tag = try rig.transferTag(of: client)
        #expect(rig.deliver([0, 4, 0, 1], from: client, tag: tag).isEmpty)
        #expect(rig.worker.activeTransfers == 0)
        let sockets = rig.backend.tags.count
        #expect(rig.deliver(rig.rrq("g"), from: client, tag: rig.listener(), received: queued + 1_000).isEmpty)
        #expect(rig.backend.tags.count == sockets && rig.worker.activeTransfers == 0 && rig.worker.summary.repeated == 1)
        // Another request from the port, taken as early, is not a copy of it.
        #expect(RoutingRig.heads(rig.deliver(rig.rrq("f"), from: client, tag: rig.listener(), received: queued + 2_000)) == [[0, 3, 0, 1]])
        _ = rig.deliver([0, 5, 0, 0, 0], from: client, tag: try rig.transferTag(of: client))
        // The same request taken after its transfer ended: asked again, served.
        #expect(RoutingRig.heads(rig.deliver(rig.rrq("g"), from: client, tag: rig.listener(), received: stampede_monotonic_ns())) == [[0, 3, 0, 1]])
        _ = rig.deliver([0, 4, 0, 1], from: client, tag: try rig.transferTag(of: client))
        // Without the kernel's time nothing is told: served.
        #expect(RoutingRig.heads(rig.deliver(rig.rrq("g"), from: client, tag: rig.listener())) == [[0, 3, 0, 1]])
        #expect(rig.worker.summary.repeated == 1)
    }

    @Test(arguments: RoutingRig.Mode.allCases)
    func anotherRequestBeforeTheClientAnsweredStartsOver(mode: RoutingRig.Mode) throws {
        let rig = try RoutingRig(mode)
        #expect(RoutingRig.heads(rig.deliver(rig.rrq("f"), from: client, tag: rig.listener())) == [[0, 3, 0, 1]])
        // The client never answered DATA 1 and now asks for another file: it started over.
        let sent = rig.deliver(rig.rrq("g"), from: client, tag: rig.listener())
        #expect(sent.map(\.bytes) == [[0, 3, 0, 1] + [UInt8]("another file")])
        #expect(rig.worker.activeTransfers == 1)
        #expect(rig.deliver([0, 4, 0, 1], from: client, tag: try rig.transferTag(of: client)).isEmpty)
        #expect(rig.worker.activeTransfers == 0)
    }

    @Test(arguments: RoutingRig.Mode.allCases)
    func anotherRequestBesideAnAnsweredTransferNeverEndsIt(mode: RoutingRig.Mode) throws {
        let rig = try RoutingRig(mode)
        _ = rig.deliver(rig.rrq("f"), from: client, tag: rig.listener())
        let tag = try rig.transferTag(of: client)
        #expect(RoutingRig.heads(rig.deliver([0, 4, 0, 1], from: client, tag: tag)) == [[0, 3, 0, 2]])
        let other = rig.deliver(rig.rrq("g"), from: client, tag: rig.listener())
        if mode == .ownSockets {
            // A transfer of its own, on a socket of its own: both run.
            #expect(RoutingRig.heads(other) == [[0, 3, 0, 1]])
            #expect(rig.worker.activeTransfers == 2)
        } else {
            // The two could not both be told apart by the client's port: a stale request, dropped.
            #expect(other.isEmpty)
            #expect(rig.worker.activeTransfers == 1)
        }
        #expect(RoutingRig.heads(rig.deliver([0, 4, 0, 2], from: client, tag: tag)) == [[0, 3, 0, 3]])
    }

    /// Defect 3: the listener handed any non-request from a known address and port to the shared
    /// sessions, whatever the mode, so a forged ERROR to port 69 ended a shared-socket transfer.
    @Test(arguments: [RoutingRig.Mode.ownSockets, .sharedSockets])
    func aForgedPacketToTheListenerNeverReachesATransfer(mode: RoutingRig.Mode) throws {
        let rig = try RoutingRig(mode)
        _ = rig.deliver(rig.rrq("f"), from: client, tag: rig.listener())
        let tag = try rig.transferTag(of: client)
        for forged: [UInt8] in [[0, 5, 0, 0, 0], [0, 4, 0, 1], [0, 4, 0, 5], [0, 3, 0, 1, 9]] {
            #expect(rig.deliver(forged, from: client, tag: rig.listener()).isEmpty)
        }
        #expect(rig.worker.activeTransfers == 1)
        #expect(RoutingRig.heads(rig.deliver([0, 4, 0, 1], from: client, tag: tag)) == [[0, 3, 0, 2]])
    }

    @Test func onASharedSocketAStrangerGetsErrorFiveAndTheTransferGoesOn() throws {
        let rig = try RoutingRig(.sharedSockets)
        _ = rig.deliver(rig.rrq("f"), from: client, tag: rig.listener())
        let tag = try rig.transferTag(of: client)
        var stranger = client
        stranger.port += 1
        let answer = rig.deliver([0, 4, 0, 1], from: stranger, tag: tag)
        #expect(answer.map(\.bytes) == [PacketWriter.error(TFTPError(.unknownTransferID, "Unknown transfer ID"))])
        #expect(answer.first?.to == stranger)
        // An ERROR from a stranger is not answered (no ERROR ping-pong), nor is it the transfer's.
        #expect(rig.deliver([0, 5, 0, 0, 0], from: stranger, tag: tag).isEmpty)
        // The client's own ACK on another socket of the pool is a stranger's too.
        let otherSocket = try #require(rig.backend.tags.first { $0 != tag && Tag(rawValue: $0).kind.map(isShared) == true })
        #expect(RoutingRig.heads(rig.deliver([0, 4, 0, 1], from: client, tag: otherSocket)) == [[0, 5, 0, 5]])
        #expect(rig.worker.activeTransfers == 1)
        #expect(RoutingRig.heads(rig.deliver([0, 4, 0, 1], from: client, tag: tag)) == [[0, 3, 0, 2]])
    }

    func isShared(_ kind: Tag.Kind) -> Bool { if case .shared = kind { true } else { false } }

    @Test func sharedSocketsAreBoundWhereTheRequestCameToOnePoolPerAddress() throws {
        let rig = try RoutingRig(.sharedSockets)
        let second = SocketAddress(parsing: "127.0.0.2:69", defaultPort: 0)!
        var other = client
        other.port += 7
        _ = rig.deliver(rig.rrq("f"), from: client, tag: rig.listener())
        _ = rig.deliver(rig.rrq("f"), from: other, tag: rig.listener(), to: second)
        let first = try #require(rig.worker.sharedSockets.pool(for: rig.local))
        let next = try #require(rig.worker.sharedSockets.pool(for: second))
        #expect(first != next)
        // Each answers from the address its request came to.
        let slot = try #require(rig.worker.table.slot(of: other))
        #expect(rig.worker.table[slot].socket?.replyFrom == second)
    }

    /// Issue 21, defect 6: the notice blamed the worker's budget whatever the cause.
    @Test(arguments: [(Errno(EMFILE), "the kernel refused a transfer socket"), (Errno(EADDRINUSE), "no free port for a transfer socket")])
    func aReadThatCannotHaveASocketOfItsOwnSharesAndTheLogSaysWhy(error: Errno, why: String) throws {
        let rig = try RoutingRig(.ownSockets, transferSocketError: error)
        #expect(RoutingRig.heads(rig.deliver(rig.rrq("f"), from: client, tag: rig.listener())) == [[0, 3, 0, 1]])
        let slot = try #require(rig.worker.table.slot(of: client))
        #expect(rig.worker.table[slot].socket?.isShared == true)
        let notice = try #require(rig.log.all.first { $0.contains("further reads share") && $0.hasSuffix("(on 127.0.0.1)") })
        #expect(notice.hasPrefix("notice \(why) (\(error))"), "\(notice)")
    }

    @Test func pastTheBudgetTheNoticeSaysSo() throws {
        let rig = try RoutingRig(.sharedSockets)
        _ = rig.deliver(rig.rrq("f"), from: client, tag: rig.listener())
        #expect(rig.log.all.contains { $0.hasPrefix("notice 0 transfers with sockets of their own, the most this worker may hold") })
    }

    @Test func inSinglePortModeOnlyTheListenerATransferRunsOnReachesIt() throws {
        let second = SocketAddress(parsing: "127.0.0.2:69", defaultPort: 0)!
        let rig = try RoutingRig(.singlePort, listeners: [SocketAddress(parsing: "127.0.0.1:69", defaultPort: 0)!, second])
        _ = rig.deliver(rig.rrq("f"), from: client, tag: rig.listener(0))
        // The client's ACK sent to the other listener: not this transfer's (and no request either).
        #expect(rig.deliver([0, 4, 0, 1], from: client, tag: rig.listener(1), to: second).isEmpty)
        #expect(RoutingRig.heads(rig.deliver([0, 4, 0, 1], from: client, tag: rig.listener(0))) == [[0, 3, 0, 2]])
        // A non-request from a port with no transfer is ignored as on any listener.
        var stranger = client
        stranger.port += 1
        #expect(rig.deliver([0, 4, 0, 2], from: stranger, tag: rig.listener(0)).isEmpty)
        #expect(rig.worker.activeTransfers == 1)
    }

    @Test(arguments: RoutingRig.Mode.allCases)
    func anEndedTransfersLateDatagramsReachNoOne(mode: RoutingRig.Mode) throws {
        let rig = try RoutingRig(mode)
        _ = rig.deliver(rig.rrq("g"), from: client, tag: rig.listener())
        let tag = try rig.transferTag(of: client)
        #expect(rig.deliver([0, 4, 0, 1], from: client, tag: tag).isEmpty)
        #expect(rig.worker.activeTransfers == 0)
        // A new transfer in the same slot (another client): the old tag's ACK does not reach it.
        var next = client
        next.port += 1
        _ = rig.deliver(rig.rrq("f"), from: next, tag: rig.listener())
        let late = rig.deliver([0, 4, 0, 1], from: client, tag: tag)
        #expect(late.allSatisfy { $0.bytes.prefix(4) == [0, 5, 0, 5] })  // a shared socket's stranger; else nothing
        #expect(rig.worker.activeTransfers == 1)
    }

    /// Defect 4: 31 bits of generation shifted by 32 put bit 30 on the shared bit, so after 2^30
    /// reuses of a slot its transfers were routed as shared and timed out.
    @Test func aSlotReusedTwoToTheThirtyTimesStillRoutesItsTransfers() throws {
        let rig = try RoutingRig(.ownSockets)
        rig.worker.table.setGeneration(Tag.generationMask - 1, of: 0)
        for round in 0..<3 {
            var peer = client
            peer.port += UInt16(round)
            #expect(rig.deliver(rig.rrq("g"), from: peer, tag: rig.listener()).count == 1)
            let tag = try rig.transferTag(of: peer)
            #expect(Tag(rawValue: tag).kind == .transfer(slot: 0, generation: (Tag.generationMask - 1 &+ UInt32(round)) & Tag.generationMask))
            #expect(rig.deliver([0, 4, 0, 1], from: peer, tag: tag).isEmpty)
            #expect(rig.worker.activeTransfers == 0, "round \(round)")
        }
    }
}

/// The tag's one layout.
@Suite struct TagSpec {
    @Test func eachKindComesBackAsItWentInAndNoneReachesAnother() {
        for generation: UInt32 in [0, 1, 1 << 29, Tag.generationMask, 1 << 30, 1 << 31, UInt32.max] {
            for slot in [0, 1, 65535, Int(UInt32.max)] {
                #expect(Tag.transfer(slot: slot, generation: generation).kind
                        == .transfer(slot: slot, generation: generation & Tag.generationMask))
            }
        }
        #expect(Tag.shared(pool: 3, index: 63).kind == .shared(pool: 3, index: 63))
        #expect(Tag.shared(pool: 65535, index: 65535).kind == .shared(pool: 65535, index: 65535))
        #expect(Tag.listener(0).kind == .listener(0))
        #expect(Tag.listener(7).kind == .listener(7))
        #expect(Tag(rawValue: UInt64.max).kind == nil)
    }
}

/// Issue 21, defect 8: a request or a DATA is judged by its whole length, whether a backend's
/// buffers took it whole or cut it (io_uring's listeners took 2 KiB and kept the start).
@Suite struct CutDatagramsSpec {
    let client = SocketAddress(parsing: "127.0.0.1:40000", defaultPort: 0)!

    func longRequest(_ nameLength: Int, options: Int = 0) -> [UInt8] {
        Request(isWrite: false, filename: [UInt8](repeating: 0x61, count: nameLength), mode: "octet",
                options: (0..<options).map { ("x\($0)", String(repeating: "9", count: 200)) }).encoded()
    }

    @Test(arguments: [nil, 8192])
    func aRequestLongerThanTheLargestIsRefusedWithErrorFourWholeOrCut(cutAt: Int?) throws {
        let rig = try RoutingRig(.ownSockets)
        rig.backend.cutAt = cutAt
        let tooLong = longRequest(100, options: 40)
        #expect(tooLong.count > Request.largestDatagram)
        #expect(rig.deliver(tooLong, from: client, tag: rig.listener()).map(\.bytes)
                == [PacketWriter.error(TFTPError(.illegalOperation, "Request too long"))])
        // A name of 3,000 bytes fits: it is looked for (and not found), not refused as too long.
        #expect(RoutingRig.heads(rig.deliver(longRequest(3000), from: client, tag: rig.listener())) == [[0, 5, 0, 1]])
    }

    @Test func aSinglePortUploadsDataCutByTheListenerEndsTheUploadAndStoresNothing() throws {
        let upload = try RoutingRig(.singlePort, allowCreate: true)
        upload.backend.cutAt = 2048
        let wrq = Request(isWrite: true, filename: Array("up.bin".utf8), mode: "octet", options: [("blksize", "1400")]).encoded()
        #expect(RoutingRig.heads(upload.deliver(wrq, from: client, tag: upload.listener())) == [[0, 6, 0x62, 0x6C]])
        // A DATA of 3,000 bytes: the listener's buffers keep 2,048 of them, and say so.
        let answer = upload.deliver([0, 3, 0, 1] + [UInt8](repeating: 7, count: 2996), from: client, tag: upload.listener())
        #expect(RoutingRig.heads(answer) == [[0, 5, 0, 4]])
        #expect(upload.worker.activeTransfers == 0)
        upload.worker.disk.drain()  // the temporary file is removed there
        #expect(upload.dir.entries().filter { $0.hasPrefix("up") || $0.hasPrefix(".stampede") }.isEmpty)
    }
}

/// Uploads commit on the disk thread (issue 21, defect 9): the last ACK waits for the commit, and
/// nothing may end the transfer meanwhile; at shutdown an upload already committed is a success.
@Suite struct CommitSpec {
    let client = SocketAddress(parsing: "127.0.0.1:40000", defaultPort: 0)!

    /// WRQ, then DATA 1 of `bytes` (< 512: the last block); returns the transfer's tag.
    func upload(_ rig: RoutingRig, _ bytes: [UInt8]) throws -> UInt64 {
        let wrq = Request(isWrite: true, filename: Array("up.bin".utf8), mode: "octet").encoded()
        #expect(RoutingRig.heads(rig.deliver(wrq, from: client, tag: rig.listener())) == [[0, 4, 0, 0]])
        let tag = try rig.transferTag(of: client)
        // The commit is handed over: no ACK yet, and the client's repeat of its block waits too.
        #expect(rig.deliver([0, 3, 0, 1] + bytes, from: client, tag: tag).isEmpty)
        #expect(rig.deliver([0, 5, 0, 0, 0], from: client, tag: tag).isEmpty)
        return tag
    }

    /// Turns the worker (the fake backend never waits: the test does) until it sends something.
    func turnUntilSent(_ rig: RoutingRig) -> [[UInt8]] {
        for _ in 0..<5000 {
            rig.backend.sent = []
            rig.worker.turnSettling(now: stampede_monotonic_ns(), maxWait: 2_000_000)
            if !rig.backend.sent.isEmpty { return rig.backend.sent.map(\.bytes) }
            usleep(2_000)
        }
        return []
    }

    @Test func theLastAckComesOnceTheFileIsThere() throws {
        let rig = try RoutingRig(.ownSockets, allowCreate: true)
        _ = try upload(rig, [UInt8]("twelve bytes"))
        #expect(turnUntilSent(rig) == [[0, 4, 0, 1]])
        #expect(rig.dir.read("up.bin") == [UInt8]("twelve bytes"))
        #expect(rig.worker.summary.transfers == 1 && rig.worker.summary.failed == 0)
    }

    @Test func anUploadCommittedAndDallyingAtShutdownHearsNoErrorAndCountsAsServed() throws {
        let rig = try RoutingRig(.ownSockets, allowCreate: true)
        _ = try upload(rig, [UInt8]("last"))
        #expect(turnUntilSent(rig) == [[0, 4, 0, 1]])
        rig.backend.sent = []
        rig.worker.abortAll(now: stampede_monotonic_ns())
        #expect(rig.backend.sent.isEmpty)  // no ERROR 0 "Server shutting down"
        #expect(rig.worker.activeTransfers == 0 && rig.worker.summary.failed == 0)
    }
}
