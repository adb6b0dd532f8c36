import ArgumentParser
import StampedeDHCP
import StampedeFiles
import StampedeIO
import StampedeMachines
import StampedeProtocol
import StampedeServing
import StampedeTFTPServer
import StampedeTLS

/// `serve`'s flags: in.tftpd 7.3's command line, and long options of Stampede's own, each parsed
/// once into its type (ArgumentTypes.swift) and checked against its range (`FlagRange`), so that
/// what the server is made of (`ServePlan`) never parses a String.
struct ServeOptions: ParsableArguments {
    @Flag(name: [.customShort("l"), .customLong("listen")],
          help: "Standalone: bind -a and serve. Without -l, serve the socket inetd passes on fd 0.")
    var listen = false

    @Flag(name: [.customShort("L"), .customLong("foreground")],
          help: "-l, staying in the foreground and logging to standard error (-l alone detaches and logs to syslog).")
    var foreground = false

    @Flag(name: .customLong("systemd"),
          help: ArgumentHelp("Serve the sockets systemd passes (LISTEN_FDS), in the foreground; excludes -l, -L and -a (the package's stampede.socket).",
                             discussion: "UDP ones for TFTP; listening TCP ones (a socket unit's ListenStream=) for HTTP, as --http serves, and for HTTPS those the unit names https (FileDescriptorName=https), with --tls-certificate and --tls-key. A count in LISTEN_FDS that names a descriptor not open, or not such a socket, stops the server saying which."))
    var systemd = false

    @Flag(name: .customLong("single-port"),
          help: "Run every transfer on the listener's port (behind NAT, in containers), told apart by client address and port.")
    var singlePort = false

    @Option(name: [.customShort("a"), .customLong("address")],
            help: ArgumentHelp("Listen on [ADDRESS][:PORT] (repeatable; default: all addresses, port 69).",
                               discussion: "The address may be a host name (every address it resolves to) and the port a services(5) name."))
    var address: [String] = []

