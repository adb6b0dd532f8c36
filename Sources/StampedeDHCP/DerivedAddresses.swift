/// `--dhcp6-derived`: addresses for boot clients on a network without a DHCPv6 server, made from
/// what names the machine (its Ethernet address, else its DUID) and the IA's IAID within the boot
/// network's /64: the same from every server that derives in that /64, with no lease to keep, as
/// Tinkerbell's derived mode. Never outside the /64.
///
/// The interface identifier is FNV-1a (64 bits) of the machine's name and the IAID, with the
/// universal/local bit clear (RFC 4291: not a globally unique identifier), never `ff:fe` in its
/// middle (so that it is never the EUI-64 a machine forms by SLAAC from its own MAC), never zero
/// (the subnet-router anycast) nor in RFC 5453's reserved range, and never the server's own. Two
/// machines share one with a chance of about 2^-60 in a rack of thousands; the firmware's
/// duplicate address detection would see it, and its Decline is logged.
public struct DerivedAddresses: Equatable, Sendable {
    /// The /64's first 8 bytes.
    public let prefix: [UInt8]
    /// The server's own address there (never handed out).
    public let server: [UInt8]

    /// Lifetimes of each address: an hour preferred, two valid; renewed at half and rebound at
    /// four fifths of the preferred lifetime.
    public static let preferred: UInt32 = 3600
    public static let valid: UInt32 = 7200
    public static let renewAt: UInt32 = 1800
    public static let rebindAt: UInt32 = 2880

    /// Within the /64 of `server` (16 bytes).
    public init(server: [UInt8]) {
        precondition(server.count == 16)
        prefix = Array(server.prefix(8))
        self.server = server
    }

    public func contains(_ address: [UInt8]) -> Bool {
        address.count == 16 && address.prefix(8).elementsEqual(prefix)
    }

    /// An IA_NA option's value for the IA `iaid` of `machine`: the IAID, T1, T2, and its address
    /// with its lifetimes (RFC 8415 §21.4, §21.6).
    public func ia(for machine: [UInt8], iaid: ArraySlice<UInt8>) -> [UInt8] {
        var inside = DHCPv6Options()
        inside.append(code: 5, address(for: machine, iaid: iaid) + Self.word(Self.preferred) + Self.word(Self.valid))
        return Array(iaid) + Self.word(Self.renewAt) + Self.word(Self.rebindAt) + inside.encoded()
    }

    private static func word(_ value: UInt32) -> [UInt8] {
        [UInt8(value >> 24), UInt8((value >> 16) & 0xFF), UInt8((value >> 8) & 0xFF), UInt8(value & 0xFF)]
    }

    /// The address of the IA `iaid` (4 bytes) of the machine named `machine`.
    public func address(for machine: [UInt8], iaid: ArraySlice<UInt8>) -> [UInt8] {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in machine + [UInt8(machine.count)] + iaid {
            hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01b3
        }
        var identifier = (0..<8).map { UInt8(truncatingIfNeeded: hash >> (56 - 8 * UInt64($0))) }
        identifier[0] &= ~0x02
        if identifier[3] == 0xff && identifier[4] == 0xfe { identifier[4] = 0xfd }
        // RFC 5453: fdff:ffff:ffff:ff80 and up (with the u/l bit clear it reads fdff...).
        if identifier[0] == 0xfd && identifier[1...6].allSatisfy({ $0 == 0xff }) && identifier[7] >= 0x80 { identifier[7] &= 0x7f }
        if identifier.allSatisfy({ $0 == 0 }) { identifier[7] = 1 }
        var address = prefix + identifier
        if address == server { address[15] ^= 0x01 }
        return address
    }
}
