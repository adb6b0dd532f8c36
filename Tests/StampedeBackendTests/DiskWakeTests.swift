import CStampedeSys
import Glibc
import Logging
import StampedeFiles
import StampedeGlibc
import StampedeIO
import StampedeProtocol
import StampedeTFTPServer
import StampedeTestSupport
import StampedeURing
import Testing

/// Issue 57, item 3: a worker hears that its disk work is done when the disk thread posts it (its
/// mailbox's eventfd wakes the backend's poll), not by looking every 2 ms. The disk is kept busy
/// for 300 ms; the worker's turns may each wait 5 s: a worker that polled would take a hundred
/// turns and more, a woken one takes a few, and the client is answered once the disk is free.
@Suite struct WorkerWokenByTheDisk {
    static let busy: UInt32 = 300_000

    @Test(arguments: BackendKind.allCases)
    func aFileReadWakesTheWorker(kind: BackendKind) throws {
        switch kind {
        case .glibc: try read(GlibcBackend())
        case .uring: try read(URingBackend())
        }
    }

    @Test(arguments: BackendKind.allCases)
    func anUploadsCommitWakesTheWorker(kind: BackendKind) throws {
        switch kind {
        case .glibc: try upload(GlibcBackend())
        case .uring: try upload(URingBackend())
        }
    }

    func rig<Backend: DatagramBackend>(_ backend: Backend, _ dir: ScratchDirectory, disk: DiskWork) throws -> (Worker<Backend>, SocketAddress) {
        let configuration = ServerConfiguration(listenAddresses: [loopbackAny], policy: AccessPolicy(root: dir.fd, allowCreate: true),
                                                logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }))
        let worker = Worker(backend: backend, configuration: configuration, cache: FileCache(), index: 0, disk: disk)
        return (worker, try worker.bindListeners([loopbackAny])[0])
    }

    /// Turns the worker until `done` (at most `limit` turns of up to 5 s each), each followed by
    /// one that only flushes what it queued; returns the turns that waited.
    func turns<Backend: DatagramBackend>(_ worker: Worker<Backend>, limit: Int, until done: () -> Bool) -> Int {
        var count = 0
        repeat {
            worker.turn(now: stampede_monotonic_ns(), maxWait: 5_000_000_000)
            worker.turn(now: stampede_monotonic_ns(), maxWait: 0)
            count += 1
        } while !done() && count < limit
        return count
    }

    func read<Backend: DatagramBackend>(_ backend: Backend) throws {
        let dir = ScratchDirectory()
        dir.write("image.bin", (0..<5000).map { UInt8(truncatingIfNeeded: $0) })
        let disk = DiskWork(threads: 1)
        let (worker, bound) = try rig(backend, dir, disk: disk)
        let client = LoopbackClient()
        _ = fcntl(client.fd, F_SETFL, O_NONBLOCK)
        disk.submit { usleep(Self.busy) }
        client.send(Request(isWrite: false, filename: Array("image.bin".utf8), mode: "octet", options: []).encoded(), to: bound)
        let started = stampede_monotonic_ns()
        _ = turns(worker, limit: 1) { worker.requestsWaitingForFiles > 0 }
        #expect(worker.requestsWaitingForFiles == 1, "the request did not wait for the busy disk")
        let taken = turns(worker, limit: 6) { worker.requestsWaitingForFiles == 0 }
        #expect(taken <= 4, "the worker took \(taken) turns to hear of one read")
        #expect(worker.requestsWaitingForFiles == 0)
        let reply = try #require(client.receive())
        #expect(Array(reply.bytes.prefix(4)) == [0, 3, 0, 1])
        #expect(stampede_monotonic_ns() - started < 3_000_000_000)
    }

    func upload<Backend: DatagramBackend>(_ backend: Backend) throws {
        let dir = ScratchDirectory()
        let disk = DiskWork(threads: 1)
        let (worker, bound) = try rig(backend, dir, disk: disk)
        let client = LoopbackClient()
        _ = fcntl(client.fd, F_SETFL, O_NONBLOCK)
        client.send(Request(isWrite: true, filename: Array("new.bin".utf8), mode: "octet", options: []).encoded(), to: bound)
        var ack: (bytes: [UInt8], from: SocketAddress)?
        _ = turns(worker, limit: 3) {
            ack = client.receive()
            return ack != nil
        }
        let first = try #require(ack)
        #expect(first.bytes == [0, 4, 0, 0])
        // The disk is busy when the last (and only) block arrives: the commit waits for it.
        disk.submit { usleep(Self.busy) }
        client.send([0, 3, 0, 1] + Array("written".utf8), to: first.from)
        let calls = backend.statistics.systemCalls
        ack = nil
        let taken = turns(worker, limit: 6) {
            ack = client.receive()
            return ack != nil
        }
        #expect(ack?.bytes == [0, 4, 0, 1], "no ACK of the last block after \(taken) turns")
        #expect(taken <= 4, "the worker took \(taken) turns to hear of one commit")
        #expect(backend.statistics.systemCalls - calls < 20)
        #expect(dir.read("new.bin") == Array("written".utf8))
    }
}
