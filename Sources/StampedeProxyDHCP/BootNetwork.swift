import Glibc
import StampedeDHCP
import StampedeIO

/// A network this server answers machines' first DHCP packets on, as a proxyDHCP server
/// (`--proxy-dhcp ADDR`): the server's address there (the boot server the answers name), the
/// interface that holds it (broadcasts are heard, and answered, on it alone), and what each kind
/// of machine boots.
public struct BootNetwork: Sendable {
    public var address: IPv4
    public var interface: NetworkInterface
    public var menu: BootMenu

    public init(address: IPv4, interface: NetworkInterface, menu: BootMenu) {
        self.address = address
        self.interface = interface
        self.menu = menu
    }

    /// The server's address as the sockets name it (a reply's source).
    public var socketAddress: SocketAddress { SocketAddress(ipv4: address, port: 0) }
}

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
