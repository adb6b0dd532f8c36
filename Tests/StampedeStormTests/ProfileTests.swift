import CStampedeSys
import Glibc
import StampedeBase
import StampedeGlibc
import StampedeHTTPWire
import StampedeIO
import StampedeProtocol
@testable import StampedeStorm
import StampedeTestSupport
import Testing

@Suite struct ProfileParsing {
    @Test func everyBuiltInProfileParsesAndNamesItself() throws {
        for name in BootProfile.builtInNames {
            let profile = try #require(BootProfile.builtIn(name))
            #expect(profile.name == name)
            #expect(!profile.stages.isEmpty)
            // Every firmware starts over when its boot failed (see BuiltInProfiles).
            #expect(profile.reboots == 3 && profile.rebootDelay == 5 * nanosecondsPerSecond)
        }
        #expect(Set(BootProfile.builtInNames) == Set(BootProfile.builtInTexts.keys))
    }

    @Test func uefiProbesThenReadsWithEDK2sOptionsAndPatience() throws {
        let uefi = try #require(BootProfile.builtIn("uefi"))
        #expect(uefi.stages.map(\.action) == [.probe, .get])
        #expect(uefi.stages[0].options.map { "\($0.name)=\($0.value)" } == ["tsize=0", "blksize=1468", "windowsize=4"])
        #expect(uefi.stages[1].options.map { "\($0.name)=\($0.value)" } == ["blksize=1468", "windowsize=4"])
        #expect(uefi.stages[0].retransmit == 4 * nanosecondsPerSecond)
        #expect(uefi.stages[0].retries == 5 && uefi.stages[0].maxBackoff == 1)
        #expect(uefi.stages.filter { !$0.answersBlocksOutOfOrder }.isEmpty)
        let plan = uefi.stages[1].plan(name: 0, for: MachineIdentity(number: 0))
        #expect(plan.answersBlocksOutOfOrder)
        let ipxe = try #require(BootProfile.builtIn("ipxe"))
        #expect(ipxe.stages.filter(\.answersBlocksOutOfOrder).isEmpty)
        #expect(throws: BootProfile.ParseError(line: 2, message: "unexpected=often: ack or wait")) {
            try BootProfile(parsing: "profile p\nfirmware f unexpected=often\nget x")
        }
    }

    @Test func theChainSwitchesFirmwareAndPatienceMidway() throws {
        let chain = try #require(BootProfile.builtIn("uefi-ipxe"))
        #expect(chain.stages.map(\.firmware) == ["uefi", "uefi", "ipxe", "ipxe", "ipxe", "ipxe"])
        #expect(chain.stages[2].action == .tryGet && chain.stages[2].names == ["autoexec.ipxe"])
        #expect(chain.stages[2].retransmit == 250_000_000 && chain.stages[2].maxBackoff == 40)
    }

    @Test func aProfileOfOnesOwn() throws {
        let profile = try BootProfile(parsing: """
            # a comment, then blank lines

            profile lab   # trailing comment
            firmware rom retry=1.5s tries=3 backoff=2
            first cfg/${mac:hexhyp} cfg/default blksize=512 tsize
            head 100 kernel timeout=2
            """)
        #expect(profile.name == "lab")
        #expect(profile.stages[0].names == ["cfg/${mac:hexhyp}", "cfg/default"])
        #expect(profile.stages[0].options.map(\.value) == ["512", "0"])
        #expect(profile.stages[1].action == .head(bytes: 100))
        #expect(profile.stages[1].retransmit == 1_500_000_000 && profile.stages[1].retries == 2)
    }

    @Test(arguments: [
        ("firmware x\nget a", "line 1: no profile line"),  // found at the end, said of line 1
        ("profile p\nget a", "line 2: get before any firmware"),
        ("profile p\nfirmware f\nget a blksize=7", "line 3: blksize=7: blksize takes 8 to 65464"),
        ("profile p\nfirmware f\nget a windowsize=40000", "windowsize takes 1 to 32767"),
        ("profile p\nfirmware f\nget a colour=blue", "colour: not an option"),
        ("profile p\nfirmware f\nget a b", "takes one name"),
        ("profile p\nfirmware f\nget blksize=512 a", "names come before the options"),
        ("profile p\nfirmware f\nget ${hostname}", "unknown ${...}"),
        ("profile p\nfirmware f\nget a\nreboot", "reboot takes a count"),
        ("profile p\nfirmware f\nget a\nreboot 2 after=1h", "line 4: after=1h: write after=500ms"),
        ("profile p\nfirmware f\nget a\nreboot 2 soon", "soon: write after="),
        ("profile p\nfirmware f\nget a\nreboot 1\nreboot 2", "line 5: a second reboot line"),
        ("profile p\nfirmware f retry=0s\nget a", "retry=0s"),
        ("profile p\nfirmware f tries=0\nget a", "tries=0"),
        ("profile p\nfirmware f\nhead x a", "byte count"),
        ("profile p\nfirmware f\nfetch a", "fetch: not a directive"),
        ("profile p\nfirmware f\nhttp GET", "http takes GET and one name"),
        ("profile p\nfirmware f\nhttp POST a", "http takes GET and one name"),
        ("profile p\nfirmware f\nhttp GET a blksize=1024", "http takes GET and one name"),
        ("profile p\nfirmware f\nhttp GET https://10.0.0.1/a", "only http:// URLs"),
        ("profile p\nfirmware f\nhttp GET http://boot.example/a", "with an IP address"),
        ("profile p\nfirmware f\nhttp GET ${hostname}.ipxe", "unknown ${...}"),
        ("profile p\nhttp GET a", "http before any firmware line"),
        ("profile p\nfirmware f", "no stages"),
        ("profile p\nprofile q", "line 2: a second profile"),
    ])
    func badLinesAreRefusedWithTheirLine(_ text: String, _ expected: String) {
        do {
            let profile = try BootProfile(parsing: text)
            Issue.record("parsed: \(profile.name)")
        } catch {
            #expect(error.description.contains(expected), "\(error.description)")
        }
    }
}

