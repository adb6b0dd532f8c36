import Testing
@testable import StampedeDHCP

@Suite struct ProxyAnswer6Spec {
    let serverID = DUID.linkLayer(ethernet: [0x02, 0x00, 0x00, 0x00, 0x00, 0x01])
    let server = "2001:db8::1"
    let menu = BootMenu.withDefaults([:], httpBase: "http://[2001:db8::1]:8080/")

    func answer(_ bytes: [UInt8], on port: ProxyAnswer6.Port = .dhcp, menu: BootMenu? = nil) -> Result<ProxyAnswer6, ProxyAnswer6.Silence> {
        ProxyAnswer6.to(bytes, on: port, serverID: serverID, server: server, menu: menu ?? self.menu)
    }

    /// What EDK2 (PxeBcParseDhcp6Packet) takes for a proxy offer it asks the boot server about:
    /// no IA_NA, a vendor class of at least 13 bytes, enterprise 343, `PXEClient` from its 7th
    /// byte, a server identifier (copied into its Request to 4011) and a boot file URL.
    func isEDK2ProxyOffer(_ message: DHCPv6Message) -> Bool {
        guard let vendor = message.options[.vendorClass], vendor.count >= 13 else { return false }
        return message.options[.iaNA] == nil && vendor.prefix(4) == [0, 0, 1, 0x57] && vendor[6..<15].elementsEqual("PXEClient".utf8)
            && message.options[.serverID] != nil && message.options[.bootFileURL] != nil
    }

    @Test func ovmfsSolicitGetsAnAdvertiseWithTheURLAndNoAddress() throws {
        let answer = try answer(ovmfSolicit()).get()
        let reply = try DHCPv6Message.parse(answer.reply)
        #expect(reply.kind == .advertise)
        #expect(reply.transactionID == 0xabcdef)
        #expect(reply.options[.clientID] == ovmfClientID)
        #expect(reply.options[.serverID] == serverID.bytes)
        #expect(reply.options[.bootFileURL] == Array("tftp://[2001:db8::1]/ipxe.efi".utf8))
        #expect(reply.options.vendorClasses() == [Array("PXEClient".utf8)])
        #expect(isEDK2ProxyOffer(reply))
        #expect(answer.selector == .efiX64)
        #expect(!answer.relayed && answer.destinationPort(to: .dhcp, from: 546) == 546)
        // Its UUID from the DUID-UUID; no Ethernet address in it.
        #expect(answer.machine.uuid == "8a3c6b5e-1122-3344-5566-778899aabbcc")
        #expect(answer.machine.hardwareAddress.isEmpty)
    }

    /// EDK2's Request to the boot server: the offer's server identifier, no IA options, on 4011.
    @Test func theBootServersRequestOn4011GetsAReplyToItsPort() throws {
        var request = ovmfSolicit(kind: 3)
        request.removeSubrange(26..<42)  // the IA_NA
        request += [0x00, 0x02, 0x00, UInt8(serverID.bytes.count)] + serverID.bytes
        let answer = try answer(request, on: .bootServer).get()
        let reply = try DHCPv6Message.parse(answer.reply)
        #expect(reply.kind == .reply)
        #expect(reply.options[.iaNA] == nil)
        #expect(reply.options[.bootFileURL] == Array("tftp://[2001:db8::1]/ipxe.efi".utf8))
        #expect(answer.destinationPort(to: .bootServer, from: 4011) == 4011)
    }

    /// A Request on 547 is for an address: another server's offer (silence), or this server's,
    /// which gives none (each IA_NA says so; RFC 8415 §18.3.2).
    @Test func aRequestForAnAddressIsAnsweredOnlyWhenItNamesThisServer() throws {
        let other: [UInt8] = [0x00, 0x02, 0x00, 0x0a, 0, 3, 0, 1, 9, 9, 9, 9, 9, 9]
        #expect(answer(ovmfSolicit(kind: 3, extra: other)) == .failure(.otherServer))
        #expect(answer(ovmfSolicit(kind: 3)) == .failure(.notForProxy(.request)))
        let ours = [0x00, 0x02, 0x00, UInt8(serverID.bytes.count)] + serverID.bytes
        let reply = try DHCPv6Message.parse(answer(ovmfSolicit(kind: 3, extra: ours)).get().reply)
        #expect(reply.kind == .reply)
        let ia = try #require(reply.options[.iaNA])
        #expect(ia.prefix(12) == [0, 0, 0, 0x2a, 0, 0, 0, 0, 0, 0, 0, 0])
        let inside = try DHCPv6Options.parse(Array(ia.dropFirst(12)))
        #expect(inside[.statusCode]?.prefix(2) == [0, 2])  // NoAddrsAvail
        #expect(inside.all.count == 1)
        // A Renew of an address this server never gave: NoBinding.
        let renewed = try DHCPv6Message.parse(answer(ovmfSolicit(kind: 5, extra: ours)).get().reply)
        #expect(try DHCPv6Options.parse(Array(renewed.options[.iaNA]!.dropFirst(12)))[.statusCode]?.prefix(2) == [0, 3])
    }

