import Glibc
import StampedeBase
import StampedeDHCP
import StampedeFiles
import StampedeHTTP
import StampedeIO
import StampedeProtocol
import StampedeProxyDHCP
import StampedeTFTPServer

/// What a server is made of, decided from its flags and a few facts of the host, with no system
/// call: the workers, the descriptors shared out (`DescriptorBudget`), the cache's limits, the
/// HTTP server's, the backend, the TFTP options and timers, and what to warn of. `ServeCommand`
/// gathers the facts, `ServerStartup` makes the server from the plan.
struct ServePlan {
    /// What the plan needs to know of the host and the process.
    struct Facts {
        var mode: ServingMode
        /// `-a`, resolved (standalone only).
        var addresses: [SocketAddress]
        /// RLIMIT_NOFILE, as raised.
        var fileLimit: Int
        var processors: Int
        /// The umask the process was started with (`-p` keeps it).
        var inheritedUmask: mode_t
        /// Whether io_uring works here, and why (`URingBackend.probe`).
        var uring: (available: Bool, reason: String)
        /// The interface that holds each `--proxy-dhcp` address, in order.
        var bootInterfaces: [NetworkInterface] = []
        /// The interface that holds each `--proxy-dhcp6` address, in order.
        var bootInterfaces6: [NetworkInterface] = []
    }

    /// A plan that cannot be served (exit 1).
    struct Refusal: Error, Equatable {
        var message: String
        /// The exit status: 64 for flags that do not fit the sockets passed.
        var status: Int32 = 1
    }

    let options: ServeOptions
    let mode: ServingMode
    let addresses: [SocketAddress]
    let workerCount: Int
    let budget: DescriptorBudget
    let cacheLimits: FileCache.Limits
    /// `--http`, and listening TCP sockets systemd passed; nil: no HTTP.
    let http: HTTPConfiguration?
    /// `--https`, with the limits of `--http` (its identity, loaded from the files, is the
    /// command's to add); nil: no HTTPS.
    let https: HTTPConfiguration?
    /// `--proxy-dhcp`'s networks, each with what its machines boot.
    let bootNetworks: [BootNetwork]
    /// `--proxy-dhcp6`'s networks.
    let bootNetworks6: [BootNetwork6]
    let useURing: Bool
    let backendReason: String
    /// -W clamped, a budget that cannot hold what was asked: said at start as warnings.
    let warnings: [String]
    /// Said at start as notices.
    let notices: [String]

    init(_ options: ServeOptions, _ facts: Facts) throws(Refusal) {
        self.options = options
        mode = facts.mode
        addresses = facts.mode == .standalone ? facts.addresses : []
        var notices: [String] = []
        let passed = try Self.passedWebSockets(options, facts.mode)
        let servesHTTP = !options.http.isEmpty || !passed.http.isEmpty || !options.https.isEmpty || !passed.https.isEmpty
        // Every descriptor a connection, a transfer or an image may hold, out of the limit.
        budget = DescriptorBudget(limit: facts.fileLimit, imageBytes: options.cacheSize << 20,
                                  smallestImage: servesHTTP ? FileImage.sharedFrom : nil,
                                  httpConnections: options.httpMaxConnections, transferSockets: options.maxTransferSockets)
        // With HTTP, images of 64 KiB and more are memfds, which HTTP sends with sendfile.
        cacheLimits = FileCache.Limits(budget: options.cacheSize << 20, fileLimit: options.cacheFileLimit << 20,
                                       sharedFrom: servesHTTP ? FileImage.sharedFrom : nil, sharedImages: budget.images)
        var workerCount = options.workers ?? facts.processors
        if options.singlePort && facts.mode != .standalone && workerCount > 1 {
            // A passed socket is one socket that every worker reads: a client's ACK could reach a
            // worker that does not hold its transfer. (Bound with -l, SO_REUSEPORT keeps a client
            // on one worker's socket.)
            notices.append("--single-port on a passed socket: one worker")
            workerCount = 1
        }
        self.workerCount = max(1, workerCount)
        http = Self.web(options.http, passed: passed.http, options, connections: budget.httpConnections)
        https = Self.web(options.https, passed: passed.https, options, connections: budget.httpConnections)
        bootNetworks = Self.bootNetworks(options, facts.bootInterfaces)
        bootNetworks6 = Self.bootNetworks6(options, facts.bootInterfaces6)
        (useURing, backendReason) = try Self.backend(options, facts.uring)
        warnings = Self.warnings(options, facts.mode) + budget.warnings
        self.notices = notices
        fileUmask = options.umask?.bits ?? (options.permissive ? facts.inheritedUmask : 0)
    }

