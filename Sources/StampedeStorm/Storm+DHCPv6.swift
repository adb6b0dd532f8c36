import StampedeBase
import StampedeDHCP
import StampedeIO
import StampedeProtocol

/// A profile's `dhcp` stages over IPv6 (`--dhcp` with this host's IPv6 address on the boot
/// network): each machine's DHCPv6 as its firmware sends it, multicast to ff02::1:2 from the
/// storm's one socket on port 546 of that address, and answered there. Each machine names itself
/// by a DUID-UUID of its UUID, as EDK2 and iPXE do; its transaction ID is its DHCPv4 one in 24 bits
/// (still one per machine). The grammar is StampedeDHCP's, the one the server speaks.
///
/// - EDK2's PXE (`dhcp pxe`): a Solicit. An Advertise holding an address (a DHCPv6 server's, or a
///   `--dhcp6-derived` proxy's) is asked for with a Request to ff02::1:2 naming its server, and its
///   Reply ends the exchange; an Advertise without one is a proxy offer (EDK2's "ProxyBinl"): a
///   Request without IA options, naming the proxy, to port 4011 of its URL's host, whose Reply
///   names the boot file.
/// - EDK2's HTTP Boot (`dhcp http`): a Solicit; an `http://` URL in the Advertise (with an address:
///   the Request and its Reply, as PXE's).
/// - iPXE (`dhcp ipxe`): an Information-request, as iPXE sends on a network whose router sets
///   only the O flag (the addresses are SLAAC's), and the boot file URL of the Reply.
extension StormDHCP {
    static let allServers = "ff02::1:2"

    /// The machine's DUID-UUID (type 4).
    static func duid(of machine: MachineIdentity) -> [UInt8] { [0, 4] + machine.uuid }

    /// What `ask`'s firmware sends first for `machine`: a Solicit (EDK2's PXE and HTTP Boot,
    /// NetworkPkg's PxeBcDhcp6Sarr and HttpBootDhcp6Sarr) or an Information-request (iPXE's
    /// stateless DHCPv6, net/udp/dhcpv6.c).
    static func solicit(_ ask: BootProfile.DHCPAsk, for machine: MachineIdentity) -> DHCPv6Message {
        let iPXE = ask.client == .ipxe
        var message = DHCPv6Message(kind: iPXE ? .informationRequest : .solicit, transactionID: transactionID(of: machine) & 0xFF_FFFF)
        message.options.append(.clientID, duid(of: machine))
        if !iPXE {
            // IA_NA: its IAID from the MAC's last four bytes, T1 and T2 left to the server.
            message.options.append(.iaNA, Array(machine.mac.suffix(4)) + [UInt8](repeating: 0, count: 8))
        }
        message.options.append(.optionRequest, [0, 59, 0, 60, 0, 23, 0, 24])
        message.options.append(.elapsedTime, [0, 0])
        let arch = String(ask.architecture)
        let padded = String(repeating: "0", count: max(0, 5 - arch.count)) + arch
        let vendor = switch ask.client {
        case .http: "HTTPClient:Arch:\(padded):UNDI:003001"
        case .ipxe: "PXEClient:Arch:\(padded):UNDI:003010"
        case .pxe, .rpi: "PXEClient:Arch:\(padded):UNDI:003000"
        }
        message.options.append(.vendorClass, DHCPv6Options.vendorClass(Array(vendor.utf8)))
        if iPXE { message.options.append(.userClass, [0, 4] + Array("iPXE".utf8)) }
        message.options.append(.clientArchitecture, [UInt8(ask.architecture >> 8), UInt8(ask.architecture & 0xFF)])
        message.options.append(.networkInterface, [1, 3, 0])
        return message
    }

    /// The Request after `advertise`: EDK2's to the proxy's 4011 (the Solicit's options without
    /// its IA_NA, the proxy's identifier added) when the Advertise gave no address, else to
    /// ff02::1:2 for the address it gave (its IA_NA as given, its server named).
    static func request(after solicit: DHCPv6Message, advertise: DHCPv6Message, toBootServer: Bool) -> DHCPv6Message {
        var message = DHCPv6Message(kind: .request, transactionID: solicit.transactionID)
        for option in solicit.options.all where option.code != DHCPv6OptionCode.iaNA.rawValue {
            message.options.append(code: option.code, option.value)
            if option.code == DHCPv6OptionCode.clientID.rawValue, let server = advertise.options[.serverID] {
                message.options.append(.serverID, server)
            }
        }
        if !toBootServer { for ia in advertise.options.values(.iaNA) { message.options.append(.iaNA, ia) } }
        return message
    }

