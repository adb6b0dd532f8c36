import Glibc
import StampedeDHCP
import StampedeIO

extension SocketAddress {
    /// An IPv4 socket address from DHCP's four bytes.
    public init(ipv4: IPv4, port: UInt16) {
        var address = in_addr()
        withUnsafeMutableBytes(of: &address) { $0.copyBytes(from: ipv4.array) }
        self.init(ipv4: address, port: port)
    }

    /// The IPv4 address in DHCP's form (nil for IPv6).
    public var ipv4: IPv4? {
        guard !isIPv6 else { return nil }
        let bytes = withUnsafeBytes(of: storage) { raw in
            withUnsafeBytes(of: raw.load(as: sockaddr_in.self).sin_addr) { Array($0) }
        }
        return IPv4(bytes)
    }
}