    /// What the flags ask that the server serves otherwise than asked: said at start.
    static func warnings(_ options: ServeOptions, _ mode: ServingMode) -> [String] {
        var warnings: [String] = []
        if mode != .standalone && !options.address.isEmpty { warnings.append("-a is for -l (standalone); serving the passed sockets") }
        if options.windowsize > TFTPOption.windowsize.range.upperBound {
            warnings.append("""
                -W \(options.windowsize): a window of 32,768 blocks or more makes block numbers ambiguous (a reordered \
                old ACK would look new and corrupt the file): granting at most \(TFTPOption.windowsize.range.upperBound)
                """)
        }
        let proxies = options.proxyDHCP.isEmpty && options.proxyDHCP6.isEmpty
        if !options.bootFile.isEmpty && proxies { warnings.append("--boot-file without --proxy-dhcp: nothing offers it") }
        if options.bootChain != .ipxe && proxies { warnings.append("--boot-chain without --proxy-dhcp: nothing offers it") }
        if options.machines != nil && proxies { warnings.append("--machines without --proxy-dhcp: nothing asks the records") }
        if options.dhcp6Derived && options.proxyDHCP6.isEmpty { warnings.append("--dhcp6-derived without --proxy-dhcp6: nothing gives the addresses") }
        if !options.proxyDHCP.isEmpty, let idle = options.idleTimeout, idle > 0 {
            warnings.append("-t \(idle) with --proxy-dhcp: once the server exits for being idle, no machine's DHCP is answered until it is started again")
        }
        return warnings
    }

    /// The listening TCP sockets a socket unit passes, for HTTP and (named https) for HTTPS; a
    /// certificate with nothing to present it on, or a socket for HTTPS with no certificate, is
    /// refused.
    static func passedWebSockets(_ options: ServeOptions, _ mode: ServingMode) throws(Refusal) -> (http: [Int32], https: [Int32]) {
        var passed: (http: [Int32], https: [Int32]) = ([], [])
        if case .systemd(_, let stream, let secure) = mode { passed = (stream, secure) }
        if !passed.https.isEmpty && options.tlsCertificate == nil {
            throw Refusal(message: "systemd passed a socket named https: --tls-certificate and --tls-key say what it presents", status: 64)
        }
        if options.https.isEmpty && passed.https.isEmpty && options.tlsCertificate != nil {
            throw Refusal(message: "--tls-certificate and --tls-key are for --https, or a socket systemd passes named https", status: 64)
        }
        return passed
    }

    /// What each boot network's machines get: the operator's --boot-file over the defaults,
    /// iPXE's script and UEFI HTTP Boot's loader over --http where it serves that address.
    static func bootNetworks(_ options: ServeOptions, _ interfaces: [NetworkInterface]) -> [BootNetwork] {
        let choices = Dictionary(options.bootFile.map { ($0.selector, $0.target) }, uniquingKeysWith: { _, last in last })
        return zip(options.proxyDHCP, interfaces).map { address, interface in
            BootNetwork(address: address, interface: interface,
                        menu: BootMenu.withDefaults(choices, httpBase: httpBase(address.description, options), chain: options.bootChain))
        }
    }

    /// The same for `--proxy-dhcp6`'s networks: URLs on --http where it serves the address (or
    /// every IPv6 address, `[::]`).
    static func bootNetworks6(_ options: ServeOptions, _ interfaces: [NetworkInterface]) -> [BootNetwork6] {
        let choices = Dictionary(options.bootFile.map { ($0.selector, $0.target) }, uniquingKeysWith: { _, last in last })
        return zip(options.proxyDHCP6, interfaces).map { address, interface in
            BootNetwork6(address: address, interface: interface,
                         menu: BootMenu.withDefaults(choices, httpBase: httpBase(address.host, options), chain: options.bootChain),
                         derived: options.dhcp6Derived ? address.ipv6Bytes.map(DerivedAddresses.init(server:)) : nil)
        }
    }

    /// Where machines on the network of `host` (a numeric IPv4 or IPv6 address) reach this
    /// server's HTTP: plain HTTP where it serves the address or its family's wildcard (firmware
    /// trusts it with no CA enrolled), else HTTPS (whose certificate must name the address, and
    /// its CA be enrolled); nil: neither does. An IPv6 address is bracketed in the URL.
    static func httpBase(_ host: String, _ options: ServeOptions) -> String? {
        let v6 = host.contains(":")
        let wildcard = v6 ? "::" : "0.0.0.0"
        let inURL = v6 ? "[\(host)]" : host
        func serving(_ addresses: [TCPAddress]) -> TCPAddress? {
            addresses.first { $0.host == wildcard || $0.host == host }
        }
        return serving(options.http).map { "http://\(inURL)\($0.port == 80 ? "" : ":\($0.port)")/" }
            ?? serving(options.https).map { "https://\(inURL)\($0.port == 443 ? "" : ":\($0.port)")/" }
    }

