import CMallocCounter
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

/// "Steady state allocates nothing per packet, in either backend" (docs/ARCHITECTURE.md). A real worker on a
/// real backend serves a file to a client on loopback; once the transfer runs, a thousand DATA/ACK
/// round trips (worker and client, same thread) must not touch the heap.
@Suite struct SteadyStateAllocations {
    @Test func theCounterSeesAnAllocation() {
        malloc_counter_start()
        let array = [Int](repeating: 7, count: Int.random(in: 100...200))
        let counted = malloc_counter_stop()
        #expect(array.count >= 100)
        #expect(counted >= 1)
    }

    /// Lockstep, and windows of 16 (sent segmented where the kernel takes UDP GSO).
    @Test(arguments: BackendKind.allCases, [1, 16])
    func aRunningTransferAllocatesNothingPerPacket(kind: BackendKind, window: Int) throws {
        switch kind {
        case .glibc: try measure(GlibcBackend(), kind, window: window)
        case .uring: try measure(URingBackend(), kind, window: window)
        }
    }

    func measure<Backend: DatagramBackend>(_ backend: Backend, _ kind: BackendKind, window: Int) throws {
        let dir = ScratchDirectory()
        dir.write("image.bin", (0..<(3 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        let listen = SocketAddress(parsing: "127.0.0.1:0", defaultPort: 0)!
        let configuration = ServerConfiguration(listenAddresses: [listen], policy: AccessPolicy(root: dir.fd),
                                                logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }))
        let worker = Worker(backend: backend, configuration: configuration, cache: FileCache(), index: 0)
        let bound = try worker.bindListeners([listen])[0]
        let client = LoopbackClient()
        _ = fcntl(client.fd, F_SETFL, O_NONBLOCK)

        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 2048, alignment: 8)
        defer { buffer.deallocate() }
        var ackPacket: (UInt8, UInt8, UInt8, UInt8) = (0, 4, 0, 0)
        var server = sockaddr_storage()
        var blocks = 0
        /// One loop turn of the worker, then the client acknowledges the last DATA that arrived.
        func step() {
            worker.turnSettling(now: stampede_monotonic_ns(), maxWait: 1_000_000)
            var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
            var received = false
            while true {
                let n = withUnsafeMutablePointer(to: &server) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { recvfrom(client.fd, buffer.baseAddress, buffer.count, 0, $0, &length) }
                }
                guard n >= 4, buffer[1] == 3 else { break }
                ackPacket.2 = buffer[2]
                ackPacket.3 = buffer[3]
                blocks += 1
                received = true
            }
            guard received else { return }
            _ = withUnsafeBytes(of: &ackPacket) { ack in
                withUnsafePointer(to: &server) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { sendto(client.fd, ack.baseAddress, 4, 0, $0, length) }
                }
            }
        }

        client.send(Request(isWrite: false, filename: Array("image.bin".utf8), mode: "octet",
                            options: [("blksize", "1024"), ("windowsize", "\(window)")]).encoded(), to: bound)
        // The request, the OACK and the first blocks may allocate (a slot, the image, the log).
        var ackedOptions = false
        while blocks < 100 {
            worker.turnSettling(now: stampede_monotonic_ns(), maxWait: 1_000_000)
            if !ackedOptions, let reply = client.receive(), reply.bytes[1] == 6 {
                client.send([0, 4, 0, 0], to: reply.from)
                ackedOptions = true
            }
            if ackedOptions { step() }
        }
        malloc_counter_start()
        let first = blocks
        while blocks < first + 1000 { step() }
        let allocations = malloc_counter_stop()
        #expect(allocations == 0, "\(allocations) allocations in 1,000 DATA (windows of \(window)) on \(kind)")
        // Windows went out segmented where this kernel takes it (the allocation count covers that path).
        #expect(window == 1 || backend.segmentation != .on || backend.segmentedSends > 0)
        while blocks < 3073 { step() } // to the end (3 MiB / 1024 + the empty last block)
        for _ in 0..<10 where worker.activeTransfers > 0 { worker.turnSettling(now: stampede_monotonic_ns(), maxWait: 1_000_000) }
        #expect(worker.activeTransfers == 0)
        #expect(worker.summary.failed == 0)
    }
}
