import ArgumentParser
import CStampedeSys
import Glibc
import Logging
import StampedeCore
import StampedeGlibc
import StampedeURing

/// `stampede [serve]`: the in.tftpd (tftpd-hpa) command line, plus long options of our own.
struct Serve: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Serve a directory over TFTP (accepts tftpd-hpa's in.tftpd flags).")

    @Flag(name: [.customShort("l"), .customLong("listen")], help: "Standalone mode: bind and serve (the only mode yet).")
    var listen = false

    @Flag(name: [.customShort("L"), .customLong("foreground")], help: "Stay in the foreground (stampede never forks).")
    var foreground = false

    @Option(name: [.customShort("a"), .customLong("address")],
            help: "Listen on [ADDRESS][:PORT] (repeatable; default: all addresses, port 69).")
    var address: [String] = []

    @Flag(name: [.customShort("4"), .customLong("ipv4")], help: "IPv4 only.")
    var ipv4 = false

    @Flag(name: [.customShort("6"), .customLong("ipv6")], help: "IPv6 only.")
    var ipv6 = false

    @Flag(name: [.customShort("s"), .customLong("secure")], help: "chroot into the directory before serving.")
    var secure = false

    @Flag(name: [.customShort("c"), .customLong("create")], help: "Allow uploads to create new files.")
    var create = false

    @Flag(name: [.customShort("p"), .customLong("permissive")],
          help: "Only the OS permissions decide: no world-readable/writable requirement.")
    var permissive = false

    @Option(name: [.customShort("u"), .customLong("user")], help: "Drop privileges to this user after binding.")
    var user = "nobody"

    @Option(name: [.customShort("U"), .customLong("umask")], help: "umask for created files (octal).")
    var umask: String?

    @Option(name: [.customShort("P"), .customLong("pidfile")], help: "Write the process ID to this file.")
    var pidfile: String?

    @Option(name: [.customShort("t"), .customLong("timeout")], help: "inetd mode: exit after this many idle seconds.")
    var idleTimeout: Int = 900

    @Option(name: [.customShort("T"), .customLong("retransmit")],
            help: "Retransmit timeout in microseconds (the ceiling of the adaptive one).")
    var retransmit: Int = 1_000_000
    @Flag(name: .customLong("fixed-timeout"),
          help: "Retransmit downloads after -T always, not after the measured round trip (at least 100 ms).")
    var fixedTimeout = false

    @Option(name: [.customShort("m"), .customLong("map-file")], help: "Remap rules file (not supported yet).")
    var mapFile: String?

    @Flag(name: [.customShort("v"), .customLong("verbose")], help: "More logging (repeatable).")
    var verbose: Int

    @Option(name: .customLong("verbosity"), help: "Log level: 0 start/stop and problems, 1 every transfer (default), 2 debug, 3 trace.")
    var verbosity: Int?

    @Option(name: [.customShort("r"), .customLong("refuse")], help: "Never negotiate this option (repeatable).")
    var refuse: [String] = []

    @Option(name: [.customShort("B"), .customLong("blocksize")],
            help: "Largest blksize granted (default: the interface MTU minus headers).")
    var blocksize: Int?

    @Option(name: [.customShort("W"), .customLong("windowsize")], help: "Largest windowsize granted.")
    var windowsize: Int = 64

    @Option(name: [.customShort("R"), .customLong("port-range")], help: "Ports for transfers, LOW:HIGH.")
    var portRange: String?

    @Flag(name: [.customShort("V"), .customLong("version")], help: "Print the version and exit.")
    var version = false

    @Option(name: .customLong("workers"), help: "Worker threads (default: one per core).")
    var workers: Int?

    @Option(name: .customLong("backend"), help: "I/O backend: auto (io_uring when this kernel allows it), uring, glibc.")
    var backend = "auto"

    @Option(name: .customLong("retries"), help: "Retransmissions before a transfer is given up.")
    var retries = 5

    @Option(name: .customLong("grace"), help: "Seconds running transfers get to finish on SIGTERM.")
    var grace = 10

    @Option(name: .customLong("cache-size"), help: "Memory budget for cached file images, in MiB.")
    var cacheSize = 1024

    @Option(name: .customLong("cache-file-limit"), help: "Larger files are streamed instead of cached, in MiB.")
    var cacheFileLimit = 256

    @Option(name: .customLong("max-transfers"), help: "Concurrent transfers in all before requests get ERROR 0 (server busy).")
    var maxTransfers = 65536
    @Option(name: .customLong("max-per-client"), help: "Concurrent transfers per client address (default: no limit).")
    var maxPerClient: Int?

    @Argument(help: "The directory to serve.")
    var directory: [String] = []

    func validate() throws {
        guard maxTransfers >= 1, maxPerClient.map({ $0 >= 1 }) ?? true else {
            throw ValidationError("--max-transfers and --max-per-client must be at least 1.")
        }
        if mapFile != nil {
            throw ValidationError("-m/--map-file: remap rules are not supported yet; remove -m or keep in.tftpd for now.")
        }
        if !version && !listen && stampede_stdin_is_datagram_socket() != 0 {
            throw ValidationError("inetd mode (a socket on fd 0, no -l) is not supported yet; run standalone with -l.")
        }
        if directory.count > 1 { throw ValidationError("stampede serves one directory; got \(directory.count).") }
        if let b = blocksize, !OptionNegotiation.blockSizeRange.contains(b) {
            throw ValidationError("-B must be within 8...65464.")
        }
        if !OptionNegotiation.windowSizeRange.contains(windowsize) { throw ValidationError("-W must be within 1...65535.") }
        if retransmit < 1000 { throw ValidationError("-T is in microseconds and must be at least 1000.") }
        if let umask, mode_t(umask, radix: 8) == nil { throw ValidationError("-U takes an octal umask, like 022.") }
        if let portRange, parsePortRange(portRange) == nil { throw ValidationError("-R takes LOW:HIGH, like 4000:4999.") }
        if !["auto", "uring", "glibc"].contains(backend) {
            throw ValidationError("--backend \(backend): choose auto, uring or glibc.")
        }
        if ipv4 && ipv6 { throw ValidationError("-4 and -6 exclude each other.") }
    }

    func parsePortRange(_ text: String) -> ClosedRange<UInt16>? {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, let low = UInt16(parts[0]), let high = UInt16(parts[1]), low > 0, low <= high else { return nil }
        return low...high
    }

    func listenAddresses() throws -> [SocketAddress] {
        let specs = address.isEmpty ? [""] : address
        var result: [SocketAddress] = []
        for spec in specs {
            let hostPart = spec.hasPrefix("[") ? spec : String(spec.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false).first ?? "")
            let hosts: [String] = hostPart.isEmpty ? (ipv4 ? ["0.0.0.0"] : ipv6 ? ["::"] : ["0.0.0.0", "::"]) : [""]
            for host in hosts {
                guard let parsed = SocketAddress(parsing: spec, defaultPort: 69, defaultHost: host.isEmpty ? "0.0.0.0" : host) else {
                    throw ValidationError("-a \(spec): not an address[:port].")
                }
                if (ipv4 && parsed.isIPv6) || (ipv6 && !parsed.isIPv6) { continue }
                result.append(parsed)
            }
        }
        return result
    }

    func run() throws {
        if version {
            print("stampede \(Stampede.version) (tftp-hpa compatible command line)")
            return
        }
        let level: Logger.Level = switch verbosity ?? (1 + verbose) {
        case ...0: .notice
        case 1: .info
        case 2: .debug
        default: .trace
        }
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        let logger = Logger(label: "stampede")
        let root = directory.first ?? "/srv/tftp"

        if let umask { Glibc.umask(mode_t(umask, radix: 8)!) }
        let fileUmask = Glibc.umask(0)
        Glibc.umask(fileUmask)
        if case .failure(let error) = liftFileLimit() {
            logger.warning("could not raise the open file limit: \(error)")
        }

        // Resolved before -s: a chroot has no /etc/passwd.
        let account = try lookUpUser()
        let rootFD: Int32
        do { rootFD = try AccessPolicy.openRoot(root) } catch { throw failure("cannot open \(root): \(error)") }
        if secure {
            guard chroot(root) == 0, chdir("/") == 0 else { throw failure("-s: chroot \(root): \(Errno.current)") }
        }

        let policy = AccessPolicy(root: rootFD, permissive: permissive, allowCreate: create, umask: fileUmask)
        var configuration = ServerConfiguration(listenAddresses: try listenAddresses(), policy: policy, logger: logger)
        configuration.optionLimits = OptionLimits(maxBlockSize: blocksize, maxWindowSize: windowsize,
                                                  refused: Set(refuse.map { $0.lowercased() }))
        configuration.retransmitTimeout = Nanoseconds(retransmit) * 1000
        if fixedTimeout { configuration.adaptiveTimeoutFloor = nil }
        configuration.maxRetries = retries
        configuration.portRange = portRange.flatMap(parsePortRange)
        configuration.shutdownGrace = Nanoseconds(grace) * Clock.nanosecondsPerSecond
        configuration.maxTransfers = maxTransfers
        configuration.maxTransfersPerClient = maxPerClient
        let cache = FileCache(limits: .init(budget: cacheSize << 20, fileLimit: cacheFileLimit << 20))
        let workerCount = workers ?? Int(sysconf(Int32(_SC_NPROCESSORS_ONLN)))

        let (useURing, reason) = chooseBackend()
        if backend == "uring" && !useURing { throw failure("--backend uring: \(reason)") }
        let serving = Serving(configuration: configuration, workerCount: workerCount, cache: cache, account: account,
                              root: root, secure: secure, pidfile: pidfile, command: self)
        if useURing {
            try serving.run(backendName: "uring", reason: reason) { () throws(Errno) in try URingBackend() }
        } else {
            try serving.run(backendName: "glibc", reason: reason) { () throws(Errno) in try GlibcBackend() }
        }
        if let pidfile { unlink(pidfile) }
    }

    /// `--backend`: auto takes io_uring when the probe (ENOSYS, EPERM from seccomp,
    /// kernel.io_uring_disabled, memory limits, kernel features) says it works.
    func chooseBackend() -> (Bool, String) {
        switch backend {
        case "glibc": return (false, "asked for")
        case "uring":
            let probe = URingBackend.probe()
            return (probe.available, probe.available ? "asked for" : probe.reason)
        default:
            let probe = URingBackend.probe()
            return (probe.available, "auto: " + probe.reason)
        }
    }

    func failure(_ message: String) -> ExitCode {
        fputs("stampede: \(message)\n", stderr)
        return ExitCode(1)
    }

    /// The `-u` account, when started as root (otherwise there is nothing to drop).
    func lookUpUser() throws -> (uid: uid_t, gid: gid_t)? {
        guard geteuid() == 0 else { return nil }
        guard let entry = getpwnam(user) else { throw failure("-u \(user): no such user") }
        return (entry.pointee.pw_uid, entry.pointee.pw_gid)
    }

    /// As in.tftpd: when started as root, become `-u` (default nobody) once the sockets are bound.
    func dropPrivileges(to account: (uid: uid_t, gid: gid_t)?, _ logger: Logger) throws {
        guard let (uid, gid) = account else { return }
        guard setgroups(0, nil) == 0, setgid(gid) == 0, setuid(uid) == 0 else {
            throw failure("-u \(user): cannot drop privileges: \(Errno.current)")
        }
        logger.debug("running as \(user) (uid \(uid), gid \(gid))")
    }
}

