import StampedeDHCP
import StampedeIO

/// Which machine holds which address, learned from its DHCP: the address a broadcast REQUEST
/// asks the site's server for (option 50), the one a boot server REQUEST comes from (ciaddr),
/// iPXE's own DHCP alike; over IPv6, the global address a boot server Request or an
/// Information-request comes from, and the address `--dhcp6-derived` gave. A TFTP or HTTP request
/// carries only its address: through this it is the machine's, and gets what its record renders.
/// The proxies learn, the file service asks.
public final class MachineBindings: Sendable {
    /// Addresses remembered at most: past it, the half learned longest ago is forgotten.
    public static let capacity = 65_536

    /// A machine as its address's binding holds it (a reference: a request copies no identity),
    /// with its MAC as logs write it, which each of its requests would otherwise write again.
    public final class Binding: Sendable {
        public let machine: MachineIdentity
        /// `aa:bb:cc:dd:ee:ff`.
        public let macText: String

        init(_ machine: MachineIdentity) {
            self.machine = machine
            macText = machine.hardwareAddress.hardwareAddressText(separator: ":")
        }
    }

    /// Each address's machine (by its host: no port, an IPv4 client on a dual-stack socket as
    /// IPv4; three words a key), and when it was learned (a counter: the latest DHCP is the
    /// largest).
    private let table = SleepingLock<(bindings: [AddressKey: (binding: Binding, learned: UInt64)], clock: UInt64)>(([:], 0))

    public init() {}

    /// `machine` holds `address` from now on (the latest DHCP says so).
    public func learn(_ address: IPv4, is machine: MachineIdentity) {
        guard !address.isAny else { return }
        learn(SocketAddress(ipv4: address, port: 0), is: machine)
    }

    /// `machine` holds `address` (either family; its port is not part of it) from now on. The
    /// same machine at the same address again (each of its DHCP requests says so) keeps its
    /// binding, learned anew: nothing is made for it.
    public func learn(_ address: SocketAddress, is machine: MachineIdentity) {
        let address = AddressKey(address.unmapped.clientHost)
        let known = table.withLock { table in
            table.clock += 1
            guard let index = table.bindings.index(forKey: address), table.bindings.values[index].binding.machine == machine else { return false }
            table.bindings.values[index].learned = table.clock
            return true
        }
        guard !known else { return }
        let binding = Binding(machine)  // its MAC's text written outside the lock
        table.withLock { table in
            if table.bindings[address] == nil && table.bindings.count >= Self.capacity {
                let cut = table.bindings.values.map(\.learned).sorted()[Self.capacity / 2]
                table.bindings = table.bindings.filter { $0.value.learned >= cut }
            }
            table.clock += 1
            table.bindings[address] = (binding, table.clock)
        }
    }

    /// The machine at `address`, if DHCP said.
    public func machine(at address: IPv4) -> MachineIdentity? { machine(at: SocketAddress(ipv4: address, port: 0)) }

    /// The machine a client at `address` (any port) is, if DHCP said.
    public func machine(at address: SocketAddress) -> MachineIdentity? { binding(at: address)?.machine }

    /// The binding of the address a client at `address` (any port) is at, if DHCP said.
    public func binding(at address: SocketAddress) -> Binding? {
        let host = AddressKey(address.unmapped.clientHost)
        return table.withLock { $0.bindings[host]?.binding }
    }

    public var count: Int { table.withLock { $0.bindings.count } }
}

extension MachineBindings {
    /// What `message` (from a network-boot client) says of the address it holds or asks for.
    public func learn(from message: DHCPMessage, pxeVendors: [[UInt8]] = []) {
        let address: IPv4
        if !message.clientAddress.isAny {
            address = message.clientAddress
        } else if message.type == .request, let asked = message.options[.requestedAddress].flatMap(IPv4.init) {
            address = asked
        } else {
            return  // a DISCOVER holds and asks for no address
        }
        guard let client = BootClient(message, pxeVendors: pxeVendors) else { return }
        learn(address, is: MachineIdentity(message, client))
    }
}
