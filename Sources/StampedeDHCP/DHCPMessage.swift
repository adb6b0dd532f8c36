import StampedeBase

/// A DHCP message (RFC 2131 §2, BOOTP's layout with options after the magic cookie), read and
/// written here and nowhere else. Pure: bytes in, a message or the reason it is not one out; a
/// message in, bytes out. The options are kept by code, each one's value whole: an option sent in
/// several pieces is joined (RFC 3396), and the pieces the `file` and `sname` fields carry when
/// option 52 says so (RFC 2131 §4.1) are read after the options field, in that order.
public struct DHCPMessage: Equatable, Sendable {
    public enum Operation: UInt8, Sendable {
        case request = 1, reply = 2
    }

    public var operation: Operation
    /// The hardware address's type (1: Ethernet) and length in `clientHardwareAddress`.
    public var hardwareType: UInt8
    public var hardwareLength: UInt8
    /// Relay agents passed (RFC 1542).
    public var hops: UInt8
    public var transactionID: UInt32
    public var seconds: UInt16
    /// Bit 15: the client asks for a broadcast reply (it cannot take a unicast one yet).
    public var flags: UInt16
    /// Addresses in network order, as four bytes each: ciaddr, yiaddr, siaddr, giaddr.
    public var clientAddress: IPv4
    public var yourAddress: IPv4
    public var serverAddress: IPv4
    public var relayAddress: IPv4
    /// chaddr: 16 bytes, of which `hardwareLength` are the address.
    public var clientHardwareAddress: [UInt8]
    /// sname (64 bytes) and file (128 bytes) as written, NUL-padded; empty when they carried options.
    public var serverName: [UInt8]
    public var bootFile: [UInt8]
    /// Every option's value by its code, in the order first seen.
    public var options: DHCPOptions

    public init(operation: Operation, transactionID: UInt32, clientHardwareAddress: [UInt8], options: DHCPOptions = DHCPOptions()) {
        self.operation = operation
        hardwareType = 1
        hardwareLength = UInt8(min(clientHardwareAddress.count, 16))
        hops = 0
        self.transactionID = transactionID
        seconds = 0
        flags = 0
        clientAddress = .any
        yourAddress = .any
        serverAddress = .any
        relayAddress = .any
        self.clientHardwareAddress = clientHardwareAddress
        serverName = []
        bootFile = []
        self.options = options
    }

    /// Bytes before the options: the fixed header (236) and the magic cookie (4).
    public static let headerLength = 240
    static let magicCookie: [UInt8] = [99, 130, 83, 99]
    /// RFC 1542 §3.4 (and what old BOOTP relays and PXE ROMs expect): a message is at least 300
    /// bytes; shorter replies are padded.
    public static let smallestMessage = 300
    /// The most a reply writes without the client's leave (option 57): RFC 2131's 576-byte IP
    /// datagram less the IP and UDP headers.
    public static let defaultLargestMessage = 548
    /// The longest boot file name `file` holds: 128 bytes, a NUL last.
    public static let largestBootFile = 127
    /// `flags`' one bit (RFC 2131 §2): answer by broadcast, the client cannot take a unicast yet.
    public static let broadcastFlag: UInt16 = 0x8000

    /// Why bytes are not a message this server reads.
    public enum Malformed: Error, Equatable, Sendable {
        /// Shorter than the fixed header and the cookie.
        case tooShort(Int)
        case noMagicCookie
        /// `op` is neither BOOTREQUEST nor BOOTREPLY.
        case operation(UInt8)
        /// `hlen` over chaddr's 16 bytes.
        case hardwareLength(UInt8)
        /// An option whose length runs past the end of its field.
        case truncatedOption(code: UInt8)
        /// Option 52 names fields that do not exist (1 file, 2 sname, 3 both).
        case overload(UInt8)
    }