/// What runs once the command line is understood: bind, drop privileges, serve, report.
struct Serving {
    let configuration: ServerConfiguration
    let workerCount: Int
    let cache: FileCache
    let account: (uid: uid_t, gid: gid_t)?
    let root: String
    let secure: Bool
    let pidfile: String?
    let command: Serve

    func run<Backend: DatagramBackend>(backendName: String, reason: String,
                                       makeBackend: () throws(Errno) -> Backend) throws {
        let logger = configuration.logger
        let server: Server<Backend>
        do {
            server = try Server(configuration: configuration, workerCount: workerCount, cache: cache, makeBackend: makeBackend)
        } catch {
            let addresses = configuration.listenAddresses.map(\.description).joined(separator: ", ")
            throw command.failure("cannot listen on \(addresses) with the \(backendName) backend: \(error)")
        }
        if let pidfile {
            guard let file = fopen(pidfile, "w") else { throw command.failure("-P \(pidfile): \(Errno.current)") }
            fputs("\(getpid())\n", file)
            fclose(file)
        }
        try command.dropPrivileges(to: account, logger)
        // As the serving user, who wrote them: what a killed server's uploads left behind.
        let stale = Upload.removeStale(beneath: configuration.policy.root)
        if stale > 0 { logger.notice("removed \(stale) temporary files of interrupted uploads") }
        stampede_install_stop_signals()
        logger.notice("""
            serving \(root)\(secure ? " (chroot)" : "") on \(server.boundAddresses.map(\.description).joined(separator: ", ")) \
            with \(workerCount) workers, backend \(server.workers[0].backend) (\(reason))
            """)
        let summary = server.run()
        logger.notice("""
            stopped after \(summary.transfers) transfers (\(summary.failed) failed, \(summary.bytes) bytes, \
            \(summary.sendFailures) datagrams the kernel would not send)
            """)
        if let pidfile { unlink(pidfile) }
    }
}