    @Test func whatAProxyDoesNotAnswer() {
        #expect(answer(ovmfSolicit(kind: 4)) == .failure(.notForProxy(.confirm)))
        #expect(answer(ovmfSolicit(kind: 6)) == .failure(.notForProxy(.rebind)))
        #expect(answer(ovmfSolicit(kind: 8)) == .failure(.notForProxy(.release)))
        #expect(answer(ovmfSolicit(kind: 2)) == .failure(.notForProxy(.advertise)))
        #expect(answer(ovmfSolicit(kind: 1), on: .bootServer) == .failure(.notForProxy(.solicit)))
        #expect(answer(ovmfSolicit(clientID: nil)) == .failure(.noClientID))
        #expect(answer([1, 0, 0]) == .failure(.malformed(.tooShort(3))))
        // The UEFI network stack's own exchange: no vendor class.
        let plain: [UInt8] = [1, 0, 0, 1, 0x00, 0x01, 0x00, 0x0a, 0, 3, 0, 1, 0x52, 0x54, 0, 0x12, 0x34, 0x56]
        #expect(answer(plain) == .failure(.notBootClient))
    }

    /// UEFI HTTP Boot over IPv6 (`HTTPClient:Arch:00016`): the URL on --http, and its class back.
    @Test func httpBootGetsAnHTTPURL() throws {
        let http = Array("HTTPClient:Arch:00016:UNDI:003000".utf8)
        let bytes: [UInt8] = [1, 0, 0, 7, 0x00, 0x01, 0x00, UInt8(ovmfClientID.count)] + ovmfClientID
            + [0x00, 0x10, 0x00, UInt8(6 + http.count), 0, 0, 1, 0x57, 0, UInt8(http.count)] + http
        let answer = try answer(bytes).get()
        let reply = try DHCPv6Message.parse(answer.reply)
        #expect(answer.selector == .httpX64)
        #expect(reply.options[.bootFileURL] == Array("http://[2001:db8::1]:8080/ipxe.efi".utf8))
        #expect(reply.options.vendorClasses() == [Array("HTTPClient".utf8)])
        // Without --http there is no URL for it.
        #expect(self.answer(bytes, menu: BootMenu.withDefaults([:], httpBase: nil)) == .failure(.noBootFile(.httpX64)))
    }

    /// iPXE (user class `iPXE`) gets its script, whatever firmware it runs on.
    @Test func iPXEGetsItsScript() throws {
        let bytes = ovmfSolicit(extra: [0x00, 0x0f, 0x00, 0x06, 0x00, 0x04] + Array("iPXE".utf8))
        let answer = try answer(bytes, menu: BootMenu.withDefaults([:], httpBase: nil)).get()
        #expect(answer.selector == .ipxe)
        #expect(answer.url == "tftp://[2001:db8::1]/boot.ipxe")
        #expect(answer.machine.firmware == .efiX64)
    }

