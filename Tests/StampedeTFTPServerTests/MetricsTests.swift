import CStampedeSys
import Glibc
import Logging
import StampedeBase
import StampedeFiles
import StampedeIO
import StampedeMetrics
import StampedeProtocol
import StampedeStorm
@testable import StampedeServing
@testable import StampedeTFTPServer
import StampedeTestSupport
import Testing

@Suite struct FileLabelSpec {
    @Test(arguments: [
        ("pxelinux.0", "pxelinux.0"),
        ("pxelinux.cfg/default", "pxelinux.cfg/default"),
        ("pxelinux.cfg/01-52-54-00-12-34-56", "pxelinux.cfg/*"),
        ("pxelinux.cfg/C0A80001", "pxelinux.cfg/*"),
        ("pxelinux.cfg/C0A", "pxelinux.cfg/*"),
        ("grub/grub.cfg-01-52-54-00-12-34-56", "grub/grub.cfg-*"),
        ("hosts/52:54:00:12:34:56/boot.ipxe", "hosts/*/boot.ipxe"),
        ("uefi/4c4c4544-0042-3510-8052-b4c04f564433/grub.cfg", "uefi/*/grub.cfg"),
        ("by-ip/10.0.0.17.ipxe", "by-ip/*.ipxe"),
        ("configs/525400123456.cfg", "configs/*.cfg"),
        ("vmlinuz-6.1.0-13-amd64", "vmlinuz-6.1.0-13-amd64"),
        ("a\u{1}b\"c", "a?b?c"),
    ])
    func machineSpecificPartsFoldToAStar(name: String, label: String) {
        #expect(FileLabels.label(of: name) == label)
    }

    @Test func aFloodOfDistinctNamesStopsAtTheLimitAndCountsAsOther() {
        let labels = FileLabels(limit: 8)
        var indices: Set<Int32> = []
        for i in 0..<10_000 { indices.insert(labels.index(of: "file-\(i)")) }
        #expect(labels.names.count == 9)
        #expect(indices.count == 9)
        #expect(labels.index(of: "file-99999") == 0)
        #expect(labels.index(of: "file-3") == 4)
    }
}

@Suite struct WorkerMetricsSpec {
    @Test func whatTheWorkerCountsIsSeenOnlyOnceItPublishes() {
        let metrics = WorkerMetrics(.tftp)
        metrics.add(.bytesSent, 516)
        metrics.countRequest(.read, .notFound)
        #expect(metrics.value(.bytesSent) == 0)
        metrics.publish()
        #expect(metrics.value(.bytesSent) == 516)
        #expect(metrics.requests(.read, .notFound) == 1)
        #expect(metrics.requests(.write, .notFound) == 0)
    }

    @Test func theDurationLogDropsWhenFullAndGivesEverythingElseOnce() {
        let log = DurationLog(capacity: 4)
        for i in 0..<6 { _ = log.push(.init(label: 0, kind: .read, nanoseconds: Int64(i))) }
        var seen: [Int64] = []
        log.drain { seen.append($0.nanoseconds) }
        #expect(seen == [0, 1, 2, 3])
        log.drain { seen.append($0.nanoseconds) }
        #expect(seen.count == 4)
        #expect(log.push(.init(label: 0, kind: .read, nanoseconds: 9)))
    }

    @Test(arguments: [
        (TFTPError(.fileNotFound, "x"), WorkerMetrics.Result.notFound),
        (TFTPError(.accessViolation, "x"), .accessDenied),
        (TFTPError(.fileExists, "x"), .accessDenied),
        (TFTPError(.illegalOperation, "x"), .protocolError),
        (TFTPError(.diskFull, "x"), .serverError),
        (TFTPError(.notDefined, "Server busy", busy: true), .busy),
    ])
    func refusalsAreClassedByTheirError(error: TFTPError, result: WorkerMetrics.Result) {
        #expect(WorkerMetrics.Result(error) == result)
    }
}

/// A worker on a fake backend, scraped through the exporter: the text a Prometheus would read.
@Suite(.serialized) struct ExporterSpec {
    let dir = ScratchDirectory()
    let backend = FakeBackend()
    let worker: Worker<FakeBackend>
    let exporter: MetricsExporter
    let client = SocketAddress(parsing: "127.0.0.1:40000", defaultPort: 0)!
    let local = SocketAddress(parsing: "127.0.0.1:69", defaultPort: 0)!

