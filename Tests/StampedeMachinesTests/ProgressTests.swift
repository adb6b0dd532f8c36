import StampedeDHCP
import StampedeIO
import Synchronization
import Testing
@testable import StampedeMachines

@Suite struct RackProgress {
    let a: [UInt8] = [0x52, 0x54, 0, 0x12, 0x34, 0x07]
    let b: [UInt8] = [0x52, 0x54, 0, 0x12, 0x34, 0x08]
    let c: [UInt8] = [0x52, 0x54, 0, 0x12, 0x34, 0x09]
    /// A request's source: its port is not the machine's address.
    func from(_ text: String) -> SocketAddress { SocketAddress(parsing: text, defaultPort: 0)! }

    /// A stage is the furthest a boot got: iPXE's own DHCP after the boot file keeps it; DHCP
    /// after the kernel is a new boot; being left alone is said whenever it happens.
    @Test func aMachinesStageIsTheFurthestItsBootGot() {
        let changes = Mutex<[String]>([])
        let progress = MachineProgress { entry in changes.withLock { $0.append(entry.stage.label) } }
        #expect(progress.note(a, .dhcp, record: "node07", offered: "ipxe.efi", now: 1))
        #expect(progress.note(a, .bootFile, address: from("[::ffff:10.0.0.57]:2070"), now: 2))
        #expect(!progress.note(a, .dhcp, offered: "http://10.0.0.1/boot.ipxe", now: 3), "iPXE's DHCP went back a stage")
        #expect(progress.note(a, .script, now: 4) && progress.note(a, .kernel, now: 5) && progress.note(a, .initrd, now: 6))
        progress.took(1000, a)
        progress.took(24, a)
        #expect(progress.entry(a) == MachineProgress.Entry(mac: a, record: "node07", stage: .initrd, why: nil, offered: "http://10.0.0.1/boot.ipxe",
                                                           address: from("10.0.0.57:0"), lastSeen: 6, bytes: 1024, offeredPath: "boot.ipxe"))
        #expect(progress.note(a, .dhcp, now: 7), "a new boot")
        #expect(progress.note(b, .leftAlone, why: "no machine record selects it", now: 8))
        #expect(!progress.note(b, .leftAlone, why: "no machine record selects it", now: 9))
        #expect(changes.withLock { $0 } == ["dhcp", "boot_file", "script", "kernel", "initrd", "dhcp", "left_alone"])
        #expect(progress.counts[.dhcp] == 1 && progress.counts[.leftAlone] == 1 && progress.counts[.done] == 0)
    }

    /// A key is its whole address: its bytes and their count (a shorter address that the longer
    /// begins with, or ends in zeros, is another), and one longer than two words is kept whole.
    @Test func aHardwareKeyIsItsWholeAddress() {
        let long = [UInt8](repeating: 7, count: 20)
        var longer = long
        longer[19] = 8
        let addresses: [[UInt8]] = [[], [0], [0, 0], a, b, a + [0], [UInt8](repeating: 0xff, count: 16), long, longer, Array(long.prefix(16))]
        for (i, x) in addresses.enumerated() {
            for (j, y) in addresses.enumerated() {
                #expect((HardwareKey(x) == HardwareKey(y)) == (i == j), "\(x) against \(y)")
            }
            // Built again from bytes of its own storage: hashed by its bytes, not where they lie.
            #expect(HardwareKey(x).hashValue == HardwareKey(x.map { $0 }).hashValue)
        }
        #expect(Set(addresses.map(HardwareKey.init)).count == addresses.count)
    }

    /// A machine that loaded its shim's GRUB and asked for nothing since is given out once, after
    /// the wait; one whose GRUB asked for its configuration is not.
    @Test func aLoaderThatAsksForNothingIsGivenOutOnce() {
        let progress = MachineProgress()
        progress.note(a, .dhcp, offered: "shimx64.efi", now: 1)
        progress.note(a, .bootFile, now: 2)
        progress.note(a, .loader, now: 3)
        progress.note(b, .dhcp, offered: "shimx64.efi", now: 1)
        progress.note(b, .loader, now: 3)
        progress.note(b, .script, now: 4)
        #expect(progress.stalledLoaders(quietFor: 15, now: 17).isEmpty)
        #expect(progress.stalledLoaders(quietFor: 15, now: 18).map(\.mac) == [a])
        #expect(progress.stalledLoaders(quietFor: 15, now: 60).isEmpty, "said once")
        // Its next boot gets as far again: said once, not again.
        progress.note(a, .dhcp, offered: "shimx64.efi", now: 70)
        progress.note(a, .loader, now: 72)
        #expect(progress.stalledLoaders(quietFor: 15, now: 100).isEmpty)
        #expect(progress.counts[.loader] == 1 && progress.counts[.script] == 1)
    }

    /// The /machines view, read back and printed: every field, a machine a line, the stages counted.
    @Test func theViewIsReadBackAndPrintedAsATable() throws {
        let progress = MachineProgress()
        progress.note(a, .kernel, record: "/etc/stampede/machines/node07", address: from("10.0.0.57:2070"), now: 100)
        progress.took(851_968, a)
        progress.note(b, .leftAlone, why: "its \"record\" says\nignore", now: 90)
        progress.note(c, .script, address: from("[2001:db8:0:1::57]:4011"), now: 105)
        let json = progress.json()
        #expect(String(decoding: json, as: UTF8.self) == """
            {"machines":[{"mac":"52:54:00:12:34:07","record":"/etc/stampede/machines/node07","stage":"kernel","why":null,"address":"10.0.0.57","last_seen":100,"bytes":851968},\
            {"mac":"52:54:00:12:34:08","record":null,"stage":"left_alone","why":"its \\"record\\" says\\nignore","address":null,"last_seen":90,"bytes":0},\
            {"mac":"52:54:00:12:34:09","record":null,"stage":"script","why":null,"address":"2001:db8:0:1::57","last_seen":105,"bytes":0}]}

            """)
        let rows = try ProgressTable.rows(json)
        #expect(rows == [ProgressTable.Row(mac: "52:54:00:12:34:07", record: "/etc/stampede/machines/node07", stage: "kernel", why: nil,
                                           address: "10.0.0.57", lastSeen: 100, bytes: 851_968),
                         ProgressTable.Row(mac: "52:54:00:12:34:08", record: nil, stage: "left_alone", why: "its \"record\" says\nignore",
                                           address: nil, lastSeen: 90, bytes: 0),
                         ProgressTable.Row(mac: "52:54:00:12:34:09", record: nil, stage: "script", why: nil,
                                           address: "2001:db8:0:1::57", lastSeen: 105, bytes: 0)])
        #expect(ProgressTable.table(rows, now: 110) == """
            MAC                RECORD  STAGE       ADDRESS           LAST SEEN  BYTES   WHY
            52:54:00:12:34:07  node07  kernel      10.0.0.57         10 s ago   851968
            52:54:00:12:34:08  -       left_alone  -                 20 s ago   0       its "record" says?ignore
            52:54:00:12:34:09  -       script      2001:db8:0:1::57  5 s ago    0
            3 machines: 1 left_alone, 1 script, 1 kernel

            """)
        #expect(ProgressTable.table(rows, now: 110, stage: "kernel").split(separator: "\n").count == 3)
        #expect(throws: ProgressTable.Unreadable.self) { try ProgressTable.rows(Array("{\"machines\":[".utf8)) }
        #expect(throws: ProgressTable.Unreadable.self) { try ProgressTable.rows(Array("[1,2]".utf8)) }
    }

    @Test func theJSONReaderReadsEscapesAndRefusesWhatIsNotJSON() throws {
        var reader = JSONReader(bytes: Array(#"{"a":["\u00e9\ud83d\ude00\t",-1.5e2,true,null,{}]}"#.utf8))
        #expect(try reader.value() == .object(["a": .array([.string("é😀\t"), .number(-150), .bool(true), .null, .object([:])])]))
        // A string without escapes is its bytes; raw UTF-8 on both sides of an escape stays whole.
        for (json, text) in [(#""plain text""#, "plain text"), (#""""#, ""), (#""a\"b\\c\/d""#, #"a"b\c/d"#), ("\"über\\nÿ\"", "über\nÿ")] {
            #expect(try JSONReader.read(Array(json.utf8)) == .string(text), "\(json)")
        }
        for bad in ["{\"a\" 1}", "\"open", "\"open\\n", "\"ends in an escape\\", "[1,", "{\"a\":\"\\q\"}", "tru", "nul", "-", String(repeating: "[", count: 100)] {
            var reader = JSONReader(bytes: Array(bad.utf8))
            #expect(throws: JSONReader.Fault.self, "\(bad)") { try reader.value() }
        }
    }
}