    /// Through two relays: the machine's address from the relay next to it (option 79), each
    /// relay's header and interface-id back around the reply, which goes to the relay's 547.
    @Test func aRelayedSolicitIsAnsweredThroughEveryRelay() throws {
        let mac: [UInt8] = [0x52, 0x54, 0x00, 0x12, 0x34, 0x56]
        let menu = BootMenu.withDefaults([.efiX64: .file("by-mac/${mac:hexhyp} x.efi")], httpBase: nil)
        let inner = relayForward(ovmfSolicit(), hops: 0, link: linkAddress, peer: peerAddress,
                                 options: [0x00, 0x4f, 0x00, 0x08, 0x00, 0x01] + mac + [0x00, 0x12, 0x00, 0x01, 0x07])
        let relay2: [UInt8] = [0xfe, 0x80] + [UInt8](repeating: 0, count: 13) + [2]
        let outer = relayForward(inner, hops: 1, link: [UInt8](repeating: 0, count: 16), peer: relay2,
                                 options: [0x00, 0x12, 0x00, 0x02, 0x0a, 0x0b])
        let answer = try answer(outer, menu: menu).get()
        #expect(answer.relayed && answer.destinationPort(to: .dhcp, from: 547) == 547)
        #expect(answer.machine.hardwareAddress == mac)
        #expect(answer.url == "tftp://[2001:db8::1]/by-mac/52-54-00-12-34-56%20x.efi")
        let first = try DHCPv6Message.parse(answer.reply)
        #expect(first.kind == .relayReply)
        #expect(first.relay == DHCPv6Message.Relay(hopCount: 1, linkAddress: [UInt8](repeating: 0, count: 16), peerAddress: relay2))
        #expect(first.options.all.map(\.code) == [18, 9])
        #expect(first.options[.interfaceID] == [0x0a, 0x0b])
        let second = try first.relayed()
        #expect(second.kind == .relayReply)
        #expect(second.relay == DHCPv6Message.Relay(hopCount: 0, linkAddress: linkAddress, peerAddress: peerAddress))
        #expect(second.options[.interfaceID] == [0x07])
        #expect(second.options[.clientLinkLayerAddress] == nil)
        let reply = try second.relayed()
        #expect(reply.kind == .advertise && reply.transactionID == 0xabcdef)
    }

    @Test func moreRelaysThanTheHopCountLetsThroughAreNotAnswered() {
        var bytes = ovmfSolicit()
        for hop in 0..<9 { bytes = relayForward(bytes, hops: UInt8(hop), link: linkAddress, peer: peerAddress) }
        #expect((try? answer(bytes).get()) != nil)
        bytes = relayForward(bytes, hops: 9, link: linkAddress, peer: peerAddress)
        #expect(answer(bytes) == .failure(.tooManyRelays))
    }

    /// iPXE names itself by a DUID-UUID (a nil one where the machine has no UUID): the machine's
    /// MAC is read from the EUI-64 of the link-local address it sent from.
    @Test func aMachineWithoutAnEthernetDUIDIsKnownByItsLinkLocalAddress() throws {
        let nilUUID: [UInt8] = [0, 4] + [UInt8](repeating: 0, count: 16)
        let source: [UInt8] = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x54, 0x00, 0xff, 0xfe, 0x5e, 0xa7, 0x01]
        let answer = try ProxyAnswer6.to(ovmfSolicit(clientID: nilUUID), on: .dhcp, from: source, serverID: serverID, server: server,
                                         menu: menu).get()
        #expect(answer.machine.hardwareAddress == [0x52, 0x54, 0x00, 0x5e, 0xa7, 0x01])
        #expect(answer.machine.uuid == nil)
        // A global or privacy address says nothing of the MAC.
        var global = source
        global[0] = 0x20
        #expect(try ProxyAnswer6.to(ovmfSolicit(clientID: nilUUID), on: .dhcp, from: global, serverID: serverID, server: server,
                                    menu: menu).get().machine.hardwareAddress.isEmpty)
    }

    @Test func theRecordsDecide() {
        let answer = ovmfSolicit().withUnsafeBytes { bytes in
            ProxyAnswer6.to(bytes, on: .dhcp, serverID: serverID, server: server) { machine, client in
                #expect(machine.uuid == "8a3c6b5e-1122-3344-5566-778899aabbcc")
                #expect(machine.architecture == 7)
                #expect(!client.isIPXE)  // OVMF's firmware: a boot starting
                return .leaveAlone(.ignored(record: "node-7"))
            }
        }
        #expect(answer == .failure(.leftAlone(.ignored(record: "node-7"))))
        // iPXE's DHCPv6 is a boot going on (it renews no kept API answer).
        let iPXE = ovmfSolicit(extra: [0x00, 0x0f, 0x00, 0x06, 0x00, 0x04] + Array("iPXE".utf8))
        var toldIPXE: Bool?
        _ = iPXE.withUnsafeBytes { bytes in
            ProxyAnswer6.to(bytes, on: .dhcp, serverID: serverID, server: server) { _, client in
                toldIPXE = client.isIPXE
                return .boot(menu)
            }
        }
        #expect(toldIPXE == true)
    }

    /// An architecture the client names only in its vendor class (no option 61).
    @Test func theArchitectureFromTheVendorClassWhenOption61IsMissing() throws {
        var bytes = ovmfSolicit()
        bytes.removeSubrange((bytes.count - 13)..<(bytes.count - 7))  // option 61
        #expect(try DHCPv6Message.parse(bytes).options.architectures.isEmpty)
        #expect(try answer(bytes).get().selector == .efiX64)
    }
}

