import CStampedeSys
import Glibc
import StampedeBase
import StampedeGlibc
@testable import StampedeHTTP
import StampedeHTTPWire
import StampedeIO
import StampedeProtocol
@testable import StampedeStorm
import StampedeTestSupport
import Testing

/// The storm's reading of a response head: the grammar the server reads requests with.
typealias ResponseHead = ReceivedResponseHead

@Suite struct HTTPStageParsing {
    @Test func theChainFetchesItsScriptKernelAndInitrdOverHTTP() throws {
        let chain = try #require(BootProfile.builtIn("uefi-ipxe"))
        #expect(chain.stages.map(\.overHTTP) == [false, false, false, true, true, true])
        #expect(chain.stages[3].label == "ipxe http GET boot.ipxe")
        #expect(chain.usesHTTP && chain.needsHTTPServer)
        // Its autoexec.ipxe, when there is one, may name http:// URLs: the storm keeps a
        // connection a machine, but needs no --http.
        let tftp = try #require(BootProfile.builtIn("uefi-ipxe-tftp"))
        #expect(tftp.usesHTTP && !tftp.needsHTTPServer && tftp.stages.count == 6)
    }

    @Test func aURLStageNamesItsOwnServer() throws {
        let profile = try BootProfile(parsing: "profile p\nfirmware f\nhttp GET http://10.0.0.1:8080/boot/${mac}.ipxe")
        #expect(profile.usesHTTP && !profile.needsHTTPServer)
        let target = try #require(HTTPTarget(MachineIdentity(number: 0).expand(profile.stages[0].names[0]), server: nil))
        #expect(target.server == SocketAddress(parsing: "10.0.0.1:8080", defaultPort: 0)!)
        #expect(target.name == "boot/52:54:00:00:00:01.ipxe" && target.path == "/boot/52:54:00:00:00:01.ipxe")
        #expect(String(decoding: target.request, as: UTF8.self).hasPrefix("GET /boot/52:54:00:00:00:01.ipxe HTTP/1.1\r\nHost: 10.0.0.1:8080\r\n"))
    }

    @Test func aPathBeneathTheStormsServerIsEncoded() throws {
        let server = SocketAddress(parsing: "[::1]:8080", defaultPort: 0)!
        let target = try #require(HTTPTarget("boot/a b%.ipxe", server: server))
        #expect(target.path == "/boot/a%20b%25.ipxe" && target.name == "boot/a b%.ipxe" && target.authority == "[::1]:8080")
        #expect(HTTPTarget("boot.ipxe", server: nil) == nil)
        #expect(HTTPTarget("http://[::1]/x", server: nil)?.server == SocketAddress(parsing: "[::1]:80", defaultPort: 0)!)
    }

    /// HTTPS: by the URL's scheme (port 443 by default), or for a path when the storm's server
    /// is `--https`.
    @Test func anHTTPSTargetIsSecureByItsSchemeOrItsServer() throws {
        let url = try #require(HTTPTarget("https://10.0.0.1/ipxe.efi", server: nil))
        #expect(url.secure && url.server == SocketAddress(parsing: "10.0.0.1:443", defaultPort: 0)! && url.name == "ipxe.efi")
        #expect(HTTPTarget("HTTPS://10.0.0.1:8443/x", server: nil)?.server.port == 8443)
        #expect(HTTPTarget("http://10.0.0.1/x", server: nil)?.secure == false)
        let server = SocketAddress(parsing: "10.0.0.1:443", defaultPort: 0)!
        #expect(HTTPTarget("boot.ipxe", server: server, secureServer: true)?.secure == true)
        #expect(HTTPTarget("boot.ipxe", server: server)?.secure == false)
        // A URL says for itself, whatever the storm's server speaks.
        #expect(HTTPTarget("http://10.0.0.2/x", server: server, secureServer: true)?.secure == false)
    }

    @Test func patienceIsTheFirmwaresRetransmitIntervalsSummed() throws {
        let chain = try #require(BootProfile.builtIn("uefi-ipxe"))
        #expect(chain.stages[0].patience == 24 * nanosecondsPerSecond)  // EDK2: 4 s, 6 tries
        // iPXE: 1/4 s doubling to 10 s, 8 tries: 0.25 + 0.5 + 1 + 2 + 4 + 8 + 10 + 10.
        #expect(chain.stages[5].patience == 35_750_000_000)
    }

