import ArgumentParser
import CStampedeSys
import Glibc
import Logging
import StampedeGlibc
import StampedeIO
import StampedeHTTP
import StampedeMetrics
import StampedeProtocol
import StampedeServer
import StampedeURing

/// `stampede [serve]`: the in.tftpd (tftpd-hpa) command line, plus long options of our own.
struct ServeCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve", abstract: "Serve a directory over TFTP (accepts tftpd-hpa's in.tftpd flags).")

    @Flag(name: [.customShort("l"), .customLong("listen")],
          help: "Standalone: bind -a and serve. Without -l, serve the socket inetd passes on fd 0.")
    var listen = false

    @Flag(name: [.customShort("L"), .customLong("foreground")],
          help: "-l, staying in the foreground and logging to standard error (-l alone detaches and logs to syslog).")
    var foreground = false

    @Flag(name: .customLong("systemd"),
          help: "Serve the sockets systemd passes (LISTEN_FDS), in the foreground; excludes -l, -L and -a (the package's stampede.socket).")
    var systemd = false

    @Flag(name: .customLong("single-port"),
          help: "Run every transfer on the listener's port (behind NAT, in containers), told apart by client address and port.")
    var singlePort = false

    @Option(name: [.customShort("a"), .customLong("address")],
            help: "Listen on [ADDRESS][:PORT] (repeatable; default: all addresses, port 69).")
    var address: [String] = []

    @Option(name: [.customShort("S"), .customLong("service"), .customLong("port")],
            help: "The port of an -a that names none: a number or a services(5) name (default: tftp, 69).")
    var service: String?

    @Flag(name: [.customShort("4"), .customLong("ipv4")], help: "IPv4 only.")
    var ipv4 = false

    @Flag(name: [.customShort("6"), .customLong("ipv6")], help: "IPv6 only.")
    var ipv6 = false

    @Flag(name: [.customShort("s"), .customLong("secure"), .customLong("chroot")], help: "chroot into the directory before serving.")
    var secure = false

    @Flag(name: [.customShort("j"), .customLong("jail")],
          help: "The directory is every name's \"/\", as under -s, without chroot (openat2): no root needed.")
    var jail = false

    @Flag(name: .customLong("validate"),
          help: "Refuse a name that does not begin with \"/\" or has a \".\" or \"..\" component or a control character (after -m and --normalize).")
    var validatePaths = false

    @Option(name: .customLong("path-prefix"),
            help: "Serve PREFIX/DIRECTORY (PREFIX must be a directory; \"/\" may be served only with a prefix).")
    var pathPrefix: String?

    @Option(name: .customLong("normalize"),
            help: "--normalize[=none|root|path], after -m: root prefixes \"/\"; path (--normalize alone) also removes \"//\" and \".\", and \"..\" with the component before it.")
    var normalize: FilenameProcessing.Normalization = .none

    @Flag(name: [.customShort("c"), .customLong("create")], help: "Allow uploads to create new files.")
    var create = false

    @Flag(name: [.customLong("ro"), .customLong("read-only")], help: "Refuse every upload, whatever the permissions.")
    var readOnly = false

    @Option(name: [.customLong("max-upload"), .customLong("max-size")],
            help: "Largest upload: SIZE bytes, or with k, M, G, T, P, E (powers of 1024); a larger tsize is refused at once, more data ends the upload (ERROR 2). 0 is --read-only.")
    var maxUpload: String?

    @Flag(name: [.customShort("p"), .customLong("permissive")],
          help: "Only the OS permissions decide: no world-readable/writable requirement.")
    var permissive = false

    @Option(name: [.customShort("u"), .customLong("user")], help: "Drop privileges to this user after binding.")
    var user = "nobody"

    @Option(name: [.customShort("U"), .customLong("umask")],
            help: "umask for created files (octal). Default, as in.tftpd: 0 (so an uploaded file may be uploaded again), or the inherited one with -p.")
    var umask: String?

    @Option(name: [.customShort("P"), .customLong("pidfile")], help: "Write the process ID to this file.")
    var pidfile: String?

    @Option(name: [.customShort("t"), .customLong("timeout")],
            help: "Exit after this many seconds with no transfer; 0 never (default: 0 with -l or -L, otherwise 900).")
    var idleTimeout: Int?

    @Option(name: [.customShort("T"), .customLong("retransmit")],
            help: "Retransmit timeout in microseconds (the ceiling of the adaptive one).")
    var retransmit: Int = 1_000_000
    @Flag(name: .customLong("fixed-timeout"),
          help: "Retransmit downloads after -T always, not after the measured round trip (at least 100 ms).")
    var fixedTimeout = false

    @Option(name: [.customShort("m"), .customLong("map-file")], help: "Filename remapping rules (tftpd-hpa's syntax).")
    var mapFile: String?

    @Option(name: .customLong("map-steps"), help: "Remap rules run at most this many regexes on a name (default 4096).")
    var mapSteps = RemapRules.defaultMaxSteps

    @Option(name: .customLong("map-test"),
            help: "Print what -m and --normalize make of each line of FILE (- for standard input), as a read (-c: a write) from an IPv4 (-6: IPv6) client, then exit.")
    var mapTest: String?
    @Option(name: .customLong("map-client"), help: "--map-test: the client's address (default 192.0.2.34, or 2001:db8::feed:face:dead:beef with -6).")
    var mapClient: String?

    @Flag(name: [.customShort("v"), .customLong("verbose")], help: "One more level of --verbosity (repeatable).")
    var verbose: Int

    @Option(name: .customLong("verbosity"),
            help: "As tftpd-hpa: 0 start, stop, problems and refusals (default); 1 every transfer and remapping; 2 accepted requests and options; 3 remap steps.")
    var verbosity: Int?

    @Option(name: [.customShort("r"), .customLong("refuse"), .customLong("reject")],
            help: "Never negotiate this option (repeatable).")
    var refuse: [String] = []

    @Flag(name: [.customLong("refuse-all"), .customLong("reject-all")],
          help: "Negotiate no option: every transfer starts with DATA (or ACK 0), never an OACK.")
    var refuseAll = false

    @Option(name: [.customShort("B"), .customLong("blocksize")],
            help: "Largest blksize granted: BYTES, or mtu or mtu-SLACK (the interface's MTU less the headers, less SLACK bytes). Default: mtu.")
    var blocksize: BlockSizeLimit?

    @Option(name: [.customShort("W"), .customLong("windowsize")],
            help: "Largest windowsize granted (default 256, as in.tftpd 7.3; 0 means 1; at most 32767: larger windows make block numbers ambiguous).")
    var windowsize: Int = OptionLimits.defaultWindowSize

    @Option(name: .customLong("window-bytes"),
            help: "blksize × windowsize never above this many bytes (0: no limit); a window of one block is lockstep.")
    var windowBytes: Int = OptionLimits.defaultWindowBytes

    @Option(name: [.customShort("R"), .customLong("port-range"), .customLong("ports")], help: "Ports for transfers, LOW:HIGH.")
    var portRange: String?

    @Flag(name: [.customShort("V"), .customLong("version")], help: "Print the version and exit.")
    var version = false

    @Option(name: .customLong("workers"), help: "Worker threads (default: one per core).")
    var workers: Int?

    @Option(name: .customLong("backend"), help: "I/O backend: auto (io_uring when this kernel allows it), uring, glibc.")
    var backend = "auto"

    @Flag(name: .customLong("no-gso"),
          help: "Send every DATA as its own send, never a window as one segmented send (UDP GSO).")
    var noSegmentation = false

    @Option(name: .customLong("retries"), help: "Retransmissions before a transfer is given up.")
    var retries = 5

    @Option(name: .customLong("grace"), help: "Seconds running transfers get to finish on SIGTERM.")
    var grace = 10

    @Option(name: .customLong("cache-size"), help: "Memory budget for cached file images, in MiB.")
    var cacheSize = 1024

    @Option(name: .customLong("cache-file-limit"), help: "Larger files are streamed instead of cached, in MiB.")
    var cacheFileLimit = 256

    @Option(name: .customLong("max-transfers"), help: "Concurrent transfers in all; further requests are busy (see --when-busy).")
    var maxTransfers = 65536
    @Option(name: .customLong("max-transfer-sockets"),
            help: "Transfers with a socket of their own, in all; further reads share 64 transfer sockets per worker (default: the open file limit less 1,024, or half of it when that is more; with --http, what HTTP's connections and images leave).")
    var maxTransferSockets: Int?
    @Option(name: .customLong("max-per-client"),
            help: "Concurrent transfers per client host, an IPv4 or IPv6 address (default: 64, loopback clients not counted).")
    var maxPerClient: Int?
    @Option(name: .customLong("max-per-prefix"),
            help: "Concurrent transfers per IPv6 /64, a whole LAN (default: 16384, loopback clients not counted).")
    var maxPerPrefix: Int?
    @Option(name: .customLong("when-busy"),
            help: "Over --max-transfers or --max-per-client, or out of sockets, descriptors or memory: silence (the client sends its request again a few seconds later; default) or error (ERROR 0 at once, which fails a firmware's boot).")
    var whenBusy = "silence"

    @Option(name: .customLong("metrics"),
            help: "Serve Prometheus metrics over HTTP at ADDR:PORT/metrics (off by default). Stampede's port is 9469: --metrics :9469 (every IPv4 address), 127.0.0.1:9469, [::]:9469; port 0 takes a free one, said at start.")
    var metrics: String?
    @Option(name: .customLong("http"),
            help: ArgumentHelp("Serve the same root over HTTP/1.1 and 1.0 at ADDR:PORT too (repeatable; off by default): GET and HEAD, ranges, conditional requests, keep-alive, through the same -m rules, access checks and file cache. Port 80 on a boot server of its own, 8080 beside another web server; :PORT is every IPv4 address, [::]:PORT every IPv6 one; port 0 takes a free one, said at start.",
                               valueName: "ADDR:PORT"))
    var http: [String] = []
    @Option(name: .customLong("http-max-connections"),
            help: "HTTP connections open at once (default: 16384, or fewer as the open-file limit holds at two descriptors each, a socket and a streamed file); more are closed as they arrive. One the limit cannot hold is lowered, with a warning.")
    var httpMaxConnections: Int?
    @Option(name: .customLong("http-idle-timeout"),
            help: "Seconds an HTTP connection may wait for its next request, or for a client to take more of a response (default 60).")
    var httpIdleTimeout = 60
    @Option(name: .customLong("http-request-timeout"),
            help: "Seconds a client has to send a request's head once it began (default 10): then 408 and the connection closed.")
    var httpRequestTimeout = 10
    @Flag(exclusivity: .chooseLast, help: "Where the log goes (the last one given; default: syslog, or standard error with -L).")
    var logTarget: LogTarget?
    @Option(name: .customLong("logfile"), help: "Log to this file instead: appended to, created 0644, reopened on SIGHUP (rotation).")
    var logfile: String?
    @Option(name: .customLong("logformat"),
            help: "Lines outside syslog, as in.tftpd writes them: human (NAME[PID]: LEVEL: text; default) or tag (<PRIORITY>text, for the journal). --stderr=FORMAT and --stdout=FORMAT say it too.")
    var lineFormat = LineFormat.human
    @Option(name: .customLong("log-format"),
            help: "text (tftpd-hpa's lines; default) or json: every line one JSON object, one per finished transfer or refusal (at -v 1; failures at -v 0).")
    var logFormat = "text"

    @Argument(help: "The directory to serve.")
    var directory: [String] = []

    func validate() throws {
        try FlagRange.check(idleTimeout, 0...FlagRange.year, "-t", "seconds (0: never)")
        // The RFC's longest timeout (255 s); a longer one's backoff would overflow.
        try FlagRange.check(retransmit, 1_000...255_000_000, "-T", "microseconds")
        try FlagRange.check(verbosity, 0...9, "--verbosity")
        try FlagRange.check(workers, 1...1024, "--workers")
        try FlagRange.check(retries, FlagRange.retries, "--retries")
        try FlagRange.check(grace, 0...FlagRange.year, "--grace", "seconds")
        try FlagRange.check(cacheSize, FlagRange.mebibytes, "--cache-size", "MiB")
        try FlagRange.check(cacheFileLimit, FlagRange.mebibytes, "--cache-file-limit", "MiB")
        try FlagRange.check(maxTransfers, FlagRange.count, "--max-transfers")
        try FlagRange.check(maxTransferSockets, 0...FlagRange.count.upperBound, "--max-transfer-sockets", "(0: every read shares)")
        try FlagRange.check(maxPerClient, FlagRange.count, "--max-per-client")
        try FlagRange.check(maxPerPrefix, FlagRange.count, "--max-per-prefix")
        try FlagRange.check(mapSteps, RemapRules.stepRange, "--map-steps")
        if mapClient != nil && mapTest == nil { throw ValidationError("--map-client is for --map-test.") }
        if systemd && (listen || foreground || !address.isEmpty) {
            throw ValidationError("--systemd serves the sockets systemd passes; -l, -L and -a bind their own: choose one.")
        }
        if let logTarget, logfile != nil { throw ValidationError("--logfile and --\(logTarget.rawValue): choose one.") }
        if directory.count > 1 { throw ValidationError("stampede serves one directory; got \(directory.count).") }
        if secure && jail { throw ValidationError("--chroot (-s) and --jail (-j) exclude each other.") }
        if jail && directory.isEmpty { throw ValidationError("--jail: name the directory to serve.") }
        if case .bytes(let bytes) = blocksize { try FlagRange.check(bytes, TFTPOption.blksize.range, "-B", "bytes (or mtu, mtu-SLACK)") }
        // Any count, as in.tftpd 7.3 takes it: 0 is 1, above the table's maximum it is clamped in run().
        try FlagRange.check(windowsize, 0...Int.max, "-W", "blocks")
        try FlagRange.check(windowBytes, 0...Int.max, "--window-bytes", "bytes")
        for name in refuse where TFTPOption(rawValue: name.lowercased()) == nil {
            throw ValidationError("-r \(name): not an option this server negotiates (\(TFTPOption.names)).")
        }
        if let maxUpload, Self.size(maxUpload) == nil {
            throw ValidationError("--max-upload \(maxUpload): a size in bytes, or with k, M, G, T, P or E (powers of 1024), like 64M.")
        }
        if let umask, mode_t(umask, radix: 8).map({ $0 <= 0o777 }) != true { throw ValidationError("-U \(umask): an octal umask within 0...777, like 022.") }
        if let service, Self.port(ofService: service) == nil {
            throw ValidationError("-S \(service): neither a port within 1...65535 nor a UDP service in /etc/services.")
        }
        if let portRange, parsePortRange(portRange) == nil {
            throw ValidationError("-R \(portRange): LOW:HIGH within 1...65535, like 4000:4999.")
        }
        if BusyReply(rawValue: whenBusy) == nil { throw ValidationError("--when-busy \(whenBusy): choose silence or error.") }
        if !["auto", "uring", "glibc"].contains(backend) {
            throw ValidationError("--backend \(backend): choose auto, uring or glibc.")
        }
        if ipv4 && ipv6 { throw ValidationError("-4 and -6 exclude each other.") }
        if let metrics, TCPAddress(metrics) == nil {
            throw ValidationError("--metrics \(metrics): not ADDR:PORT with a numeric address (or :PORT), like 127.0.0.1:9469.")
        }
        for address in http where TCPAddress(address) == nil {
            throw ValidationError("--http \(address): not ADDR:PORT with a numeric address (or :PORT), like 192.0.2.1:80 or [::]:8080.")
        }
        try FlagRange.check(httpMaxConnections, FlagRange.count, "--http-max-connections")
        try FlagRange.check(httpIdleTimeout, 1...FlagRange.year, "--http-idle-timeout", "seconds")
        try FlagRange.check(httpRequestTimeout, 1...FlagRange.year, "--http-request-timeout", "seconds")
        if LogFormat(rawValue: logFormat) == nil { throw ValidationError("--log-format \(logFormat): choose text or json.") }
    }

    /// `-S`: a port number, or a name services(5) gives a UDP port, as in.tftpd takes it.
    static func port(ofService text: String) -> UInt16? {
        if let number = Int(text) { return (1...65535).contains(number) ? UInt16(number) : nil }
        guard !text.isEmpty, let entry = getservbyname(text, "udp") else { return nil }
        return UInt16(bigEndian: UInt16(truncatingIfNeeded: entry.pointee.s_port))
    }

    /// `--max-upload`'s SIZE: digits and an optional k, M, G, T, P or E (either case), a power
    /// of 1024 each, as in.tftpd 7.3 reads it.
    static func size(_ text: String) -> Int? {
        let units: [Character: Int] = ["k": 10, "m": 20, "g": 30, "t": 40, "p": 50, "e": 60]
        var digits = Substring(text), shift = 0
        if let last = text.last?.lowercased().first, let bits = units[last] {
            digits = text.dropLast()
            shift = bits
        }
        guard !digits.isEmpty, digits.allSatisfy(\.isASCII), digits.allSatisfy(\.isNumber), let value = Int(digits),
              value <= Int.max >> shift else { return nil }
        return value << shift
    }

    func parsePortRange(_ text: String) -> ClosedRange<UInt16>? {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, let low = UInt16(parts[0]), let high = UInt16(parts[1]), low > 0, low <= high else { return nil }
        return low...high
    }

    /// The addresses `-a` names. No address, or IPv6's wildcard `[::]`, is every address of both
    /// families (unless -4 or -6), as in.tftpd serves IPv4 clients on `[::]`: its listeners are
    /// 0.0.0.0 and [::] (IPv6 only), so that an IPv4 client is seen as one. A host name is every
    /// address it resolves to (of the family -4 or -6 leaves), a port may be a services(5) name,
    /// as in in.tftpd 7.3; a name that resolves to nothing stops the server (exit 65, as 7.3).
    func listenAddresses() throws -> [SocketAddress] {
        let specs = address.isEmpty ? [""] : address
        let defaultPort = service.flatMap(Self.port(ofService:)) ?? 69
        let family = ipv4 ? AF_INET : ipv6 ? AF_INET6 : AF_UNSPEC
        var result: [SocketAddress] = []
        for spec in specs {
            guard let (host, portText) = SocketAddress.split(spec) else { throw ValidationError("-a \(spec): not an address[:port].") }
            let port: UInt16
            if let portText {
                // 0 takes a free port, said at start.
                guard let number = UInt16(portText) ?? Self.port(ofService: String(portText)) else {
                    throw ValidationError("-a \(spec): \(portText) is neither a port within 1...65535 nor a UDP service in /etc/services.")
                }
                port = number
            } else {
                port = defaultPort
            }
            var found: [SocketAddress]
            if host.isEmpty {
                found = [SocketAddress(parsing: ipv6 ? "::" : "0.0.0.0", defaultPort: port)!]
                if family == AF_UNSPEC { found.append(SocketAddress(parsing: "::", defaultPort: port)!) }
            } else if let numeric = SocketAddress(numericHost: String(host), port: port) {
                found = [numeric]
            } else {
                switch SocketAddress.resolving(String(host), port: port, family: family) {
                case .success(let addresses) where !addresses.isEmpty: found = addresses
                case .success: throw failure("-a \(spec): \(host) has no address\(ipv4 ? " for IPv4" : ipv6 ? " for IPv6" : "")", status: 65)
                case .failure(let error): throw failure("-a \(spec): cannot resolve \(host): \(error)", status: 65)
                }
            }
            for parsed in found {
                var family = [parsed]
                if parsed.isIPv6 && parsed.host == "::" && !ipv6 {
                    family.insert(SocketAddress(parsing: "0.0.0.0", defaultPort: parsed.port)!, at: 0)
                }
                for address in family where !((ipv4 && address.isIPv6) || (ipv6 && !address.isIPv6)) && !result.contains(address) {
                    result.append(address)
                }
            }
        }
        return result
    }

    func run() throws {
        if version {
            print(Stampede.versionText(ioURing: URingBackend.probe()))
            return
        }
        let rules = try mapFile.map(loadRules)
        if let mapTest { return try runMapTest(mapTest, rules?.current) }
        let mode = try servingMode()
        if mode == .inetd && !http.isEmpty {
            throw failure("--http needs a server that stays (-l, -L or --systemd): under inetd each request starts another", status: 64)
        }
        // in.tftpd detaches unless -L; inetd and systemd supervise the process themselves.
        let detaching = mode == .standalone && !foreground
        let destination = try logDestination(mode)
        destination.bootstrap(level: LogDestination.level(verbosity: verbosity ?? verbose), format: LogFormat(rawValue: logFormat)!,
                              lines: lineFormat)
        let logger = Logger(label: "stampede")
        for warning in rules?.current.warnings ?? [] { logger.warning("-m \(mapFile!): \(warning)") }
        if mode != .standalone && !address.isEmpty { logger.warning("-a is for -l (standalone); serving the passed sockets") }
        var detached: ServerStartup.Detached?
        if detaching {
            var null: Int32 = -1
            let ready = stampede_detach(&null)
            if ready < 0 { throw failure("cannot detach into the background: \(Errno(-ready))") }
            detached = ServerStartup.Detached(ready: ready, null: null)
        }
        // In the process that serves, before -s hides the file's directory (as in.tftpd does).
        let pid: PidFile?
        do { pid = try pidfile.map { path throws(Errno) in try PidFile(path) } } catch {
            throw failure("-P \(pidfile!): \(error)")
        }
        defer { if let problem = pid?.remove() { logger.notice("\(problem)") } }
        let root = try servedDirectory()

        // in.tftpd's -U default: 0, so that a file an upload created (0666) may be uploaded again
        // (switches back up their configuration every night); with -p, the inherited umask.
        let inherited = Glibc.umask(0)
        Glibc.umask(inherited)
        let fileUmask = umask.map { mode_t($0, radix: 8)! } ?? (permissive ? inherited : 0)
        var fileLimit = rlim_t(1024)
        switch liftFileLimit() {
        case .success(let limit): fileLimit = limit
        case .failure(let error): logger.warning("could not raise the open file limit: \(error)")
        }

        // Resolved before -s: a chroot has no /etc/passwd, /etc/hosts or /etc/services (nor
        // /run/systemd/notify, nor /proc).
        let account = try lookUpUser()
        let addresses = mode == .standalone ? try listenAddresses() : []
        let notifier = SystemdNotifier()
        let processFigures = metrics == nil ? nil : ProcessFigures()
        let rootFD: Int32
        do { rootFD = try AccessPolicy.openRoot(root) } catch {
            // EX_NOINPUT, as in.tftpd exits when its directory is not there.
            throw failure("cannot open \(root): \(error)", status: [ENOENT, ENOTDIR].contains(error.rawValue) ? 66 : 1)
        }
        if secure {
            guard chroot(root) == 0, chdir("/") == 0 else { throw failure("-s: chroot \(root): \(Errno.current)") }
        }

        let policy = accessPolicy(root: rootFD, umask: fileUmask)
        var configuration = ServerConfiguration(listenAddresses: [], policy: policy, logger: logger)
        switch mode {
        case .standalone: configuration.listenAddresses = addresses
        case .inetd: configuration.inheritedListeners = [0]
        case .systemd(let datagram, _): configuration.inheritedListeners = datagram
        }
        // in.tftpd's default: 15 minutes under a superserver, which starts another; never standalone.
        let idle = idleTimeout ?? (mode == .standalone ? 0 : 900)
        if idle > 0 { configuration.idleExit = Nanoseconds(idle) * nanosecondsPerSecond }
        if case .file(let file) = destination { configuration.onHangup = file.reopen }
        configuration.remapRules = rules
        configuration.singlePort = singlePort
        let window = min(max(1, windowsize), TFTPOption.windowsize.range.upperBound)
        if window < windowsize {
            logger.warning("""
                -W \(windowsize): a window of 32,768 blocks or more makes block numbers ambiguous (a reordered \
                old ACK would look new and corrupt the file): granting at most \(window)
                """)
        }
        var maxBlockSize: Int?
        switch blocksize {
        case .bytes(let bytes): maxBlockSize = bytes
        case .mtu(let slack): configuration.blockSizeSlack = slack
        case nil: break
        }
        configuration.optionLimits = OptionLimits(maxBlockSize: maxBlockSize, maxWindowSize: window, maxWindowBytes: windowBytes,
                                                  refused: refuseAll ? Set(TFTPOption.allCases.map(\.rawValue))
                                                                     : Set(refuse.map { $0.lowercased() }))
        configuration.retransmitTimeout = Nanoseconds(retransmit) * 1000
        if fixedTimeout { configuration.adaptiveTimeoutFloor = nil }
        configuration.maxRetries = retries
        configuration.portRange = portRange.flatMap(parsePortRange)
        configuration.shutdownGrace = Nanoseconds(grace) * nanosecondsPerSecond
        configuration.maxTransfers = maxTransfers
        if let maxPerClient { configuration.maxTransfersPerClient = maxPerClient }
        if let maxPerPrefix { configuration.maxTransfersPerPrefix = maxPerPrefix }
        if maxPerClient != nil || maxPerPrefix != nil { configuration.loopbackUncountedPerClient = false }
        configuration.whenBusy = BusyReply(rawValue: whenBusy)!
        configuration.logFormat = LogFormat(rawValue: logFormat)!
        // HTTP on --http's addresses, and on the listening TCP sockets a socket unit passes.
        var passedHTTP: [Int32] = []
        if case .systemd(_, let stream) = mode { passedHTTP = stream }
        let servesHTTP = !http.isEmpty || !passedHTTP.isEmpty
        // Every descriptor a connection, a transfer or an image may hold, out of the limit.
        let budget = DescriptorBudget(limit: Int(min(fileLimit, rlim_t(Int.max))), imageBytes: cacheSize << 20,
                                      smallestImage: servesHTTP ? FileImage.sharedFrom : nil,
                                      httpConnections: httpMaxConnections, transferSockets: maxTransferSockets)
        for warning in budget.warnings { logger.warning("\(warning)") }
        // With HTTP, images of 64 KiB and more are memfds, which HTTP sends with sendfile.
        let cache = FileCache(limits: .init(budget: cacheSize << 20, fileLimit: cacheFileLimit << 20,
                                            sharedFrom: servesHTTP ? FileImage.sharedFrom : nil, sharedImages: budget.images))
        var workerCount = workers ?? Int(sysconf(Int32(_SC_NPROCESSORS_ONLN)))
        if singlePort && mode != .standalone && workerCount > 1 {
            // A passed socket is one socket that every worker reads: a client's ACK could reach a
            // worker that does not hold its transfer. (Bound with -l, SO_REUSEPORT keeps a client
            // on one worker's socket.)
            logger.notice("--single-port on a passed socket: one worker")
            workerCount = 1
        }
        // Beyond this, transfers share sockets instead of running out of descriptors.
        var httpConfiguration: HTTPConfiguration?
        if servesHTTP {
            var serving = HTTPConfiguration(listenAddresses: http.compactMap(TCPAddress.init).map(\.socketAddress))
            serving.inheritedListeners = passedHTTP
            serving.maxConnections = budget.httpConnections
            serving.idleTimeout = Nanoseconds(httpIdleTimeout) * nanosecondsPerSecond
            serving.sendTimeout = serving.idleTimeout
            serving.requestTimeout = Nanoseconds(httpRequestTimeout) * nanosecondsPerSecond
            httpConfiguration = serving
        }
        configuration.ownTransferSocketsPerWorker = budget.transferSockets / workerCount

        let (useURing, reason) = chooseBackend()
        if backend == "uring" && !useURing { throw failure("--backend uring: \(reason)") }
        let serving = ServerStartup(configuration: configuration, workerCount: workerCount, cache: cache, account: account,
                              root: root, secure: secure, detached: detached, metrics: metrics.flatMap(TCPAddress.init),
                              http: httpConfiguration, processFigures: processFigures, notifier: notifier, command: self)
        let segmentation = !noSegmentation
        if useURing {
            var ring = URingBackend.Configuration()
            ring.segmentation = segmentation
            try serving.run(backendName: "uring", reason: reason) { () throws(Errno) in try URingBackend(configuration: ring) }
        } else {
            try serving.run(backendName: "glibc", reason: reason) { () throws(Errno) in
                try GlibcBackend(segmentation: segmentation)
            }
        }
    }

    enum ServingMode: Equatable {
        case standalone
        /// fd 0 is the socket (inetd "wait" mode): fds 0-2 are the socket, so nothing is printed.
        case inetd
        /// systemd's sockets: UDP ones for TFTP, listening TCP ones for HTTP (a socket unit's
        /// ListenDatagram and ListenStream lines).
        case systemd(datagram: [Int32], stream: [Int32])
    }

    /// -l (or -L) binds; --systemd, or LISTEN_FDS meant for this process, serves systemd's
    /// sockets; otherwise fd 0 must be inetd's socket, as in.tftpd expects.
    func servingMode() throws -> ServingMode {
        if listen || foreground { return .standalone }
        if let (datagram, stream) = try systemdSockets() { return .systemd(datagram: datagram, stream: stream) }
        if systemd {
            throw failure("--systemd: no sockets passed (LISTEN_FDS and LISTEN_PID unset, or meant for another process)")
        }
        if stampede_fd_is_datagram_socket(0) != 0 { return .inetd }
        throw ValidationError("""
            nothing to serve on: give -l to bind -a (standalone), or start stampede from inetd \
            (a UDP socket on fd 0) or from a systemd socket unit (--systemd).
            """)
    }

    /// sd_listen_fds(3): the sockets start at fd 3; the variables are removed so that nothing
    /// this process starts takes them for its own. LISTEN_FDS is not taken on trust: a count no
    /// process could hold, a descriptor that is not open, or one that is neither a UDP socket
    /// nor a listening TCP socket stops the server, saying which.
    func systemdSockets() throws -> (datagram: [Int32], stream: [Int32])? {
        defer {
            unsetenv("LISTEN_PID")
            unsetenv("LISTEN_FDS")
            unsetenv("LISTEN_FDNAMES")
        }
        guard let pidText = getenv("LISTEN_PID"), let pid = Int32(String(cString: pidText)), pid == getpid(),
              let countText = getenv("LISTEN_FDS") else { return nil }
        let text = String(cString: countText)
        guard let count = Int(text), count > 0 else {
            if text == "0" { return nil }
            throw failure("LISTEN_FDS=\(sanitizedForLog(text.utf8)): not a count of sockets")
        }
        var limit = rlimit()
        getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        guard count <= Int(min(limit.rlim_max, rlim_t(Int32.max))) - 3 else {
            throw failure("LISTEN_FDS=\(count): more descriptors than this process may hold (\(limit.rlim_max))")
        }
        var datagram: [Int32] = [], stream: [Int32] = []
        for fd in Int32(3)..<Int32(3 + count) {
            switch stampede_passed_socket_kind(fd) {
            case 1: datagram.append(fd)
            case 2: stream.append(fd)
            case -EBADF: throw failure("LISTEN_FDS=\(count): descriptor \(fd) is not open")
            case let error:
                throw failure("LISTEN_FDS=\(count): descriptor \(fd) is neither a UDP socket nor a listening TCP socket (\(Errno(-error)))")
            }
        }
        guard !datagram.isEmpty else { throw failure("LISTEN_FDS=\(count): no UDP socket to serve TFTP on") }
        return (datagram, stream)
    }

    /// `--logfile`, `--stderr`, `--stdout`, `--syslog`; without them syslog, or standard error in
    /// the foreground. In inetd mode fds 0-2 are the socket: syslog whatever is asked.
    func logDestination(_ mode: ServingMode) throws -> LogDestination {
        let syslog = LogDestination.syslog(identity: Stampede.invokedName)
        if let logfile {
            do { return .file(try LogFile(logfile)) } catch { throw failure("--logfile \(logfile): \(error)") }
        }
        if mode == .inetd { return syslog }
        switch logTarget {
        case .stderr: return .standardError
        case .stdout: return .standardOutput
        case .syslog: return syslog
        case nil: return foreground ? .standardError : syslog
        }
    }

    /// The -m file, read now and again on SIGHUP (`RuleFile`).
    func loadRules(_ path: String) throws -> RemapRuleSet {
        let file: RuleFile
        do { file = try RuleFile(path, maxSteps: mapSteps) } catch { throw failure("-m \(path): cannot read: \(error)") }
        do {
            return RemapRuleSet(try file.load(), reload: file.load)
        } catch let error as RemapRulesError {
            // tftpd-hpa exits with EX_CONFIG on a bad rule file.
            writeToStandardError(error.lines.map { "stampede: -m \(path): \($0)\n" }.joined())
            throw ExitCode(78)
        } catch {
            throw failure("-m \(path): \(error)")
        }
    }

    /// What the flags say a client may read and write beneath `root` (`-p`, `-c`, `--ro`,
    /// `--max-upload`, `-U`, `-s`/`-j`, `--normalize`, `--validate`).
    func accessPolicy(root: Int32, umask: mode_t = 0o022) -> AccessPolicy {
        let uploadLimit = maxUpload.flatMap(Self.size)
        var policy = AccessPolicy(root: root, permissive: permissive, allowCreate: create, readOnly: readOnly || uploadLimit == 0,
                                  umask: umask, virtualRoot: secure || jail)
        policy.maxUpload = uploadLimit
        policy.names = FilenameProcessing(normalization: normalize, validates: validatePaths)
        return policy
    }

    /// The directory served: `--path-prefix` joined to the one named (in.tftpd 7.3's rules: the
    /// named directory is absolute unless -s or -j, the prefix must be a directory, and "/" may be
    /// served only with one; exit 65 otherwise).
    func servedDirectory() throws -> String {
        let named = directory.first ?? "/srv/tftp"
        // A relative directory would be resolved against wherever the server was started from,
        // which a supervisor does not promise; under -s and -j it is the root, named once.
        if !named.hasPrefix("/") && !secure && !jail { throw failure("invalid directory path: \(named)", status: 65) }
        guard let pathPrefix else {
            if FilenameProcessing.normalize(Array(named.utf8), .path) == [UInt8(ascii: "/")] && named.hasPrefix("/") {
                throw failure("/ as the directory to serve needs --path-prefix", status: 65)
            }
            return named
        }
        var info = stat()
        guard stat(pathPrefix, &info) == 0 else { throw failure("--path-prefix \(pathPrefix): \(Errno.current)", status: 65) }
        guard info.st_mode & S_IFMT == S_IFDIR else { throw failure("--path-prefix \(pathPrefix): not a directory", status: 65) }
        return pathPrefix + (named.hasPrefix("/") || pathPrefix.hasSuffix("/") ? "" : "/") + named
    }

    /// `--map-test FILE`, as in.tftpd 7.3's: each line of FILE as a requested name, what -m and
    /// --normalize make of it on standard output ("ERROR: message" for a refusal); the rules'
    /// steps on standard error at -v 3. An `E` rule never finds its file, as in 7.3, whose probe
    /// answers "Just testing..." under --map-test whatever directory is named: the output is
    /// what the rules make of the name, the same on every host.
    func runMapTest(_ path: String, _ rules: RemapRules?) throws {
        let defaultClient = ipv6 ? "2001:db8::feed:face:dead:beef" : "192.0.2.34"
        // A bare numeric address, as a client's is: "" is not the wildcard, nor " 10.0.0.1" an address.
        guard let client = SocketAddress(numericHost: mapClient ?? defaultClient, port: 0) else {
            throw ValidationError("--map-client \"\(mapClient!)\": not an IPv4 or IPv6 address.")
        }
        let text: [UInt8]
        do {
            text = try path == "-" ? readToEnd(0) : readWholeFile(path)
        } catch {
            throw failure("--map-test \(path): cannot read: \(error)", status: 66)
        }
        let trace: ((String) -> Void)? = (verbosity ?? verbose) >= 3 ? { writeToStandardError("\($0)\n") } : nil
        for warning in rules?.warnings ?? [] { writeToStandardError("stampede: -m \(mapFile!): \(warning)\n") }
        var lines = text.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
        if lines.last?.isEmpty == true { lines.removeLast() }
        var output: [UInt8] = []
        for line in lines {
            let outcome = rules?.apply(to: Array(line), isWrite: create, client: client,
                                       servable: nil,
                                       trace: trace) ?? .mapped(Array(line))
            switch outcome {
            case .mapped(let mapped):
                output += FilenameProcessing.normalize(mapped, normalize) + [UInt8(ascii: "\n")]
            case .refused(let message):
                output += Array("ERROR: \(message ?? "Access violation")\n".utf8)
            case .failed(let failure):
                // As 7.3: the refusal on standard output, why on standard error.
                output += Array("ERROR: Remap table failure\n".utf8)
                writeToStandardError("stampede: remap: \(sanitizedForLog(line)): \(failure)\n")
            }
        }
        output.withUnsafeBytes { try? writeFully(1, $0) }
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

    /// Says why the server cannot run (on standard error, and in syslog once it is the log), and
    /// the exit status for it.
    func failure(_ message: String, status: Int32 = 1) -> ExitCode {
        if stampede_fd_is_datagram_socket(2) == 0 { writeToStandardError("stampede: \(message)\n") }
        if SyslogHandler.inUse { stampede_syslog(LOG_ERR, message) }
        return ExitCode(status)
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


/// `--metrics` and `--http`'s ADDR:PORT: a numeric IPv4 address, a bracketed IPv6 one, or none
/// (every IPv4 address).
struct TCPAddress: CustomStringConvertible {
    let host: String
    let port: Int

    init?(_ text: String) {
        let host: Substring, port: Substring
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]"), text[text.index(after: close)...].hasPrefix(":") else { return nil }
            host = text[text.index(after: text.startIndex)..<close]
            port = text[text.index(close, offsetBy: 2)...]
            var address = in6_addr()
            guard inet_pton(AF_INET6, String(host), &address) == 1 else { return nil }
        } else {
            guard let colon = text.lastIndex(of: ":") else { return nil }
            host = text[..<colon]
            port = text[text.index(after: colon)...]
            var address = in_addr()
            guard host.isEmpty || inet_pton(AF_INET, String(host), &address) == 1 else { return nil }
        }
        guard let number = Int(port), (0...65535).contains(number), port.allSatisfy(\.isASCII) else { return nil }
        self.host = host.isEmpty ? "0.0.0.0" : String(host)
        self.port = number
    }

    var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }

    var socketAddress: SocketAddress { SocketAddress(numericHost: host, port: UInt16(port))! }
}

