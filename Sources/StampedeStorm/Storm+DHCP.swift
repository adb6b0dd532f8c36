import Glibc
import StampedeBase
import StampedeDHCP
import StampedeIO
import StampedeProtocol

/// A profile's `dhcp` stages: each machine's DHCP as its firmware sends it, from port 68 of the
/// boot network's interface (`--dhcp ADDR`), as every firmware sends from port 68 and is answered
/// there: the broadcasts on the wildcard address, which every storm on the host hears (several
/// storms, each with `--slice` and an ADDR of its own, play one rack), and the boot server's
/// unicast ACKs on ADDR's port 68, which only this storm's socket hears; over IPv6 (ADDR an IPv6
/// address) on port 546 of ADDR (Storm+DHCPv6.swift). Answers are told apart by their
/// transaction ID, one per machine, and the machine's MAC (its DUID over IPv6). The grammar is
/// StampedeDHCP's, the one the server speaks. A class: the storm changes its tables in place.
final class StormDHCP {
    /// The socket's tag: no slot has it.
    static let tag = UInt64(UInt32.max)

    let socket: SocketHandle
    /// IPv4: the socket on ADDR's port 68 a boot server REQUEST goes out of, so that its ACK
    /// (sent to the request's source) comes back to this storm and no other; nil over IPv6.
    let bootServerSocket: SocketHandle?
    /// The storm's address on the boot network: what a boot server REQUEST is sent from.
    let source: SocketAddress
    /// The boot network's interface: where a DHCPv6 multicast goes out.
    let interface: NetworkInterface
    /// Per slot, the exchange a machine is in.
    var exchanges: [Exchange?]
    /// Transaction ID → slot, for the exchanges running.
    var waiting: [UInt32: Int] = [:]

    init(socket: SocketHandle, bootServerSocket: SocketHandle?, source: SocketAddress, interface: NetworkInterface, slots: Int) {
        self.socket = socket
        self.bootServerSocket = bootServerSocket
        self.source = source
        self.interface = interface
        exchanges = Array(repeating: nil, count: slots)
    }

    struct Exchange {
        var transactionID: UInt32
        /// The message resent on each timeout: the DISCOVER, then the boot server REQUEST.
        var message: [UInt8]
        var destination: SocketAddress
        var tries = 0
        var interval: Nanoseconds
        /// Waiting for the boot server's ACK on 4011, not for an offer.
        var atBootServer = false
        /// DHCPv6: waiting for the Reply to a Request for the address an Advertise gave.
        var requested = false
    }

    /// Machine n's transaction ID: n + 1 times an odd constant, distinct for every machine.
    static func transactionID(of machine: MachineIdentity) -> UInt32 {
        UInt32(truncatingIfNeeded: machine.number + 1) &* 0x9E37_79B1
    }

    /// The DISCOVER `ask`'s firmware sends for `machine`.
    static func discover(_ ask: BootProfile.DHCPAsk, for machine: MachineIdentity) -> DHCPMessage {
        var message = DHCPMessage(operation: .request, transactionID: transactionID(of: machine), clientHardwareAddress: machine.mac)
        message.flags = 0x8000
        message.options[.messageType] = [DHCPMessageType.discover.rawValue]
        message.options[.maximumMessageSize] = [0x05, 0xC0]
        message.options[.parameterRequestList] = [1, 3, 43, 60, 66, 67, 97]
        message.options[.machineIdentifier] = [0] + machine.uuid
        message.options[.networkInterface] = [1, 3, 0]
        message.options[.clientArchitecture] = [UInt8(ask.architecture >> 8), UInt8(ask.architecture & 0xFF)]
        let arch = String(ask.architecture)
        let padded = String(repeating: "0", count: max(0, 5 - arch.count)) + arch
        let vendor = switch ask.client {
        case .http: "HTTPClient:Arch:\(padded):UNDI:003001"
        // A Pi 4's ROM says what a BIOS PXE ROM says (UNDI 2.1).
        case .rpi: "PXEClient:Arch:\(padded):UNDI:002001"
        case .pxe, .ipxe: "PXEClient:Arch:\(padded):UNDI:003000"
        }
        message.options[.vendorClass] = Array(vendor.utf8)
        if ask.client == .ipxe {
            message.options[.userClass] = Array("iPXE".utf8)
            message.options[.iPXEEncapsulated] = [0x13, 1, 1]
        }
        return message
    }

