import StampedeBase
import StampedeDHCP
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
        #expect(chain.stages[0].dhcp != nil && chain.stages[3].dhcp?.client == .ipxe)
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
}
