import StampedeBase
import StampedeDHCP
import StampedeIO
import StampedeProtocol
import Testing
@testable import StampedeStorm

/// A profile's `dhcp` stages: how they read, what each machine sends, and that a storm without a
/// boot network plays the profile without them.
@Suite struct DHCPStageParsing {
    @Test func aDHCPLineTakesItsClientAndArchitectureAndTheFirmwaresTiming() throws {
        let profile = try BootProfile(parsing: "profile p\nfirmware uefi retry=4s tries=4 backoff=8\ndhcp pxe arch=7\nget ipxe.efi")
        #expect(profile.usesDHCP && profile.stages.count == 2)
        let stage = profile.stages[0]
        #expect(stage.dhcp == BootProfile.DHCPAsk(client: .pxe, architecture: 7))
        #expect(stage.label == "uefi dhcp pxe arch=7")
        // EDK2's DISCOVER: after 4, 8, 16 and 32 s, then it gives up.
        #expect(stage.patience == 60 * nanosecondsPerSecond)
        #expect(profile.withoutDHCP.stages.map(\.names) == [["ipxe.efi"]] && !profile.withoutDHCP.usesDHCP)
    }

    @Test(arguments: ["dhcp pxe", "dhcp bootp arch=7", "dhcp pxe arch=70000", "dhcp pxe arch=x", "dhcp pxe arch=7 more"])
    func aBadDHCPLineIsRefusedWithItsNumber(line: String) {
        #expect(throws: BootProfile.ParseError.self) { try BootProfile(parsing: "profile p\nfirmware f\n\(line)") }
    }

    @Test func theBuiltInFirmwareBeginsWithItsDHCPOnlyWhenAsked() throws {
        let chain = try #require(BootProfile.builtIn("uefi-ipxe", dhcp: true))
        #expect(chain.stages.compactMap(\.dhcp) == [.init(client: .pxe, architecture: 7), .init(client: .ipxe, architecture: 7)])
        #expect(chain.stages[0].dhcp != nil && chain.stages[4].dhcp?.client == .ipxe)
        #expect(BootProfile.builtIn("uefi-ipxe") == chain.withoutDHCP)
        #expect(try #require(BootProfile.builtIn("pxelinux", dhcp: true)).stages[0].dhcp == .init(client: .pxe, architecture: 0))
    }

    @Test func eachMachineSaysWhoItIsAsItsFirmwareDoes() throws {
        let machine = MachineIdentity(number: 41)
        let discover = StormDHCP.discover(.init(client: .pxe, architecture: 7), for: machine)
        let read = try discover.encoded().withUnsafeBytes { try DHCPMessage.parse($0) }
        #expect(read.type == .discover && read.clientHardwareAddress == machine.mac && read.wantsBroadcast)
        let client = try #require(BootClient(read))
        #expect(client.kind == .pxe && client.architecture == 7 && !client.isIPXE)
        #expect(read.options[.vendorClass] == Array("PXEClient:Arch:00007:UNDI:003000".utf8))
        #expect(read.options[.machineIdentifier] == [0] + machine.uuid)
        let ipxe = try #require(BootClient(StormDHCP.discover(.init(client: .ipxe, architecture: 7), for: machine)))
        #expect(ipxe.isIPXE)
        let http = try #require(BootClient(StormDHCP.discover(.init(client: .http, architecture: 16), for: machine)))
        #expect(http.kind == .http && http.architecture == 16)
        // Transaction IDs tell the machines apart.
        #expect(Set((0..<10_000).map { StormDHCP.transactionID(of: MachineIdentity(number: $0)) }).count == 10_000)
    }

