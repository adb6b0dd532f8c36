// Micro-benchmarks of the server's hot path (package-benchmark), with malloc counts.
//
//   make bench-micro          runs them and checks Benchmarks/Thresholds (fails on a regression)
//   make bench-thresholds     stores new thresholds after a deliberate change
//
// Each sample runs a batch (100 packets, 100 windows, 10 wheel turns), so an allocation per
// packet shows as 100 mallocs, far above the harness's own few per sample.
import Benchmark
import Glibc
import Logging
import StampedeBase
import StampedeFiles
import StampedeIO
import StampedeProtocol
import StampedeTFTPServer

let hotPathMetrics: [BenchmarkMetric] = [.wallClock, .mallocCountTotal]
/// Malloc counts may not grow (beyond the harness's own jitter of a few per sample); wall time
/// gets room for a shared, noisy machine and fails only at three times the stored figure.
/// (Immutable; the benchmark package does not mark its threshold type Sendable.)
nonisolated(unsafe) let hotPathThresholds: [BenchmarkMetric: BenchmarkThresholds] = [
    .mallocCountTotal: .init(absolute: [.p90: 4]),
    .wallClock: .init(relative: [.p90: 200]),
]

/// CLOCK_MONOTONIC in nanoseconds, the clock the worker's timers run on.
func monotonicNanoseconds() -> Int64 {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec)
}

func hotPath(_ name: String, _ body: @escaping (Benchmark) -> Void) {
    Benchmark(name, configuration: .init(metrics: hotPathMetrics, timeUnits: .microseconds, warmupIterations: 10,
                                         maxDuration: .seconds(2), maxIterations: 1000, thresholds: hotPathThresholds)) {
        benchmark in body(benchmark)
    }
}

let benchmarks: @Sendable () -> Void = {
    // A DATA and an ACK decoded in place, 100 of each per sample.
    let data: [UInt8] = [0, 3, 0x12, 0x34] + Array(repeating: 0x5A, count: 1468)
    let ack: [UInt8] = [0, 4, 0x12, 0x34]
    hotPath("PacketDecode-100DATA-100ACK") { benchmark in
        data.withUnsafeBytes { d in
            ack.withUnsafeBytes { a in
                for _ in 0..<100 {
                    blackHole(TransferPacket(d))
                    blackHole(TransferPacket(a))
                }
            }
        }
    }

    // An RRQ with options, parsed and negotiated: the per-request path (it allocates: strings).
    let rrq = Request(isWrite: false, filename: Array("pxelinux.0".utf8), mode: "octet",
                      options: [("blksize", "1468"), ("tsize", "0"), ("windowsize", "16")]).encoded()
    Benchmark("RequestParseNegotiate-1RRQ",
              configuration: .init(metrics: hotPathMetrics, timeUnits: .microseconds, warmupIterations: 10,
                                   maxDuration: .seconds(2), maxIterations: 1000, thresholds: hotPathThresholds)) { _ in
        rrq.withUnsafeBytes { bytes in
            if let request = try? Request.parse(bytes) {
                blackHole(OptionNegotiation(requested: request.options, isWrite: false, fileSize: 1 << 20,
                                               maxBlockSize: 1468, limits: OptionLimits()))
            }
        }
    }

    // A real worker over a backend that only counts: each ACK brings the next window of 16
    // DATA sends (header + image slice) through the worker's whole transfer path.
    let window = WindowRig()
    hotPath("WindowOf16Sends-100ACKs") { _ in
        for _ in 0..<100 { window.acknowledgeWindow() }
    }

    // 10,000 running transfers' timers: each turn expires what is due and re-arms it.
    var wheel = TimerWheel(capacity: 10_000, now: 0)
    var expired: [Int32] = []
    expired.reserveCapacity(10_000)
    var now: Nanoseconds = 0
    for slot in 0..<10_000 { wheel.schedule(slot, at: Nanoseconds(slot % 500) * 2_000_000 + 1_000_000_000) }
    hotPath("TimerWheelTurn-10000timers-10turns") { _ in
        for _ in 0..<10 {
            now += 2_000_000
            wheel.expire(now: now + 1_000_000_000, into: &expired)
            for slot in expired { wheel.schedule(Int(slot), at: now + 2_000_000_000) }
            blackHole(expired.count)
            expired.removeAll(keepingCapacity: true)
        }
    }
}

/// A backend that hands the worker one prepared datagram per poll and counts sends.
final class CountingBackend: DatagramBackend {
    var description: String { "counting" }
    var sends = 0
    var next: (tag: UInt64, bytes: UnsafeRawBufferPointer)?
    var lastTransferTag: UInt64 = 0
    let peer = SocketAddress(parsing: "127.0.0.1:40000", defaultPort: 0)!
    let local = SocketAddress(parsing: "127.0.0.1:69", defaultPort: 0)!

