import Testing
@testable import StampedeDHCP

@Suite struct ProxyAnswerSpec {
    let server = IPv4(10, 0, 0, 1)
    let menu = BootMenu.withDefaults([:], httpBase: "http://10.0.0.1/")
    let client = (address: IPv4.any, port: UInt16(68))

    func answer(_ bytes: [UInt8], on port: ProxyAnswer.Port = .dhcp, from source: (address: IPv4, port: UInt16)? = nil,
                menu: BootMenu? = nil, mayChain: Bool = true) -> Result<ProxyAnswer, ProxyAnswer.Silence> {
        let message = try! parse(bytes).get()
        return ProxyAnswer.to(message, on: port, from: source ?? client, server: server, mayChain: mayChain, menu: menu ?? self.menu)
    }

    /// UEFI's offer: no address, naming this server and the file, option 60 and 97 echoed,
    /// broadcast, and no option 43 (as dnsmasq since 2.76: EDK2 then asks port 4011, and an EDK2
    /// of before 2019, which does not check the bypass bit, does not take a menu-less offer for
    /// "local boot").
    @Test func uefiPXEIsOfferedIPXEWithoutOption43() throws {
        let answer = try answer(edk2Discover()).get()
        let reply = answer.reply
        #expect(answer.destination == .broadcast)
        #expect(answer.selector == .efiX64)
        #expect(reply.operation == .reply)
        #expect(reply.type == .offer)
        #expect(reply.transactionID == 0x1234_5678)
        #expect(reply.clientHardwareAddress == [0x52, 0x54, 0x00, 0x12, 0x34, 0x56])
        #expect(reply.yourAddress.isAny)
        #expect(reply.serverAddress == server)
        #expect(reply.bootFile == Array("ipxe.efi".utf8))
        #expect(reply.options[.serverIdentifier] == [10, 0, 0, 1])
        #expect(reply.options[.vendorClass] == Array("PXEClient".utf8))
        #expect(reply.options[.machineIdentifier] == edk2UUID)
        #expect(reply.options[.vendorSpecific] == nil)
        #expect(reply.wantsBroadcast)
        // What goes on the wire parses back the same.
        #expect(try parse(reply.encoded()).get() == reply)
    }

    /// The bypass, for BIOS PXE ROMs (and iPXE on BIOS): discovery control 8, boot the file named
    /// here. Every UEFI code (6 and up, U-Boot's too) goes without, its ACK on 4011 too unless it
    /// sent a boot item, which is echoed.
    @Test func theBypassIsForBIOSAlone() throws {
        let bios = edk2Discover(arch: 0, vendor: "PXEClient:Arch:00000:UNDI:002001")
        #expect(try answer(bios).get().reply.options[.vendorSpecific] == [6, 1, 8, 255])
        #expect(try answer(bios + option(77, "iPXE")).get().reply.options[.vendorSpecific] == [6, 1, 8, 255])
        let noArchitecture = request(options: option(53, [1]) + option(60, "PXEClient") + [255])
        #expect(try answer(noArchitecture).get().reply.options[.vendorSpecific] == [6, 1, 8, 255])
        for arch: UInt16 in [6, 7, 9, 10, 11, 22, 27, 39, 300] {
            let menu = BootMenu.withDefaults([BootSelector.architecture(arch): .file("x.efi")], httpBase: nil)
            #expect(try answer(edk2Discover(arch: arch), menu: menu).get().reply.options[.vendorSpecific] == nil, "arch \(arch)")
            let boot = bootServerRequest(option(93, [UInt8(arch >> 8), UInt8(arch & 0xff)]))
            #expect(try answer(boot, on: .bootServer, menu: menu).get().reply.options[.vendorSpecific] == nil, "arch \(arch)")
        }
        let item = bootServerRequest(option(93, [0, 7]) + option(43, [71, 4, 0, 0, 0, 0, 255]))
        #expect(try answer(item, on: .bootServer).get().reply.options[.vendorSpecific] == [71, 4, 0, 0, 0, 0, 255])
    }

    /// EDK2's REQUEST to the boot server's port 4011, from the address it has.
    func bootServerRequest(_ options: [UInt8]) -> [UInt8] {
        request(ciaddr: [10, 0, 0, 57], flags: 0, options: option(53, [3]) + option(97, edk2UUID) + options
                + option(60, "PXEClient:Arch:00007:UNDI:003000") + [255])
    }

