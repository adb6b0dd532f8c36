import StampedeDHCP
import StampedeTestSupport
import Glibc
import Synchronization
import Testing
@testable import StampedeMachines

@Suite struct MachineRecordGrammar {
    func parse(_ text: String, file: String = "node07") -> Result<MachineRecord?, RecordFaults> {
        parse(Array(text.utf8), file: file)
    }

    func parse(_ bytes: [UInt8], file: String = "node07") -> Result<MachineRecord?, RecordFaults> {
        Result { () throws(RecordFaults) in try MachineRecord.parse(bytes, file: file) }
    }

    @Test func aRecordSaysWhatItSelectsAndWhatTheyDo() throws {
        let record = try #require(try parse("""
            # node 7 of rack 1
            mac = 52:54:00:12:34:56
            mac = 52-54-00-AB-CD-EF
            uuid = 4C4C4544-0031-3510-8052-B4C04F4C4E31

            arch = efi-arm64
            arch = 10
            action = boot
            boot-file = efi-x64=installers/node07.efi
            boot-file = ipxe=http://10.0.0.1/node07.ipxe#x
            """).get())
        #expect(record.name == "node07")
        #expect(record.selectors.map(\.selector) == [.hardwareAddress([0x52, 0x54, 0, 0x12, 0x34, 0x56]), .hardwareAddress([0x52, 0x54, 0, 0xab, 0xcd, 0xef]),
                                                     .uuid("4c4c4544-0031-3510-8052-b4c04f4c4e31"), .firmware(.efiArm64), .architecture(10)])
        #expect(record.selectors.map(\.line) == [2, 3, 4, 6, 7])
        #expect(record.action == .boot)
        // The value is all that follows the first "=", a "#" in it too.
        #expect(record.bootFiles == [.efiX64: .file("installers/node07.efi"), .ipxe: .url("http://10.0.0.1/node07.ipxe#x")])
    }

    /// Every fault is named with its file and line, all of them at once.
    @Test func everyFaultNamesItsFileAndLine() throws {
        let faults = parse("""
            mac = 52:54:00:12:34
            uuid = not-a-uuid
            arch = ipxe
            colour = blue
            action = reboot
            action = local
            boot-file = efi-x64=http://10.0.0.1/ipxe.efi
            default = maybe
            just words
            """, file: "/srv/machines/node07")
        guard case .failure(let found) = faults else {
            Issue.record("accepted: \(faults)")
            return
        }
        #expect(found.errors.map(\.description) == [
            "/srv/machines/node07:1: mac 52:54:00:12:34: not a hardware address like 52:54:00:12:34:56",
            "/srv/machines/node07:2: uuid not-a-uuid: not a UUID like 4c4c4544-0031-3510-8052-b4c04f4c4e31",
            "/srv/machines/node07:3: arch ipxe: not one of bios, efi-x86, efi-x64, efi-arm32, efi-arm64, efi-riscv64, efi-loongarch64, uboot-arm32, uboot-arm64, rpi, http-x86, http-x64, http-arm32, http-arm64, http-riscv64, http-loongarch64, nor an architecture number (0-65535)",
            "/srv/machines/node07:4: unknown key \"colour\" (a record takes mac, uuid, arch, default, action, once, boot-file, kernel, initrd, cmdline, script, var NAME)",
            "/srv/machines/node07:5: action reboot: one of boot, local, ignore",
            "/srv/machines/node07:6: action said again (first on line 5)",
            "/srv/machines/node07:7: boot-file efi-x64=http://10.0.0.1/ipxe.efi: a PXE firmware loads a file over TFTP, not a URL: name the file",
            "/srv/machines/node07:8: default maybe: yes or no",
            "/srv/machines/node07:9: not key = value",
        ])
    }

    @Test func aRecordMustSelectAMachineAndOfferOnlyWhatItBoots() {
        #expect(parse("action = ignore\n") == .failure(RecordFaults([RecordError(file: "node07", line: 0, "selects no machine: give it a mac, uuid or arch, or default = yes")])))
        #expect(parse("mac = 52:54:00:12:34:56\naction = local\nboot-file = bios=pxelinux.0\n")
                    == .failure(RecordFaults([RecordError(file: "node07", line: 3, "boot-file in a record whose action is local: nothing would offer it")])))
        #expect(parse("mac = 52:54:00:12:34:56\nmac = \n") == .failure(RecordFaults([RecordError(file: "node07", line: 2, "mac: the value is empty or holds a control character")])))
        #expect(parse([0x6d, 0xff]) == .failure(RecordFaults([RecordError(file: "node07", line: 0, "not UTF-8 text")])))
        // An emptied file (as Ironic leaves one) selects nothing, and is no fault.
        #expect(parse("\n# nothing\n") == .success(nil))
    }

    /// Ironic's PXE filter writes dnsmasq hosts files, one per MAC: read as they are.
    @Test func ironicsHostsFilesAreReadAsTheyAre() throws {
        let allowed = try #require(try parse("de:ad:be:ef:de:ad\n", file: "de-ad-be-ef-de-ad").get())
        #expect(allowed.selectors.map(\.selector) == [.hardwareAddress([0xde, 0xad, 0xbe, 0xef, 0xde, 0xad])] && allowed.action == .boot)
        let denied = try #require(try parse("de:ad:be:ef:de:ad,ignore\n").get())
        #expect(denied.action == .ignore)
        let unknown = try #require(try parse("*:*:*:*:*:*,ignore\n", file: "unknown_hosts_filter").get())
        #expect(unknown.selectors.map(\.selector) == [.everyMachine] && unknown.action == .ignore)
        #expect(parse("de:ad:be:ef:de:ad,set:ironic\n") == .failure(RecordFaults([RecordError(file: "node07", line: 1,
                                                                                 "of a hosts file's line only MAC and MAC,ignore are read, not de:ad:be:ef:de:ad,set:ironic")])))
        #expect(parse("de:ad:be:ef:de:ad\nde:ad:be:ef:de:ae\n") == .failure(RecordFaults([RecordError(file: "node07", line: 2, "a hosts file (MAC or MAC,ignore) holds one line")])))
    }
}

@Suite struct MachineBookChoices {
    let network = BootMenu.withDefaults([:], httpBase: nil)
    let mac: [UInt8] = [0x52, 0x54, 0, 0x12, 0x34, 0x56]

    func record(_ name: String, _ selectors: [MachineRecord.Selector], _ action: MachineRecord.Action = .boot,
                bootFiles: [BootSelector: BootTarget] = [:]) -> MachineRecord {
        MachineRecord(name: name, selectors: selectors.enumerated().map { ($1, $0 + 1) }, action: action, bootFiles: bootFiles)
    }

    func machine(_ address: [UInt8], uuid: String? = nil, firmware: BootSelector? = .efiX64, architecture: UInt16 = 7) -> MachineIdentity {
        MachineIdentity(hardwareAddress: address, uuid: uuid, firmware: firmware, architecture: architecture)
    }

    /// The hardware address first, then the UUID, then the architecture, then the default.
    @Test func theMostParticularRecordIsTheMachines() throws {
        let book = try MachineBook([
            record("by-mac", [.hardwareAddress(mac)], bootFiles: [.efiX64: .file("mac.efi")]),
            record("by-uuid", [.uuid("4c4c4544-0031-3510-8052-b4c04f4c4e31")], .local),
            record("arm", [.firmware(.efiArm64)], bootFiles: [.efiArm64: .file("grubaa64.efi")]),
            record("arch-10", [.architecture(10)], .ignore),
            record("rest", [.everyMachine], .ignore),
        ])
        let uuid = "4c4c4544-0031-3510-8052-b4c04f4c4e31"
        #expect(book.record(for: machine(mac, uuid: uuid))?.name == "by-mac")
        #expect(book.record(for: machine([1, 2, 3, 4, 5, 6], uuid: uuid))?.name == "by-uuid")
        #expect(book.record(for: machine([1, 2, 3, 4, 5, 6], firmware: .efiArm64, architecture: 11))?.name == "arm")
        #expect(book.record(for: machine([1, 2, 3, 4, 5, 6], firmware: nil, architecture: 10))?.name == "arch-10")
        #expect(book.record(for: machine([1, 2, 3, 4, 5, 6]))?.name == "rest")

        guard case .boot(let menu) = book.choice(for: machine(mac), over: network) else {
            Issue.record("by-mac does not boot")
            return
        }
        // The record's boot files over the network's menu.
        #expect(menu.target(for: .efiX64) == .file("mac.efi") && menu.target(for: .bios) == .file("undionly.kpxe"))
        #expect(book.choice(for: machine([1, 2, 3, 4, 5, 6], uuid: uuid), over: network) == .leaveAlone(.local(record: "by-uuid")))
        #expect(book.choice(for: machine([1, 2, 3, 4, 5, 6]), over: network) == .leaveAlone(.ignored(record: "rest")))
    }

    @Test func aMachineNoRecordSelectsIsLeftAloneUnlessTheOperatorSaysBoot() throws {
        let records = [record("node07", [.hardwareAddress(mac)])]
        #expect(try MachineBook(records).choice(for: machine([1, 2, 3, 4, 5, 6]), over: network) == .leaveAlone(.unknown))
        #expect(try MachineBook(records, unknown: .boot).choice(for: machine([1, 2, 3, 4, 5, 6]), over: network) == .boot(network))
        #expect(try MachineBook([]).choice(for: machine(mac), over: network) == .leaveAlone(.unknown))
    }

    /// Two records that select one thing: refused, both named with their lines.
    @Test func twoRecordsForOneMachineAreRefusedNamingBoth() {
        #expect(throws: RecordFaults([RecordError(file: "b", line: 2, "mac 52:54:00:12:34:56 is selected by a:1 too"),
                                                  RecordError(file: "c", line: 1, "default is selected by a:2 too")])) {
            try MachineBook([record("a", [.hardwareAddress(mac), .everyMachine]),
                             record("b", [.uuid("4c4c4544-0031-3510-8052-b4c04f4c4e31"), .hardwareAddress(mac)]),
                             record("c", [.everyMachine])])
        }
    }

    /// A directory read whole: editors' files passed over, every fault of every file told.
    @Test func aDirectoryIsReadWholeOrRefusedWithEveryFault() throws {
        let dir = ScratchDirectory()
        _ = dir.write("node07", Array("mac = 52:54:00:12:34:56\n".utf8))
        _ = dir.write("de-ad-be-ef-de-ad", Array("de:ad:be:ef:de:ad,ignore\n".utf8))
        _ = dir.write("node07~", Array("not a record\n".utf8))
        _ = dir.write(".node07.swp", Array("not a record\n".utf8))
        let book = try MachineDirectory(dir.path).read(unknown: .ignore)
        #expect(book.records.map(\.name) == [dir.path + "/de-ad-be-ef-de-ad", dir.path + "/node07"])
        #expect(book.choice(for: machine([0xde, 0xad, 0xbe, 0xef, 0xde, 0xad]), over: network) == .leaveAlone(.ignored(record: dir.path + "/de-ad-be-ef-de-ad")))

        _ = dir.write("node08", Array("mac = 52:54:00:12:34:56\nsize = 3\n".utf8))
        _ = dir.write("node09", Array("mac = 52:54:00:12:34:5\n".utf8))
        #expect(throws: RecordFaults([RecordError(file: dir.path + "/node08", line: 2, "unknown key \"size\" (a record takes mac, uuid, arch, default, action, once, boot-file, kernel, initrd, cmdline, script, var NAME)"),
                                                  RecordError(file: dir.path + "/node09", line: 1, "mac 52:54:00:12:34:5: not a hardware address like 52:54:00:12:34:56")])) {
            try MachineDirectory(dir.path).read(unknown: .ignore)
        }
        #expect(throws: RecordFaults([RecordError(file: "/nonexistent", line: 0, "cannot read the directory: No such file or directory")])) {
            try MachineDirectory("/nonexistent")
        }
    }
}

/// The directory watched while serving: a change is read within moments, a bad one refused whole
/// with the set before kept, a removed record's machine unknown again.
@Suite struct RecordsWatched {
    final class Outcomes: @unchecked Sendable {
        private let lock = Mutex<[Result<MachineBook, RecordFaults>]>([])
        private let written = Mutex<[String?]>([])
        func add(_ event: RecordWatch.Event) {
            switch event {
            case .reloaded(let outcome): lock.withLock { $0.append(outcome) }
            case .enlisted(_, let path): written.withLock { $0.append(path) }
            case .enlistFailed(let machine, let error): Issue.record("\(machine.fileName): \(error)")
            case .markedDone(let mac, let outcome): Issue.record("\(mac) marked done: \(outcome)")
            }
        }
        var all: [Result<MachineBook, RecordFaults>] { lock.withLock { $0 } }
        var paths: [String?] { written.withLock { $0 } }

        /// Waits up to 5 s for the `count`th outcome.
        func await(_ count: Int) -> Result<MachineBook, RecordFaults>? {
            for _ in 0..<500 where all.count < count { usleep(10_000) }
            return all.count >= count ? all[count - 1] : nil
        }
    }

    @Test func aChangeIsReadWhileServingAndABadOneRefusedWhole() throws {
        let dir = ScratchDirectory()
        let node07: [UInt8] = [0x52, 0x54, 0, 0x12, 0x34, 0x07]
        let node08: [UInt8] = [0x52, 0x54, 0, 0x12, 0x34, 0x08]
        _ = dir.write("node07", Array("mac = 52:54:00:12:34:07\n".utf8))
        let records = try MachineRecords(try MachineDirectory(dir.path), unknown: .ignore)
        let watch = try RecordWatch(records)
        let outcomes = Outcomes()
        let stop = Atomic<Bool>(false)
        let thread = watch.start(stopping: { stop.load(ordering: .relaxed) }, report: outcomes.add)
        defer {
            stop.store(true, ordering: .relaxed)
            thread.join()
        }
        let who = { (mac: [UInt8]) in records.current.record(for: MachineIdentity(hardwareAddress: mac))?.name }
        #expect(who(node07) == dir.path + "/node07" && who(node08) == nil)

        _ = dir.write("node08", Array("mac = 52:54:00:12:34:08\naction = local\n".utf8))
        #expect(try outcomes.await(1)?.get().records.count == 2)
        #expect(who(node08) == dir.path + "/node08")

        _ = dir.write("node09", Array("mac = 52:54:00:12:34:07\n".utf8))
        guard case .failure(let faults) = outcomes.await(2) else {
            Issue.record("a second record for node07 was taken: \(outcomes.all)")
            return
        }
        #expect(faults.errors == [RecordError(file: dir.path + "/node09", line: 1, "mac 52:54:00:12:34:07 is selected by \(dir.path)/node07:1 too")])
        #expect(who(node07) == dir.path + "/node07" && who(node08) == dir.path + "/node08", "the set before was not kept")

        unlink(dir.path + "/node09")
        unlink(dir.path + "/node08")
        #expect(try outcomes.await(3)?.get().records.count == 1)
        #expect(who(node08) == nil)
    }
}

@Suite struct DiscoveredMachines {
    let stranger = MachineIdentity(hardwareAddress: [0x52, 0x54, 0, 0x12, 0x34, 0x99], uuid: "01020304-0506-0708-090a-0b0c0d0e0f10",
                                   firmware: .efiX64, architecture: 7)

    /// The record written is one the grammar reads back: it ignores the machine, by its MAC and UUID.
    @Test func aDiscoveredMachinesRecordIgnoresItAndReadsBack() throws {
        let found = DiscoveredMachine(identity: stranger, said: "DISCOVER on eth1, vendor class PXEClient:Arch:00007\nmac = 00:00:00:00:00:00", seen: 1_795_000_000)
        #expect(found.fileName == "discovered-52-54-00-12-34-99")
        #expect(found.text == """
            # Discovered 2026-11-18T11:06:40Z: no record selected this machine when it asked to boot.
            # Its request: DISCOVER on eth1, vendor class PXEClient:Arch:00007mac = 00:00:00:00:00:00, architecture 7 (efi-x64).
            # It is left alone: say action = boot (or local) to let it boot.
            mac = 52:54:00:12:34:99
            uuid = 01020304-0506-0708-090a-0b0c0d0e0f10
            action = ignore

            """)
        let record = try #require(try MachineRecord.parse(Array(found.text.utf8), file: found.fileName))
        #expect(record.action == .ignore)
        #expect(record.selectors.map(\.selector) == [.hardwareAddress(stranger.hardwareAddress), .uuid("01020304-0506-0708-090a-0b0c0d0e0f10")])
    }

    /// Enlisted once per machine, written by the watch's thread, and an operator's file of the
    /// same name never replaced; the directory read again holds it.
    @Test func aMachineIsWrittenOnceAndNothingIsReplaced() throws {
        let dir = ScratchDirectory()
        let records = try MachineRecords(try MachineDirectory(dir.path), unknown: .record)
        #expect(records.current.choice(for: stranger, over: BootMenu([:])) == .leaveAlone(.discovered))
        let watch = try RecordWatch(records)
        let outcomes = RecordsWatched.Outcomes()
        let stop = Atomic<Bool>(false)
        let thread = watch.start(stopping: { stop.load(ordering: .relaxed) }, report: outcomes.add)
        defer {
            stop.store(true, ordering: .relaxed)
            thread.join()
        }
        let found = DiscoveredMachine(identity: stranger, said: "DISCOVER on eth1", seen: 0)
        #expect(records.enlist(found))
        #expect(!records.enlist(found), "enlisted twice")
        #expect(try outcomes.await(1)?.get().records.map(\.name) == [dir.path + "/discovered-52-54-00-12-34-99"])
        #expect(outcomes.paths == [dir.path + "/discovered-52-54-00-12-34-99"])
        #expect(records.current.choice(for: stranger, over: BootMenu([:])) == .leaveAlone(.ignored(record: dir.path + "/discovered-52-54-00-12-34-99")))
        #expect(dir.entries().sorted() == [".stampede-key", "discovered-52-54-00-12-34-99"], "a temporary file was left")

        // An operator's file of that name is never replaced.
        let other = MachineIdentity(hardwareAddress: [0x52, 0x54, 0, 0x12, 0x34, 0x98])
        let mine = Array("mac = 52:54:00:12:34:98\naction = boot\n".utf8)
        _ = dir.write("discovered-52-54-00-12-34-98", mine)
        _ = outcomes.await(2)
        #expect(records.enlist(DiscoveredMachine(identity: other, said: "DISCOVER on eth1", seen: 0)))
        for _ in 0..<500 where outcomes.paths.count < 2 { usleep(10_000) }
        #expect(outcomes.paths.last == .some(nil))
        #expect(dir.read("discovered-52-54-00-12-34-98") == mine)
    }
}
