import ArgumentParser
import CStampedeSys
import Glibc
import StampedeBase
import StampedeGlibc
import StampedeIO
import StampedeMetrics
import StampedeProtocol
import StampedeStorm
import StampedeTLS
import StampedeURing

/// `stampede storm`: a rack of machines booting at once, played against a server.
struct Storm: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Play many machines booting from a TFTP (and HTTP) server at once, and report what happened.",
        discussion: """
            Without a profile every client opens its own socket, sends an RRQ and reads the whole file. With \
            --profile (\(BootProfile.builtInNames.joined(separator: ", "))) or --profile-file, every \
            machine plays the requests its firmware sends, stage by stage, with names from its own MAC, IP \
            and UUID, over TFTP and, for a profile's http stages, HTTP (--http names that server) \
            (--show-profile prints a profile to start your own from). With --verify or --verify-root every \
            byte is compared. Prints machines ok/failed, MB/s, p50/p99/max boot time, retransmissions and, \
            for a profile, the same per stage, with the storm's own CPU time (so you can tell whether the \
            storm or the server was the limit). Ctrl-C (or SIGTERM) ends the storm early and still \
            reports. Exits 1 if any machine failed.
            """)

    @Argument(help: "The server, HOST[:PORT] (port 69 by default).")
    var target: String?
    @Argument(help: "The file every client reads (without a profile).")
    var file: String?

    @Option(help: "Play this firmware's boot: \(BootProfile.builtInNames.joined(separator: ", ")).")
    var profile: String?
    @Option(help: "Play the boot this profile file describes (see --show-profile for the format).")
    var profileFile: String?
    @Option(help: "Print a built-in profile, as a start for your own, and exit.")
    var showProfile: String?
    @Option(help: "Play only the profile's first N stages.")
    var stages: Int?
    @Option(help: "Compare every file a profile reads with the file of that name under this directory.")
    var verifyRoot: String?
    @Option(help: "The HTTP server of a profile's http stages, HOST[:PORT] (default: the TFTP server's address, port 80).")
    var http: String?
    @Option(help: "The http stages over HTTPS instead, to this server, HOST[:PORT] (port 443 by default), trusting --tls-ca; each machine's connection begins with a full TLS 1.2 handshake, timed in the report.")
    var https: String?
    @Option(name: .customLong("tls-ca"), help: ArgumentHelp("The CA certificates (PEM) the machines trust, for --https and https:// URLs in a profile: the server's certificate must chain to one and name its address.", valueName: "FILE"))
    var tlsCA: String?
    @Option(help: ArgumentHelp("Play the profile's dhcp stages from this host's address on a boot network: each machine's DISCOVER broadcast from port 68 there (IPv4), or its Solicit or Information-request multicast to ff02::1:2 from port 546 of ADDR (IPv6), as its firmware sends it, answered by a proxyDHCP or DHCPv6 boot server (without it, the dhcp stages are left out).", valueName: "ADDR"))
    var dhcp: String?
    @Flag(help: "A machine whose boot failed starts over from the first stage, as its firmware does: as often and after as long as the profile's reboot line says (default: it counts as failed at once).")
    var reboot = false
    @Option(help: ArgumentHelp("Play the machines of a server's records (serve --machines DIR): one machine for each record that selects a MAC, with that MAC and the record's UUID, and, where the record has a kernel, its iPXE script (a profile's follow stage) must name that kernel and those initrds (default --total: one each).", valueName: "DIR"))
    var machines: String?
    @Option(help: "Power the machines on spread evenly over this many seconds (default: all at once).")
    var ramp = 0.0
    @Option(help: "Play only slice I of N of the machines (I/N, from 0), to share a rack between processes.")
    var slice: String?
    @Option(help: "Machine n sends from this address + n (the host must take them: a local route for the network, non-local binds allowed).")
    var sourceRange: String?

    @Option(help: "Machines booting at once (with --slice: in every slice together).")
    var clients = 100
    @Option(help: "Machines in all (default: one per client, or unbounded with --duration).")
    var total: Int?
    @Option(help: "Keep starting machines for this many seconds, then let the running ones finish.")
    var duration: Double?
    @Option(help: "Ask for this block size.")
    var blksize: Int?
    @Option(help: "Ask for this window size (RFC 7440).")
    var windowsize: Int?
    @Flag(inversion: .prefixedNo, help: "Ask for the transfer size (RFC 2349).")
    var tsize = true
    @Option(name: .customLong("option"),
            help: "Ask for any option of the table as NAME=VALUE (repeatable): blksize2, utimeout, rollover, cookie, ...",
            transform: ClientOptions.requested)
    var option: [(name: String, value: String)] = []
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
    @Option(help: "Read the server's metrics (http://HOST:PORT/metrics, its --metrics) before and after, and report its own view: its CPU, retransmissions, refusals.")
    var metrics: String?

    func validate() throws {
        if let showProfile {
            guard BootProfile.builtIn(showProfile) != nil else { throw ValidationError("--show-profile \(showProfile): \(Self.knownProfiles)") }
            return
        }
        guard target != nil else { throw ValidationError("Missing the server, HOST[:PORT].") }
        if let metrics, !metrics.hasPrefix("http://") {
            throw ValidationError("--metrics \(metrics): an http:// URL, like http://10.0.0.1:9469/metrics.")
        }
        let profiles = (profile == nil ? 0 : 1) + (profileFile == nil ? 0 : 1)
        guard profiles <= 1 else { throw ValidationError("--profile and --profile-file: choose one.") }
        if profiles == 1 {
            guard file == nil else { throw ValidationError("A profile names its own files: leave out \(file!).") }
            guard blksize == nil, windowsize == nil, timeout == nil, tsize, option.isEmpty, verify == nil else {
                throw ValidationError("A profile sets its own options and retries: leave out --blksize, --windowsize, --timeout, --no-tsize, --option and --verify (use --verify-root).")
            }
            if let profile, BootProfile.builtIn(profile) == nil { throw ValidationError("--profile \(profile): \(Self.knownProfiles)") }
        } else {
            guard file != nil else { throw ValidationError("Missing the file to read (or a --profile).") }
            guard stages == nil else { throw ValidationError("--stages needs a profile.") }
            guard dhcp == nil else { throw ValidationError("--dhcp needs a profile with dhcp stages.") }
            guard !reboot else { throw ValidationError("--reboot needs a profile (its reboot line says how often).") }
        }
        try FlagRange.check(stages, FlagRange.count, "--stages")
        if let http, SocketAddress(parsing: http, defaultPort: 80, defaultHost: "127.0.0.1") == nil {
            throw ValidationError("--http \(http): an address and port, like 10.0.0.1:8080 or [::1]:80.")
        }
        if let https, SocketAddress(parsing: https, defaultPort: 443, defaultHost: "127.0.0.1") == nil {
            throw ValidationError("--https \(https): an address and port, like 10.0.0.1:443 or [::1]:8443.")
        }
        if http != nil && https != nil { throw ValidationError("--http and --https: choose one.") }
        if https != nil && tlsCA == nil { throw ValidationError("--https needs --tls-ca, the CA the server's certificate chains to.") }
        if let dhcp, SocketAddress(parsing: dhcp, defaultPort: 68).map({ $0.port != 68 }) ?? true {
            throw ValidationError("--dhcp \(dhcp): this host's address on the boot network, like 10.0.0.5 or 2001:db8::5.")
        }
        try FlagRange.check(ramp, 0...Double(FlagRange.year), "--ramp", "seconds")
        if let slice, parseSlice(slice) == nil { throw ValidationError("--slice \(slice): write I/N with 0 <= I < N.") }
        if let sourceRange, SocketAddress(parsing: sourceRange, defaultPort: 0) == nil {
            throw ValidationError("--source-range \(sourceRange): an IPv4 or IPv6 address, the first machine's.")
        }
        try FlagRange.check(clients, FlagRange.count, "--clients")
        try FlagRange.check(total, 0...Int(Int32.max), "--total")
        try FlagRange.check(duration, 0.001...Double(FlagRange.year), "--duration", "seconds")
        try ClientOptions.check(blksize, .blksize)
        try ClientOptions.check(windowsize, .windowsize)
        try ClientOptions.check(timeout, .timeout)
        try FlagRange.check(retransmit, 1...255_000, "--retransmit", "milliseconds")
        try FlagRange.check(retries, FlagRange.retries, "--retries")
        try FlagRange.check(hold, 0...255, "--hold", "seconds")
        try FlagRange.check(threads, 1...1024, "--threads")
        if let dhcp, threads > 1 {
            throw ValidationError("--dhcp \(dhcp) --threads \(threads): a storm's DHCP answers come to one socket; use --threads 1, and for more, several storms with --slice, each its own --dhcp address.")
        }
        guard ["auto", "uring", "glibc"].contains(backend) else { throw ValidationError("--backend \(backend): choose auto, uring or glibc.") }
    }

    static var knownProfiles: String { "the built-in profiles are \(BootProfile.builtInNames.joined(separator: ", "))." }

    /// `I/N` → (I, N).
    func parseSlice(_ text: String) -> (index: Int, count: Int)? {
        let parts = text.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2, let index = Int(parts[0]), let count = Int(parts[1]), count >= 1, (0..<count).contains(index) else { return nil }
        return (index, count)
    }

    /// The profile the flags name: built in, from a file, or one file read with the flags' options.
    func bootProfile() throws -> BootProfile {
        var chosen: BootProfile
        if let profile {
            chosen = BootProfile.builtIn(profile, dhcp: true)!
        } else if let profileFile {
            let bytes: [UInt8]
            do {
                bytes = try readWholeFile(profileFile)
            } catch {
                throw ValidationError("--profile-file \(profileFile): \(error)")
            }
            do throws(BootProfile.ParseError) {
                chosen = try BootProfile(parsing: String(decoding: bytes, as: UTF8.self))
            } catch {
                throw ValidationError("--profile-file \(profileFile): \(error)")
            }
        } else {
            let options = TFTPOption.requestList(blockSize: blksize, timeoutSeconds: timeout, transferSize: tsize ? 0 : nil,
                                                 windowSize: windowsize, more: option)
            return .single(file: file!, options: options, retransmit: Nanoseconds(retransmit) * 1_000_000, retries: retries)
        }
        if dhcp == nil {
            chosen = chosen.withoutDHCP
        } else if !chosen.usesDHCP {
            throw ValidationError("--dhcp: profile \(chosen.name) has no dhcp stage.")
        }
        if let stages {
            guard stages <= chosen.stages.count else {
                throw ValidationError("--stages \(stages): profile \(chosen.name) has \(chosen.stages.count).")
            }
            chosen.stages.removeLast(chosen.stages.count - stages)
        }
        return chosen
    }

    func run() throws {
        if let showProfile {
            print(BootProfile.builtInTexts[showProfile]!)
            return
        }
        let plan = try makePlan()
        try checkDescriptors(plan)
        let progress: (@Sendable (StormReport, Int) -> Void)? = isatty(2) != 0 && !json ? Self.showProgressLine : nil
        // SIGINT/SIGTERM end the storm early: running transfers count as interrupted, the report is printed.
        stampede_install_stop_signals()
        let before: MetricsSample?
        do { before = try metrics.map { url throws(MetricsSample.Failure) in try MetricsSample.read(url) } } catch {
            throw failure("--metrics: \(error)")
        }
        var report = try storm(plan, progress: progress)
        if progress != nil { writeToStandardError("\n") }
        if let metrics, let before {
            do {
                let view = ServerView(before: before, after: try Self.settledReading(metrics, running: before.sum("stampede_transfers_running")))
                report.serverView = (view.text, view.json)
            } catch {
                writeToStandardError("storm: --metrics: \(error)\n")
            }
        }
        print(json ? report.json : report.text)
        if report.failed > 0 || report.ok == 0 { throw ExitCode(1) }
    }

    /// The storm the flags describe.
    func makePlan() throws -> StormPlan {
        guard let server = SocketAddress(parsing: target!, defaultPort: 69, defaultHost: "127.0.0.1") else {
            throw ValidationError("\(target!): not an address (HOST[:PORT]).")
        }
        var plan = StormPlan(server: server, profile: try bootProfile())
        if plan.profile.needsHTTPServer {
            var address = server
            address.port = https == nil ? 80 : 443
            plan.httpServer = (https ?? http).flatMap { SocketAddress(parsing: $0, defaultPort: address.port, defaultHost: server.host) }
                ?? address
            plan.httpSecure = https != nil
        }
        if let tlsCA {
            do { plan.tls = try TLSClient(trusting: tlsCA) } catch { throw ValidationError("--tls-ca \(error)") }
        }
        plan.clients = clients
        plan.total = total
        if let machines { try Self.machines(from: machines, into: &plan) }
        plan.duration = duration.map { Nanoseconds($0 * 1e9) }
        plan.ramp = Nanoseconds(ramp * 1e9)
        if let slice { plan.slice = parseSlice(slice)! }
        plan.hold = Nanoseconds(hold * 1e9)
        plan.verifyRoot = verifyRoot
        plan.sourcePerMachine = profile != nil || profileFile != nil
        plan.reboot = reboot
        plan.dhcpSource = dhcp.flatMap { SocketAddress(parsing: $0, defaultPort: 68) }
        if let source = plan.dhcpSource, source.isIPv6 != server.isIPv6 {
            throw ValidationError("--dhcp \(dhcp!) and the server \(target!) are of two address families.")
        }
        plan.firstSource = sourceRange.flatMap { SocketAddress(parsing: $0, defaultPort: 0) }
        if let first = plan.firstSource, first.isIPv6 != server.isIPv6 {
            throw ValidationError("--source-range \(sourceRange!) and the server \(target!) are of two address families.")
        }
        if let verify, let file {
            do {
                plan.expected[file] = try readWholeFile(verify)
            } catch {
                throw ValidationError("--verify \(verify): \(error)")
            }
        }
        return plan
    }

    /// Each machine holds a socket while it boots (and the HTTP connection of its http stages,
    /// which it keeps; a followed TFTP script's http:// files come on a connection that takes the
    /// place of its closed TFTP socket; its DHCP goes through the storm's one socket): said before
    /// starting if even the hard fd limit is short.
    func checkDescriptors(_ plan: StormPlan) throws {
        let stages = plan.profile.stages
        let perMachine = (stages.contains { $0.dhcp == nil && !$0.overHTTP } ? 1 : 0) + (stages.contains(where: \.overHTTP) ? 1 : 0)
        let needed = rlim_t(plan.slots * perMachine + 64)
        if case .success(let limit) = liftFileLimit(), limit < needed {
            throw failure("""
                \(plan.slots) machines at once need \(needed) file descriptors; the limit is \(limit) (ulimit -n): \
                share them between processes with --slice
                """)
        }
    }

    /// The storm itself, on the backend --backend names.
    func storm(_ plan: StormPlan, progress: (@Sendable (StormReport, Int) -> Void)?) throws -> StormReport {
        let stop: @Sendable () -> Bool = { stampede_stop_requested() != 0 }
        let probe = URingBackend.probe()
        let useURing = backend == "uring" || (backend == "auto" && probe.available)
        if backend == "uring" && !probe.available { throw failure("--backend uring: \(probe.reason)") }
        do {
            if useURing {
                return try StormRunner.run(plan: plan, threads: threads, makeBackend: { () throws(Errno) in try makeURingBackend(largestBlock: plan.largestBlock, machines: (plan.slots + threads - 1) / threads) }, progress: progress,
                                           stop: stop)
            } else {
                return try StormRunner.run(plan: plan, threads: threads, makeBackend: { () throws(Errno) in try GlibcBackend() },
                                           progress: progress, stop: stop)
            }
        } catch {
            throw failure("cannot start the storm's backend: \(error)")
        }
    }

    /// The server's metrics once its transfers of the storm are over: a transfer ends on the server
    /// when it hears the last ACK, a moment after the client; and a scrape that comes while a
    /// worker publishes may read the running count already lowered and the request it ended not
    /// yet counted. So: no more running than before, and two readings 100 ms apart that agree on
    /// the requests (at most 5 s of waiting).
    static func settledReading(_ url: String, running: Double) throws(MetricsSample.Failure) -> MetricsSample {
        var sample = try MetricsSample.read(url)
        let deadline = stampede_monotonic_ns() + 5 * nanosecondsPerSecond
        while stampede_monotonic_ns() < deadline {
            usleep(100_000)
            let next = try MetricsSample.read(url)
            let settled = next.sum("stampede_transfers_running") <= running
                && next.sum("stampede_requests_total") == sample.sum("stampede_requests_total")
            sample = next
            if settled { break }
        }
        return sample
    }

    /// The live line on a terminal.
    @Sendable static func showProgressLine(_ report: StormReport, _ active: Int) {
        writeToStandardError("\rstorm: \(report.ok) ok, \(report.failed) failed, \(active) booting, \(report.bytes / 1_000_000) MB   ")
    }

    /// Large receive buffers for every client when blocks do not fit the small ones. Small ones
    /// for two datagrams a machine (a power of two, 4,096 to the ring's 32,768): with 4,096 for
    /// 5,000 machines, the receives of thousands found none in every turn, ended, and were armed
    /// again, work that starved the storm in a rack of 20,000.
    func makeURingBackend(largestBlock: Int, machines: Int) throws(Errno) -> URingBackend {
        var configuration = URingBackend.Configuration()
        let wanted = min(32768, max(Int(configuration.smallBuffers), 2 * machines))
        configuration.smallBuffers = UInt32(1 << (Int.bitWidth - (wanted - 1).leadingZeroBitCount))
        if largestBlock + 4 > Int(configuration.smallSize) { configuration.largeBuffers = 1024 }
        return try URingBackend(configuration: configuration)
    }

    func failure(_ message: String) -> ExitCode {
        writeToStandardError("stampede storm: \(message)\n")
        return ExitCode(2)
    }

}
