import Logging
import StampedeBase
import StampedeDHCP
import StampedeFiles
import StampedeIO
import StampedeProtocol
import StampedeTFTPServer
import Testing
@testable import stampede

/// `serve`'s flags, parsed into their types, and the plan made of them and of the host's facts:
/// no socket, no file, no system call.
@Suite struct ServePlanSpec {
    func options(_ arguments: String...) throws -> ServeOptions {
        try ServeOptions.parse(arguments + ["/srv/tftp"])
    }

    func facts(_ mode: ServingMode = .standalone, fileLimit: Int = 65536, processors: Int = 2,
               uring: (Bool, String) = (true, "works")) -> ServePlan.Facts {
        ServePlan.Facts(mode: mode, addresses: [SocketAddress(parsing: "127.0.0.1:69", defaultPort: 69)!], fileLimit: fileLimit,
                        processors: processors, inheritedUmask: 0o022, uring: uring)
    }

    func configured(_ plan: ServePlan) -> ServerConfiguration {
        var configuration = ServerConfiguration(listenAddresses: [], policy: plan.policy(root: -1),
                                                logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }))
        plan.configure(&configuration)
        return configuration
    }

    @Test func flagsAreParsedOnceIntoTheirTypes() throws {
        let parsed = try options("-R", "4000:4999", "-U", "027", "--max-upload", "64M", "--http", "[::1]:8080", "-S", "1069",
                                 "--when-busy", "error", "--backend", "glibc", "--log-format", "json", "-r", "TSIZE")
        #expect(parsed.portRange?.ports == 4000...4999 && parsed.umask?.bits == 0o027 && parsed.maxUpload?.bytes == 64 << 20)
        #expect(parsed.http == [TCPAddress("[::1]:8080")!] && parsed.service?.port == 1069)
        #expect(parsed.whenBusy == .error && parsed.backend == .glibc && parsed.logFormat == .json && parsed.refuse == [.tsize])
        // Each refused for its own reason, said as the usage error says it.
        for (bad, said) in [(["-R", "5:1"], "-R 5:1: LOW:HIGH within 1...65535"), (["-U", "9z"], "-U 9z: an octal umask"),
                            (["--max-upload", "1.5M"], "--max-upload 1.5M: a size in bytes"),
                            (["--http", "nonsense"], "--http nonsense: not ADDR:PORT"), (["-S", "0"], "-S 0: neither a port"),
                            (["--when-busy", "maybe"], "'maybe' is invalid for '--when-busy"), (["--backend", "x"], "'x' is invalid for '--backend"),
                            (["-r", "multicast"], "-r multicast: not an option this server negotiates"),
                            (["--map-test", "-", "--map-client", ""], "--map-client \"\": not an IPv4 or IPv6 address")] {
            #expect(refusal(bad)?.contains(said) == true, "\(bad): \(refusal(bad) ?? "taken")")
        }
    }

    /// The usage error `arguments` get, as ArgumentParser says it; nil when they parse.
    func refusal(_ arguments: [String]) -> String? {
        do {
            _ = try ServeOptions.parse(arguments + ["/srv/tftp"])
            return nil
        } catch {
            return ServeOptions.message(for: error)
        }
    }

    @Test func theConfigurationIsWhatTheFlagsSay() throws {
        let plan = try ServePlan(options("-T", "500000", "--retries", "3", "-R", "4000:4999", "-B", "1468", "-W", "16",
                                         "--single-port", "--max-per-client", "8", "--grace", "2"), facts())
        let configuration = configured(plan)
        #expect(configuration.listenAddresses == facts().addresses)
        #expect(configuration.retransmitTimeout == 500_000_000 && configuration.maxRetries == 3)
        #expect(configuration.portRange == 4000...4999 && configuration.singlePort)
        #expect(configuration.optionLimits.maxBlockSize == 1468 && configuration.optionLimits.maxWindowSize == 16)
        #expect(configuration.maxTransfersPerClient == 8 && !configuration.loopbackUncountedPerClient)
        #expect(configuration.shutdownGrace == 2 * nanosecondsPerSecond && configuration.idleExit == nil)
    }

    /// in.tftpd's -t default: never standalone, 15 minutes under a superserver, which starts
    /// another server for the next request.
    @Test func theIdleExitIsInTftpdsDefault() throws {
        #expect(configured(try ServePlan(options(), facts(.standalone))).idleExit == nil)
        #expect(configured(try ServePlan(options(), facts(.inetd))).idleExit == 900 * nanosecondsPerSecond)
        #expect(configured(try ServePlan(options("-t", "5"), facts(.inetd))).idleExit == 5 * nanosecondsPerSecond)
    }

    @Test func aWindowPastTheTableIsGrantedAtItsMostAndSaid() throws {
        let plan = try ServePlan(options("-W", "40000"), facts())
        #expect(configured(plan).optionLimits.maxWindowSize == TFTPOption.windowsize.range.upperBound)
        #expect(plan.warnings.contains { $0.hasPrefix("-W 40000:") })
        #expect(configured(try ServePlan(options("-W", "0"), facts())).optionLimits.maxWindowSize == 1)
    }

    @Test func theDescriptorsAreSharedOutAndAnImpossibleConnectionLimitIsLowered() throws {
        let tftp = try ServePlan(options(), facts(fileLimit: 65536))
        #expect(tftp.http == nil && tftp.cacheLimits.sharedFrom == nil)
        #expect(configured(tftp).ownTransferSocketsPerWorker == ServerConfiguration.ownTransferSocketsPerWorkerByDefault)
        #expect(configured(try ServePlan(options(), facts(fileLimit: 1500))).ownTransferSocketsPerWorker == (1500 - 750) / 2)
        let asked = try ServePlan(options("--max-transfer-sockets", "30000"), facts(fileLimit: 65536))
        #expect(configured(asked).ownTransferSocketsPerWorker == 15000, "as asked, past the default")
        let web = try ServePlan(options("--http", ":8080", "--http-max-connections", "5000"), facts(fileLimit: 600))
        #expect(web.http!.maxConnections < 300 && web.warnings.contains { $0.contains("serving at most") })
        #expect(web.cacheLimits.sharedFrom == FileImage.sharedFrom && web.cacheLimits.sharedImages == web.budget.images)
    }

    /// A socket unit's ListenStream is HTTP, with or without --http.
    @Test func aPassedTCPSocketIsServedOverHTTP() throws {
        let plan = try ServePlan(options(), facts(.systemd(datagram: [3], stream: [4])))
        #expect(plan.http?.inheritedListeners == [4] && plan.http?.listenAddresses == [])
        #expect(configured(plan).inheritedListeners == [3] && configured(plan).listenAddresses == [])
    }

    @Test func singlePortOnAPassedSocketServesOnOneWorker() throws {
        let plan = try ServePlan(options("--single-port"), facts(.systemd(datagram: [3], stream: []), processors: 4))
        #expect(plan.workerCount == 1 && plan.notices == ["--single-port on a passed socket: one worker"])
        #expect(try ServePlan(options("--single-port"), facts(processors: 4)).workerCount == 4)
    }

    @Test func uploadsFollowTheirFlags() throws {
        #expect(try ServePlan(options("--max-upload", "0"), facts()).policy(root: -1).readOnly)
        #expect(try ServePlan(options("--max-upload", "1k"), facts()).policy(root: -1).maxUpload == 1024)
        // -U: 0 by default as in.tftpd, the inherited umask with -p, or as given.
        #expect(try ServePlan(options(), facts()).fileUmask == 0)
        #expect(try ServePlan(options("-p"), facts()).fileUmask == 0o022)
        #expect(try ServePlan(options("-p", "-U", "077"), facts()).fileUmask == 0o077)
        #expect(try ServePlan(options("-s"), facts()).policy(root: -1).virtualRoot)
    }

    @Test func theBackendIsChosenByTheProbe() throws {
        #expect(try ServePlan(options(), facts(uring: (true, "works"))).useURing)
        let without = try ServePlan(options(), facts(uring: (false, "ENOSYS")))
        #expect(!without.useURing && without.backendReason == "auto: ENOSYS")
        #expect(throws: ServePlan.Refusal(message: "--backend uring: ENOSYS")) {
            _ = try ServePlan(options("--backend", "uring"), facts(uring: (false, "ENOSYS")))
        }
        #expect(try !ServePlan(options("--backend", "glibc"), facts()).useURing)
    }
}