@Suite struct MachineIdentities {
    @Test func theNamesFirmwareDerives() {
        let machine = MachineIdentity(number: 6)
        #expect(machine.expand("pxelinux.cfg/01-${mac:hexhyp}") == "pxelinux.cfg/01-52-54-00-00-00-07")
        #expect(machine.expand("${mac}") == "52:54:00:00:00:07")
        #expect(machine.expand("${ip} ${ip:hex} ${ip:hex:3} ${ip:hex:1}") == "10.0.0.7 0A000007 0A0 0")
        #expect(machine.expand("m${machine}.ipxe") == "m6.ipxe")
        let uuid = machine.uuidText
        #expect(uuid.count == 36 && uuid.split(separator: "-").map(\.count) == [8, 4, 4, 4, 12])
        #expect(uuid[uuid.index(uuid.startIndex, offsetBy: 14)] == "4")  // version 4
    }

    @Test func identitiesAreStableAndDistinct() {
        let machines = (0..<20_000).map(MachineIdentity.init)
        #expect(Set(machines.map(\.macText)).count == 20_000)
        #expect(Set(machines.map(\.ipHex)).count == 20_000)
        #expect(Set(machines.map(\.uuidText)).count == 20_000)
        #expect(MachineIdentity(number: 123).uuidText == MachineIdentity(number: 123).uuidText)
    }
}

/// Profiles played against a real worker (glibc) by a storm: what each stage does on the wire is
/// judged by the storm's verdicts and the server's own files.
@Suite(.serialized) struct ProfilesAgainstAServer {
    func run(_ rig: Rig<GlibcBackend>, _ profile: BootProfile, machines: Int, configure: (inout StormPlan) -> Void = { _ in })
        throws -> StormReport {
        var plan = StormPlan(server: rig.address, profile: profile)
        plan.clients = machines
        plan.verifyRoot = rig.dir.path
        configure(&plan)
        return rig.play(Storm(plan: plan, backend: try GlibcBackend()))
    }