    @Test(arguments: [
        ("HTTP/1.1 200 OK\r\nContent-Length: 12\r\nETag: \"x\"", ResponseHead?.some(ResponseHead(status: 200, contentLength: 12, keepAlive: true))),
        ("HTTP/1.1 404 Not Found\r\ncontent-length:  0 \r\nConnection: close", ResponseHead(status: 404, contentLength: 0, keepAlive: false)),
        ("HTTP/1.0 200 OK\r\nContent-Length: 3", ResponseHead(status: 200, contentLength: 3, keepAlive: false)),
        ("HTTP/1.0 200 OK\r\nContent-Length: 3\r\nConnection: Keep-Alive", ResponseHead(status: 200, contentLength: 3, keepAlive: true)),
        ("HTTP/1.1 200 OK", ResponseHead(status: 200, contentLength: nil, keepAlive: true)),
        ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked", nil),
        ("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4", nil),
        ("HTTP/1.1 200 OK\r\nContent-Length: -3", nil),
        ("HTTP/2 200", nil),
        ("HTTP/1.1 2000 OK", nil),
        ("HTTP/1.1 200 OK\r\nno colon", nil),
    ])
    func responseHeads(_ text: String, _ expected: ResponseHead?) {
        let whole = Array((text + "\r\n\r\nbody").utf8)
        let parsed = try? whole.withUnsafeBytes { try ReceivedResponseHead.read($0) }
        #expect(parsed?.0 == expected, "\(text)")
        if let length = parsed?.length { #expect(length == whole.count - 4) }
    }
}

/// `http` stages against the server's own HTTP loop, over the same root and cache as its TFTP
/// worker, turned in one thread with the storm.
@Suite(.serialized) struct HTTPStagesAgainstAServer {
    func run(_ rig: Rig<GlibcBackend>, _ profile: BootProfile, machines: Int, backend: BackendKind = .glibc,
             configure: (inout StormPlan) -> Void = { _ in }) throws -> StormReport {
        var plan = StormPlan(server: rig.address, profile: profile)
        plan.clients = machines
        plan.verifyRoot = rig.dir.path
        plan.httpServer = rig.http?.boundAddresses[0]
        configure(&plan)
        return play(rig, plan, on: try backend.make())
    }

    func play<Backend: DatagramBackend>(_ rig: Rig<GlibcBackend>, _ plan: StormPlan, on backend: Backend) -> StormReport {
        rig.play(Storm(plan: plan, backend: backend))
    }

    @Test(arguments: BackendKind.allCases)
    func theWholeChainBootsOverTFTPThenHTTPWithEveryByteCompared(_ backend: BackendKind) throws {
        let rig = try Rig(backend: try GlibcBackend(), http: true)
        let efi = randomBytes(200_000), script = Array("#!ipxe\nkernel vmlinuz\ninitrd initrd.img\nboot\n".utf8)
        let kernel = randomBytes(1_500_000), initrd = randomBytes(2_500_001)
        rig.dir.write("ipxe.efi", efi)
        rig.dir.write("boot.ipxe", script)
        rig.dir.write("vmlinuz", kernel)
        rig.dir.write("initrd.img", initrd)
        let report = try run(rig, try #require(BootProfile.builtIn("uefi-ipxe")), machines: 6, backend: backend)
        #expect(report.ok == 6 && report.failed == 0, "\(report.text)")
        #expect(report.stages.map(\.ok) == [6, 6, 6, 6, 6, 6])
        #expect(report.stages[2].notFound == 6)  // autoexec.ipxe, over TFTP
        #expect(report.stages[3].bytes == 6 * script.count && report.stages[4].bytes == 6 * kernel.count
                && report.stages[5].bytes == 6 * initrd.count)
        #expect(report.bytes == 6 * (efi.count + script.count + kernel.count + initrd.count))
        #expect(report.stages[5].durations.count == 6)
        // One connection per machine, kept from the script to the initrd: the loop accepted six
        // and served 18 GETs on them.
        #expect(rig.http!.loops[0].accepted == 6)
        #expect(rig.http!.loops[0].metrics.requests(.get, .served) == 18)
    }

    @Test func aWrongByteOverHTTPFailsThatStage() throws {
        let rig = try Rig(backend: try GlibcBackend(), http: true)
        let kernel = randomBytes(700_000)
        rig.dir.write("vmlinuz", kernel)
        var wrong = kernel
        wrong[654_321] ^= 0x40
        let profile = try BootProfile(parsing: "profile p\nfirmware f retry=100ms tries=2\nhttp GET vmlinuz")
        let report = try run(rig, profile, machines: 3) { $0.verifyRoot = nil; $0.expected["vmlinuz"] = wrong }
        #expect(report.failuresByKind == ["corrupted": 3] && report.stages[0].failed == 3, "\(report.text)")
        #expect(report.failureExamples.first?.contains("byte 654321") == true, "\(report.failureExamples)")
    }

