import Testing
@testable import StampedeDHCP

/// A request as firmware sends it: the fixed header, the cookie, then `options` as raw bytes.
func request(xid: UInt32 = 0x1234_5678, mac: [UInt8] = [0x52, 0x54, 0x00, 0x12, 0x34, 0x56], ciaddr: [UInt8] = [0, 0, 0, 0],
             giaddr: [UInt8] = [0, 0, 0, 0], hops: UInt8 = 0, flags: UInt16 = 0x8000, file: [UInt8] = [], sname: [UInt8] = [],
             options: [UInt8]) -> [UInt8] {
    var bytes = [UInt8](repeating: 0, count: 240)
    bytes[0] = 1
    bytes[1] = 1
    bytes[2] = UInt8(mac.count)
    bytes[3] = hops
    bytes[4] = UInt8(xid >> 24); bytes[5] = UInt8(xid >> 16 & 0xff); bytes[6] = UInt8(xid >> 8 & 0xff); bytes[7] = UInt8(xid & 0xff)
    bytes[10] = UInt8(flags >> 8); bytes[11] = UInt8(flags & 0xff)
    bytes.replaceSubrange(12..<16, with: ciaddr)
    bytes.replaceSubrange(24..<28, with: giaddr)
    bytes.replaceSubrange(28..<(28 + mac.count), with: mac)
    bytes.replaceSubrange(44..<(44 + sname.count), with: sname)
    bytes.replaceSubrange(108..<(108 + file.count), with: file)
    bytes.replaceSubrange(236..<240, with: [99, 130, 83, 99])
    return bytes + options
}

func option(_ code: UInt8, _ value: [UInt8]) -> [UInt8] { [code, UInt8(value.count)] + value }
func option(_ code: UInt8, _ text: String) -> [UInt8] { option(code, Array(text.utf8)) }

let edk2UUID: [UInt8] = [0] + (1...16).map { UInt8($0) }

/// What OVMF's UEFI PXE sends first (EDK2 PxeBcDhcp4.c): type, size, parameters, UUID, UNDI,
/// architecture 7, vendor class.
func edk2Discover(arch: UInt16 = 7, vendor: String = "PXEClient:Arch:00007:UNDI:003000", extra: [UInt8] = []) -> [UInt8] {
    request(options: option(53, [1]) + option(57, [0x05, 0xc0]) + option(55, [1, 2, 3, 4, 5, 6, 12, 13, 15, 17, 18, 22, 23, 28, 40, 41, 42, 43, 50, 51, 54, 58, 59, 60, 66, 67, 97, 128, 129, 130, 131, 132, 133, 134, 135])
            + option(97, edk2UUID) + option(94, [1, 3, 0]) + option(93, [UInt8(arch >> 8), UInt8(arch & 0xff)])
            + option(60, vendor) + extra + [255])
}

func parse(_ bytes: [UInt8]) -> Result<DHCPMessage, DHCPMessage.Malformed> {
    bytes.withUnsafeBytes { raw in Result { () throws(DHCPMessage.Malformed) in try DHCPMessage.parse(raw) } }
}

@Suite struct DHCPMessageCodec {
    @Test func aFirmwareDiscoverIsReadWhole() throws {
        let message = try parse(edk2Discover()).get()
        #expect(message.operation == .request)
        #expect(message.type == .discover)
        #expect(message.transactionID == 0x1234_5678)
        #expect(message.hardwareAddress() == "52:54:00:12:34:56")
        #expect(message.hardwareAddress(separator: "-") == "52-54-00-12-34-56")
        #expect(message.wantsBroadcast)
        #expect(message.options[.clientArchitecture] == [0, 7])
        #expect(message.options[.vendorClass] == Array("PXEClient:Arch:00007:UNDI:003000".utf8))
        #expect(message.options[.machineIdentifier] == edk2UUID)
        #expect(message.options.present.first == 53)
    }

    @Test func aMessageRoundTripsAndIsPaddedToThreeHundredBytes() throws {
        var message = DHCPMessage(operation: .reply, transactionID: 7, clientHardwareAddress: [1, 2, 3, 4, 5, 6])
        message.serverAddress = IPv4(10, 0, 0, 1)
        message.bootFile = Array("ipxe.efi".utf8)
        message.options[.messageType] = [DHCPMessageType.offer.rawValue]
        message.options[.serverIdentifier] = [10, 0, 0, 1]
        let bytes = message.encoded()
        #expect(bytes.count == DHCPMessage.smallestMessage)
        #expect(try parse(bytes).get() == message)
    }

