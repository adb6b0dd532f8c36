import Glibc
import StampedeDHCP
import StampedeFiles
import StampedeIO
import StampedeTestSupport
import Synchronization
import Testing
@testable import StampedeMachines

/// Boot once: a machine reports its boot done with its done URL's token; from then on it is left
/// alone (DHCP silent, its loader told to exit), and the directory says so after a restart.
@Suite struct BootOnce {
    let node07: [UInt8] = [0x52, 0x54, 0, 0x12, 0x34, 0x07]

    /// SipHash-2-4's reference vector (the paper's appendix: key 00..0f, message 00..0e).
    @Test func theTokensAreSipHashUnderTheDirectorysKey() throws {
        let key0 = UInt64(0x0706_0504_0302_0100), key1 = UInt64(0x0f0e_0d0c_0b0a_0908)
        #expect(DoneTokens.sipHash(Array(0..<15), key0, key1) == 0xa129_ca61_49be_45e5)
        #expect(DoneTokens.sipHash([], key0, key1) == 0x726f_db47_dd0e_0e31)
        // A token is both hashes in hex, each its 16 digits (what machines installed before hold).
        let keyed = DoneTokens(keys: (key0, key1, key1, key0))
        #expect(keyed.token(for: Array(0..<15)) == "a129ca6149be45e5" + String(DoneTokens.sipHash(Array(0..<15), key1, key0), radix: 16))
        #expect(DoneTokens(keys: (0, 0, 0, 0)).token(for: []).count == 32)
        let dir = ScratchDirectory()
        let first = try MachineDirectory(dir.path).tokens
        let again = try MachineDirectory(dir.path).tokens
        #expect(first.token(for: node07).count == 32 && first.token(for: node07) == again.token(for: node07), "not the same after a restart")
        #expect(first.token(for: node07) != first.token(for: [0x52, 0x54, 0, 0x12, 0x34, 0x08]))
        #expect(first.accepts(first.token(for: node07), for: node07))
        #expect(!first.accepts(first.token(for: [0x52, 0x54, 0, 0x12, 0x34, 0x08]), for: node07))
        #expect(!first.accepts("", for: node07))
        var info = stat()
        #expect(stat(dir.path + "/.stampede-key", &info) == 0 && info.st_mode & 0o777 == 0o600 && info.st_size == 32)
        // Another directory, another key.
        let other = ScratchDirectory()
        // Read only (the storm's): no key is written.
        _ = try MachineDirectory(other.path, reading: true)
        #expect(other.entries().isEmpty)
        #expect(try MachineDirectory(other.path).tokens.token(for: node07) != first.token(for: node07))
    }

    @Test func aMachineThatSaysItIsDoneIsLeftAloneAndStaysSoAfterARestart() throws {
        let dir = ScratchDirectory()
        _ = dir.write("node07", Array("mac = 52:54:00:12:34:07\nonce = yes\nkernel = vmlinuz\ncmdline = done=${done-url}\n".utf8))
        _ = dir.write("node08", Array("mac = 52:54:00:12:34:08\nkernel = vmlinuz\n".utf8))
        let records = try MachineRecords(try MachineDirectory(dir.path), unknown: .ignore)
        let boot = MachineBoot(records: records, bindings: MachineBindings(), httpBase: "http://10.0.0.1:8080/", now: { 1_800_000_000 })
        let client = SocketAddress(parsing: "10.0.0.57:40000", defaultPort: 0)!
        let token = records.directory.tokens.token(for: node07)
        let url = "http://10.0.0.1:8080/.stampede/done/52-54-00-12-34-07/" + token
        let script = { String(decoding: boot.contents(of: Array("grub.cfg-01-52-54-00-12-34-07".utf8), for: client) ?? [], as: UTF8.self) }
        #expect(script().contains("linux /vmlinuz done=" + url))
        let identity = MachineIdentity(hardwareAddress: node07, firmware: .efiX64, architecture: 7)
        #expect(records.current.choice(for: identity, over: BootMenu([:])) == .boot(BootMenu([:])))

        let report = { (path: String) in boot.report(to: Array(path.utf8), from: client) }
        #expect(report("boot.ipxe") == nil, "not a done URL, yet taken")
        #expect(report(".stampede/done/52-54-00-12-34-07/" + String(repeating: "0", count: 32)) == .failure(FileRefusal(.denied, "not this machine's done URL")))
        let node08 = records.directory.tokens.token(for: [0x52, 0x54, 0, 0x12, 0x34, 0x08])
        #expect(report(".stampede/done/52-54-00-12-34-08/" + node08) == .failure(FileRefusal(.notFound, "no record boots 52:54:00:12:34:08 once")))
        #expect(report(".stampede/done/nonsense") == .failure(FileRefusal(.notFound, "not a done URL")))
        #expect(records.current.done.isEmpty)

        #expect(report(".stampede/done/52-54-00-12-34-07/" + token) == .success("machine 52:54:00:12:34:07 done (\(dir.path)/node07): its next boot is from its disk"))
        #expect(records.current.choice(for: identity, over: BootMenu([:])) == .leaveAlone(.done(record: dir.path + "/node07")))
        #expect(script().hasSuffix("exit\n"))
        // Written by the watch's thread.
        let watch = try RecordWatch(records)
        let written = Mutex<[String]>([])
        let stop = Atomic<Bool>(false)
        let thread = watch.start(stopping: { stop.load(ordering: .relaxed) }) { event in
            if case .markedDone(_, .success(let path)) = event { written.withLock { $0.append(path) } }
        }
        for _ in 0..<500 where written.withLock({ $0.isEmpty }) { usleep(10_000) }
        stop.store(true, ordering: .relaxed)
        thread.join()
        #expect(written.withLock { $0 } == [dir.path + "/.done-52-54-00-12-34-07"])
        #expect(dir.read(".done-52-54-00-12-34-07") == Array("done 1800000000\n".utf8))
        // A restart reads it.
        let restarted = try MachineRecords(try MachineDirectory(dir.path), unknown: .ignore)
        #expect(restarted.current.choice(for: identity, over: BootMenu([:])) == .leaveAlone(.done(record: dir.path + "/node07")))
        // Its removal boots it again.
        unlink(dir.path + "/.done-52-54-00-12-34-07")
        #expect(try restarted.reload().choice(for: identity, over: BootMenu([:])) == .boot(BootMenu([:])))
    }

    @Test func onceGoesWithABoot() throws {
        #expect(throws: RecordFaults([RecordError(file: "n", line: 3, "once in a record whose action is local: it boots nothing to be done with")])) {
            try MachineRecord.parse(Array("mac = 52:54:00:12:34:07\naction = local\nonce = yes\n".utf8), file: "n")
        }
    }
}
