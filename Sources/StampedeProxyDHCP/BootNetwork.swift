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