    /// RFC 3396: an option longer than 255 bytes goes in pieces, and the pieces are joined.
    @Test func aLongOptionIsSplitAndJoined() throws {
        var message = DHCPMessage(operation: .reply, transactionID: 1, clientHardwareAddress: [1, 2, 3, 4, 5, 6])
        let url = "http://10.0.0.1/" + String(repeating: "a", count: 400)
        message.options[.bootFileName] = Array(url.utf8)
        let bytes = message.encoded()
        #expect(bytes.count > 400 + 240)
        #expect(try parse(bytes).get().options[.bootFileName] == Array(url.utf8))
        let split = request(options: option(60, "PXECl") + option(60, "ient") + [255])
        #expect(try parse(split).get().options[.vendorClass] == Array("PXEClient".utf8))
    }

    /// RFC 2131 §4.1: under option 52 the options go on in `file` (1), then `sname` (2).
    @Test func overloadedFieldsCarryOptions() throws {
        let bytes = request(file: option(60, "PXEClient") + [255], sname: option(93, [0, 7]) + [255],
                            options: option(53, [1]) + option(52, [3]) + [255])
        let message = try parse(bytes).get()
        #expect(message.options[.vendorClass] == Array("PXEClient".utf8))
        #expect(message.options[.clientArchitecture] == [0, 7])
        #expect(message.options[.overload] == nil)
        #expect(message.bootFile.isEmpty && message.serverName.isEmpty)
        #expect(parse(request(options: option(52, [4]) + [255])) == .failure(.overload(4)))
    }

    @Test func padsAndAMissingEndAtTheFieldsEndAreTaken() throws {
        let padded = request(options: [0, 0, 0] + option(53, [1]) + [0, 0] + option(60, "PXEClient"))
        let message = try parse(padded).get()
        #expect(message.type == .discover)
        #expect(message.options[.vendorClass] == Array("PXEClient".utf8))
    }

    @Test func truncatedAndShortMessagesAreRefused() {
        #expect(parse(Array(repeating: 0, count: 64)) == .failure(.tooShort(64)))
        #expect(parse(Array(request(options: [])[..<239])) == .failure(.tooShort(239)))
        var noCookie = request(options: [255])
        noCookie[236] = 0
        #expect(parse(noCookie) == .failure(.noMagicCookie))
        #expect(parse(request(options: [53, 1])) == .failure(.truncatedOption(code: 53)))
        #expect(parse(request(options: [53])) == .failure(.truncatedOption(code: 53)))
        #expect(parse(request(options: option(60, "PXEClient") + [97, 17, 0, 1, 2])) == .failure(.truncatedOption(code: 97)))
        var longAddress = request(options: [255])
        longAddress[2] = 17
        #expect(parse(longAddress) == .failure(.hardwareLength(17)))
        var notBootp = request(options: [255])
        notBootp[0] = 3
        #expect(parse(notBootp) == .failure(.operation(3)))
    }

    /// A 1,500-byte message full of options, and one of pads, parse whole.
    @Test func largeMessagesParse() throws {
        var options: [UInt8] = []
        while options.count < 1500 - 240 - 20 { options += option(250, Array(repeating: 7, count: 10)) }
        let big = try parse(request(options: options + option(53, [1]) + [255])).get()
        #expect(big.options[raw: 250]?.count ?? 0 > 1000)
        #expect(big.type == .discover)
        let pads = try parse(request(options: Array(repeating: 0, count: 1200) + [255])).get()
        #expect(pads.options.present.isEmpty)
    }

    @Test func pxeSubOptionsAreReadAndWritten() {
        #expect(PXEOption.write([(.discoveryControl, [8])]) == [6, 1, 8, 255])
        #expect(PXEOption.read([6, 1, 8, 71, 4, 0x80, 0, 0, 0, 255])?[71] == [0x80, 0, 0, 0])
        #expect(PXEOption.read([71, 9, 1]) == nil)
    }
}