/// `--proxy-dhcp` and `--boot-file`: what each boot network's machines are offered.
@Suite struct ProxyDHCPPlanSpec {
    let eth1 = NetworkInterface(name: "eth1", index: 3)

    func plan(_ arguments: String..., mode: ServingMode = .systemd(datagram: [3], stream: [])) throws -> ServePlan {
        try plan(arguments, mode: mode)
    }

    func plan(_ arguments: [String], mode: ServingMode = .systemd(datagram: [3], stream: [])) throws -> ServePlan {
        var facts = ServePlan.Facts(mode: mode, addresses: [], fileLimit: 65536, processors: 2, inheritedUmask: 0o022,
                                    uring: (true, "works"))
        facts.bootInterfaces = [eth1]
        facts.bootInterfaces6 = [eth1]
        return try ServePlan(ServeOptions.parse(arguments + ["/srv/tftp"]), facts)
    }

    /// `--proxy-dhcp6`: the same chain, its URLs bracketed where --http serves the address (or [::]).
    @Test func overIPv6TheURLsBracketTheAddress() throws {
        let network = try #require(plan("--proxy-dhcp6", "2001:db8::1", "--http", "[::]:8080").bootNetworks6.first)
        #expect(network.address.host == "2001:db8::1" && network.interface == eth1)
        #expect(network.menu.target(for: .efiX64) == .file("ipxe.efi"))
        #expect(network.menu.target(for: .httpX64) == .url("http://[2001:db8::1]:8080/ipxe.efi"))
        #expect(network.menu.target(for: .ipxe) == .url("http://[2001:db8::1]:8080/boot.ipxe"))
        let elsewhere = try #require(plan("--proxy-dhcp6", "2001:db8::1", "--http", "10.0.0.1:80").bootNetworks6.first)
        #expect(elsewhere.menu.target(for: .ipxe) == .file("boot.ipxe") && elsewhere.menu.target(for: .httpX64) == nil)
        // Not an address firmware could be told to fetch from.
        for bad in ["fe80::1", "ff02::1:2", "::", "::1", "10.0.0.1", "eth0"] {
            #expect(throws: (any Error).self, "\(bad)") { try ServeOptions.parse(["--proxy-dhcp6", bad, "/srv/tftp"]) }
        }
    }