    /// The REQUEST to a proxy's port 4011 after an offer without the bypass, as EDK2 sends it
    /// (NetworkPkg's PxeBcDhcp4Discover): a boot item (option 43's sub-option 71, the type,
    /// layer 0) when the offer had a boot menu and the firmware took its first item
    /// (`bootItem`: that item's type), none when it had no menu (EDK2's "BINL" retry) and for
    /// iPXE's ProxyDHCP REQUEST.
    static func bootServerRequest(after discover: DHCPMessage, from source: IPv4, bootItem: UInt16?) -> DHCPMessage {
        var message = discover
        message.flags = 0
        message.clientAddress = source
        message.options[.messageType] = [DHCPMessageType.request.rawValue]
        if let bootItem {
            message.options[.vendorSpecific] = PXEOption.write([(.bootItem, [UInt8(bootItem >> 8), UInt8(truncatingIfNeeded: bootItem), 0, 0])])
        }
        return message
    }
}

extension Storm {
    /// Opens the DHCP socket when the profile has `dhcp` stages and the plan a boot network; nil
    /// otherwise. Throws what kept it closed (each machine's `dhcp` stage then fails with it).
    static func openDHCP(plan: StormPlan, backend: Backend) throws(Errno) -> StormDHCP? {
        guard plan.profile.usesDHCP, let source = plan.dhcpSource else { return nil }
        let interface = try NetworkInterface.holding(source)
        // IPv4: the wildcard address, for the broadcast answers; IPv6: the storm's address, where
        // every answer comes unicast.
        var bound = source.isIPv6 ? source : SocketAddress(parsing: "0.0.0.0:68", defaultPort: 68)!
        bound.port = source.isIPv6 ? 546 : 68
        let descriptor = try UDPSocket.dhcpClient(bound, device: interface.name, receiveBuffer: 8 << 20)
        let socket = try backend.adoptListener(descriptor, receiveBuffer: 8 << 20, tag: StormDHCP.tag)
        var bootServerSocket: SocketHandle?
        if !source.isIPv6 {
            var own = source
            own.port = 68
            let unicast = try UDPSocket.dhcpClient(own, device: interface.name, receiveBuffer: 8 << 20)
            bootServerSocket = try backend.adoptListener(unicast, receiveBuffer: 8 << 20, tag: StormDHCP.tag)
        }
        return StormDHCP(socket: socket, bootServerSocket: bootServerSocket, source: source, interface: interface, slots: plan.slots)
    }

    func isAskingDHCP(_ slot: Int) -> Bool { dhcp?.exchanges[slot] != nil }

    /// Broadcasts the machine's DISCOVER for its current (`dhcp`) stage (over IPv6, its first
    /// DHCPv6 message).
    func startDHCP(_ slot: Int, now: Nanoseconds) -> Bool {
        let machine = machines[slot]!
        let stage = plan.profile.stages[machine.stage]
        guard let state = dhcp else {
            machineEnded(slot, .failed(.socketError(dhcpUnavailable ?? Errno(EBADF))), now: now)
            return false
        }
        if state.source.isIPv6 { return startDHCPv6(slot, stage.dhcp!, state: state, now: now) }
        let discover = StormDHCP.discover(stage.dhcp!, for: machine.identity)
        let broadcast = SocketAddress(parsing: "255.255.255.255:67", defaultPort: 67)!
        sendAfresh(StormDHCP.Exchange(transactionID: discover.transactionID, message: discover.encoded(), destination: broadcast,
                                      interval: stage.retransmit), slot, state: state, now: now)
        return true
    }

    /// Sends `exchange`'s message, the first of its tries at the stage's interval, and times it.
    func sendAfresh(_ exchange: StormDHCP.Exchange, _ slot: Int, state: StormDHCP, now: Nanoseconds) {
        var exchange = exchange
        exchange.tries = 0
        exchange.interval = plan.profile.stages[machines[slot]!.stage].retransmit
        state.exchanges[slot] = exchange
        state.waiting[exchange.transactionID] = slot
        sendDHCP(slot)
        wheel.schedule(slot, at: now + exchange.interval)
    }

    func sendDHCP(_ slot: Int) {
        guard let state = dhcp, let exchange = state.exchanges[slot] else { return }
        let socket = exchange.atBootServer ? state.bootServerSocket ?? state.socket : state.socket
        exchange.message.withUnsafeBytes { backend.send(socket, to: exchange.destination, from: nil, packet: $0) }
    }

    /// No answer within the interval: sent again, the interval doubled (up to the firmware's
    /// backoff), until the firmware's tries are spent.
    func dhcpTimerFired(_ slot: Int, now: Nanoseconds) {
        guard let state = dhcp, var exchange = state.exchanges[slot] else { return }
        let stage = plan.profile.stages[machines[slot]!.stage]
        exchange.tries += 1
        guard exchange.tries <= stage.retries else {
            dhcpEnded(slot, .failed(.timedOut), now: now)
            return
        }
        exchange.interval = min(exchange.interval * 2, stage.retransmit * stage.maxBackoff)
        state.exchanges[slot] = exchange
        report.stages[machines[slot]!.stage].retransmits += 1
        sendDHCP(slot)
        wheel.schedule(slot, at: now + exchange.interval)
    }