    init() throws {
        let configuration = ServerConfiguration(listenAddresses: [local], policy: AccessPolicy(root: dir.fd),
                                                logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }))
        let cache = FileCache()
        worker = Worker(backend: backend, configuration: configuration, cache: cache, index: 0)
        try worker.bindListeners([local])
        exporter = MetricsExporter(workers: [worker.metrics], cache: cache, fileLabels: worker.fileLabels,
                                   build: BuildInfo(version: "test", backend: "fake", features: []))
    }

    func deliver(_ bytes: [UInt8], tag: UInt64) {
        backend.inbox.append((tag, bytes, client, local))
        worker.turnSettling(now: stampede_monotonic_ns(), maxWait: 0)
    }

    func read(_ name: String) {
        deliver(Request(isWrite: false, filename: Array(name.utf8), mode: "octet", options: []).encoded(), tag: backend.tags[0])
    }

    func scrape() -> MetricsSample { MetricsSample(parsing: String(decoding: exporter.scrape(), as: UTF8.self)) }

    @Test func servedRefusedBytesAndDurationsReachTheExposition() {
        mkdir(dir.path + "/pxelinux.cfg", 0o755)
        dir.write("pxelinux.cfg/01-52-54-00-00-00-01", Array(repeating: 7, count: 700))
        read("pxelinux.cfg/01-52-54-00-00-00-01")
        deliver([0, 4, 0, 1], tag: backend.tags.last!)
        deliver([0, 4, 0, 2], tag: backend.tags.last!)
        read("missing")
        read("missing")
        worker.turnSettling(now: stampede_monotonic_ns(), maxWait: 0)  // publishes
        let sample = scrape()
        #expect(sample.sum("stampede_requests_total", ["outcome=\"served\"", "request=\"rrq\""]) == 1)
        #expect(sample.sum("stampede_requests_total", ["outcome=\"not_found\""]) == 2)
        #expect(sample.sum("stampede_file_bytes_total", ["direction=\"sent\""]) == 700)
        #expect(sample.sum("stampede_transfer_duration_seconds_count", ["file=\"pxelinux.cfg/*\""]) == 1)
        #expect(sample.sum("stampede_transfers_running") == 0)
        #expect(sample.sum("stampede_cache_misses_total") == 1)
        // Scraped again, nothing new: the counters stay (a scrape moves deltas, never twice).
        #expect(scrape().sum("stampede_requests_total") == 3)
    }

    @Test func aRunningTransferIsAGaugeAndARetransmissionACounter() {
        dir.write("f", Array(repeating: 1, count: 2000))
        read("f")
        worker.turnSettling(now: stampede_monotonic_ns(), maxWait: 0)  // the next turn publishes, before it waits
        #expect(scrape().sum("stampede_transfers_running") == 1)
        deliver([0, 4, 0, 0], tag: backend.tags.last!)  // ACK 0 repeats "nothing yet": a duplicate, too soon to resend
        worker.turnSettling(now: stampede_monotonic_ns(), maxWait: 0)
        #expect(scrape().sum("stampede_duplicate_acks_total") == 1)
        #expect(scrape().sum("stampede_retransmissions_total") == 0)
        // The retransmit timer fires (1 s, and the adaptive floor of 100 ms at first contact).
        worker.turnSettling(now: stampede_monotonic_ns() + 2 * nanosecondsPerSecond, maxWait: 0)
        worker.turnSettling(now: stampede_monotonic_ns() + 2 * nanosecondsPerSecond, maxWait: 0)
        #expect(scrape().sum("stampede_retransmissions_total") >= 1)
    }
}

/// The metrics listener's own limits, on loopback.
@Suite struct MetricsListenerSpec {
    /// A blocking TCP connection to 127.0.0.1:`port`.
    func connect(_ port: Int) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = SocketAddress(parsing: "127.0.0.1:\(port)", defaultPort: 0)!.storage
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        try #require(connected == 0)
        var timeout = timeval(tv_sec: 15, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        return fd
    }

    /// One answer's head and body (by its Content-Length); nil when the peer has closed.
    func answer(_ fd: Int32) -> (head: String, body: Int)? {
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            if let end = bytes.indices.dropLast(3).first(where: { bytes[$0...($0 + 3)].elementsEqual([13, 10, 13, 10]) }) {
                let head = String(decoding: bytes[..<end], as: UTF8.self)
                let length = head.split(separator: "\r\n").first { $0.lowercased().hasPrefix("content-length:") }
                    .flatMap { Int($0.split(separator: ":")[1].filter { $0 != " " }) } ?? 0
                while bytes.count < end + 4 + length {
                    let n = read(fd, &buffer, buffer.count)
                    guard n > 0 else { return nil }
                    bytes += buffer[..<n]
                }
                return (head, length)
            }
            let n = read(fd, &buffer, buffer.count)
            guard n > 0 else { return nil }
            bytes += buffer[..<n]
        }
    }

    /// Issue 21, defect 14: keep-alive scrapers could hold all 16 places for ever.
    @Test func aKeepAliveConnectionIsClosedAfterItsLifetime() throws {
        let exporter = MetricsExporter(workers: [WorkerMetrics(.tftp)], cache: FileCache(), fileLabels: FileLabels(),
                                       build: BuildInfo(version: "test", backend: "none", features: []))
        let listener = try MetricsListener(host: "127.0.0.1", port: 0, exporter: exporter, lifetime: 500_000_000)
        defer { listener.shutdown() }
        let port = Int(listener.address.split(separator: ":").last!)!
        let opened = stampede_monotonic_ns()
        let fd = try connect(port)
        defer { close(fd) }
        let get = Array("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n".utf8)
        // A scraper asking every 100 ms, keep-alive: answered, until its lifetime is over.
        var closing: Nanoseconds?
        for _ in 0..<100 where closing == nil {
            _ = write(fd, get, get.count)
            let reply = try #require(answer(fd))
            #expect(reply.head.hasPrefix("HTTP/1.1 200"))
            if reply.head.lowercased().contains("connection: close") { closing = stampede_monotonic_ns() }
            usleep(100_000)
        }
        let closed = try #require(closing)
        #expect(closed - opened >= 500_000_000)
        #expect(answer(fd) == nil)  // and then the end
    }
}
