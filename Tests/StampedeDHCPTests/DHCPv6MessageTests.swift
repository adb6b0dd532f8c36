import Testing
@testable import StampedeDHCP

/// Bytes as OVMF's PXE over IPv6 sends its Solicit (options 1, 3, 6, 8, 16, 61, 62: what was seen
/// from Debian 12's OVMF), written out by hand, not by the encoder under test.
let ovmfUUID: [UInt8] = [0x8a, 0x3c, 0x6b, 0x5e, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc]
let ovmfClientID: [UInt8] = [0x00, 0x04] + ovmfUUID
let ovmfVendorClass = Array("PXEClient:Arch:00007:UNDI:003000".utf8)

func ovmfSolicit(transaction: [UInt8] = [0xab, 0xcd, 0xef], clientID: [UInt8]? = ovmfClientID, kind: UInt8 = 1,
                 extra: [UInt8] = []) -> [UInt8] {
    var bytes: [UInt8] = [kind] + transaction
    if let clientID { bytes += [0x00, 0x01, 0x00, UInt8(clientID.count)] + clientID }
    bytes += [0x00, 0x03, 0x00, 0x0c, 0x00, 0x00, 0x00, 0x2a] + [UInt8](repeating: 0, count: 8)  // IA_NA, IAID 42
    bytes += [0x00, 0x06, 0x00, 0x08, 0x00, 0x3b, 0x00, 0x3c, 0x00, 0x17, 0x00, 0x18]  // ORO: 59, 60, 23, 24
    bytes += [0x00, 0x08, 0x00, 0x02, 0x00, 0x00]  // elapsed
    bytes += [0x00, 0x10, 0x00, UInt8(6 + ovmfVendorClass.count), 0x00, 0x00, 0x01, 0x57, 0x00, UInt8(ovmfVendorClass.count)]
        + ovmfVendorClass
    bytes += [0x00, 0x3d, 0x00, 0x02, 0x00, 0x07]  // architecture 7
    bytes += [0x00, 0x3e, 0x00, 0x03, 0x01, 0x03, 0x00]  // UNDI 3.0
    return bytes + extra
}

/// A Relay-forward around `inner`, with `options` before option 9.
func relayForward(_ inner: [UInt8], hops: UInt8, link: [UInt8], peer: [UInt8], options: [UInt8] = []) -> [UInt8] {
    [12, hops] + link + peer + options + [0x00, 0x09, UInt8(inner.count >> 8), UInt8(inner.count & 0xff)] + inner
}

let linkAddress: [UInt8] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1]
let peerAddress: [UInt8] = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x54, 0x00, 0xff, 0xfe, 0x12, 0x34, 0x56]

@Suite struct DHCPv6MessageSpec {
    @Test func ovmfsSolicitReadsAsSent() throws {
        let message = try DHCPv6Message.parse(ovmfSolicit())
        #expect(message.kind == .solicit)
        #expect(message.transactionID == 0xabcdef)
        #expect(message.relay == nil)
        #expect(message.options.all.map(\.code) == [1, 3, 6, 8, 16, 61, 62])
        #expect(message.options[.clientID] == ovmfClientID)
        #expect(DUID(ovmfClientID).uuid == ovmfUUID)
        #expect(message.options.vendorClasses() == [ovmfVendorClass])
        #expect(message.options.vendorClasses(enterprise: 10629).isEmpty)
        #expect(message.options.architectures == [7])
        #expect(message.options.userClasses.isEmpty)
        // Written again, the same bytes.
        #expect(message.encoded() == ovmfSolicit())
    }

    @Test func iPXEsUserClassAndSeveralArchitecturesRead() throws {
        // User class "iPXE" (RFC 8415 §21.15: each class with its length), two architectures.
        let bytes: [UInt8] = [11, 0, 0, 1, 0x00, 0x0f, 0x00, 0x06, 0x00, 0x04] + Array("iPXE".utf8)
            + [0x00, 0x3d, 0x00, 0x04, 0x00, 0x07, 0x00, 0x10]
        let message = try DHCPv6Message.parse(bytes)
        #expect(message.kind == .informationRequest)
        #expect(message.options.userClasses == [Array("iPXE".utf8)])
        #expect(message.options.architectures == [7, 16])
    }