    /// An answer on the DHCP socket: the machine whose transaction it is goes on, or asks the
    /// boot server; anything else (another machine's, another storm's, a site server's address
    /// offer) is passed over.
    func receiveDHCP(_ datagram: Datagram, now: Nanoseconds) {
        guard let state = dhcp else { return }
        if state.source.isIPv6 { return receiveDHCPv6(datagram, state: state, now: now) }
        guard datagram.error == nil, !datagram.truncated,
              let answer = try? DHCPMessage.parse(datagram.bytes), answer.operation == .reply,
              let slot = state.waiting[answer.transactionID], var exchange = state.exchanges[slot],
              let machine = machines[slot], answer.clientHardwareAddress.prefix(6).elementsEqual(machine.identity.mac) else { return }
        let ask = plan.profile.stages[machine.stage].dhcp!
        // A proxy's answer says it is one (option 60); a site server's offer of an address alone does not.
        guard let vendor = answer.options[.vendorClass], vendor.starts(with: Array("PXEClient".utf8)) || vendor.starts(with: Array("HTTPClient".utf8)) else { return }
        let file = answer.bootFile.isEmpty ? answer.options[.bootFileName] ?? [] : answer.bootFile
        if exchange.atBootServer {
            guard answer.type == .ack else { return }
            dhcpEnded(slot, file.isEmpty ? .failed(.protocolError("a boot server ACK without a boot file")) : .ok, now: now)
            return
        }
        guard answer.type == .offer else { return }
        if ask.client == .rpi {
            // The Pi's ROM takes a proxy's offer only with its string in option 43; it names its
            // own files (its TFTP server is option 54's).
            let wanted = Array("Raspberry Pi Boot".utf8)
            guard let vendorOptions = answer.options[.vendorSpecific],
                  vendorOptions.indices.contains(where: { vendorOptions[$0...].starts(with: wanted) }) else { return }
            dhcpEnded(slot, .ok, now: now)
            return
        }
        let control = answer.options[.vendorSpecific].flatMap(PXEOption.read)?[PXEOption.discoveryControl.rawValue]
        let bypass = (control?.first ?? 0) & PXEOption.useThisBootFile != 0
        // EDK2 asks the boot server the offer names (option 54, else siaddr) on 4011 when the offer
        // does not bypass it; iPXE sends its ProxyDHCP REQUEST there after every proxy offer, and
        // boots what the ACK names.
        if (ask.client == .pxe && !bypass) || ask.client == .ipxe {
            let server = answer.options[.serverIdentifier].flatMap(IPv4.init) ?? answer.serverAddress
            guard !server.isAny else {
                dhcpEnded(slot, .failed(.protocolError("an offer without the bypass and without a boot server")), now: now)
                return
            }
            // The machine's DISCOVER, made again from what made it (its identity and the stage).
            let discover = StormDHCP.discover(ask, for: machine.identity)
            let menu = answer.options[.vendorSpecific].flatMap(PXEOption.read)?[PXEOption.bootMenu.rawValue]
            let firstItem = menu.flatMap { $0.count >= 2 ? UInt16($0[0]) << 8 | UInt16($0[1]) : nil }
            // Its ciaddr is the machine's own address when it sends from one (--source-range), as
            // a machine's is the address its DHCP server gave it: the proxy binds it to the machine.
            let own = plan.firstSource == nil ? nil : plan.ownSource(of: machine.identity.number).flatMap { IPv4(dotted: $0.host) }
            exchange.message = StormDHCP.bootServerRequest(after: discover, from: own ?? IPv4(dotted: state.source.host)!,
                                                           bootItem: ask.client == .pxe ? firstItem : nil).encoded()
            exchange.destination = SocketAddress(parsing: "\(server):4011", defaultPort: 4011)!
            exchange.atBootServer = true
            sendAfresh(exchange, slot, state: state, now: now)
            return
        }
        if file.isEmpty {
            dhcpEnded(slot, .failed(.protocolError("an offer without a boot file")), now: now)
        } else if ask.client == .http && !file.starts(with: Array("http://".utf8)) && !file.starts(with: Array("https://".utf8)) {
            dhcpEnded(slot, .failed(.protocolError("an HTTP Boot offer without a URL")), now: now)
        } else {
            dhcpEnded(slot, .ok, now: now)
        }
    }

    /// The exchange is over: forgotten, and the machine goes on as after a transfer.
    func dhcpEnded(_ slot: Int, _ end: StormEnd, now: Nanoseconds) {
        if let state = dhcp, let exchange = state.exchanges[slot] {
            state.waiting[exchange.transactionID] = nil
            state.exchanges[slot] = nil
        }
        transferEnded(slot, end, now: now)
    }
}