    /// --backend: auto takes io_uring when the probe (ENOSYS, EPERM from seccomp,
    /// kernel.io_uring_disabled, memory limits, kernel features) says it works.
    static func backend(_ options: ServeOptions, _ uring: (available: Bool, reason: String)) throws(Refusal) -> (Bool, String) {
        switch options.backend {
        case .glibc:
            return (false, "asked for")
        case .uring:
            guard uring.available else { throw Refusal(message: "--backend uring: \(uring.reason)") }
            return (true, "asked for")
        case .auto:
            return (uring.available, "auto: " + uring.reason)
        }
    }

    /// An HTTP server on `addresses` and the sockets passed for it (nil: neither), from the
    /// --http-* flags: --http and --https have the same limits, and share the connection limit
    /// (and so the descriptors it stands for).
    static func web(_ addresses: [TCPAddress], passed: [Int32], _ options: ServeOptions, connections: Int) -> HTTPConfiguration? {
        guard !addresses.isEmpty || !passed.isEmpty else { return nil }
        var http = HTTPConfiguration(listenAddresses: addresses.map(\.socketAddress))
        http.inheritedListeners = passed
        http.maxConnections = connections
        http.idleTimeout = Nanoseconds(options.httpIdleTimeout) * nanosecondsPerSecond
        http.sendTimeout = http.idleTimeout
        http.requestTimeout = Nanoseconds(options.httpRequestTimeout) * nanosecondsPerSecond
        return http
    }

    /// in.tftpd's -U default: 0, so that a file an upload created (0666) may be uploaded again
    /// (switches back up their configuration every night); with -p, the inherited umask.
    let fileUmask: mode_t

    /// What the flags say a client may read and write beneath `root` (`-p`, `-c`, `--ro`,
    /// `--max-upload`, `-U`, `-s`/`-j`, `--normalize`, `--validate`).
    func policy(root: Int32) -> AccessPolicy {
        let uploadLimit = options.maxUpload?.bytes
        var policy = AccessPolicy(root: root, permissive: options.permissive, allowCreate: options.create,
                                  readOnly: options.readOnly || uploadLimit == 0, umask: fileUmask,
                                  virtualRoot: options.secure || options.jail)
        policy.maxUpload = uploadLimit
        let virtualRoot = options.secure || options.jail
        policy.names = FilenameProcessing(normalization: options.normalize, validates: options.validatePaths,
                                          hostDirectory: virtualRoot ? nil : options.directory.first ?? "/srv/tftp")
        return policy
    }

    /// Everything of a server's configuration the flags decide (not its policy, logger, rules).
    func configure(_ configuration: inout ServerConfiguration) {
        switch mode {
        case .standalone: configuration.listenAddresses = addresses
        case .inetd: configuration.inheritedListeners = [0]
        case .systemd(let datagram, _, _): configuration.inheritedListeners = datagram
        }
        // in.tftpd's default: 15 minutes under a superserver, which starts another; never standalone,
        // nor for a proxyDHCP server, whose ports no superserver holds (the next rack's DHCP would
        // go unanswered).
        let idle = options.idleTimeout ?? (mode == .standalone || !options.proxyDHCP.isEmpty || !options.proxyDHCP6.isEmpty ? 0 : 900)
        configuration.idleExit = idle > 0 ? Nanoseconds(idle) * nanosecondsPerSecond : nil
        configuration.singlePort = options.singlePort
        var maxBlockSize: Int?
        switch options.blocksize {
        case .bytes(let bytes)?: maxBlockSize = bytes
        case .mtu(let slack)?: configuration.blockSizeSlack = slack
        case nil: break
        }
        let window = min(max(1, options.windowsize), TFTPOption.windowsize.range.upperBound)
        let refused = options.refuseAll ? TFTPOption.allCases : options.refuse
        configuration.optionLimits = OptionLimits(maxBlockSize: maxBlockSize, maxWindowSize: window,
                                                  maxWindowBytes: options.windowBytes, refused: Set(refused.map(\.rawValue)))
        configuration.retransmitTimeout = Nanoseconds(options.retransmit) * 1000
        if options.fixedTimeout { configuration.adaptiveTimeoutFloor = nil }
        configuration.maxRetries = options.retries
        configuration.portRange = options.portRange?.ports
        configuration.shutdownGrace = Nanoseconds(options.grace) * nanosecondsPerSecond
        configuration.maxTransfers = options.maxTransfers
        if let maxPerClient = options.maxPerClient { configuration.maxTransfersPerClient = maxPerClient }
        if let maxPerPrefix = options.maxPerPrefix { configuration.maxTransfersPerPrefix = maxPerPrefix }
        if options.maxPerClient != nil || options.maxPerPrefix != nil { configuration.loopbackUncountedPerClient = false }
        configuration.whenBusy = options.whenBusy
        configuration.logFormat = options.logFormat
        // Beyond this, transfers share sockets: instead of running out of descriptors, and by
        // default past the count where sharing costs less.
        let descriptors = budget.transferSockets / workerCount
        configuration.ownTransferSocketsPerWorker = options.maxTransferSockets != nil
            ? descriptors : min(descriptors, ServerConfiguration.ownTransferSocketsPerWorkerByDefault)
    }
}