    func openListener(_ address: SocketAddress, receiveBuffer: Int, tag: UInt64) throws(Errno) -> SocketHandle { SocketHandle(0) }
    func adoptListener(_ socket: consuming Descriptor, receiveBuffer: Int, tag: UInt64) throws(Errno) -> SocketHandle {
        SocketHandle(0)
    }
    func openTransfer(local: SocketAddress, peer: SocketAddress, ports: ClosedRange<UInt16>?, largestDatagram: Int,
                      buffers: SocketBuffers, tag: UInt64) throws(Errno) -> SocketHandle {
        lastTransferTag = tag
        return SocketHandle(1)
    }
    func openClient(local: SocketAddress, largestDatagram: Int, buffers: SocketBuffers, tag: UInt64) throws(Errno) -> SocketHandle {
        SocketHandle(2)
    }
    func localAddress(of socket: SocketHandle) -> SocketAddress? { local }
    func close(_ socket: SocketHandle) {}
    func send(_ socket: SocketHandle, header: UnsafeRawBufferPointer, payload: UnsafeRawBufferPointer) {
        sends += 1
        blackHole(payload.count)
    }
    func send(_ socket: SocketHandle, to peer: SocketAddress, from local: SocketAddress?,
              header: UnsafeRawBufferPointer, payload: UnsafeRawBufferPointer) { sends += 1 }
    func sendWindow(_ socket: SocketHandle, to peer: SocketAddress?, from local: SocketAddress?,
                    headers: UnsafeRawBufferPointer, payload: UnsafeRawBufferPointer, blockSize: Int) {
        sends += headers.count / 4
        blackHole(payload.count)
    }
    var segmentation: Segmentation { .off }
    var segmentationFallbacks: Int { 0 }
    var segmentedSends: Int { 0 }
    func watch(_ descriptor: Int32) throws(Errno) { throw Errno(ENOTSUP) }
    func poll(deadline: Nanoseconds?) -> Int { next == nil ? 0 : 1 }
    func datagram(_ index: Int) -> Datagram {
        let d = next!
        next = nil
        return Datagram(tag: d.tag, bytes: d.bytes, peer: peer, local: local)
    }
    var statistics: BackendStatistics { BackendStatistics() }
    var socketCount: Int { 0 }
    var largestDatagram: Int { 65536 }
    var largestListenerDatagram: Int { 2048 }
}

/// A worker serving a 64 MiB file with windowsize 16 to one client, acknowledged window by window.
final class WindowRig {
    let backend = CountingBackend()
    let worker: Worker<CountingBackend>
    let request: [UInt8]
    var ack = UnsafeMutableRawBufferPointer.allocate(byteCount: 4, alignment: 4)
    var block = 0
    let blocksPerFile: Int

    init() {
        var template = Array("/tmp/stampede-bench-XXXXXX".utf8CString)
        let path = template.withUnsafeMutableBufferPointer { String(cString: mkdtemp($0.baseAddress!)!) }
        let fd = open(path + "/image", O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        ftruncate(fd, 64 << 20)
        close(fd)
        let root = open(path, O_RDONLY | O_DIRECTORY)
        var configuration = ServerConfiguration(listenAddresses: [backend.local], policy: AccessPolicy(root: root),
                                                logger: Logger(label: "bench", factory: { _ in SwiftLogNoOpLogHandler() }))
        configuration.optionLimits.maxBlockSize = 1468
        worker = Worker(backend: backend, configuration: configuration, cache: FileCache(), index: 0)
        try! worker.bindListeners([backend.local])
        request = Request(isWrite: false, filename: Array("image".utf8), mode: "octet",
                          options: [("blksize", "1468"), ("windowsize", "16")]).encoded()
        blocksPerFile = (64 << 20) / 1468 + 1
        startTransfer()
    }

    private func deliver(_ bytes: UnsafeRawBufferPointer, tag: UInt64) {
        backend.next = (tag, bytes)
        worker.turn(now: monotonicNanoseconds(), maxWait: 0)
    }

    private func startTransfer() {
        request.withUnsafeBytes { deliver($0, tag: 1 << 63) }
        block = 0
        sendAck()  // ACK 0 for the OACK: the first window goes out.
    }

    private func sendAck() {
        ack[0] = 0
        ack[1] = 4
        ack[2] = UInt8(truncatingIfNeeded: block >> 8)
        ack[3] = UInt8(truncatingIfNeeded: block)
        deliver(UnsafeRawBufferPointer(ack), tag: backend.lastTransferTag)
    }

    /// ACKs the window in flight, which sends the next one; a new transfer when the file is done.
    func acknowledgeWindow() {
        block += 16
        if block >= blocksPerFile {
            block = blocksPerFile
            sendAck()
            startTransfer()
            return
        }
        sendAck()
    }
}