/// `--syslog`, `--stderr`, `--stdout`: where the log goes, the last one given winning, as in.tftpd
/// takes them.
enum LogTarget: String, EnumerableFlag {
    case syslog, stderr, stdout

    static func name(for value: LogTarget) -> NameSpecification { .customLong(value.rawValue) }

    static func help(for value: LogTarget) -> ArgumentHelp? {
        switch value {
        case .syslog: "Log to syslog (facility daemon)."
        case .stderr: "Log to standard error (--stderr=FORMAT also sets --logformat)."
        case .stdout: "Log to standard output (--stdout=FORMAT also sets --logformat)."
        }
    }
}

extension FilenameProcessing.Normalization: ExpressibleByArgument {}

/// `-B`: a number of bytes, or `mtu`/`mtu-SLACK` as in.tftpd 7.3 takes them (any case).
enum BlockSizeLimit: ExpressibleByArgument {
    case bytes(Int)
    case mtu(slack: Int)

    init?(argument: String) {
        let lowered = argument.lowercased()
        if lowered == "mtu" {
            self = .mtu(slack: 0)
        } else if lowered.hasPrefix("mtu-"), let slack = Int(lowered.dropFirst(4)), slack >= 0, lowered.dropFirst(4).allSatisfy(\.isNumber) {
            self = .mtu(slack: slack)
        } else if let bytes = Int(argument) {
            self = .bytes(bytes)
        } else {
            return nil
        }
    }
}