    @Test func pxelinuxSearchesEachMachinesOwnNamesInOrder() throws {
        let rig = try Rig(backend: try GlibcBackend())
        mkdir(rig.dir.path + "/pxelinux.cfg", 0o755)
        for name in ["pxelinux.0", "ldlinux.c32", "vmlinuz", "initrd.img", "pxelinux.cfg/default"] { rig.dir.write(name, randomBytes(5000)) }
        // Machine 0 has a file by UUID, machine 1 by MAC, machine 2 (10.0.0.3) by its IP in hex;
        // machine 3 finds only the default.
        rig.dir.write("pxelinux.cfg/" + MachineIdentity(number: 0).uuidText, randomBytes(300))
        rig.dir.write("pxelinux.cfg/01-52-54-00-00-00-02", randomBytes(300))
        rig.dir.write("pxelinux.cfg/0A000003", randomBytes(300))
        let report = try run(rig, try #require(BootProfile.builtIn("pxelinux")), machines: 4)
        #expect(report.ok == 4 && report.failed == 0, "\(report.text)")
        let search = report.stages[2]
        // Misses: none for the UUID, 1 for the MAC, 2 for the hex IP, 10 before the default.
        #expect(search.ok == 4 && search.notFound == 0 + 1 + 2 + 10)
        #expect(report.bytes == 4 * 4 * 5000 + 3 * 300 + 5000)
    }

    @Test func aSearchThatFindsNothingFailsTheBootAtThatStage() throws {
        let rig = try Rig(backend: try GlibcBackend())
        rig.dir.write("pxelinux.0", randomBytes(700))
        rig.dir.write("ldlinux.c32", randomBytes(700))
        let report = try run(rig, try #require(BootProfile.builtIn("pxelinux")), machines: 2)
        #expect(report.ok == 0 && report.failed == 2)
        #expect(report.stages[2].failed == 2 && report.stages[2].notFound == 2 * 11)
        #expect(report.stages.dropFirst(3).allSatisfy { $0.ok == 0 && $0.failed == 0 })
        #expect(report.failuresByKind == ["server error 1": 2])
    }

    @Test func theUEFIProbeEndsAtTheOptionAckAndTheChainGoesOn() throws {
        let rig = try Rig(backend: try GlibcBackend())
        let efi = randomBytes(100_000)
        rig.dir.write("ipxe.efi", efi)
        rig.dir.write("boot.ipxe", Array("#!ipxe\nchain kernel\n".utf8))
        let chain = try #require(BootProfile.builtIn("uefi-ipxe-tftp"))
        let report = try run(rig, BootProfile(name: chain.name, stages: Array(chain.stages.prefix(4))), machines: 5)
        #expect(report.ok == 5 && report.failed == 0, "\(report.text)")
        #expect(report.stages[0].ok == 5 && report.stages[0].bytes == 0)  // the probe reads nothing
        #expect(report.stages[1].bytes == 5 * efi.count)
        #expect(report.stages[2].ok == 5 && report.stages[2].notFound == 5)  // autoexec.ipxe
        #expect(report.durations.count == 5)
    }

    @Test func grubReadsAHeaderClosesAndReadsAgain() throws {
        let rig = try Rig(backend: try GlibcBackend())
        mkdir(rig.dir.path + "/grub", 0o755)
        rig.dir.write("grub/grub.cfg", randomBytes(2000))
        let kernel = randomBytes(40_000)
        rig.dir.write("vmlinuz", kernel)
        rig.dir.write("initrd.img", randomBytes(9000))
        let report = try run(rig, try #require(BootProfile.builtIn("grub")), machines: 3)
        #expect(report.ok == 3, "\(report.text)")
        // The header read stops at 4096 bytes (4 blocks of 1024), then the whole kernel.
        #expect(report.stages[1].bytes == 3 * 4096 && report.stages[2].bytes == 3 * kernel.count)
        // The server heard "closed" and ended those transfers (and then the last ACKs): nothing
        // left running once it has read what the storm sent last.
        for _ in 0..<50 where rig.worker.activeTransfers > 0 { rig.worker.turn(now: stampede_monotonic_ns(), maxWait: 10_000_000) }
        #expect(rig.worker.activeTransfers == 0)
        // No transfer failed: "closed" is what GRUB meant; the config search's misses are
        // refused requests, not failed transfers.
        #expect(rig.worker.summary.failed == 0)
        #expect(rig.worker.summary.refused == 3 * 9 && rig.worker.summary.notFound == 3 * 9)
    }

    @Test func aWrongByteInAStageFailsThatStage() throws {
        let rig = try Rig(backend: try GlibcBackend())
        let efi = randomBytes(30_000)
        rig.dir.write("ipxe.efi", efi)
        let profile = try BootProfile(parsing: "profile p\nfirmware f retry=100ms tries=2\nget ipxe.efi blksize=1024")
        var wrong = efi
        wrong[12_345] ^= 1
        let report = try run(rig, profile, machines: 2) { $0.expected["ipxe.efi"] = wrong }
        #expect(report.failuresByKind == ["corrupted": 2] && report.stages[0].failed == 2)
    }

    @Test func aRampSpreadsThePowerOns() throws {
        let rig = try Rig(backend: try GlibcBackend())
        rig.dir.write("f", randomBytes(600))
        let profile = try BootProfile(parsing: "profile p\nfirmware f\nget f")
        let started = stampede_monotonic_ns()
        let report = try run(rig, profile, machines: 6) { $0.ramp = 300_000_000 }
        #expect(report.ok == 6)
        // The last machine powers on at 5/6 of the ramp.
        #expect(stampede_monotonic_ns() - started >= 250_000_000)
    }

    @Test func slicesShareOneRackWithoutOverlap() {
        var plan = StormPlan(server: SocketAddress(parsing: "127.0.0.1:69", defaultPort: 69)!,
                             profile: .single(file: "f", options: [], retransmit: nanosecondsPerSecond, retries: 1))
        plan.clients = 10
        var seen: [Int] = []
        for process in 0..<3 {
            var slice = plan
            slice.slice = (process, 3)
            for thread in 0..<2 {
                let part = slice.share(thread, of: 2)
                seen += (0..<(part.plannedTotal ?? 0)).map(part.machineNumber)
            }
        }
        #expect(seen.sorted() == Array(0..<10))
    }
}

/// Issue 21, defect 7: the storm checks what it reads, and keeps only what it checks against.
@Suite(.serialized) struct StormChecks {
    func storm(_ rig: Rig<GlibcBackend>, _ profile: BootProfile, machines: Int, verifyRoot: String?) throws -> Storm<GlibcBackend> {
        var plan = StormPlan(server: rig.address, profile: profile)
        plan.clients = machines
        plan.verifyRoot = verifyRoot
        return Storm(plan: plan, backend: try GlibcBackend())
    }

    /// EDK2 allocates what the probe's tsize says and fails when the file is another size.
    @Test func aSizeProbeWhoseTsizeIsNotTheFilesSizeFails() throws {
        let rig = try Rig(backend: try GlibcBackend())
        rig.dir.write("bootx64.efi", randomBytes(3000))
        let other = ScratchDirectory()
        other.write("bootx64.efi", randomBytes(4000))
        let probe = try #require(BootProfile.builtIn("uefi"))
        var first = probe
        first.stages.removeLast(first.stages.count - 1)
        let wrong = rig.play(try storm(rig, first, machines: 2, verifyRoot: other.path))
        #expect(wrong.ok == 0 && wrong.failed == 2, "\(wrong.text)")
        #expect(wrong.text.contains("wrong size"), "\(wrong.text)")
        let right = rig.play(try storm(rig, first, machines: 2, verifyRoot: rig.dir.path))
        #expect(right.ok == 2 && right.failed == 0, "\(right.text)")
    }

    @Test func withoutAVerifyRootNoNameIsKeptHoweverManyTheMachinesAskFor() throws {
        let rig = try Rig(backend: try GlibcBackend())
        mkdir(rig.dir.path + "/pxelinux.cfg", 0o755)
        for name in ["pxelinux.0", "ldlinux.c32", "vmlinuz", "initrd.img", "pxelinux.cfg/default"] { rig.dir.write(name, randomBytes(500)) }
        let pxelinux = try #require(BootProfile.builtIn("pxelinux"))
        let unchecked = try storm(rig, pxelinux, machines: 20, verifyRoot: nil)
        #expect(rig.play(unchecked).ok == 20)
        #expect(unchecked.knownFiles == 0)
        // With a root, one entry per name asked: the machines' own names (13 tries each), and the shared files.
        let checked = try storm(rig, pxelinux, machines: 20, verifyRoot: rig.dir.path)
        #expect(rig.play(checked).ok == 20)
        #expect(checked.knownFiles <= 20 * 13 + 5)
    }

    @Test func aFailedBootStartsOverAsItsFirmwareDoesAndTheExtraTimeIsReported() throws {
        let rig = try Rig(backend: try GlibcBackend())
        let profile = try BootProfile(parsing: """
            profile p
            firmware f retry=50ms tries=2
            try autoexec.ipxe
            get kernel blksize=1024
            reboot 2 after=200ms
            """)
        var plan = StormPlan(server: rig.address, profile: profile)
        plan.clients = 3
        plan.verifyRoot = rig.dir.path
        plan.reboot = true
        // The kernel is missing until the first boot has failed: every machine starts over once.
        let kernel = randomBytes(20_000)
        let report = rig.play(Storm(plan: plan, backend: try GlibcBackend())) { report in
            if report.reboots > 0 && access(rig.dir.path + "/kernel", F_OK) != 0 { rig.dir.write("kernel", kernel) }
        }
        #expect(report.ok == 3 && report.failed == 0, "\(report.text)")
        #expect(report.reboots >= 1 && report.rebootCausesByKind.keys.sorted() == ["server error 1"])
        #expect(report.rebootedDurations.count == report.reboots)
        // Started over from the first stage, after the delay; the boot time counts from the first power-on.
        #expect(report.stages[0].ok == 3 + report.reboots)
        #expect(report.rebootedDurations.allSatisfy { $0 >= 200_000_000 })
        #expect(report.stages[1].failed == report.reboots && report.transfersFailed == report.reboots)
        #expect(report.text.contains("machines booted after starting over"), "\(report.text)")
        #expect(report.json.contains("\"reboots\": \(report.reboots)"))
        #expect(report.failureExamples.isEmpty && report.rebootExamples.first?.contains("server error 1") == true, "\(report.rebootExamples)")
    }

    /// A rack's many reboots do not take the places of the few machines that failed in the
    /// examples a report describes.
    @Test func theMachinesThatFailedAreDescribedWhateverTheRebootsBeforeThem() throws {
        var report = StormReport(profile: try BootProfile(parsing: "profile p\nfirmware f\nget kernel\nreboot 2"))
        for _ in 0..<100 { report.recordReboot(.timedOut, stage: 0) }
        report.recordFailure(.protocolError("an OACK with blksize 9000, asked 1468"), stage: 0)
        #expect(report.rebootExamples.count == StormReport.examplesKept && report.failureExamples.count == 1)
        #expect(report.failureExamples.first?.hasSuffix("protocol error: an OACK with blksize 9000, asked 1468") == true)
        #expect(report.json.contains("\"failure_examples\": [\"") && report.json.contains("\"reboot_examples\": [\""))
        var merged = StormReport()
        merged.merge(report)
        #expect(merged.failureExamples == report.failureExamples && merged.rebootExamples == report.rebootExamples)
    }

    @Test func aBootThatNeverSucceedsFailsAfterItsLastRebootAndOnlyWithRebootAsked() throws {
        let rig = try Rig(backend: try GlibcBackend())
        let profile = try BootProfile(parsing: "profile p\nfirmware f retry=50ms tries=2\nget missing\nreboot 2 after=10ms")
        var plan = StormPlan(server: rig.address, profile: profile)
        plan.clients = 2
        let once = rig.play(Storm(plan: plan, backend: try GlibcBackend()))
        #expect(once.failed == 2 && once.reboots == 0 && once.stages[0].failed == 2)
        plan.reboot = true
        let report = rig.play(Storm(plan: plan, backend: try GlibcBackend()))
        #expect(report.ok == 0 && report.failed == 2, "\(report.text)")
        #expect(report.reboots == 2 * 2 && report.stages[0].failed == 3 * 2 && report.rebootedDurations.isEmpty)
        #expect(report.failuresByKind == ["server error 1": 2])
    }
}

@Suite struct IPXEScriptReading {
    @Test func theFilesAScriptNamesAreReadAsIPXERunsIt() throws {
        let script = try IPXEScript(Array("""
            #!ipxe
            # a comment
            :label
            echo kernel is not this
            set x y
            kernel --name k http://10.0.0.2/k.efi initrd=a.img quiet
            initrd --name a.img a.img
            imgfetch /abs/b.img
            module c.img
            boot
            kernel after-boot
            """.utf8), from: "http://10.0.0.1:8080/dir/boot.ipxe")
        #expect(script.fetches == [.kernel("http://10.0.0.2/k.efi"), .initrd("http://10.0.0.1:8080/dir/a.img"),
                                   .initrd("http://10.0.0.1:8080/abs/b.img"), .initrd("http://10.0.0.1:8080/dir/c.img")])
        #expect(!script.exits)
        let beside = try IPXEScript(Array("#!ipxe\nchain --autofree next.ipxe\nkernel never\n".utf8), from: "efi/boot.ipxe")
        #expect(beside.fetches == [.chain("efi/next.ipxe")])
        #expect(try IPXEScript(Array("#!ipxe\nexit\n".utf8), from: "boot.ipxe").exits)
        #expect(throws: IPXEScript.Unreadable.self) { try IPXEScript(Array("kernel x\n".utf8), from: "boot.ipxe") }
        #expect(throws: IPXEScript.Unreadable.self) { try IPXEScript(Array("#!ipxe\nkernel --name x\n".utf8), from: "boot.ipxe") }
        #expect(HTTPLocation.path(of: "http://10.0.0.1:8080/linux/vmlinuz") == "linux/vmlinuz" && HTTPLocation.path(of: "/a/b") == "a/b")
    }

    @Test func followEndsAnHTTPGetOrATFTPGetOrTry() throws {
        let profile = try BootProfile(parsing: "profile p\nfirmware f\nhttp GET boot.ipxe follow\nhttp GET x\ntry autoexec.ipxe tsize follow\nget y follow")
        #expect(profile.stages.map(\.follows) == [true, false, true, true])
        #expect(profile.stages[2].options.map(\.name) == ["tsize"] && profile.stages[2].label == "f try autoexec.ipxe follow")
        for line in ["http GET boot.ipxe chase", "probe x follow", "first a b follow", "get x follow tsize"] {
            #expect(throws: BootProfile.ParseError.self, "\(line)") { try BootProfile(parsing: "profile p\nfirmware f\n\(line)") }
        }
        let builtIn = try #require(BootProfile.builtIn("uefi-ipxe-follow"))
        #expect(builtIn.stages.last?.label == "ipxe http GET boot.ipxe follow")
    }
}