    @Option(name: [.customShort("S"), .customLong("service"), .customLong("port")],
            help: "The port of an -a that names none: a number or a services(5) name (default: tftp, 69).",
            transform: ServicePort.parse)
    var service: ServicePort?

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
            help: "Largest upload: SIZE bytes, or with k, M, G, T, P, E (powers of 1024); a larger tsize is refused at once, more data ends the upload (ERROR 2). 0 is --read-only.",
            transform: ByteSize.parse)
    var maxUpload: ByteSize?

    @Flag(name: [.customShort("p"), .customLong("permissive")],
          help: "Only the OS permissions decide: no world-readable/writable requirement.")
    var permissive = false

    @Option(name: [.customShort("u"), .customLong("user")],
            help: "Drop privileges to this user after binding, when started as root (default nobody): its group and every group it is in, as in.tftpd's initgroups.")
    var user = "nobody"

    @Option(name: [.customShort("U"), .customLong("umask")],
            help: "umask for created files (octal). Default, as in.tftpd: 0 (so an uploaded file may be uploaded again), or the inherited one with -p.",
            transform: Umask.parse)
    var umask: Umask?

    @Option(name: [.customShort("P"), .customLong("pidfile")], help: "Write the process ID to this file, and remove it at exit.")
    var pidfile: String?

    @Option(name: [.customShort("t"), .customLong("timeout")],
            help: "Exit after this many seconds with no transfer (an open HTTP connection counts as one); 0 never (default: 0 with -l or -L, otherwise 900; never with --proxy-dhcp).")
    var idleTimeout: Int?

    @Option(name: [.customShort("T"), .customLong("retransmit")],
            help: "The longest retransmit timeout, in microseconds (default 1000000): downloads retransmit after the round trip measured for each client, never sooner than 100 ms; --fixed-timeout always waits the whole timeout.")
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
    @Option(name: .customLong("map-client"),
            help: "--map-test: the client's address (default 192.0.2.34, or 2001:db8::feed:face:dead:beef with -6).",
            transform: { text in
                // A bare numeric address, as a client's is: "" is not the wildcard, nor " 10.0.0.1" an address.
                guard let client = SocketAddress(numericHost: text, port: 0) else {
                    throw ValidationError("--map-client \"\(text)\": not an IPv4 or IPv6 address.")
                }
                return client
            })
    var mapClient: SocketAddress?

    @Flag(name: [.customShort("v"), .customLong("verbose")], help: "One more level of --verbosity (repeatable).")
    var verbose: Int

    @Option(name: .customLong("verbosity"),
            help: "As tftpd-hpa: 0 start, stop, problems and refusals (default); 1 every transfer and remapping; 2 accepted requests and options; 3 remap steps.")
    var verbosity: Int?

    @Option(name: [.customShort("r"), .customLong("refuse"), .customLong("reject")],
            help: "Never negotiate this option (repeatable).",
            transform: { name in
                guard let option = TFTPOption(rawValue: name.lowercased()) else {
                    throw ValidationError("-r \(name): not an option this server negotiates (\(TFTPOption.names)).")
                }
                return option
            })
    var refuse: [TFTPOption] = []

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

    @Option(name: [.customShort("R"), .customLong("port-range"), .customLong("ports")], help: "Ports for transfers, LOW:HIGH.",
            transform: PortRange.parse)
    var portRange: PortRange?

    @Flag(name: [.customShort("V"), .customLong("version")], help: "Print the version and what is built in, and exit.")
    var version = false

    @Option(name: .customLong("workers"), help: "Worker threads (default: one per core).")
    var workers: Int?

    @Option(name: .customLong("backend"), help: "I/O backend: auto (io_uring when this kernel allows it), uring, glibc.")
    var backend = BackendChoice.auto

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
            help: "Transfers with a socket of their own, in all; further reads share 64 transfer sockets per worker (default: 1,024 per worker, or fewer when the open file limit less 1,024, or half of it when that is more, holds fewer; with --http, what HTTP's connections and images leave).")
    var maxTransferSockets: Int?
    @Option(name: .customLong("max-per-client"),
            help: "Concurrent transfers per client host, an IPv4 or IPv6 address (default: 64, loopback clients not counted).")
    var maxPerClient: Int?
    @Option(name: .customLong("max-per-prefix"),
            help: "Concurrent transfers per IPv6 /64, a whole LAN (default: 16384, loopback clients not counted).")
    var maxPerPrefix: Int?
    @Option(name: .customLong("when-busy"),
            help: "Over --max-transfers or --max-per-client, or out of sockets, descriptors or memory: silence (the client sends its request again a few seconds later; default) or error (ERROR 0 at once, which fails a firmware's boot).")
    var whenBusy = BusyReply.silence

    @Option(name: .customLong("metrics"),
            help: "Serve Prometheus metrics over HTTP at ADDR:PORT/metrics (off by default). Stampede's port is 9469: --metrics :9469 (every IPv4 address), 127.0.0.1:9469, [::]:9469; port 0 takes a free one, said at start.",
            transform: { try TCPAddress.parse($0, flag: "--metrics", example: "127.0.0.1:9469") })
    var metrics: TCPAddress?
    @Option(name: .customLong("http"),
            help: ArgumentHelp("Serve the same root over HTTP/1.1 and 1.0 at ADDR:PORT too (repeatable; off by default): GET and HEAD, ranges, conditional requests, keep-alive, through the same -m rules, access checks and file cache. Port 80 on a boot server of its own, 8080 beside another web server; :PORT is every IPv4 address, [::]:PORT every IPv6 one; port 0 takes a free one, said at start.",
                               valueName: "ADDR:PORT"),
            transform: { try TCPAddress.parse($0, flag: "--http", example: "192.0.2.1:80 or [::]:8080") })
    var http: [TCPAddress] = []
    @Option(name: .customLong("https"),
            help: ArgumentHelp("Serve the same root over HTTPS at ADDR:PORT too (repeatable; off by default), as --http serves it, with --tls-certificate and --tls-key. Port 443; :PORT is every IPv4 address, [::]:PORT every IPv6 one; port 0 takes a free one, said at start.",
                               valueName: "ADDR:PORT"),
            transform: { try TCPAddress.parse($0, flag: "--https", example: "192.0.2.1:443 or [::]:8443") })
    var https: [TCPAddress] = []
    @Option(name: .customLong("tls-certificate"),
            help: ArgumentHelp("--https's certificate chain in PEM: the server's certificate (its subject alternative names must hold the host name or address of the boot URLs), then the intermediates. Read again on SIGHUP.",
                               valueName: "FILE"))
    var tlsCertificate: String?
    @Option(name: .customLong("tls-key"),
            help: ArgumentHelp("--https's private key in PEM, unencrypted, readable by the server's user alone. Read again on SIGHUP.", valueName: "FILE"))
    var tlsKey: String?
    @Option(name: .customLong("tls-profile"),
            help: "What --https speaks: firmware (default: TLS 1.2 and 1.3, ECDHE suites first, then DHE-RSA and RSA key exchange for UEFI firmware without elliptic curves) or modern (TLS 1.2 with ECDHE and AEAD suites only, and TLS 1.3).")
    var tlsProfile = TLSProfile.firmware
    @Flag(name: .customLong("tls-kernel"),
          help: "Let the kernel encrypt --https's bodies where it has TLS (the tls module, TCP_ULP): SSL_sendfile from the file images, no copy through OpenSSL. Off by default (as nginx's ssl_conf_command Options KTLS): without it, bodies go by SSL_write from the images' memory.")
    var tlsKernel = false
    @Option(name: .customLong("proxy-dhcp"),
            help: ArgumentHelp("Answer network-boot machines' DHCP requests as a proxyDHCP server on the network where this host has ADDR (repeatable, up to 16; off by default): boot information only, never an address, beside the site's DHCP server. ADDR names the interface whose broadcasts are answered, is where relays send (through any interface), and is the boot server the answers name.",
                               discussion: "Port 67 is heard through a packet socket and answered through a raw one, never bound: a DHCP server on the same host keeps every datagram it is owed. That needs root or CAP_NET_RAW; the boot server's port 4011 is a UDP socket on ADDR.",
                               valueName: "ADDR"),
            transform: IPv4.parse)
    var proxyDHCP: [IPv4] = []
    @Option(name: .customLong("proxy-dhcp6"),
            help: ArgumentHelp("Answer network-boot machines' DHCPv6 messages on the network where this host has the IPv6 address ADDR (repeatable; off by default): a boot file URL (tftp://[ADDR]/NAME, or --http's URL for UEFI HTTP Boot and iPXE's script), never an address; the site's DHCPv6 server or the router's advertisements give those. --boot-file and --boot-chain choose as for --proxy-dhcp.",
                               discussion: "UDP port 547, joined to ff02::1:2 on ADDR's interface (so no DHCPv6 server may run on this host), and the boot server's port 4011 on ADDR: UEFI's PXE over IPv6 takes the answer as a proxy offer and asks [ADDR]:4011 for its boot file.",
                               valueName: "ADDR"),
            transform: parseBootAddress6)
    var proxyDHCP6: [SocketAddress] = []
    @Flag(name: .customLong("dhcp6-derived"),
          help: ArgumentHelp("With --proxy-dhcp6, give each network-boot machine an address too, for a network without a DHCPv6 server: made from its MAC (else its DUID) and the IA's IAID within the /64 of ADDR, the same from every server that derives there, with no lease kept (off by default: the site's DHCPv6 server gives addresses)."))
    var dhcp6Derived = false
    @Option(name: .customLong("boot-file"),
            help: ArgumentHelp("What machines of SELECTOR boot, offered by --proxy-dhcp (repeatable): bios, efi-x86, efi-x64, efi-arm32, efi-arm64, efi-riscv64, efi-loongarch64, uboot-arm32, uboot-arm64 (a file name), http-x86, http-x64, http-arm32, http-arm64, http-riscv64, http-loongarch64 (UEFI HTTP Boot: a URL), ipxe (iPXE asking again: its script, a file name or a URL), or arch:N for machines that send architecture code N (RFC 4578, IANA's registry; before a named selector of the same code). Defaults: bios=undionly.kpxe, each UEFI architecture's iPXE as boot.ipxe.org names it (efi-x64=ipxe.efi, efi-arm64=ipxe-arm64.efi, efi-x86=ipxe-i386.efi, ...) and its URL on --http for HTTP Boot, ipxe=boot.ipxe (its URL on --http); U-Boot none. NAME may hold ${mac}, ${mac:hexhyp}, ${uuid} and ${arch}.",
                               valueName: "SELECTOR=NAME"),
            transform: BootFileChoice.parse)
    var bootFile: [BootFileChoice] = []
    @Option(name: .customLong("boot-chain"),
            help: ArgumentHelp("The chain --proxy-dhcp offers by default, under --boot-file's choices: ipxe (the default: undionly.kpxe for a BIOS, iPXE for each UEFI architecture) or secure-boot (shim, signed by Microsoft, for x64 and ARM64 UEFI: efi-x64=shimx64.efi, efi-arm64=shimaa64.efi and their URLs on --http for HTTP Boot; shim loads grubx64.efi or grubaa64.efi beside itself; the rest as ipxe).",
                               valueName: "CHAIN"))
    var bootChain: BootChain = .ipxe
    @Option(name: .customLong("pxe-vendor"),
            help: ArgumentHelp("Answer DHCP requests whose vendor class (option 60) starts with VENDOR as PXEClient's (repeatable), as dnsmasq's --dhcp-pxe-vendor: U-Boot sends U-Boot.armv8 (its architecture, option 93, picks the selector: uboot-arm64 for 22). PXEClient and HTTPClient are always answered.",
                               valueName: "VENDOR"),
            transform: ServeOptions.pxeVendor)
    var pxeVendor: [String] = []
    @Option(name: .customLong("machines"),
            help: ArgumentHelp("Machine records: a directory of files, one per machine (or a default), each saying which machines it selects (mac, uuid, arch) and whether --proxy-dhcp boots them, leaves them to boot from disk, or ignores them; Ironic's dhcp-hostsdir files (MAC, MAC,ignore) are read as they are. A machine no record selects is left alone (--unknown-machines). A bad file at start is refused with its file and line (exit 78). Off by default: every network-boot machine is answered.",
                               valueName: "DIR"))
    var machines: String?
    @Option(name: .customLong("unknown-machines"),
            help: "With --machines: what a machine no record selects gets: ignore (silence, the default), boot (the network's boot, as without records), or record (silence, and a record that ignores it written into DIR with what its DHCP request said, for the operator to change: enlistment).")
    var unknownMachines: MachineBook.UnknownMachines?
    @Option(name: .customLong("machines-api"),
            help: ArgumentHelp("With --machines: the site's inventory, pixiecore's API (matchbox's /pixiecore, or any server of that API): GET URL/v1/boot/MAC?arch=N&uuid=U&giaddr=A&stage=S is asked what a machine boots, by threads of their own (--machines-api-calls); a 200's kernel, initrd and cmdline are its boot, a 4xx leaves it to the records of DIR, then --unknown-machines. When the API cannot be reached a machine keeps its last answer until it expires, then gets DIR's records. Answers that would inject into a loader's script are refused (the machine left alone).",
                               valueName: "URL"))
    var machinesAPI: String?
    @Option(name: .customLong("machines-api-cache"),
            help: "Seconds an answer of --machines-api is kept (default 60, from 1), a 4xx too; a machine's firmware starting a boot after half of them has it asked again behind the kept answer.")
    var machinesAPICache = 60
    @Option(name: .customLong("machines-api-calls"),
            help: "Calls to --machines-api at once, at most (default 64), each on a thread of its own and at most 2 s: what a rack powering on asks at once (a machine's requests wait for its one call).")
    var machinesAPICalls = MachineInventory.defaultCallers
    @Option(name: .customLong("http-max-connections"),
            help: "HTTP connections open at once (default: 16384, or fewer as the open-file limit holds at two descriptors each, a socket and a streamed file); more are closed as they arrive. One the limit cannot hold is lowered, with a warning.")
    var httpMaxConnections: Int?
    @Option(name: .customLong("http-max-per-client"),
            help: "HTTP and HTTPS connections one client may hold open at once, an IPv4 or IPv6 address, of which a quarter (at least one) in a TLS handshake (default: 64, loopback clients not counted); more are closed as they arrive, so that one host cannot take the connections every machine needs.")
    var httpMaxPerClient: Int?
    @Option(name: .customLong("http-max-per-prefix"),
            help: "HTTP and HTTPS connections the hosts of one IPv6 /64, a whole LAN, may hold open at once (default: 16384, loopback clients not counted): one host rotating its address through its /64 cannot take them all.")
    var httpMaxPerPrefix: Int?
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
    var logFormat = LogFormat.text

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
        if ipv4 && ipv6 { throw ValidationError("-4 and -6 exclude each other.") }
        if unknownMachines != nil && machines == nil { throw ValidationError("--unknown-machines is for --machines.") }
        if let machinesAPI {
            if machines == nil {
                throw ValidationError("--machines-api needs --machines DIR (what the API does not list, and the key of done URLs; it may be empty).")
            }
            if !machinesAPI.lowercased().hasPrefix("http://") || machinesAPI.count <= "http://".count {
                throw ValidationError("--machines-api \(machinesAPI): an http:// URL (https is not asked here).")
            }
        }
        try FlagRange.check(machinesAPICache, 1...FlagRange.year, "--machines-api-cache", "seconds")
        try FlagRange.check(machinesAPICalls, 1...1024, "--machines-api-calls")
        if !https.isEmpty && (tlsCertificate == nil || tlsKey == nil) {
            throw ValidationError("--https needs --tls-certificate and --tls-key.")
        }
        // Under --systemd a socket named https may stand for --https (ServePlan checks it then).
        if https.isEmpty && !systemd && (tlsCertificate != nil || tlsKey != nil) {
            throw ValidationError("--tls-certificate and --tls-key are for --https.")
        }
        if (tlsCertificate == nil) != (tlsKey == nil) { throw ValidationError("--tls-certificate and --tls-key go together.") }
        try FlagRange.check(httpMaxConnections, FlagRange.count, "--http-max-connections")
        try FlagRange.check(httpMaxPerClient, FlagRange.count, "--http-max-per-client")
        try FlagRange.check(httpMaxPerPrefix, FlagRange.count, "--http-max-per-prefix")
        if tlsKernel && tlsCertificate == nil { throw ValidationError("--tls-kernel is for --https.") }
        try FlagRange.check(httpIdleTimeout, 1...FlagRange.year, "--http-idle-timeout", "seconds")
        try FlagRange.check(httpRequestTimeout, 1...FlagRange.year, "--http-request-timeout", "seconds")
    }

    /// tftpd-hpa's verbosity: --verbosity, or how many -v.
    var level: Int { verbosity ?? verbose }
}