    @Test func aFollowStageRunsItsScriptAsIPXEDoesEveryByteCompared() throws {
        let rig = try Rig(backend: try GlibcBackend(), http: true)
        let first = Array("#!ipxe\necho hello\nchain --replace scripts/second.ipxe\nkernel never\n".utf8)
        let second = Array("#!ipxe\n# the machine's\nkernel /linux/vmlinuz initrd=initrd.img quiet\ninitrd initrd.img\nboot\n".utf8)
        let kernel = randomBytes(300_000), initrd = randomBytes(500_001)
        for directory in ["scripts", "linux"] { mkdir(rig.dir.path + "/" + directory, 0o755) }
        rig.dir.write("boot.ipxe", first)
        rig.dir.write("scripts/second.ipxe", second)
        rig.dir.write("linux/vmlinuz", kernel)
        rig.dir.write("scripts/initrd.img", initrd)
        let profile = try BootProfile(parsing: "profile p\nfirmware f retry=100ms tries=2\nhttp GET boot.ipxe follow")
        #expect(profile.stages[0].follows && profile.stages[0].label == "f http GET boot.ipxe follow")
        let report = try run(rig, profile, machines: 4)
        #expect(report.ok == 4 && report.failed == 0, "\(report.text)")
        #expect(report.stages[0].bytes == 4 * (first.count + second.count + kernel.count + initrd.count), "\(report.text)")
        #expect(rig.http!.loops[0].metrics.requests(.get, .served) == 16)
        // Every byte: a wrong one in the initrd fails the machine.
        var wrong = initrd
        wrong[400_000] ^= 1
        let corrupted = try run(rig, profile, machines: 2) { $0.expected["scripts/initrd.img"] = wrong }
        #expect(corrupted.failuresByKind == ["corrupted": 2], "\(corrupted.text)")
        // What its record names (storm --machines): another kernel fails it.
        let other = try run(rig, profile, machines: 1) { plan in
            plan.machineBoots[MachineIdentity(number: 0).mac] = PlannedBoot(kernel: "linux/vmlinuz-rescue", initrds: ["scripts/initrd.img"])
        }
        #expect(other.failed == 1 && other.failureExamples.first?.contains("names kernel linux/vmlinuz") == true, "\(other.failureExamples)")
        let same = try run(rig, profile, machines: 1) { plan in
            plan.machineBoots[MachineIdentity(number: 0).mac] = PlannedBoot(kernel: "http://10.0.0.1/linux/vmlinuz", initrds: ["scripts/initrd.img"])
        }
        #expect(same.ok == 1, "\(same.text)")
        // A script that says exit, and one that chains itself for ever.
        rig.dir.write("boot.ipxe", Array("#!ipxe\nexit\n".utf8))
        let exits = try run(rig, profile, machines: 1)
        #expect(exits.failed == 1 && exits.failureExamples.first?.contains("says exit") == true, "\(exits.failureExamples)")
        rig.dir.write("boot.ipxe", Array("#!ipxe\nsleep 1\nchain boot.ipxe\n".utf8))
        let loops = try run(rig, profile, machines: 1)
        #expect(loops.failed == 1 && loops.failureExamples.first?.contains("more than 8 scripts") == true, "\(loops.failureExamples)")
    }

    @Test(arguments: BackendKind.allCases)
    func anAutoexecFoundIsRunInPlaceOfTheRestOfTheChain(_ backend: BackendKind) throws {
        // iPXE 2.0 runs the autoexec.ipxe beside itself instead of its own DHCP and the script
        // that names: its paths over TFTP (as the script came), its http:// URLs over HTTP.
        let rig = try Rig(backend: try GlibcBackend(), http: true)
        let http = try #require(rig.http?.boundAddresses[0])
        let efi = randomBytes(100_000), kernel = randomBytes(300_000), initrd = randomBytes(500_001)
        let autoexec = Array("#!ipxe\nkernel /linux/vmlinuz quiet\ninitrd http://\(http)/initrd.img\nboot\n".utf8)
        mkdir(rig.dir.path + "/linux", 0o755)
        rig.dir.write("ipxe.efi", efi)
        rig.dir.write("autoexec.ipxe", autoexec)
        rig.dir.write("linux/vmlinuz", kernel)
        rig.dir.write("initrd.img", initrd)
        let chain = try #require(BootProfile.builtIn("uefi-ipxe"))
        #expect(chain.stages[2].label == "ipxe try autoexec.ipxe follow")
        let report = try run(rig, chain, machines: 3, backend: backend)
        #expect(report.ok == 3 && report.failed == 0, "\(report.text)")
        #expect(report.stages.map(\.ok) == [3, 3, 3, 0, 0, 0], "\(report.text)")
        #expect(report.stages[2].bytes == 3 * (autoexec.count + kernel.count + initrd.count), "\(report.text)")
        #expect(rig.http!.loops[0].metrics.requests(.get, .served) == 3)  // the initrds; no boot.ipxe
        // A file the script names that is not there fails the machine, though the stage's own
        // name may be missing.
        rig.dir.write("autoexec.ipxe", Array("#!ipxe\nkernel /linux/missing\nboot\n".utf8))
        let missing = try run(rig, chain, machines: 1, backend: backend)
        #expect(missing.failed == 1 && missing.stages[2].failed == 1, "\(missing.text)")
    }

