import Glibc

/// A socket address as a table's key, in three words: its address (an IPv4 one as
/// `::ffff:a.b.c.d`), and its port, family and IPv6 scope. A `SocketAddress` holds a whole
/// `sockaddr_storage` (128 bytes), so a table keyed by it spreads over two cache lines an entry
/// and hashes bytes through a buffer; this one hashes and compares three words. An IPv4 address
/// and the same address mapped into IPv6 stay two keys (their families differ), and an IPv6
/// address's flow label is not part of it.
public struct AddressKey: Hashable, Sendable {
    private let high: UInt64
    private let low: UInt64
    /// The port (16 bits), the family (16 bits) and the scope (32 bits).
    private let rest: UInt64

    public init(_ address: SocketAddress) {
        let family = UInt64(UInt16(truncatingIfNeeded: address.family))
        (high, low, rest) = withUnsafeBytes(of: address.storage) { raw in
            switch address.family {
            case AF_INET:
                let sin = raw.load(as: sockaddr_in.self)
                let mapped = 0x0000_FFFF_0000_0000 | UInt64(UInt32(bigEndian: sin.sin_addr.s_addr))
                return (0, mapped, UInt64(UInt16(bigEndian: sin.sin_port)) | family << 16)
            case AF_INET6:
                let sin6 = raw.load(as: sockaddr_in6.self)
                let (high, low) = withUnsafeBytes(of: sin6.sin6_addr) { ($0.loadUnaligned(as: UInt64.self), $0.loadUnaligned(fromByteOffset: 8, as: UInt64.self)) }
                return (high, low, UInt64(UInt16(bigEndian: sin6.sin6_port)) | family << 16 | UInt64(sin6.sin6_scope_id) << 32)
            default:
                return (0, 0, family << 16)
            }
        }
    }
}