    /// Reads a message. A missing END where the options reach the end of their field is taken as
    /// the end (some ROMs pad with nothing); an option that runs past it is not.
    public static func parse(_ bytes: UnsafeRawBufferPointer) throws(Malformed) -> DHCPMessage {
        guard bytes.count >= headerLength else { throw .tooShort(bytes.count) }
        guard bytes[236] == magicCookie[0], bytes[237] == magicCookie[1], bytes[238] == magicCookie[2],
              bytes[239] == magicCookie[3] else { throw .noMagicCookie }
        guard let operation = Operation(rawValue: bytes[0]) else { throw .operation(bytes[0]) }
        let hardwareLength = bytes[2]
        guard hardwareLength <= 16 else { throw .hardwareLength(hardwareLength) }
        var message = DHCPMessage(operation: operation, transactionID: bytes.uint32(at: 4),
                                  clientHardwareAddress: Array(bytes[28..<(28 + Int(hardwareLength))]))
        message.hardwareType = bytes[1]
        message.hops = bytes[3]
        message.seconds = bytes.uint16(at: 8)
        message.flags = bytes.uint16(at: 10)
        message.clientAddress = IPv4(bytes, at: 12)
        message.yourAddress = IPv4(bytes, at: 16)
        message.serverAddress = IPv4(bytes, at: 20)
        message.relayAddress = IPv4(bytes, at: 24)
        let serverName = UnsafeRawBufferPointer(rebasing: bytes[44..<108])
        let bootFile = UnsafeRawBufferPointer(rebasing: bytes[108..<236])
        try message.options.read(UnsafeRawBufferPointer(rebasing: bytes[headerLength...]))
        let overload = message.options[.overload]?.first ?? 0
        guard overload <= 3 else { throw .overload(overload) }
        if overload & 1 != 0 { try message.options.read(bootFile) } else { message.bootFile = Array(bootFile).trimmingNULs }
        if overload & 2 != 0 { try message.options.read(serverName) } else { message.serverName = Array(serverName).trimmingNULs }
        message.options[.overload] = nil
        return message
    }

    /// The message's bytes: the header, the cookie, the options (each split in pieces of 255
    /// bytes where longer, RFC 3396), END, padded to `smallestMessage`.
    public func encoded() -> [UInt8] {
        var out = [UInt8](repeating: 0, count: Self.headerLength)
        out[0] = operation.rawValue
        out[1] = hardwareType
        out[2] = hardwareLength
        out[3] = hops
        out.put(transactionID, at: 4)
        out.put(seconds, at: 8)
        out.put(flags, at: 10)
        clientAddress.write(into: &out, at: 12)
        yourAddress.write(into: &out, at: 16)
        serverAddress.write(into: &out, at: 20)
        relayAddress.write(into: &out, at: 24)
        for (i, byte) in clientHardwareAddress.prefix(16).enumerated() { out[28 + i] = byte }
        for (i, byte) in serverName.prefix(63).enumerated() { out[44 + i] = byte }
        for (i, byte) in bootFile.prefix(127).enumerated() { out[108 + i] = byte }
        out.replaceSubrange(236..<240, with: Self.magicCookie)
        options.write(into: &out)
        out.append(DHCPOptionCode.end.rawValue)
        if out.count < Self.smallestMessage { out += [UInt8](repeating: 0, count: Self.smallestMessage - out.count) }
        return out
    }

    /// The client's hardware address as written in logs and names: lower-case hex pairs joined
    /// by `separator` (`52-54-00-12-34-56`).
    public func hardwareAddress(separator: String = ":") -> String {
        hexText(clientHardwareAddress.prefix(Int(hardwareLength)), separator: separator.utf8.first)
    }

    /// The message type (option 53), if it carries one.
    public var type: DHCPMessageType? {
        guard let value = options[.messageType], value.count == 1 else { return nil }
        return DHCPMessageType(rawValue: value[0])
    }

    /// Bit 15 of `flags` (RFC 2131 §2).
    public var wantsBroadcast: Bool { flags & Self.broadcastFlag != 0 }
}

/// DHCP message types (option 53, RFC 2132 §9.6).
public enum DHCPMessageType: UInt8, Sendable, CustomStringConvertible {
    case discover = 1, offer, request, decline, ack, nak, release, inform

    /// Its name as RFC 2131 writes it, for log lines: DISCOVER, REQUEST, …
    public var name: String {
        switch self {
        case .discover: "DISCOVER"
        case .offer: "OFFER"
        case .request: "REQUEST"
        case .decline: "DECLINE"
        case .ack: "ACK"
        case .nak: "NAK"
        case .release: "RELEASE"
        case .inform: "INFORM"
        }
    }