    /// Whether an IA_NA of `message` holds an address (an IAADDR, option 5).
    /// Whether a machine's exchange awaits an answer of `kind`: a Reply answers its Request (to
    /// the boot server, or for an address) or iPXE's Information-request, an Advertise its
    /// Solicit. Any other comes from an exchange before this one (a server's second copy of a boot
    /// server Reply to a machine of the same identity in an earlier storm) and is passed over, as
    /// firmware passes it over.
    static func awaits(_ kind: DHCPv6Message.Kind, sentRequest: Bool, iPXE: Bool) -> Bool {
        switch kind {
        case .reply: sentRequest || iPXE
        case .advertise: !sentRequest && !iPXE
        default: false
        }
    }

    static func givesAddress(_ message: DHCPv6Message) -> Bool {
        message.options.values(.iaNA).contains { ia in
            ia.count > 12 && (try? DHCPv6Options.parse(Array(ia.dropFirst(12))))?.all.contains { $0.code == 5 } == true
        }
    }

    /// The host of a boot file URL (`tftp://[2001:db8::1]/ipxe.efi`): its bracketed literal.
    static func urlHost(_ url: [UInt8]) -> String? {
        let text = String(decoding: url, as: UTF8.self)
        guard let open = text.firstIndex(of: "["), let close = text[open...].firstIndex(of: "]") else { return nil }
        return String(text[text.index(after: open)..<close])
    }
}

extension Storm {
    /// Sends the machine's first DHCPv6 message for its current (`dhcp`) stage.
    func startDHCPv6(_ slot: Int, _ ask: BootProfile.DHCPAsk, state: StormDHCP, now: Nanoseconds) -> Bool {
        let machine = machines[slot]!
        guard ask.client != .rpi else {
            machineEnded(slot, .failed(.protocolError("a Raspberry Pi's boot ROM has no DHCPv6")), now: now)
            return false
        }
        let solicit = StormDHCP.solicit(ask, for: machine.identity)
        var server = SocketAddress(parsing: "[\(StormDHCP.allServers)]:547", defaultPort: 547)!
        server.scope = UInt32(state.interface.index)
        sendAfresh(StormDHCP.Exchange(transactionID: solicit.transactionID, message: solicit.encoded(), destination: server,
                                      interval: plan.profile.stages[machine.stage].retransmit), slot, state: state, now: now)
        return true
    }

    /// An answer on the DHCPv6 socket: the machine whose transaction it is goes on (its Request)
    /// or ends its exchange; anything else (another machine's, a server's answer to another
    /// client) is passed over.
    func receiveDHCPv6(_ datagram: Datagram, state: StormDHCP, now: Nanoseconds) {
        guard datagram.error == nil, !datagram.truncated, let answer = try? DHCPv6Message.parse(datagram.bytes),
              answer.kind == .advertise || answer.kind == .reply,
              let slot = state.waiting[answer.transactionID], var exchange = state.exchanges[slot], let machine = machines[slot],
              answer.options[.clientID] == StormDHCP.duid(of: machine.identity) else { return }
        let ask = plan.profile.stages[machine.stage].dhcp!
        guard StormDHCP.awaits(answer.kind, sentRequest: exchange.requested || exchange.atBootServer, iPXE: ask.client == .ipxe) else { return }
        guard let url = answer.options[.bootFileURL], !url.isEmpty else {
            // A site server's answer that boots nothing (an address alone): another server's may.
            if answer.kind == .advertise { return }
            dhcpEnded(slot, .failed(.protocolError("a DHCPv6 Reply without a boot file URL")), now: now)
            return
        }
        if ask.client == .http && !url.starts(with: Array("http://".utf8)) && !url.starts(with: Array("https://".utf8)) {
            dhcpEnded(slot, .failed(.protocolError("an HTTP Boot offer without a URL")), now: now)
            return
        }
        guard answer.kind == .advertise else {
            dhcpEnded(slot, .ok, now: now)
            return
        }
        let addressed = StormDHCP.givesAddress(answer)
        // HTTP Boot takes a proxy's URL as it is; its address comes from the site's server.
        if ask.client == .http && !addressed {
            dhcpEnded(slot, .ok, now: now)
            return
        }
        let solicit = StormDHCP.solicit(ask, for: machine.identity)
        exchange.message = StormDHCP.request(after: solicit, advertise: answer, toBootServer: !addressed).encoded()
        if addressed {
            exchange.requested = true
        } else {
            guard let host = StormDHCP.urlHost(url), let server = SocketAddress(parsing: "[\(host)]:4011", defaultPort: 4011) else {
                dhcpEnded(slot, .failed(.protocolError("a proxy offer whose URL names no IPv6 boot server")), now: now)
                return
            }
            exchange.destination = server
            exchange.atBootServer = true
        }
        sendAfresh(exchange, slot, state: state, now: now)
    }
}
