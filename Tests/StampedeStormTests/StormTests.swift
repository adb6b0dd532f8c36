import CStampedeSys
import Glibc
import Logging
import StampedeBase
import StampedeFiles
import StampedeGlibc
import StampedeHTTP
import StampedeIO
import StampedeProtocol
import StampedeServing
import StampedeStorm
import StampedeTFTPServer
import StampedeTestSupport
import StampedeURing
import Testing

/// A real server worker (and, with `http`, an HTTP loop over the same root and cache) and a
/// storm on loopback, turned in one thread: the storm's verdicts are checked against files whose
/// bytes the test controls.
final class Rig<Backend: DatagramBackend> {
    let dir = ScratchDirectory()
    let worker: Worker<Backend>
    let address: SocketAddress
    let http: HTTPServer?
    var serverAnswers = true

    /// `httpIdleTimeout`: how long the HTTP loop keeps an idle connection.
    init(backend: Backend, http withHTTP: Bool = false, httpIdleTimeout: Nanoseconds = 60 * nanosecondsPerSecond) throws {
        _ = brokenPipesIgnored
        let listen = SocketAddress(parsing: "127.0.0.1:0", defaultPort: 0)!
        let configuration = ServerConfiguration(listenAddresses: [listen], policy: AccessPolicy(root: dir.fd),
                                                logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }))
        let cache = FileCache()
        worker = Worker(backend: backend, configuration: configuration, cache: cache, index: 0)
        address = try worker.bindListeners([listen])[0]
        var httpConfiguration = HTTPConfiguration(listenAddresses: [listen])
        httpConfiguration.idleTimeout = httpIdleTimeout
        http = withHTTP ? try HTTPServer(http: httpConfiguration, files: worker.files, fileLabels: FileLabels(),
                                         logger: configuration.logger, loopCount: 1) : nil
    }

    /// The HTTP server's address (with `http`).
    var httpAddress: SocketAddress { http!.boundAddresses[0] }

    /// Turns server and storm until the storm ends (or 30 s pass: a hung storm is a failure too).
    /// `silenceAfter`: the server stops answering after this many turns (a transfer lost midway).
    /// `everyTurn`: called before each turn with the storm's report so far (a test changes the
    /// served files when the storm reaches some point).
    func play<StormBackend>(_ storm: Storm<StormBackend>, silenceAfter turns: Int? = nil,
                            everyTurn: ((StormReport) -> Void)? = nil) -> StormReport {
        let limit = stampede_monotonic_ns() + 30_000_000_000
        var turn = 0
        storm.start(now: stampede_monotonic_ns())
        while !storm.isFinished && stampede_monotonic_ns() < limit {
            if let turns, turn >= turns { serverAnswers = false }
            everyTurn?(storm.report)
            if serverAnswers {
                worker.turn(now: stampede_monotonic_ns(), maxWait: 0)
                http?.loops[0].turn(now: stampede_monotonic_ns(), maxWait: 0)
            }
            storm.turn(now: stampede_monotonic_ns(), maxWait: 1_000_000)
            turn += 1
        }
        #expect(storm.isFinished, "the storm did not end")
        _ = storm.backend.poll(deadline: stampede_monotonic_ns())  // what the storm sent last (run() does the same)
        return storm.report
    }
}

func randomBytes(_ count: Int) -> [UInt8] { (0..<count).map { _ in UInt8.random(in: 0...255) } }

@Suite(.serialized) struct StormVerification {
    func rig(_ kind: BackendKind) throws -> (Rig<GlibcBackend>, any DatagramBackend) {
        (try Rig(backend: try GlibcBackend()), try kind.make())
    }

    func plan(_ rig: Rig<GlibcBackend>, _ file: String, clients: Int, expected: [UInt8]?) -> StormPlan {
        let profile = BootProfile.single(file: file, options: [("blksize", "1024"), ("tsize", "0")],
                                         retransmit: 100_000_000, retries: 2)
        var plan = StormPlan(server: rig.address, profile: profile)
        plan.clients = clients
        if let expected { plan.expected[file] = expected }
        return plan
    }

    func play(_ rig: Rig<GlibcBackend>, _ plan: StormPlan, on backend: any DatagramBackend,
              silenceAfter turns: Int? = nil) -> StormReport {
        func open<B: DatagramBackend>(_ backend: B) -> StormReport {
            rig.play(Storm(plan: plan, backend: backend), silenceAfter: turns)
        }
        return open(backend)
    }

    @Test(arguments: BackendKind.allCases) func rightBytesAreCountedOk(_ kind: BackendKind) throws {
        let (rig, backend) = try rig(kind)
        let content = randomBytes(50_000)
        rig.dir.write("boot.img", content)
        let report = play(rig, plan(rig, "boot.img", clients: 20, expected: content), on: backend)
        #expect(report.ok == 20 && report.failed == 0)
        #expect(report.bytes == 20 * content.count)
        #expect(report.durations.count == 20)
        // Every client socket is given back once the last closes are flushed.
        _ = backend.poll(deadline: stampede_monotonic_ns() + 50_000_000)
        #expect(backend.socketCount == 0)
    }

    @Test(arguments: BackendKind.allCases) func aCorruptedByteIsReportedWithItsOffset(_ kind: BackendKind) throws {
        let (rig, backend) = try rig(kind)
        let content = randomBytes(50_000)
        rig.dir.write("boot.img", content)
        var expected = content
        expected[31_337] ^= 0x40
        let report = play(rig, plan(rig, "boot.img", clients: 8, expected: expected), on: backend)
        #expect(report.ok == 0 && report.failed == 8)
        #expect(report.failuresByKind == ["corrupted": 8])
        #expect(report.failureExamples.first == StormFailure.corrupted(offset: 31_337).description)
        #expect(report.bytes == 0)
    }

    @Test func aShortFileIsAWrongSizeNotASuccess() throws {
        let (rig, backend) = try rig(.glibc)
        let content = randomBytes(10_000)
        rig.dir.write("short", content)
        let report = play(rig, plan(rig, "short", clients: 3, expected: content + [1, 2, 3]), on: backend)
        #expect(report.failuresByKind == ["wrong size": 3])
        #expect(report.failureExamples.first == StormFailure.wrongSize(expected: 10_003, received: 10_000).description)
    }

    @Test func aTransferLostMidwayIsReportedAsTimedOut() throws {
        let (rig, backend) = try rig(.glibc)
        let content = randomBytes(200_000)
        rig.dir.write("big", content)
        let report = play(rig, plan(rig, "big", clients: 4, expected: content), on: backend, silenceAfter: 20)
        #expect(!rig.serverAnswers, "the server was never silenced")
        #expect(report.ok == 0)
        #expect(report.failuresByKind == ["timed out": 4])
        #expect(report.retransmits >= 4 * 2)
    }

    @Test func aMissingFileIsTheServersError() throws {
        let (rig, backend) = try rig(.glibc)
        let report = play(rig, plan(rig, "nothing-here", clients: 2, expected: nil), on: backend)
        #expect(report.failuresByKind == ["server error 1": 2])
    }

    @Test func totalAndClientsBoundTheRun() throws {
        let (rig, backend) = try rig(.glibc)
        rig.dir.write("small", randomBytes(3000))
        var plan = plan(rig, "small", clients: 5, expected: nil)
        plan.total = 23
        let report = play(rig, plan, on: backend)
        #expect(report.ok == 23 && report.peakActive == 5)
    }
}
