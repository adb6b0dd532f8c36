/// What a DHCP message travels in below the sockets: the IPv4 header and the UDP header around
/// it. The proxy hears port 67 through a packet socket, which hands over whole IP packets, and
/// answers through a raw socket, which takes them whole (IPPROTO_RAW): so it never binds port 67,
/// which a DHCP server on the same host may hold, and never takes a datagram the kernel owes to
/// that server. Pure: bytes in, the envelope and where its payload lies out; the envelope and a
/// payload in, the headers out.
public struct UDPEnvelope: Equatable, Sendable {
    public var source: IPv4
    public var sourcePort: UInt16
    public var destination: IPv4
    public var destinationPort: UInt16

    public init(source: IPv4, sourcePort: UInt16, destination: IPv4, destinationPort: UInt16) {
        self.source = source
        self.sourcePort = sourcePort
        self.destination = destination
        self.destinationPort = destinationPort
    }

    /// Why bytes are not an IPv4 packet carrying one whole UDP datagram.
    public enum Malformed: Error, Equatable, Sendable {
        /// Shorter than the headers it says it has.
        case tooShort(Int)
        /// Not IPv4 (the version nibble).
        case version(UInt8)
        /// An IP header length under 20 bytes.
        case headerLength(Int)
        /// An IP total length shorter than its headers or longer than the bytes that came.
        case totalLength(Int)
        /// Another protocol than UDP.
        case notUDP(UInt8)
        /// A fragment: the datagram is not whole here.
        case fragment
        /// A UDP length shorter than its header or longer than the IP packet holds.
        case udpLength(Int)
    }

    /// IPv4's header without options, and UDP's.
    public static let headerLength = 28

    /// Reads the envelope of `packet` (from its IP header on, as a packet socket of type
    /// SOCK_DGRAM gives it; a link may pad it past the total length): the envelope, and the
    /// range of the UDP payload in `packet`. The checksums are not checked: a packet the sender's
    /// own host delivers may carry a partial UDP checksum that its NIC was to finish (veth, a
    /// virtual machine's tap), and the IP header's the kernel checked before it delivered it.
    public static func read(_ packet: UnsafeRawBufferPointer) throws(Malformed) -> (UDPEnvelope, payload: Range<Int>) {
        guard packet.count >= 20 else { throw .tooShort(packet.count) }
        guard packet[0] >> 4 == 4 else { throw .version(packet[0] >> 4) }
        let ipHeader = Int(packet[0] & 0x0F) * 4
        guard ipHeader >= 20 else { throw .headerLength(ipHeader) }
        guard packet.count >= ipHeader + 8 else { throw .tooShort(packet.count) }
        let total = Int(packet[2]) << 8 | Int(packet[3])
        guard total >= ipHeader + 8, total <= packet.count else { throw .totalLength(total) }
        guard packet[9] == 17 else { throw .notUDP(packet[9]) }
        // More fragments, or an offset: either way not a whole datagram.
        guard (Int(packet[6]) << 8 | Int(packet[7])) & 0x3FFF == 0 else { throw .fragment }
        let udp = ipHeader
        let length = Int(packet[udp + 4]) << 8 | Int(packet[udp + 5])
        guard length >= 8, udp + length <= total else { throw .udpLength(length) }
        let envelope = UDPEnvelope(source: IPv4(packet, at: 12), sourcePort: UInt16(packet[udp]) << 8 | UInt16(packet[udp + 1]),
                                   destination: IPv4(packet, at: 16),
                                   destinationPort: UInt16(packet[udp + 2]) << 8 | UInt16(packet[udp + 3]))
        return (envelope, (udp + 8)..<(udp + length))
    }

    /// The packet that carries `payload` in this envelope: an IPv4 header (no options, time to
    /// live `ttl`, the don't-fragment bit clear, as dnsmasq sends DHCP for ROMs that mishandle
    /// it), the UDP header, and the payload, both checksums computed.
    public func packet(carrying payload: [UInt8], ttl: UInt8 = 64) -> [UInt8] {
        let udpLength = 8 + payload.count
        let total = 20 + udpLength
        var out = [UInt8](repeating: 0, count: Self.headerLength)
        out.reserveCapacity(total)
        out[0] = 0x45
        out.put(UInt16(truncatingIfNeeded: total), at: 2)
        out[8] = ttl
        out[9] = 17
        source.write(into: &out, at: 12)
        destination.write(into: &out, at: 16)
        out.put(~Self.onesComplementSum(out[0..<20]), at: 10)
        out.put(sourcePort, at: 20)
        out.put(destinationPort, at: 22)
        out.put(UInt16(truncatingIfNeeded: udpLength), at: 24)
        out += payload
        // RFC 768: the sum over a pseudo-header (the addresses, the protocol, UDP's length), the
        // UDP header and the payload; a sum of 0 is sent as 0xFFFF (0 means "none").
        var pseudo = source.array + destination.array
        pseudo += [0, 17, UInt8(truncatingIfNeeded: udpLength >> 8), UInt8(truncatingIfNeeded: udpLength)]
        let sum = ~Self.onesComplementSum(pseudo[...], out[20...])
        out.put(sum == 0 ? 0xFFFF : sum, at: 26)
        return out
    }

    /// The Internet checksum's one's complement sum (RFC 1071) of `parts` in turn, each taken as
    /// big-endian 16-bit words (an odd last byte padded with zero: only the last part may be of
    /// odd length), folded to 16 bits.
    static func onesComplementSum(_ parts: ArraySlice<UInt8>...) -> UInt16 {
        var sum: UInt32 = 0
        for part in parts {
            var i = part.startIndex
            while i + 1 < part.endIndex {
                sum += UInt32(part[i]) << 8 | UInt32(part[i + 1])
                i += 2
            }
            if i < part.endIndex { sum += UInt32(part[i]) << 8 }
        }
        while sum >> 16 != 0 { sum = (sum & 0xFFFF) + (sum >> 16) }
        return UInt16(sum)
    }
}