    /// Its name in lower case, as JSON events say it (written out: an enum without a description
    /// is printed by reflection, on every request's path).
    public var description: String {
        switch self {
        case .discover: "discover"
        case .offer: "offer"
        case .request: "request"
        case .decline: "decline"
        case .ack: "ack"
        case .nak: "nak"
        case .release: "release"
        case .inform: "inform"
        }
    }
}

/// An IPv4 address as DHCP carries it: four bytes in network order.
public struct IPv4: Hashable, Sendable, CustomStringConvertible {
    public var bytes: (UInt8, UInt8, UInt8, UInt8)

    public init(_ a: UInt8, _ b: UInt8, _ c: UInt8, _ d: UInt8) { bytes = (a, b, c, d) }

    init(_ buffer: UnsafeRawBufferPointer, at offset: Int) {
        bytes = (buffer[offset], buffer[offset + 1], buffer[offset + 2], buffer[offset + 3])
    }

    /// From four bytes (an option's value); nil for any other length.
    public init?(_ value: [UInt8]) {
        guard value.count == 4 else { return nil }
        bytes = (value[0], value[1], value[2], value[3])
    }

    /// From `a.b.c.d`, four decimal numbers of 0 to 255; nil for anything else.
    public init?(dotted text: String) {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4 else { return nil }
        var values: [UInt8] = []
        for part in parts {
            guard !part.isEmpty, part.count <= 3, part.allSatisfy({ $0 >= "0" && $0 <= "9" }), let value = UInt8(part) else { return nil }
            values.append(value)
        }
        bytes = (values[0], values[1], values[2], values[3])
    }

    public static let any = IPv4(0, 0, 0, 0)
    public static let broadcast = IPv4(255, 255, 255, 255)

    public var isAny: Bool { self == .any }
    public var array: [UInt8] { [bytes.0, bytes.1, bytes.2, bytes.3] }
    public var description: String { "\(bytes.0).\(bytes.1).\(bytes.2).\(bytes.3)" }

    func write(into out: inout [UInt8], at offset: Int) {
        out[offset] = bytes.0
        out[offset + 1] = bytes.1
        out[offset + 2] = bytes.2
        out[offset + 3] = bytes.3
    }

    public static func == (a: IPv4, b: IPv4) -> Bool { a.array == b.array }
    public func hash(into hasher: inout Hasher) { hasher.combine(array) }
}

extension UnsafeRawBufferPointer {
    func uint16(at offset: Int) -> UInt16 { UInt16(self[offset]) << 8 | UInt16(self[offset + 1]) }
    func uint32(at offset: Int) -> UInt32 { UInt32(uint16(at: offset)) << 16 | UInt32(uint16(at: offset + 2)) }
}

extension Array where Element == UInt8 {
    mutating func put(_ value: UInt16, at offset: Int) {
        self[offset] = UInt8(value >> 8)
        self[offset + 1] = UInt8(value & 0xff)
    }

    mutating func put(_ value: UInt32, at offset: Int) {
        put(UInt16(value >> 16), at: offset)
        put(UInt16(value & 0xffff), at: offset + 2)
    }

    /// Up to the first NUL: a fixed field's string.
    var trimmingNULs: [UInt8] { Array(prefix { $0 != 0 }) }
}

extension DHCPMessage {
    /// What tells this machine from others when it asks again: its hardware address; where it
    /// has none (InfiniBand's IPoIB sends hlen 0, RFC 4390), its client identifier (option 61),
    /// marked so that it never equals an address; else the exchange's transaction ID.
    public var machine: [UInt8] {
        if hardwareLength > 0 { return Array(clientHardwareAddress.prefix(Int(hardwareLength))) }
        if let identifier = options[.clientIdentifier] { return [0xFF] + identifier }
        return [0xFE, UInt8(transactionID >> 24), UInt8(truncatingIfNeeded: transactionID >> 16),
                UInt8(truncatingIfNeeded: transactionID >> 8), UInt8(truncatingIfNeeded: transactionID)]
    }
}

extension Array where Element == UInt8 {
    /// A hardware address as logs, names and records write it: lower-case hex pairs joined by
    /// `separator` (`52:54:00:12:34:56`, `52-54-00-12-34-56`).
    /// `separator` is one ASCII character or none.
    public func hardwareAddressText(separator: String = ":") -> String {
        hexText(self, separator: separator.utf8.first)
    }
}