    @Test func theDefaultChainOverHTTPWhereItServesTheAddress() throws {
        let network = try #require(plan("--proxy-dhcp", "10.0.0.1", "--http", "10.0.0.1:80").bootNetworks.first)
        #expect(network.address == IPv4(10, 0, 0, 1) && network.interface == eth1)
        #expect(network.menu.target(for: .bios) == .file("undionly.kpxe"))
        #expect(network.menu.target(for: .efiX64) == .file("ipxe.efi"))
        #expect(network.menu.target(for: .httpX64) == .url("http://10.0.0.1/ipxe.efi"))
        #expect(network.menu.target(for: .ipxe) == .url("http://10.0.0.1/boot.ipxe"))
        // Every UEFI architecture has iPXE by default, named as boot.ipxe.org names its builds.
        #expect(network.menu.target(for: .efiArm64) == .file("ipxe-arm64.efi"))
        #expect(network.menu.target(for: .httpArm64) == .url("http://10.0.0.1/ipxe-arm64.efi"))
        #expect(network.menu.target(for: .efiX86) == .file("ipxe-i386.efi"))
        #expect(network.menu.target(for: .efiRiscv64) == .file("ipxe-riscv64.efi"))
        #expect(network.menu.target(for: .ubootArm64) == nil, "U-Boot's own PXE loads no iPXE")
        let wildcard = try #require(plan("--proxy-dhcp", "10.0.0.1", "--http", ":8080").bootNetworks.first)
        #expect(wildcard.menu.target(for: .ipxe) == .url("http://10.0.0.1:8080/boot.ipxe"))
        let elsewhere = try #require(plan("--proxy-dhcp", "10.0.0.1", "--http", "10.9.9.9:80").bootNetworks.first)
        #expect(elsewhere.menu.target(for: .ipxe) == .file("boot.ipxe") && elsewhere.menu.target(for: .httpX64) == nil)
    }