    @Test func whatIsNotAMessageSaysWhy() {
        #expect(throws: DHCPv6Message.Malformed.tooShort(3)) { try DHCPv6Message.parse([1, 0, 0]) }
        #expect(throws: DHCPv6Message.Malformed.kind(0)) { try DHCPv6Message.parse([0, 0, 0, 0]) }
        #expect(throws: DHCPv6Message.Malformed.kind(14)) { try DHCPv6Message.parse([14, 0, 0, 0]) }
        // A relay's header is 34 bytes.
        #expect(throws: DHCPv6Message.Malformed.tooShort(20)) { try DHCPv6Message.parse([12] + [UInt8](repeating: 0, count: 19)) }
        // A length past the end, and an option header cut short.
        #expect(throws: DHCPv6Message.Malformed.truncatedOption(code: 1)) { try DHCPv6Message.parse([1, 0, 0, 0, 0, 1, 0, 9, 1, 2]) }
        #expect(throws: DHCPv6Message.Malformed.truncatedOption(code: 0x0102)) { try DHCPv6Message.parse([1, 0, 0, 0, 1, 2]) }
        #expect(throws: DHCPv6Message.Malformed.truncatedOption(code: 0x0100)) { try DHCPv6Message.parse([1, 0, 0, 0, 1]) }
        // A relay without the message it relays.
        #expect(throws: DHCPv6Message.Malformed.noRelayedMessage) {
            try DHCPv6Message.parse([12, 0] + linkAddress + peerAddress).relayed()
        }
    }

    @Test func aRelayForwardHoldsTheClientsMessage() throws {
        let interface: [UInt8] = [0x00, 0x12, 0x00, 0x04] + Array("eth3".utf8)
        let bytes = relayForward(ovmfSolicit(), hops: 0, link: linkAddress, peer: peerAddress, options: interface)
        let relay = try DHCPv6Message.parse(bytes)
        #expect(relay.kind == .relayForward)
        #expect(relay.relay == DHCPv6Message.Relay(hopCount: 0, linkAddress: linkAddress, peerAddress: peerAddress))
        #expect(relay.options[.interfaceID] == Array("eth3".utf8))
        #expect(try relay.relayed() == DHCPv6Message.parse(ovmfSolicit()))
        #expect(relay.encoded() == bytes)
    }

    @Test func duidsSayTheMachinesAddressOrUUID() {
        let mac: [UInt8] = [0x52, 0x54, 0x00, 0x12, 0x34, 0x56]
        #expect(DUID([0, 1, 0, 1, 0x2a, 0x2b, 0x2c, 0x2d] + mac).ethernetAddress == mac)  // LLT
        #expect(DUID([0, 3, 0, 1] + mac).ethernetAddress == mac)  // LL
        #expect(DUID.linkLayer(ethernet: mac).ethernetAddress == mac)
        #expect(DUID([0, 3, 0, 6] + mac).ethernetAddress == nil)  // not Ethernet
        #expect(DUID([0, 2, 0, 0, 0x01, 0x57, 1, 2, 3]).ethernetAddress == nil)  // EN
        #expect(DUID([0, 2, 0, 0, 0x01, 0x57, 1, 2, 3]).uuid == nil)
        #expect(DUID([0, 4] + ovmfUUID).uuid == ovmfUUID)
        #expect(DUID([0, 4] + ovmfUUID.dropLast()).uuid == nil)
        #expect(DUID([0, 4] + [UInt8](repeating: 0, count: 16)).uuid == nil)  // iPXE's where the machine has none
    }

    @Test func aClassCutShortEndsTheList() {
        #expect(DHCPv6Options.lengthPrefixed([0, 2, 65, 66, 0, 5, 67][...]) == [[65, 66]])
        #expect(DHCPv6Options.lengthPrefixed([0][...]).isEmpty)
    }
}