    /// The rpi4 profile: a Pi 4's ROM as the proxy tells one (a Pi's hardware address, a BIOS
    /// ROM's vendor class, architecture 0), its serial number 8 hex digits, and its files under
    /// `${dir}`: the directory its `first` stage found start4.elf in.
    @Test func aRaspberryPiSaysWhatItsROMSays() throws {
        let profile = try #require(BootProfile.builtIn("rpi4", dhcp: true))
        #expect(profile.stages[0].dhcp == .init(client: .rpi, architecture: 0))
        #expect(profile.stages[1].action == .first && profile.stages[1].names == ["${serial}/start4.elf", "start4.elf"])
        let plan = StormPlan(server: SocketAddress(parsing: "10.0.0.1:69", defaultPort: 69)!, profile: profile)
        let machine = plan.identity(of: 7)
        #expect(machine.mac.prefix(3).elementsEqual([0xDC, 0xA6, 0x32]))
        let read = try StormDHCP.discover(profile.stages[0].dhcp!, for: machine).encoded().withUnsafeBytes { try DHCPMessage.parse($0) }
        #expect(read.options[.vendorClass] == Array("PXEClient:Arch:00000:UNDI:002001".utf8))
        #expect(try #require(BootClient(read)).isRaspberryPi)
        #expect(BootSelector(try #require(BootClient(read))) == .rpi)
        let serial = machine.expand("${serial}")
        #expect(serial.count == 8 && serial.utf8.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) })
        #expect(serial == plan.identity(of: 7).expand("${serial}") && serial != plan.identity(of: 8).expand("${serial}"))
        let kernel = try #require(profile.stages.last)
        #expect(String(decoding: kernel.plan(name: 0, for: machine, directory: serial + "/").request.filename, as: UTF8.self)
                == serial + "/kernel8.img")
        #expect(String(decoding: kernel.plan(name: 0, for: machine).request.filename, as: UTF8.self) == "kernel8.img")
        // A profile of another firmware keeps the storm's own addresses.
        let uefi = StormPlan(server: SocketAddress(parsing: "10.0.0.1:69", defaultPort: 69)!, profile: BootProfile.builtIn("uefi", dhcp: true)!)
        #expect(uefi.identity(of: 7).mac.prefix(3).elementsEqual([0x52, 0x54, 0x00]))
    }

    /// EDK2 names the menu item it took (dnsmasq numbers its pxe-services from 0x8000), and names
    /// none after an offer without a menu (its "BINL" retry); iPXE never does.
    @Test func theBootServerRequestCarriesTheMenuItemTakenAndNoneWithoutAMenu() throws {
        let machine = MachineIdentity(number: 0)
        let discover = StormDHCP.discover(.init(client: .pxe, architecture: 7), for: machine)
        let source = IPv4(10, 0, 0, 5)
        let edk2 = StormDHCP.bootServerRequest(after: discover, from: source, bootItem: 0x8000)
        #expect(edk2.type == .request && edk2.clientAddress == source && !edk2.wantsBroadcast)
        #expect(edk2.options[.vendorSpecific].flatMap(PXEOption.read)?[PXEOption.bootItem.rawValue] == [0x80, 0, 0, 0])
        #expect(StormDHCP.bootServerRequest(after: discover, from: source, bootItem: nil).options[.vendorSpecific] == nil)
    }

    /// Over IPv6, each machine's first message as its firmware sends it, read by the server's own
    /// grammar and answered by its proxy; then EDK2's Request for what the Advertise gave: to the
    /// boot server (no IA, the proxy named) for a proxy offer, for the address otherwise.
    @Test func overIPv6EachMachineSolicitsAsItsFirmwareDoesAndRequestsWhatItWasGiven() throws {
        let machine = MachineIdentity(number: 41)
        let solicit = StormDHCP.solicit(.init(client: .pxe, architecture: 7), for: machine)
        let read = try DHCPv6Message.parse(solicit.encoded())
        #expect(read.kind == .solicit && read.transactionID == StormDHCP.transactionID(of: machine) & 0xFF_FFFF)
        #expect(read.options[.clientID] == [0, 4] + machine.uuid && read.options[.iaNA]?.count == 12)
        #expect(read.options.vendorClasses() == [Array("PXEClient:Arch:00007:UNDI:003000".utf8)] && read.options.architectures == [7])
        let serverID = DUID.linkLayer(ethernet: [2, 0, 0, 0, 0, 1])
        let menu = BootMenu.withDefaults([:], httpBase: "http://[2001:db8::1]:8080/")
        let offer = try DHCPv6Message.parse(ProxyAnswer6.to(solicit.encoded(), on: .dhcp, serverID: serverID, server: "2001:db8::1",
                                                             menu: menu).get().reply)
        #expect(!StormDHCP.givesAddress(offer) && StormDHCP.urlHost(offer.options[.bootFileURL]!) == "2001:db8::1")
        let request = StormDHCP.request(after: solicit, advertise: offer, toBootServer: true)
        #expect(request.kind == .request && request.options[.iaNA] == nil && request.options[.serverID] == serverID.bytes)
        let reply = try DHCPv6Message.parse(ProxyAnswer6.to(request.encoded(), on: .bootServer, serverID: serverID, server: "2001:db8::1",
                                                             menu: menu).get().reply)
        #expect(reply.kind == .reply && reply.options[.bootFileURL] == Array("tftp://[2001:db8::1]/ipxe.efi".utf8))
        // A derived address: asked for on 547 with the IA as given.
        let derived = DerivedAddresses(server: [0x20, 0x01, 0x0d, 0xb8] + [UInt8](repeating: 0, count: 11) + [1])
        let addressed = try DHCPv6Message.parse(ProxyAnswer6.to(solicit.encoded(), on: .dhcp, serverID: serverID, server: "2001:db8::1",
                                                                derived: derived, menu: menu).get().reply)
        #expect(StormDHCP.givesAddress(addressed))
        let forAddress = StormDHCP.request(after: solicit, advertise: addressed, toBootServer: false)
        #expect(forAddress.options[.iaNA] == addressed.options[.iaNA] && forAddress.options[.serverID] == serverID.bytes)
        // iPXE: an Information-request with its user class, no IA; HTTP Boot: HTTPClient.
        let ipxe = try DHCPv6Message.parse(StormDHCP.solicit(.init(client: .ipxe, architecture: 7), for: machine).encoded())
        #expect(ipxe.kind == .informationRequest && ipxe.options[.iaNA] == nil && ipxe.options.userClasses == [Array("iPXE".utf8)])
        let http = StormDHCP.solicit(.init(client: .http, architecture: 16), for: machine)
        #expect(http.options.vendorClasses() == [Array("HTTPClient:Arch:00016:UNDI:003001".utf8)])
        // A soliciting machine takes Advertises, not Replies (a boot server's second copy of its
        // Reply to the same machine in an earlier storm ended a later storm's HTTP Boot machines
        // with "an HTTP Boot offer without a URL"); after its Request, Replies alone.
        #expect(StormDHCP.awaits(.advertise, sentRequest: false, iPXE: false) && !StormDHCP.awaits(.reply, sentRequest: false, iPXE: false))
        #expect(StormDHCP.awaits(.reply, sentRequest: true, iPXE: false) && !StormDHCP.awaits(.advertise, sentRequest: true, iPXE: false))
        #expect(StormDHCP.awaits(.reply, sentRequest: false, iPXE: true) && !StormDHCP.awaits(.advertise, sentRequest: false, iPXE: true))
        #expect(!StormDHCP.awaits(.reconfigure, sentRequest: true, iPXE: false))
    }
}