    @Test func aMissingFileIsTheServers404() throws {
        let rig = try Rig(backend: try GlibcBackend(), http: true)
        rig.dir.write("boot.ipxe", randomBytes(100))
        let profile = try BootProfile(parsing: "profile p\nfirmware f retry=100ms tries=2\nhttp GET boot.ipxe\nhttp GET vmlinuz")
        let report = try run(rig, profile, machines: 2)
        #expect(report.failuresByKind == ["HTTP status 404": 2] && report.stages[0].ok == 2 && report.stages[1].failed == 2,
                "\(report.text)")
    }

    @Test func aConnectionTheServerClosedWhileIdleIsOpenedAgain() throws {
        // The server closes connections idle for 1 s; each machine's TFTP stage holds its first
        // ACK 2.5 s, so its kept connection is gone when its next http stage asks on it.
        let rig = try Rig(backend: try GlibcBackend(), http: true, httpIdleTimeout: nanosecondsPerSecond)
        for name in ["boot.ipxe", "vmlinuz", "initrd.img"] { rig.dir.write(name, randomBytes(20_000)) }
        let profile = try BootProfile(parsing: """
            profile p
            firmware f retry=1s tries=5
            http GET boot.ipxe
            get vmlinuz blksize=1024
            http GET initrd.img
            """)
        let started = stampede_monotonic_ns()
        let report = try run(rig, profile, machines: 2) { $0.hold = 2_500_000_000 }
        #expect(report.ok == 2 && report.failed == 0, "\(report.text)")
        #expect(report.stages[2].bytes == 2 * 20_000)
        #expect(stampede_monotonic_ns() - started >= 2_500_000_000)
        #expect(rig.http!.loops[0].metrics.requests(.get, .served) == 4)
        // Two connections per machine: the server did close the first, and the storm opened another.
        #expect(rig.http!.loops[0].accepted == 4)
    }

    @Test func aServerThatNeverAnswersTimesOutAfterTheFirmwaresPatience() throws {
        let rig = try Rig(backend: try GlibcBackend())
        // A listener nobody accepts from: the connection completes in its backlog, the request
        // is written, and no byte comes back.
        var listen = SocketAddress(parsing: "127.0.0.1:0", defaultPort: 0)!
        let silent = stampede_tcp_listener(&listen.storage, 16)
        try #require(silent >= 0)
        defer { close(silent) }
        var bound = SocketAddress()
        _ = stampede_socket_address(silent, &bound.storage)
        let profile = try BootProfile(parsing: "profile p\nfirmware f retry=50ms tries=2 backoff=1\nhttp GET boot.ipxe")
        let started = stampede_monotonic_ns()
        let report = try run(rig, profile, machines: 2) { $0.httpServer = bound }
        #expect(report.failuresByKind == ["timed out": 2], "\(report.text)")
        #expect(stampede_monotonic_ns() - started >= 95_000_000)  // two tries of 50 ms
    }

    @Test func aClosedPortIsASocketError() throws {
        let rig = try Rig(backend: try GlibcBackend())
        var listen = SocketAddress(parsing: "127.0.0.1:0", defaultPort: 0)!
        let probe = stampede_tcp_listener(&listen.storage, 1)
        var bound = SocketAddress()
        _ = stampede_socket_address(probe, &bound.storage)
        close(probe)  // a port nothing listens on now
        let profile = try BootProfile(parsing: "profile p\nfirmware f retry=50ms tries=2\nhttp GET boot.ipxe")
        let report = try run(rig, profile, machines: 2) { $0.httpServer = bound }
        #expect(report.failed == 2 && report.failuresByKind.keys.allSatisfy { $0.hasPrefix("socket error") }, "\(report.text)")
    }
}