    /// HTTPS where plain HTTP does not serve the address: the same chain under https://.
    @Test func theDefaultChainOverHTTPSWhereOnlyItServesTheAddress() throws {
        let tls = ["--tls-certificate", "c.pem", "--tls-key", "k.pem"]
        let secure = try #require(plan(["--proxy-dhcp", "10.0.0.1", "--https", "10.0.0.1:443"] + tls).bootNetworks.first)
        #expect(secure.menu.target(for: .httpX64) == .url("https://10.0.0.1/ipxe.efi"))
        #expect(secure.menu.target(for: .ipxe) == .url("https://10.0.0.1/boot.ipxe"))
        let both = try #require(plan(["--proxy-dhcp", "10.0.0.1", "--https", ":8443", "--http", ":8080"] + tls).bootNetworks.first)
        #expect(both.menu.target(for: .httpX64) == .url("http://10.0.0.1:8080/ipxe.efi"))
        let https = try plan(["--https", ":8443"] + tls)
        #expect(https.https?.listenAddresses.map(\.description) == ["0.0.0.0:8443"] && https.http == nil)
        #expect(https.https?.requestTimeout == 10 * nanosecondsPerSecond)
    }

    @Test func bootFilesOverTheDefaultsTheLastOfEachWinning() throws {
        let network = try #require(plan("--proxy-dhcp", "10.0.0.1", "--boot-file", "efi-x64=a.efi", "--boot-file", "efi-x64=b.efi",
                                        "--boot-file", "http-arm64=http://10.0.0.1/arm.efi").bootNetworks.first)
        #expect(network.menu.target(for: .efiX64) == .file("b.efi"))
        #expect(network.menu.target(for: .httpArm64) == .url("http://10.0.0.1/arm.efi"))
        for (bad, said) in [(["--boot-file", "http-x64=ipxe.efi"], "UEFI HTTP Boot loads a URL"),
                            (["--boot-file", "bios=http://x/y"], "a PXE firmware loads a file over TFTP"),
                            (["--boot-file", "arm=x"], "not SELECTOR=NAME"), (["--boot-file", "bios="], "NAME is empty"),
                            (["--boot-file", "arch:70000=x"], "or arch:N"), (["--boot-file", "arch:16=x.efi"], "UEFI HTTP Boot loads a URL"),
                            (["--pxe-vendor", "U-Boot armv8"], "--pxe-vendor U-Boot armv8: the start of a vendor class"),
                            (["--pxe-vendor", ""], "--pxe-vendor : the start of a vendor class"),
                            (["--boot-file", "efi-x64=" + String(repeating: "n", count: 110) + "/${mac}"], "128 bytes for a machine"),
                            (["--proxy-dhcp", "eth0"], "--proxy-dhcp eth0: not this server's IPv4 address"),
                            (["--proxy-dhcp", "0.0.0.0"], "--proxy-dhcp 0.0.0.0: not this server's IPv4 address"),
                            (["--proxy-dhcp", "10.0.0"], "--proxy-dhcp 10.0.0: not this server's IPv4 address")] {
            let message: String? = {
                do {
                    _ = try ServeOptions.parse(bad + ["/srv/tftp"])
                    return nil
                } catch {
                    return ServeOptions.message(for: error)
                }
            }()
            #expect(message?.contains(said) == true, "\(bad): \(message ?? "taken")")
        }
    }

    /// Nothing holds DHCP's ports for a server that exits idle: with --proxy-dhcp it stays.
    @Test func aProxyNeverExitsForBeingIdle() throws {
        var configuration = ServerConfiguration(listenAddresses: [], policy: try plan("--proxy-dhcp", "10.0.0.1").policy(root: -1),
                                                logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }))
        let proxy = try plan("--proxy-dhcp", "10.0.0.1")
        proxy.configure(&configuration)
        #expect(configuration.idleExit == nil && proxy.bootNetworks.count == 1)
        #expect(try plan("--proxy-dhcp", "10.0.0.1", "-t", "60").warnings.contains { $0.contains("-t 60 with --proxy-dhcp") })
    }
}