    /// Option 97 of every length: answered whatever it holds, echoed only when it is a UUID
    /// (type 0 and 16 bytes), as PXE defines it; never a crash or a malformed reply.
    @Test func aMachineIdentifierOfEveryLengthIsEchoedOnlyWhenItIsAUUID() throws {
        for length in 0...255 {
            let value = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 7) }
            let bytes = request(options: option(53, [1]) + option(60, "PXEClient:Arch:00007:UNDI:003000") + option(93, [0, 7])
                                + option(97, value) + [255])
            let reply = try answer(bytes).get().reply
            #expect(reply.options[.machineIdentifier] == (length == 17 && value[0] == 0 ? value : nil), "length \(length)")
            #expect(try parse(reply.encoded()).get() == reply)
        }
    }

    /// A relay chain's hop count: up to 16 hops answered (RFC 1542's limit), more dropped.
    @Test func hopCountsUpToSixteenAreAnswered() throws {
        for hops in UInt8(0)...UInt8(255) {
            let bytes = request(giaddr: hops == 0 ? [0, 0, 0, 0] : [10, 9, 0, 1], hops: hops,
                                options: option(53, [1]) + option(60, "PXEClient:Arch:00007:UNDI:003000") + option(93, [0, 7]) + [255])
            switch answer(bytes) {
            case .success: #expect(hops <= 16, "hops \(hops)")
            case .failure(let silence): #expect(hops > 16 && silence == .tooManyHops(hops), "hops \(hops)")
            }
        }
    }

    @Test func eachArchitectureGetsItsFile() throws {
        let custom = BootMenu.withDefaults([.efiArm64: .file("arm64/ipxe.efi"), .efiX86: .file("ipxe-i386.efi")], httpBase: nil)
        #expect(try answer(edk2Discover(arch: 0, vendor: "PXEClient:Arch:00000:UNDI:002001"), menu: custom).get().target == .file("undionly.kpxe"))
        #expect(try answer(edk2Discover(arch: 9), menu: custom).get().target == .file("ipxe.efi"))
        #expect(try answer(edk2Discover(arch: 11), menu: custom).get().target == .file("arm64/ipxe.efi"))
        #expect(try answer(edk2Discover(arch: 6), menu: custom).get().target == .file("ipxe-i386.efi"))
        #expect(try answer(edk2Discover(arch: 11)).get().target == .file("ipxe-arm64.efi"))
        #expect(try answer(edk2Discover(arch: 10)).get().target == .file("ipxe-arm32.efi"))
        #expect(answer(edk2Discover(arch: 12)) == .failure(.unknownArchitecture(12)))
        #expect(answer(edk2Discover(arch: 22)) == .failure(.noBootFile(.ubootArm64)))
        let empty = BootMenu([:])
        #expect(answer(edk2Discover(arch: 11), menu: empty) == .failure(.noBootFile(.efiArm64)))
    }

    /// Secure Boot's chain: shim for x64 and ARM64 UEFI, by PXE and HTTP Boot; iPXE for the other
    /// UEFI architectures, undionly.kpxe for a BIOS; the operator's choices over it.
    @Test func secureBootsChainOffersShimWhereThereIsOne() throws {
        let chain = BootMenu.withDefaults([:], httpBase: "http://10.0.0.1/", chain: .secureBoot)
        #expect(try answer(edk2Discover(arch: 7), menu: chain).get().target == .file("shimx64.efi"))
        #expect(try answer(edk2Discover(arch: 11), menu: chain).get().target == .file("shimaa64.efi"))
        #expect(chain.target(for: .httpX64) == .url("http://10.0.0.1/shimx64.efi"))
        #expect(chain.target(for: .httpArm64) == .url("http://10.0.0.1/shimaa64.efi"))
        #expect(chain.target(for: .efiX86) == .file("ipxe-i386.efi") && chain.target(for: .bios) == .file("undionly.kpxe"))
        #expect(chain.target(for: .ipxe) == .url("http://10.0.0.1/boot.ipxe"))
        let chosen = BootMenu.withDefaults([.efiX64: .file("efi/shimx64.efi")], httpBase: nil, chain: .secureBoot)
        #expect(chosen.target(for: .efiX64) == .file("efi/shimx64.efi") && chosen.target(for: .httpX64) == nil)
        #expect(BootMenu.withDefaults([:], httpBase: nil).target(for: .efiX64) == .file("ipxe.efi"))
    }

    /// `arch:N`: any code of IANA's registry, PXE or HTTP Boot, answered by its own entry, which
    /// comes before a named selector covering the same code (efi-x64 is 7 and 9); iPXE is still
    /// given its script, whatever it runs on.
    @Test func anArchitectureCodeIsAnsweredByItsOwnEntry() throws {
        let menu = BootMenu.withDefaults([
            BootSelector(name: "arch:9")!: .file("ebc-is-really-x64.efi"),
            BootSelector(name: "arch:12")!: .file("powerpc/core.elf"),
            BootSelector(name: "arch:26")!: .url("http://10.0.0.1/riscv32.efi"),
        ], httpBase: "http://10.0.0.1/")
        let nine = try answer(edk2Discover(arch: 9), menu: menu).get()
        #expect(nine.selector.name == "arch:9" && nine.target == .file("ebc-is-really-x64.efi"))
        #expect(try answer(edk2Discover(arch: 7), menu: menu).get().selector == .efiX64)
        #expect(try answer(edk2Discover(arch: 12), menu: menu).get().target == .file("powerpc/core.elf"))
        let http = request(options: option(53, [1]) + option(60, "HTTPClient:Arch:00026:UNDI:003000") + option(93, [0, 26]) + [255])
        let riscv = try answer(http, menu: menu).get()
        #expect(riscv.target == .url("http://10.0.0.1/riscv32.efi") && riscv.reply.options[.vendorClass] == Array("HTTPClient".utf8))
        let ipxe = edk2Discover(arch: 9, extra: option(77, "iPXE"))
        #expect(try answer(ipxe, menu: menu).get().selector == .ipxe)
        #expect(answer(edk2Discover(arch: 13), menu: menu) == .failure(.unknownArchitecture(13)))
    }

    /// U-Boot's DISCOVER as its net/bootp.c writes it on ARM64 (option 93 = 22, 94, 97 when
    /// `pxeuuid` is set, vendor class `U-Boot.armv8`): not a PXE client unless `--pxe-vendor`
    /// says so, then answered by uboot-arm64 (no default: U-Boot loads no iPXE), with option 60
    /// `PXEClient` in the reply as dnsmasq writes it.
    @Test func uBootIsAnsweredWhereItsVendorClassIsNamed() throws {
        let uboot = request(options: option(53, [1]) + option(57, [0x02, 0x40]) + option(93, [0, 22]) + option(94, [1, 0, 0])
                                + option(97, [0] + Array(0..<16)) + option(60, "U-Boot.armv8") + [255])
        let message = try parse(uboot).get()
        let menu = BootMenu.withDefaults([.ubootArm64: .file("pxelinux.0")], httpBase: nil)
        #expect(ProxyAnswer.to(message, on: .dhcp, from: client, server: server, menu: menu) == .failure(.notBootClient))
        let vendors = [Array("U-Boot".utf8)]
        let answer = try ProxyAnswer.to(message, on: .dhcp, from: client, server: server, pxeVendors: vendors, menu: menu).get()
        #expect(answer.selector == .ubootArm64 && answer.target == .file("pxelinux.0"))
        #expect(answer.reply.options[.vendorClass] == Array("PXEClient".utf8))
        #expect(ProxyAnswer.to(message, on: .dhcp, from: client, server: server, pxeVendors: vendors, menu: BootMenu.withDefaults([:], httpBase: nil))
                == .failure(.noBootFile(.ubootArm64)))
        #expect(BootClient(message, pxeVendors: [Array("U-Boot.armv7".utf8)]) == nil)
        #expect(BootClient(message, pxeVendors: vendors)?.architecture == 22)
    }

    /// `arch:N`'s grammar: N a code of 0 ... 65535 in decimal; an HTTP Boot code takes a URL and
    /// any other a file, as the named selectors do.
    @Test func anArchitectureCodesGrammar() throws {
        #expect(BootSelector(name: "arch:0")?.architectures == [0])
        #expect(BootSelector(name: "arch:65535")?.architectures == [65535])
        for bad in ["arch:", "arch:65536", "arch:-1", "arch:0x10", "arch:1 ", "arch:000001", "Arch:7", "efi-arm"] {
            #expect(BootSelector(name: bad) == nil, "\(bad)")
        }
        #expect(throws: BootFileChoice.Refusal.self) { try BootFileChoice(parsing: "arch:19=arm64.efi") }
        #expect(throws: BootFileChoice.Refusal.self) { try BootFileChoice(parsing: "arch:11=http://10.0.0.1/arm64.efi") }
        #expect(try BootFileChoice(parsing: "arch:40=http://10.0.0.1/loong.efi").target == .url("http://10.0.0.1/loong.efi"))
        #expect(try BootFileChoice(parsing: "arch:41=rpi/start4.elf").selector == BootSelector.architecture(41))
        #expect(try BootFileChoice(parsing: "efi-riscv64=riscv.efi").selector == .efiRiscv64)
        // `${arch}` becomes the selector's name, and the longest (http-loongarch64) is allowed for.
        #expect(try BootFileChoice(parsing: "arch:27=${arch}/" + String(repeating: "x", count: 110)).selector.name == "arch:27")
        #expect(throws: BootFileChoice.Refusal.self) { try BootFileChoice(parsing: "arch:27=${arch}/" + String(repeating: "x", count: 111)) }
    }

    /// A Raspberry Pi 4's or 5's boot ROM: architecture 0 and a BIOS ROM's vendor class, told by
    /// its makers' hardware address (or architecture 41 from any); answered with option 43 as
    /// dnsmasq writes it for `pxe-service=0,"Raspberry Pi Boot"`, byte for byte (the ROM ignores
    /// an offer without that string, and then reads its TFTP server from option 54).
    @Test func aRaspberryPiIsAnsweredAsItsBootROMRequires() throws {
        func discover(mac: [UInt8], arch: UInt8 = 0, extra: [UInt8] = []) -> [UInt8] {
            request(mac: mac, options: option(53, [1]) + option(57, [0x05, 0xdc]) + option(97, [0] + Array(repeating: 0x42, count: 16))
                    + option(93, [0, arch]) + option(94, [1, 2, 1]) + option(60, "PXEClient:Arch:000\(arch < 10 ? "0" : "")\(arch):UNDI:002001")
                    + extra + [255])
        }
        let expected: [UInt8] = [0x06, 0x01, 0x03, 0x0a, 0x04, 0x00, 0x50, 0x58, 0x45, 0x09, 0x14, 0x00, 0x00, 0x11]
            + Array("Raspberry Pi Boot".utf8) + [0xff]
        for prefix: [UInt8] in [[0xdc, 0xa6, 0x32], [0xe4, 0x5f, 0x01], [0xd8, 0x3a, 0xdd], [0x2c, 0xcf, 0x67], [0xb8, 0x27, 0xeb]] {
            let answer = try answer(discover(mac: prefix + [0x0a, 0xef, 0x79])).get()
            #expect(answer.selector == .rpi && answer.reply.options[.vendorSpecific] == expected, "\(prefix)")
            #expect(answer.reply.options[.serverIdentifier] == [10, 0, 0, 1] && answer.reply.serverAddress == server)
            #expect(answer.reply.options[.vendorClass] == Array("PXEClient".utf8) && answer.target == .file("start4.elf"))
        }
        #expect(PXEOption.raspberryPiBoot == expected)
        // The same request from a PC's BIOS ROM is a BIOS's; architecture 41 is a Pi from any address.
        #expect(try answer(discover(mac: [0x52, 0x54, 0x00, 0x0a, 0xef, 0x79])).get().selector == .bios)
        #expect(try answer(discover(mac: [0x52, 0x54, 0x00, 0x0a, 0xef, 0x79], arch: 41)).get().reply.options[.vendorSpecific] == expected)
        // arch:0 is for BIOS machines, not a Pi that says 0; arch:41 is the Pi's own.
        let codes = BootMenu.withDefaults([BootSelector.architecture(0): .file("pc.kpxe"), BootSelector.architecture(41): .file("pi41")], httpBase: nil)
        #expect(try answer(discover(mac: [0xdc, 0xa6, 0x32, 1, 2, 3]), menu: codes).get().selector == .rpi)
        #expect(try answer(discover(mac: [0x52, 0x54, 0x00, 1, 2, 3]), menu: codes).get().target == .file("pc.kpxe"))
        #expect(try answer(discover(mac: [0xdc, 0xa6, 0x32, 1, 2, 3], arch: 41), menu: codes).get().target == .file("pi41"))
        // iPXE or U-Boot on a Pi is iPXE or U-Boot: its own answer.
        let ipxe = try answer(discover(mac: [0xdc, 0xa6, 0x32, 1, 2, 3], extra: option(77, "iPXE"))).get()
        #expect(ipxe.selector == .ipxe && ipxe.reply.options[.vendorSpecific] == [6, 1, 8, 255])
    }

    /// Option 175 says what an iPXE build can fetch: one without HTTPS (a NIC's or QEMU's ROM)
    /// is never handed an https:// URL, nor one without HTTP an http:// one; a URL on this server
    /// becomes the file over TFTP. An iPXE that names no features, a URL elsewhere or one with a
    /// query are left as they are.
    @Test func iPXEIsNeverHandedAURLItCannotFetch() throws {
        let https = BootMenu.withDefaults([:], httpBase: "https://10.0.0.1:8443/")
        func features(_ codes: [UInt8]) -> [UInt8] {
            option(77, "iPXE") + option(175, [0xb1, 5, 1, 0x80, 0x86, 0x10, 0x0e, 0xeb, 3, 1, 0, 0] + codes.flatMap { [$0, 1, 1] })
        }
        let rom = edk2Discover(arch: 0, vendor: "PXEClient:Arch:00000:UNDI:002001", extra: features([0x10, 0x13, 0x15, 0x17]))
        #expect(try answer(rom, menu: https).get().target == .file("boot.ipxe"))
        let full = edk2Discover(extra: features([0x13, 0x14, 0x15]))
        #expect(try answer(full, menu: https).get().target == .url("https://10.0.0.1:8443/boot.ipxe"))
        let noHTTP = edk2Discover(extra: features([0x15]))
        #expect(try answer(noHTTP, mayChain: false).get().target == .file("boot.ipxe"))
        #expect(try answer(edk2Discover(extra: features([0x13]))).get().target == .url("http://10.0.0.1/boot.ipxe"))
        // A feature of version 0 is not had.
        #expect(try answer(edk2Discover(extra: option(77, "iPXE") + option(175, [0x13, 1, 0])), mayChain: false).get().target == .file("boot.ipxe"))
        // No option 175: nothing known, nothing changed.
        #expect(try answer(edk2Discover(extra: option(77, "iPXE")), menu: https).get().target == .url("https://10.0.0.1:8443/boot.ipxe"))
        for elsewhere in ["https://10.0.0.9/boot.ipxe", "https://10.0.0.1/boot.ipxe?mac=${mac}", "https://10.0.0.1/"] {
            let menu = BootMenu.withDefaults([.ipxe: .url(elsewhere)], httpBase: nil)
            #expect(try answer(rom, menu: menu).get().target.description.hasPrefix("https://"), "\(elsewhere)")
        }
        let deep = BootMenu.withDefaults([.ipxe: .url("https://10.0.0.1/scripts/${mac:hexhyp}.ipxe")], httpBase: nil)
        #expect(try answer(rom, menu: deep).get().target == .file("scripts/52-54-00-12-34-56.ipxe"))
        // Option 175 that does not parse: nothing known.
        let broken = edk2Discover(extra: option(77, "iPXE") + option(175, [0x13, 9, 1]))
        #expect(try answer(broken, menu: https).get().target == .url("https://10.0.0.1:8443/boot.ipxe"))
    }

    /// An iPXE without HTTP offered an http:// URL is chained to the full iPXE its firmware's
    /// selector boots (once: `mayChain`), when that is an iPXE by its name; then it is given what
    /// it can fetch. One with HTTP, or offered a file, is not chained.
    @Test func anIPXEWithoutHTTPIsChainedToTheFullIPXEFirst() throws {
        func features(_ codes: [UInt8]) -> [UInt8] { option(77, "iPXE") + option(175, codes.flatMap { [$0, 1, 1] }) }
        let bios = edk2Discover(arch: 0, vendor: "PXEClient:Arch:00000:UNDI:002001", extra: features([0x10, 0x15]))
        let chained = try answer(bios).get()
        #expect(chained.chained && chained.selector == .ipxe && chained.target == .file("undionly.kpxe"))
        #expect(chained.reply.bootFile == Array("undionly.kpxe".utf8))
        #expect(try answer(bios, mayChain: false).get().target == .file("boot.ipxe"))
        let efi = try answer(edk2Discover(extra: features([0x15]))).get()
        #expect(efi.chained && efi.selector == .ipxe && efi.target == .file("ipxe.efi"))
        let arm = try answer(edk2Discover(arch: 11, vendor: "PXEClient:Arch:00011:UNDI:003000", extra: features([]))).get()
        #expect(arm.chained && arm.target == .file("ipxe-arm64.efi"))
        // Its firmware's own choices: arch:N first, then the named selector's file, by its name.
        let mine = BootMenu.withDefaults([.architecture(0): .file("site/snponly.efi"), .ipxe: .url("http://10.0.0.1/s.ipxe")], httpBase: nil)
        #expect(try answer(bios, menu: mine).get().target == .file("site/snponly.efi"))
        let shim = BootMenu.withDefaults([:], httpBase: "http://10.0.0.1/", chain: .secureBoot)
        #expect(try answer(edk2Discover(extra: features([0x15])), menu: shim).get().target == .file("boot.ipxe"), "shim is no iPXE")
        // With HTTP, or offered its script over TFTP: nothing to chain.
        #expect(try !answer(edk2Discover(extra: features([0x13]))).get().chained)
        #expect(try answer(bios, menu: BootMenu.withDefaults([:], httpBase: nil)).get().target == .file("boot.ipxe"))
        #expect(ProxyAnswer.isIPXEBuild("undionly.kpxe") && ProxyAnswer.isIPXEBuild("x/IPXE-arm64.efi") && ProxyAnswer.isIPXEBuild("snp.efi"))
        #expect(!ProxyAnswer.isIPXEBuild("shimx64.efi") && !ProxyAnswer.isIPXEBuild("pxelinux.0") && !ProxyAnswer.isIPXEBuild("ipxe/grubx64.efi"))
    }

    /// The Raspberry Pi 4's EDK2 sends no option 93, only `Arch:00011` in option 60.
    @Test func theArchitectureFallsBackToOption60() throws {
        let noOption93 = request(options: option(53, [1]) + option(60, "PXEClient:Arch:00011:UNDI:003000") + [255])
        let menu = BootMenu.withDefaults([.efiArm64: .file("arm64.efi")], httpBase: nil)
        #expect(try answer(noOption93, menu: menu).get().selector == .efiArm64)
        let neither = request(options: option(53, [1]) + option(60, "PXEClient") + [255])
        #expect(try answer(neither).get().selector == .bios)
    }

    /// iPXE asks again once loaded (user class `iPXE`): it gets its script, never ipxe.efi.
    @Test func iPXEGetsItsScriptNotItself() throws {
        let ipxe = edk2Discover(extra: option(77, "iPXE") + option(175, [0x13, 1, 1]))
        let overHTTP = try answer(ipxe).get()
        #expect(overHTTP.selector == .ipxe)
        #expect(overHTTP.target == .url("http://10.0.0.1/boot.ipxe"))
        #expect(overHTTP.reply.options[.bootFileName] == Array("http://10.0.0.1/boot.ipxe".utf8) + [0])
        let tftpOnly = try answer(ipxe, menu: BootMenu.withDefaults([:], httpBase: nil)).get()
        #expect(tftpOnly.target == .file("boot.ipxe"))
        // SeaBIOS's iPXE ROM sends the user class alone.
        let rom = request(options: option(53, [1]) + option(93, [0, 0]) + option(60, "PXEClient:Arch:00000:UNDI:002001")
                          + option(77, "iPXE") + [255])
        #expect(try answer(rom).get().selector == .ipxe)
    }

    /// UEFI HTTP Boot: a URL, option 60 `HTTPClient`, no PXE options; without --http, nothing.
    @Test func httpBootGetsAURL() throws {
        let discover = edk2Discover(arch: 16, vendor: "HTTPClient:Arch:00016:UNDI:003001")
        let answer = try answer(discover).get()
        #expect(answer.reply.options[.vendorClass] == Array("HTTPClient".utf8))
        #expect(answer.reply.bootFile == Array("http://10.0.0.1/ipxe.efi".utf8))
        #expect(answer.reply.options[.bootFileName] == Array("http://10.0.0.1/ipxe.efi".utf8) + [0])
        #expect(answer.reply.options[.vendorSpecific] == nil)
        #expect(self.answer(discover, menu: BootMenu.withDefaults([:], httpBase: nil)) == .failure(.noBootFile(.httpX64)))
        #expect(self.answer(discover, menu: BootMenu.withDefaults([.httpX64: .file("ipxe.efi")], httpBase: nil))
                == .failure(.noBootFile(.httpX64)))
    }

    @Test func onlyNetworkBootClientsAreAnswered() {
        let laptop = request(options: option(53, [1]) + option(60, "MSFT 5.0") + [255])
        #expect(answer(laptop) == .failure(.notBootClient))
        let plain = request(options: option(53, [1]) + [255])
        #expect(answer(plain) == .failure(.notBootClient))
        let release = request(options: option(53, [7]) + option(60, "PXEClient") + [255])
        #expect(answer(release) == .failure(.notForProxy))
        var reply = edk2Discover()
        reply[0] = 2
        #expect(answer(reply) == .failure(.notForProxy))
        #expect(answer(request(hops: 17, options: option(53, [1]) + option(60, "PXEClient") + [255])) == .failure(.tooManyHops(17)))
    }

    /// The site's server gives the address: a REQUEST for one is not the proxy's.
    @Test func anAddressRequestOnPort67IsLeftToTheDHCPServer() {
        let selecting = request(options: option(53, [3]) + option(54, [10, 0, 0, 2]) + option(50, [10, 0, 0, 57])
                                + option(93, [0, 7]) + option(60, "PXEClient:Arch:00007:UNDI:003000") + [255])
        #expect(answer(selecting) == .failure(.addressRequest))
    }

    /// Firmware that ignores the bypass asks port 4011, from its own port 4011: the ACK goes back
    /// there, naming the address the client has.
    @Test func theBootServerAnswersOn4011ToTheSourcePort() throws {
        let bootRequest = request(ciaddr: [10, 0, 0, 57], flags: 0,
                                  options: option(53, [3]) + option(97, edk2UUID) + option(93, [0, 7])
                                  + option(60, "PXEClient:Arch:00007:UNDI:003000") + [255])
        let answer = try answer(bootRequest, on: .bootServer, from: (IPv4(10, 0, 0, 57), 4011)).get()
        #expect(answer.destination == .unicast(IPv4(10, 0, 0, 57), port: 4011))
        #expect(answer.reply.type == .ack)
        #expect(answer.reply.yourAddress == IPv4(10, 0, 0, 57))
        #expect(answer.reply.bootFile == Array("ipxe.efi".utf8))
        #expect(answer.reply.options[.machineIdentifier] == edk2UUID)
    }

    /// Boot server discovery by broadcast to 67 (PXE 2.1 §2.2.5) for the bootstrap server (type 0,
    /// what an offer without a menu implies) carries a boot item, echoed in the ACK.
    @Test func aBootItemOnPort67IsDiscovery() throws {
        let discovery = request(ciaddr: [10, 0, 0, 57], options: option(53, [3]) + option(93, [0, 0])
                                + option(60, "PXEClient:Arch:00000:UNDI:002001") + option(43, [71, 4, 0, 0, 0, 1, 255]) + [255])
        let answer = try answer(discovery).get()
        #expect(answer.reply.type == .ack)
        #expect(answer.reply.options[.vendorSpecific] == [71, 4, 0, 0, 0, 1, 255])
        #expect(answer.destination == .broadcast)
    }

    /// Another PXE server's menu item (dnsmasq numbers its pxe-services from 0x8000; WDS is type
    /// 1), a BIS request, a REQUEST that chose another server: not this proxy's, on either port.
    /// The machine records are asked only of a request the proxy would answer, with the machine's
    /// identity (its firmware with the iPXE stage set aside) and the boot client it is (an iPXE
    /// going on with a boot, or the firmware starting one: only that renews the machine API's
    /// answer); their menu is the one offered, and a machine they leave alone gets silence.
    @Test func theMachineRecordsChooseWhatAMachineBootsOrLeaveItAlone() throws {
        let message = try parse(edk2Discover(extra: option(77, "iPXE"))).get()
        var asked: [MachineIdentity] = []
        let ours = BootMenu([.ipxe: .file("node07.ipxe")])
        let booted = ProxyAnswer.to(message, on: .dhcp, from: client, server: server) { machine, client in
            asked.append(machine)
            #expect(client.isIPXE)
            return .boot(ours)
        }
        #expect(try booted.get().reply.bootFile == Array("node07.ipxe".utf8))
        var firmware: BootClient?
        _ = ProxyAnswer.to(try parse(edk2Discover()).get(), on: .dhcp, from: client, server: server) { _, client in
            firmware = client
            return .boot(ours)
        }
        #expect(firmware?.isIPXE == false && firmware?.architecture == 7)
        #expect(asked == [MachineIdentity(hardwareAddress: [0x52, 0x54, 0x00, 0x12, 0x34, 0x56], uuid: "01020304-0506-0708-090a-0b0c0d0e0f10",
                                          firmware: .efiX64, architecture: 7)])
        for why in [LeftAlone.unknown, .local(record: "node07"), .ignored(record: "node07")] {
            #expect(ProxyAnswer.to(message, on: .dhcp, from: client, server: server) { _, _ in .leaveAlone(why) } == .failure(.leftAlone(why)))
        }
        // Not a boot client, or an address request: the records are not asked.
        let laptop = try parse(edk2Discover(vendor: "MSFT 5.0")).get()
        #expect(ProxyAnswer.to(laptop, on: .dhcp, from: client, server: server) { _, _ in Issue.record("asked"); return .boot(ours) }
                    == .failure(.notBootClient))
    }

    @Test func anotherServersBootItemOrChoiceIsLeftToIt() {
        let pxe = option(93, [0, 7]) + option(60, "PXEClient:Arch:00007:UNDI:003000")
        for port in [ProxyAnswer.Port.dhcp, .bootServer] {
            for (item, silence) in [([UInt8(0x80), 0x00, 0, 0], ProxyAnswer.Silence.otherBootServerType(0x8000)),
                                    ([0, 1, 0, 0], .otherBootServerType(1)), ([0, 0, 0x80, 0], .bootIntegrityServices)] {
                let menuItem = request(ciaddr: [10, 0, 0, 57], options: option(53, [3]) + pxe + option(43, [71, 4] + item + [255]) + [255])
                #expect(answer(menuItem, on: port, from: (IPv4(10, 0, 0, 57), 4011)) == .failure(silence), "\(port) \(item)")
            }
            let chosen = request(ciaddr: [10, 0, 0, 57], options: option(53, [3]) + option(54, [10, 0, 0, 9]) + pxe
                                 + option(43, [71, 4, 0, 0, 0, 0, 255]) + [255])
            #expect(answer(chosen, on: port, from: (IPv4(10, 0, 0, 57), 4011)) == .failure(.otherServer(IPv4(10, 0, 0, 9))))
            let ours = request(ciaddr: [10, 0, 0, 57], options: option(53, [3]) + option(54, [10, 0, 0, 1]) + pxe
                               + option(43, [71, 4, 0, 0, 0, 0, 255]) + [255])
            #expect(answer(ours, on: port, from: (IPv4(10, 0, 0, 57), 4011)).map(\.reply.type) == .success(.ack))
        }
    }

    /// RFC 2131 §4.3.5: the ACK to an INFORM names no address (yiaddr 0); a REQUEST's names ciaddr.
    @Test func anInformsAckNamesNoAddress() throws {
        let inform = request(ciaddr: [10, 0, 0, 57], flags: 0, options: option(53, [8]) + option(93, [0, 7])
                             + option(60, "PXEClient:Arch:00007:UNDI:003000") + [255])
        let answer = try answer(inform, on: .bootServer, from: (IPv4(10, 0, 0, 57), 4011)).get()
        #expect(answer.reply.type == .ack && answer.reply.yourAddress.isAny)
        #expect(answer.destination == .unicast(IPv4(10, 0, 0, 57), port: 4011))
    }

    /// A relay forwards the answer by the broadcast flag: with it clear it would unicast to yiaddr,
    /// 0.0.0.0. So an answer to a client without an address asks for broadcast, whatever the
    /// request said; and the relay's option 82 comes back whole, last (RFC 3046).
    @Test func aRelayedRequestIsAnsweredThroughTheRelayByBroadcastWithItsOption82() throws {
        let agent: [UInt8] = [1, 6, 0, 4, 0, 1, 0, 2, 2, 3, 0xAA, 0xBB, 0xCC]
        let relayed = request(giaddr: [10, 9, 0, 1], hops: 1, flags: 0, options: option(53, [1]) + option(93, [0, 7])
                              + option(60, "PXEClient:Arch:00007:UNDI:003000") + option(82, agent) + [255])
        let answer = try answer(relayed, from: (IPv4(10, 9, 0, 1), 67)).get()
        #expect(answer.destination == .relay(IPv4(10, 9, 0, 1)))
        #expect(answer.reply.relayAddress == IPv4(10, 9, 0, 1))
        #expect(answer.reply.wantsBroadcast)
        #expect(answer.reply.options[.relayAgentInformation] == agent)
        #expect(answer.reply.options.present.last == DHCPOptionCode.relayAgentInformation.rawValue)
        let bytes = answer.reply.encoded()
        #expect(bytes.count >= 300)
        // On the wire: 82, its length, the value, END.
        let end = try #require(bytes.lastIndex(of: 255))
        #expect(Array(bytes[(end - agent.count - 2)..<end]) == [82, UInt8(agent.count)] + agent)
        // A client that has an address (a 4011 request through a relay) keeps its flag.
        let withAddress = request(ciaddr: [10, 9, 0, 57], giaddr: [10, 9, 0, 1], flags: 0, options: option(53, [3]) + option(93, [0, 7])
                                  + option(60, "PXEClient:Arch:00007:UNDI:003000") + [255])
        #expect(try !self.answer(withAddress, on: .bootServer, from: (IPv4(10, 9, 0, 1), 67)).get().reply.wantsBroadcast)
    }

    /// Option 67 ends with a NUL, as dnsmasq writes it (a ROM that reads it as a C string would
    /// read on into END); `file` holds the name with its NUL in the field's zeros.
    @Test func option67IsNULTerminated() throws {
        let reply = try answer(edk2Discover()).get().reply
        #expect(reply.options[.bootFileName] == Array("ipxe.efi".utf8) + [0])
        let bytes = reply.encoded()
        #expect(Array(bytes[108..<117]) == Array("ipxe.efi".utf8) + [0])
    }

    /// A name that is longer than the reply holds for this machine (a 16-byte hardware address in
    /// `${mac}`) is not sent cut short: silence, which the operator is told of.
    @Test func aBootFileTooLongForThisMachineIsNotSentCutShort() throws {
        let name = String(repeating: "n", count: 80) + "/${mac}"
        let menu = BootMenu.withDefaults([.efiX64: .file(name)], httpBase: nil)
        #expect(try answer(edk2Discover(), menu: menu).get().target.description.utf8.count == 98)
        let long = request(mac: (1...16).map { UInt8($0) }, options: option(53, [1]) + option(93, [0, 7])
                           + option(60, "PXEClient:Arch:00007:UNDI:003000") + [255])
        #expect(answer(long, menu: menu) == .failure(.bootFileTooLong(.efiX64, 128)))
        #expect(BootTarget.file(name).longestExpansion == 98)
        #expect(BootTarget.url("http://x/" + String(repeating: "u", count: 245)).longestExpansion == 254)
    }

    /// IPoIB sends no hardware address (hlen 0): the client identifier tells its machines apart.
    @Test func aMachineWithoutAHardwareAddressIsKnownByItsClientIdentifier() throws {
        let ib1 = try parse(request(mac: [], options: option(53, [1]) + option(61, [0xff, 1, 2, 3]) + [255])).get()
        let ib2 = try parse(request(mac: [], options: option(53, [1]) + option(61, [0xff, 1, 2, 4]) + [255])).get()
        let none = try parse(request(mac: [], options: option(53, [1]) + [255])).get()
        #expect(ib1.machine == [0xff, 0xff, 1, 2, 3] && ib1.machine != ib2.machine)
        #expect(none.machine == [0xfe, 0x12, 0x34, 0x56, 0x78])
        #expect(try parse(edk2Discover()).get().machine == [0x52, 0x54, 0x00, 0x12, 0x34, 0x56])
    }

    /// A name may hold the machine: `-m` rules with `E` then pick a file per machine with a default.
    @Test func aBootFileNameMayNameTheMachine() throws {
        let menu = BootMenu.withDefaults([.efiX64: .file("machines/${mac:hexhyp}/ipxe.efi"),
                                          .ipxe: .url("http://10.0.0.1/boot/${uuid}/${arch}.ipxe?mac=${mac}")], httpBase: nil)
        #expect(try answer(edk2Discover(), menu: menu).get().target == .file("machines/52-54-00-12-34-56/ipxe.efi"))
        let ipxe = edk2Discover(extra: option(77, "iPXE"))
        #expect(try answer(ipxe, menu: menu).get().target
                == .url("http://10.0.0.1/boot/01020304-0506-0708-090a-0b0c0d0e0f10/ipxe.ipxe?mac=52:54:00:12:34:56"))
    }
}
