/// The option codes this server reads or writes (RFC 8415 §21; RFC 5970 for network boot; RFC
/// 6939 for the client's link-layer address).
public enum DHCPv6OptionCode: UInt16, Sendable {
    case clientID = 1
    case serverID = 2
    /// An identity association for non-temporary addresses: IAID, T1, T2, its own options.
    case iaNA = 3
    case iaTA = 4
    case optionRequest = 6
    case elapsedTime = 8
    /// A relay's option: the message it relays, whole.
    case relayMessage = 9
    case statusCode = 13
    case rapidCommit = 14
    /// Opaque classes, each with a two-byte length: iPXE sends `iPXE`.
    case userClass = 15
    /// An enterprise number, then classes each with a two-byte length: EDK2 and iPXE send 343
    /// (Intel) and `PXEClient:Arch:00007:UNDI:003000`, UEFI HTTP Boot `HTTPClient:…`.
    case vendorClass = 16
    /// A relay's option (RFC 8415 §21.18): the interface a message came in on, echoed.
    case interfaceID = 18
    case iaPD = 25
    /// RFC 5970: the boot file's URL (`tftp://[2001:db8::1]/ipxe.efi`), its parameters, the
    /// client's architectures (two bytes each, RFC 4578's codes) and network interface (UNDI).
    case bootFileURL = 59
    case bootFileParameters = 60
    case clientArchitecture = 61
    case networkInterface = 62
    /// A relay's option (RFC 6939): the client's link-layer type and address.
    case clientLinkLayerAddress = 79
}

/// A DHCPv6 status code (RFC 8415 §21.13).
public enum DHCPv6Status: UInt16, Sendable {
    case success = 0, unspecifiedFailure = 1, noAddressesAvailable = 2, noBinding = 3, notOnLink = 4, useMulticast = 5
}

/// A message's options in the order they came: a code may come more than once (an IA_NA per
/// interface, a vendor class per enterprise).
public struct DHCPv6Options: Equatable, Sendable {
    public struct Option: Equatable, Sendable {
        public var code: UInt16
        public var value: [UInt8]
    }

    public private(set) var all: [Option] = []

    public init() {}

    /// The first value of `code`.
    public subscript(code: DHCPv6OptionCode) -> [UInt8]? {
        all.first { $0.code == code.rawValue }?.value
    }

    /// Every value of `code`, in order.
    public func values(_ code: DHCPv6OptionCode) -> [[UInt8]] {
        all.filter { $0.code == code.rawValue }.map(\.value)
    }

    public mutating func append(_ code: DHCPv6OptionCode, _ value: [UInt8]) {
        append(code: code.rawValue, value)
    }

    public mutating func append(code: UInt16, _ value: [UInt8]) {
        all.append(Option(code: code, value: value))
    }

    /// Options from `start` to the end of `bytes` (a message's, or an IA's own options).
    public static func parse(_ bytes: UnsafeRawBufferPointer, from start: Int) throws(DHCPv6Message.Malformed) -> DHCPv6Options {
        var options = DHCPv6Options()
        var at = start
        while at < bytes.count {
            guard at + 4 <= bytes.count else {
                throw .truncatedOption(code: at + 2 <= bytes.count ? UInt16(bytes[at]) << 8 | UInt16(bytes[at + 1]) : UInt16(bytes[at]) << 8)
            }
            let code = UInt16(bytes[at]) << 8 | UInt16(bytes[at + 1])
            let length = Int(bytes[at + 2]) << 8 | Int(bytes[at + 3])
            guard at + 4 + length <= bytes.count else { throw .truncatedOption(code: code) }
            options.append(code: code, Array(bytes[(at + 4)..<(at + 4 + length)]))
            at += 4 + length
        }
        return options
    }

    public static func parse(_ bytes: [UInt8], from start: Int = 0) throws(DHCPv6Message.Malformed) -> DHCPv6Options {
        try bytes.withUnsafeBytes { raw in Result { () throws(DHCPv6Message.Malformed) in try parse(raw, from: start) } }.get()
    }

    /// Each option as code, length, value. A value longer than a length holds (65,535) is cut.
    public func write(into out: inout [UInt8]) {
        for option in all {
            let value = option.value.prefix(Int(UInt16.max))
            out += [UInt8(option.code >> 8), UInt8(option.code & 0xFF), UInt8(value.count >> 8), UInt8(value.count & 0xFF)]
            out += value
        }
    }

    public func encoded() -> [UInt8] {
        var out: [UInt8] = []
        write(into: &out)
        return out
    }
}

extension DHCPv6Options {
    /// Intel's enterprise number, under which PXE and UEFI HTTP Boot name their class.
    public static let pxeEnterprise: UInt32 = 343

    /// The classes of every vendor class option (16) under `enterprise`.
    public func vendorClasses(enterprise: UInt32 = pxeEnterprise) -> [[UInt8]] {
        values(.vendorClass).flatMap { value -> [[UInt8]] in
            guard value.count >= 4, UInt32(value[0]) << 24 | UInt32(value[1]) << 16 | UInt32(value[2]) << 8 | UInt32(value[3]) == enterprise
            else { return [] }
            return Self.lengthPrefixed(value.dropFirst(4))
        }
    }

    /// A vendor class option (16) of one class under `enterprise`.
    public static func vendorClass(_ data: [UInt8], enterprise: UInt32 = pxeEnterprise) -> [UInt8] {
        [UInt8(enterprise >> 24), UInt8((enterprise >> 16) & 0xFF), UInt8((enterprise >> 8) & 0xFF), UInt8(enterprise & 0xFF),
         UInt8(data.count >> 8), UInt8(data.count & 0xFF)] + data
    }

    /// The user classes (option 15).
    public var userClasses: [[UInt8]] { values(.userClass).flatMap { Self.lengthPrefixed($0[...]) } }

    /// The architectures the client runs (option 61), first the one it boots.
    public var architectures: [UInt16] {
        guard let value = self[.clientArchitecture] else { return [] }
        return stride(from: 0, to: value.count - 1, by: 2).map { UInt16(value[$0]) << 8 | UInt16(value[$0 + 1]) }
    }

    /// Items of a two-byte length each, as user and vendor classes hold them; a last item cut
    /// short ends the list.
    static func lengthPrefixed(_ bytes: ArraySlice<UInt8>) -> [[UInt8]] {
        var items: [[UInt8]] = []
        var at = bytes.startIndex
        while at + 2 <= bytes.endIndex {
            let length = Int(bytes[at]) << 8 | Int(bytes[at + 1])
            guard at + 2 + length <= bytes.endIndex else { break }
            items.append(Array(bytes[(at + 2)..<(at + 2 + length)]))
            at += 2 + length
        }
        return items
    }

    /// A status code option (13): the code and its message.
    public static func status(_ status: DHCPv6Status, _ message: String) -> [UInt8] {
        [UInt8(status.rawValue >> 8), UInt8(status.rawValue & 0xFF)] + Array(message.utf8)
    }
}