/// `--dhcp6-derived`: the same answers with an address in each IA_NA, made from the machine and
/// the IAID within the server's /64, and the exchanges that keep it answered.
@Suite struct DerivedAddressesSpec {
    let serverID = DUID.linkLayer(ethernet: [0x02, 0x00, 0x00, 0x00, 0x00, 0x01])
    let serverAddress: [UInt8] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0x77, 0, 0, 0, 0, 0, 0, 0, 1]
    var derived: DerivedAddresses { DerivedAddresses(server: serverAddress) }
    let menu = BootMenu.withDefaults([:], httpBase: nil)
    let macClientID: [UInt8] = [0, 3, 0, 1, 0x52, 0x54, 0x00, 0x12, 0x34, 0x56]

    func answer(_ bytes: [UInt8], derived: DerivedAddresses?) throws -> DHCPv6Message {
        try DHCPv6Message.parse(ProxyAnswer6.to(bytes, on: .dhcp, serverID: serverID, server: "2001:db8:0:77::1", derived: derived, menu: menu).get().reply)
    }

    /// The IAID, T1, T2 and the one address of an IA_NA.
    func ia(_ message: DHCPv6Message) throws -> (iaid: [UInt8], t1: [UInt8], t2: [UInt8], address: [UInt8], lifetimes: [UInt8]) {
        let value = try #require(message.options[.iaNA])
        let inside = try DHCPv6Options.parse(Array(value.dropFirst(12)))
        let address = try #require(inside.all.first { $0.code == 5 }?.value)
        return (Array(value[0..<4]), Array(value[4..<8]), Array(value[8..<12]), Array(address.prefix(16)), Array(address.dropFirst(16)))
    }

    @Test func aSolicitGetsAnAddressInTheServersPrefixTheSameFromEveryServer() throws {
        let solicit = ovmfSolicit(clientID: macClientID)
        let advertise = try answer(solicit, derived: derived)
        #expect(advertise.kind == .advertise)
        let given = try ia(advertise)
        #expect(given.iaid == [0, 0, 0, 42])
        #expect(given.t1 == [0, 0, 0x07, 0x08] && given.t2 == [0, 0, 0x0b, 0x40])  // 1800, 2880
        #expect(given.lifetimes == [0, 0, 0x0e, 0x10, 0, 0, 0x1c, 0x20])  // 3600, 7200
        #expect(derived.contains(given.address) && given.address != serverAddress)
        #expect(given.address[8] & 0x02 == 0, "the u/l bit")
        #expect(!(given.address[11] == 0xff && given.address[12] == 0xfe), "never an EUI-64")
        #expect(advertise.options[.bootFileURL] == Array("tftp://[2001:db8:0:77::1]/ipxe.efi".utf8))
        // Another server in the same /64, another run: the same address; another IAID, another.
        let other = DerivedAddresses(server: Array(serverAddress.prefix(15)) + [9])
        #expect(try ia(answer(solicit, derived: other)).address == given.address)
        #expect(derived.address(for: [0x52, 0x54, 0x00, 0x12, 0x34, 0x56], iaid: [0, 0, 0, 43]) != given.address)
        #expect(derived.address(for: [0x52, 0x54, 0x00, 0x12, 0x34, 0x56], iaid: [0, 0, 0, 42]) == given.address)
    }

    @Test func theExchangesThatKeepTheAddressAreAnswered() throws {
        let ours = [0x00, 0x02, 0x00, UInt8(serverID.bytes.count)] + serverID.bytes
        let given = try ia(answer(ovmfSolicit(clientID: macClientID), derived: derived)).address
        for kind: UInt8 in [3, 5, 6] {  // Request, Renew (naming this server), Rebind (naming none)
            let reply = try answer(ovmfSolicit(clientID: macClientID, kind: kind, extra: kind == 6 ? [] : ours), derived: derived)
            #expect(reply.kind == .reply)
            #expect(try ia(reply).address == given, "kind \(kind)")
        }
        // Without derived addresses, a Rebind is the site server's.
        #expect(ProxyAnswer6.to(ovmfSolicit(clientID: macClientID, kind: 6), on: .dhcp, serverID: serverID, server: "2001:db8::1",
                                menu: menu) == .failure(.notForProxy(.rebind)))
        // Confirm: on this link (an address in the /64) or not.
        func confirm(_ address: [UInt8]) -> [UInt8] {
            let iaAddress: [UInt8] = [0x00, 0x05, 0x00, 0x18] + address + [UInt8](repeating: 0, count: 8)
            var bytes = ovmfSolicit(clientID: macClientID, kind: 4)
            let at = 4 + 4 + macClientID.count
            bytes.replaceSubrange(at..<(at + 16), with: [0x00, 0x03, 0x00, UInt8(12 + iaAddress.count), 0, 0, 0, 42] + [UInt8](repeating: 0, count: 8) + iaAddress)
            return bytes
        }
        #expect(try answer(confirm(given), derived: derived).options[.statusCode]?.prefix(2) == [0, 0])
        let elsewhere: [UInt8] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0x99] + given.suffix(8)
        #expect(try answer(confirm(elsewhere), derived: derived).options[.statusCode]?.prefix(2) == [0, 4])  // NotOnLink
        #expect(ProxyAnswer6.to(ovmfSolicit(clientID: macClientID, kind: 4), on: .dhcp, serverID: serverID, server: "2001:db8::1",
                                derived: derived, menu: menu) == .failure(.notForProxy(.confirm)))  // no address in it
        // Release and Decline: nothing kept, Success; EDK2's Release carries no vendor class.
        for kind: UInt8 in [8, 9] {
            let reply = try answer(ovmfSolicit(clientID: macClientID, kind: kind, extra: ours), derived: derived)
            #expect(reply.kind == .reply && reply.options[.statusCode]?.prefix(2) == [0, 0])
        }
        let release: [UInt8] = [8, 0, 0, 9, 0x00, 0x01, 0x00, UInt8(macClientID.count)] + macClientID + ours
            + [0x00, 0x03, 0x00, 0x0c, 0, 0, 0, 42] + [UInt8](repeating: 0, count: 8)
        #expect(try answer(release, derived: derived).options[.statusCode]?.prefix(2) == [0, 0])
        #expect(ProxyAnswer6.to(release, on: .dhcp, serverID: serverID, server: "2001:db8::1", menu: menu) == .failure(.notForProxy(.release)))
    }

    /// A relayed machine on a link of its own: an address of the server's /64 would not work
    /// there, so none is given, and the answer is a proxy's; one relayed from a link in the /64
    /// gets its address.
    @Test func aRelayedMachineGetsAnAddressOnlyWhereItsLinkIsThePrefix() throws {
        let solicit = ovmfSolicit(clientID: macClientID)
        let elsewhere = relayForward(solicit, hops: 0, link: linkAddress, peer: peerAddress)
        let answered = try ProxyAnswer6.to(elsewhere, on: .dhcp, serverID: serverID, server: "2001:db8:0:77::1", derived: derived, menu: menu).get()
        let inner = try DHCPv6Message.parse(answered.reply).relayed()
        #expect(inner.kind == .advertise && inner.options[.iaNA] == nil && answered.given.isEmpty)
        #expect(inner.options[.bootFileURL] != nil)
        let onLink = relayForward(solicit, hops: 0, link: Array(serverAddress.prefix(8)) + [0, 0, 0, 0, 0, 0, 0, 9], peer: peerAddress)
        let given = try ProxyAnswer6.to(onLink, on: .dhcp, serverID: serverID, server: "2001:db8:0:77::1", derived: derived, menu: menu).get()
        #expect(try DHCPv6Message.parse(given.reply).relayed().options[.iaNA] != nil && given.given.count == 1)
    }

    @Test func anAddressIsNeverReservedNorTheServers() {
        let addresses = (0..<20_000).map { derived.address(for: [UInt8(truncatingIfNeeded: $0), UInt8(truncatingIfNeeded: $0 >> 8)], iaid: [0, 0, 0, 1]) }
        #expect(Set(addresses).count == addresses.count)
        for address in addresses {
            #expect(derived.contains(address) && address != serverAddress)
            #expect(!address.suffix(8).allSatisfy { $0 == 0 })
            #expect(!(address[11] == 0xff && address[12] == 0xfe))
            #expect(!(address[8] == 0xfd && address[9...14].allSatisfy { $0 == 0xff } && address[15] >= 0x80))
        }
    }
}
