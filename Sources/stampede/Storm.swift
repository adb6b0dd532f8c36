import ArgumentParser
import CStampedeSys
import Glibc
import StampedeGlibc
import StampedeIO
import StampedeProtocol
import StampedeServer
import StampedeStorm
import StampedeURing

/// `stampede storm`: a rack of machines booting at once, played against a server.
struct Storm: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Play many TFTP clients reading one file at once, and report what happened.",
        discussion: """
            Every client opens its own socket, sends an RRQ and reads the whole file; with --verify every \
            byte is compared. Prints sessions ok/failed, MB/s, sessions/s, p50/p99/max transfer time and \
            retransmissions, with the storm's own CPU time (so you can tell whether the storm or the \
            server was the limit). Ctrl-C (or SIGTERM) ends the storm early and still reports. Exits 1 if \
            any transfer failed.
            """)

    @Argument(help: "The server, HOST[:PORT] (port 69 by default).")
    var target: String
    @Argument(help: "The file every client reads.")
    var file: String

    @Option(help: "Transfers running at once.")
    var clients = 100
    @Option(help: "Transfers in all (default: one per client, or unbounded with --duration).")
    var total: Int?
    @Option(help: "Keep starting transfers for this many seconds, then let the running ones finish.")
    var duration: Double?
    @Option(help: "Ask for this block size.")
    var blksize: Int?
    @Option(help: "Ask for this window size (RFC 7440).")
    var windowsize: Int?
    @Flag(inversion: .prefixedNo, help: "Ask for the transfer size (RFC 2349).")
    var tsize = true
    @Option(help: "Ask for this retransmit timeout, in seconds (RFC 2349).")
    var timeout: Int?
    @Option(help: "Our retransmit interval when no timeout is negotiated, in milliseconds.")
    var retransmit = 1000
    @Option(help: "Retries before a transfer counts as lost.")
    var retries = 5
    @Option(help: "Hold each client's first ACK this many seconds (keeps every transfer open at once).")
    var hold = 0.0
    @Option(help: "Compare every byte received with this local file.")
    var verify: String?
    @Option(help: "Threads, each with its own backend and share of the clients.")
    var threads = 1
    @Option(help: "I/O backend: auto (io_uring when this kernel allows it), uring, glibc.")
    var backend = "auto"
    @Flag(help: "Print the report as one JSON object.")
    var json = false

    func validate() throws {
        guard clients >= 1 else { throw ValidationError("--clients must be at least 1.") }
        if let total, total < 0 { throw ValidationError("--total must not be negative.") }
        if let duration, duration <= 0 { throw ValidationError("--duration must be positive.") }
        try ClientOptions.check(blksize, .blksize)
        try ClientOptions.check(windowsize, .windowsize)
        try ClientOptions.check(timeout, .timeout)
        guard retransmit >= 1, retries >= 0, hold >= 0, threads >= 1 else {
            throw ValidationError("--retransmit, --threads must be positive; --retries, --hold not negative.")
        }
        guard ["auto", "uring", "glibc"].contains(backend) else { throw ValidationError("--backend \(backend): choose auto, uring or glibc.") }
    }

    func run() throws {
        guard let server = SocketAddress(parsing: target, defaultPort: 69, defaultHost: "127.0.0.1") else {
            throw ValidationError("\(target): not an address (HOST[:PORT]).")
        }
        var plan = StormPlan(server: server, file: file)
        plan.clients = clients
        plan.total = total
        plan.duration = duration.map { Nanoseconds($0 * 1e9) }
        plan.blockSize = blksize
        plan.windowSize = windowsize
        plan.askSize = tsize
        plan.timeoutSeconds = timeout
        plan.retransmit = Nanoseconds(retransmit) * 1_000_000
        plan.retries = retries
        plan.hold = Nanoseconds(hold * 1e9)
        if let verify {
            do {
                plan.expected = try readWholeFile(verify)
            } catch {
                throw ValidationError("--verify \(verify): \(error)")
            }
        }
        // Each client holds a socket: say so before starting if even the hard fd limit is short.
        let needed = rlim_t(clients + 64)
        if case .success(let limit) = liftFileLimit(), limit < needed {
            throw failure("\(clients) clients need \(needed) file descriptors; the limit is \(limit) (ulimit -n)")
        }

        let progress: (@Sendable (StormReport, Int) -> Void)? = isatty(2) != 0 && !json ? Self.showProgressLine : nil
        // SIGINT/SIGTERM end the storm early: running transfers count as interrupted, the report is printed.
        stampede_install_stop_signals()
        let stop: @Sendable () -> Bool = { stampede_stop_requested() != 0 }
        let probe = URingBackend.probe()
        let useURing = backend == "uring" || (backend == "auto" && probe.available)
        if backend == "uring" && !probe.available { throw failure("--backend uring: \(probe.reason)") }
        let report: StormReport
        do {
            if useURing {
                report = try StormRunner.run(plan: plan, threads: threads, makeBackend: makeURingBackend, progress: progress,
                                             stop: stop)
            } else {
                report = try StormRunner.run(plan: plan, threads: threads, makeBackend: { () throws(Errno) in try GlibcBackend() },
                                             progress: progress, stop: stop)
            }
        } catch {
            throw failure("cannot start the storm's backend: \(error)")
        }
        if progress != nil { writeToStandardError("\n") }
        print(json ? report.json : report.text)
        if report.failed > 0 || report.ok == 0 { throw ExitCode(1) }
    }

    /// The live line on a terminal.
    @Sendable static func showProgressLine(_ report: StormReport, _ active: Int) {
        writeToStandardError("\rstorm: \(report.ok) ok, \(report.failed) failed, \(active) running, \(report.bytes / 1_000_000) MB   ")
    }

    /// Large receive buffers for every client when blocks do not fit the small ones.
    func makeURingBackend() throws(Errno) -> URingBackend {
        var configuration = URingBackend.Configuration()
        if (blksize ?? 512) + 4 > Int(configuration.smallSize) { configuration.largeBuffers = 1024 }
        return try URingBackend(configuration: configuration)
    }

    func failure(_ message: String) -> ExitCode {
        writeToStandardError("stampede storm: \(message)\n")
        return ExitCode(2)
    }

}
