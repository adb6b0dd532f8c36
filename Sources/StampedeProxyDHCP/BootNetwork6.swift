import StampedeDHCP
import StampedeIO

/// A network this server answers machines' DHCPv6 boot requests on (`--proxy-dhcp6 ADDR`): the
/// server's IPv6 address there (the boot server the answers name, in their URLs), the interface
/// that holds it (its Solicits are heard on it: ff02::1:2 is joined there), and what each kind of
/// machine boots.
public struct BootNetwork6: Sendable {
    /// IPv6, port 0.
    public var address: SocketAddress
    public var interface: NetworkInterface
    public var menu: BootMenu
    /// `--dhcp6-derived`: addresses for boot clients in the address's /64; nil: none given.
    public var derived: DerivedAddresses?

    public init(address: SocketAddress, interface: NetworkInterface, menu: BootMenu, derived: DerivedAddresses? = nil) {
        self.address = address
        self.interface = interface
        self.menu = menu
        self.derived = derived
    }
}
