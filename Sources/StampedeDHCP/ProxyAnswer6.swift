import StampedeBase

/// What this server answers a network-boot client over DHCPv6: the IPv6 form of the proxy. Boot
/// information only, no address (the site's DHCPv6 server gives those; with `derived`, the
/// addresses `DerivedAddresses` makes, for a network without one), and nothing at all to a client
/// that does not boot from the network. Pure:
/// a message, where it came and the boot menu in; the reply (wrapped for each relay it came
/// through) or why there is none, out.
///
/// EDK2's PXE over IPv6 (NetworkPkg/UefiPxeBcDxe/PxeBcDhcp6.c) takes an Advertise without IA_NA
/// whose vendor class is `PXEClient` under enterprise 343 for a proxy offer ("ProxyBinl"); beside
/// an address offer it sends a Request, its IA options removed and this server's identifier
/// copied from the offer, to UDP port 4011 of the offered URL's host, and boots the URL of the
/// Reply to it. So:
///
/// - Solicit on 547: an Advertise with the client's and this server's identifiers, the vendor
///   class (`PXEClient` or `HTTPClient`, as the client said) and the boot file's URL (option 59:
///   `tftp://[ADDR]/NAME` for a file, the URL as it is for a URL).
/// - Request on 4011 (the boot server's port), and Information-request on either port: a Reply
///   with the same.
/// - Request or Renew on 547 that names this server: a Reply with the same and each IA_NA
///   answered with no address (NoAddrsAvail; NoBinding to a Renew): this server gives none.
/// - Anything that names another server, Confirm, Rebind, Release, Decline, and every server or
///   relay reply: silence (this server holds no binding to confirm, extend or release).
///
/// A relayed message (Relay-forward) is answered inside a Relay-reply for each relay, each with
/// its hop count, link and peer addresses and its interface-id (RFC 8415 §19.3), sent back to
/// the relay that sent it.
public struct ProxyAnswer6: Equatable, Sendable {
    /// Where a message arrived.
    public enum Port: Equatable, Sendable {
        /// 547: DHCPv6's, multicast to ff02::1:2 or from a relay.
        case dhcp
        /// 4011: the boot server's, unicast.
        case bootServer
    }

    /// Why a message gets no answer.
    public enum Silence: Error, Equatable, Sendable, CustomStringConvertible {
        case malformed(DHCPv6Message.Malformed)
        /// No vendor class `PXEClient`/`HTTPClient` (enterprise 343) and no user class `iPXE`.
        case notBootClient
        /// A message type the proxy does not answer.
        case notForProxy(DHCPv6Message.Kind)
        /// It names another server (option 2): the client chose that one.
        case otherServer
        /// A Solicit, Request or Renew without the client's identifier (RFC 8415 §16: discarded).
        case noClientID
        /// More relays than RFC 8415's hop count limit lets through (8, so 9 Relay-forwards).
        case tooManyRelays
        case unknownArchitecture(UInt16)
        case noBootFile(BootSelector)
        case leftAlone(LeftAlone)

        public var description: String {
            switch self {
            case .malformed(let why): "malformed (\(why))"
            case .notBootClient: "not a network-boot client"
            case .notForProxy(let kind): "a \(kind), which a proxy does not answer"
            case .otherServer: "it names another server"
            case .noClientID: "no client identifier"
            case .tooManyRelays: "more relays than a hop count of 8 lets through"
            case .unknownArchitecture(let arch): "architecture \(arch): no --boot-file selector names it (arch:\(arch)=NAME would)"
            case .noBootFile(let selector): "no boot file for \(selector.name) (--boot-file \(selector.name)=NAME)"
            case .leftAlone(let why): "\(why)"
            }
        }
    }

    /// The reply, as it goes back: to the relay that sent the message (port 547), or to the
    /// client (546 from port 547, the port it sent from to 4011).
    public var reply: [UInt8]
    public var relayed: Bool
    /// What it boots; nil in a reply that only says a status (to a Release, a Decline, a
    /// Confirm of derived addresses).
    public var selector: BootSelector?
    public var target: BootTarget?
    /// Option 59's URL.
    public var url: String?
    /// The machine, as DHCPv6 told it: its Ethernet address where its DUID or a relay says one.
    public var machine: MachineIdentity
    /// What the client sent (inside its relays): its kind, and its DUID (none in an
    /// Information-request that named none).
    public var asked: DHCPv6Message.Kind
    public var clientID: [UInt8]?
    /// The addresses its IA_NAs give (`derived`), 16 bytes each.
    public var given: [[UInt8]] = []

    /// RFC 8415 §7.6's HOP_COUNT_LIMIT: a relay drops a message it would forward past it.
    public static let hopCountLimit = 8

    /// The port the reply goes to, for a message from `port`: a relay's 547, a client's 546 (to
    /// a message on 547) or the one it sent from (to 4011).
    public func destinationPort(to port: Port, from sourcePort: UInt16) -> UInt16 {
        if relayed { return 547 }
        return port == .dhcp ? 546 : sourcePort
    }

    public static func to(_ bytes: [UInt8], on port: Port, from source: [UInt8]? = nil, serverID: DUID, server: String,
                          pxeVendors: [[UInt8]] = [], derived: DerivedAddresses? = nil, menu: BootMenu) -> Result<ProxyAnswer6, Silence> {
        bytes.withUnsafeBytes { raw in
            to(raw, on: port, from: source, serverID: serverID, server: server, pxeVendors: pxeVendors, derived: derived) { _, _ in .boot(menu) }
        }
    }

    /// The answer to `bytes`, which arrived on `port` from `source` (its 16 bytes), from a server named `serverID` whose
    /// address on the client's link is `server` (the URL's host, without brackets), booting each
    /// machine as `choose` says (the machine records) of the machine and the boot client it is:
    /// asked only of a message it would answer.
    /// With `derived`, each IA_NA of a boot client gets its derived address (`DerivedAddresses`),
    /// and the exchanges that keep an address (Request, Renew, Rebind, Confirm, Release, Decline)
    /// are answered as RFC 8415 asks of a server that gave it; a relayed client whose link (the
    /// nearest relay's link-address) is not in `derived`'s /64 gets none (an address of the
    /// server's link would not work on its own), and its exchange is a proxy's.
    public static func to(_ bytes: UnsafeRawBufferPointer, on port: Port, from source: [UInt8]? = nil, serverID: DUID, server: String,
                          pxeVendors: [[UInt8]] = [], derived: DerivedAddresses? = nil,
                          choose: (MachineIdentity, BootClient) -> MachineChoice) -> Result<ProxyAnswer6, Silence> {
        var message: DHCPv6Message
        var relays: [DHCPv6Message] = []
        do throws(DHCPv6Message.Malformed) {
            message = try DHCPv6Message.parse(bytes)
            while message.kind == .relayForward {
                guard relays.count <= hopCountLimit else { return .failure(.tooManyRelays) }
                relays.append(message)
                message = try message.relayed()
            }
        } catch {
            return .failure(.malformed(error))
        }
        let options = message.options
        if let named = options[.serverID], named != serverID.bytes { return .failure(.otherServer) }
        let clientID = options[.clientID]
        var derived = derived
        if let link = relays.last?.relay?.linkAddress, derived.map({ !$0.contains(link) }) ?? false { derived = nil }
        let answer: Answer
        switch Self.answer(to: message, on: port, derived: derived) {
        case .success(let kind): answer = kind
        case .failure(let silence): return .failure(silence)
        }
        if message.kind != .informationRequest && clientID == nil { return .failure(.noClientID) }
        if case .status(let status) = answer {
            // Whoever sends it: the firmware's Release carries no vendor class, and an unanswered
            // one holds the firmware seconds before it hands the network to what it loaded.
            var reply = DHCPv6Message(kind: .reply, transactionID: message.transactionID)
            if let clientID { reply.options.append(.clientID, clientID) }
            reply.options.append(.serverID, serverID.bytes)
            reply.options.append(.statusCode, DHCPv6Options.status(status, status == .success ? "" : "not on this link"))
            let machine = MachineIdentity(hardwareAddress: hardwareAddress(clientID: clientID.map(DUID.init), relays: relays, source: source))
            return .success(wrap(reply, in: relays, selector: nil, target: nil, url: nil, machine: machine, asked: message.kind,
                                 clientID: clientID))
        }
        guard let client = bootClient(options, pxeVendors: pxeVendors) else { return .failure(.notBootClient) }
        let machine = identity(client, clientID: clientID.map(DUID.init), relays: relays, source: source)

        let menu: BootMenu
        switch choose(machine, client) {
        case .boot(let chosen): menu = chosen
        case .leaveAlone(let why): return .failure(.leftAlone(why))
        }
        guard let selector = menu.selector(for: client) else { return .failure(.unknownArchitecture(client.architecture)) }
        guard let chosen = menu.target(for: selector) else { return .failure(.noBootFile(selector)) }
        let target = chosen.expanded(hardwareAddress: machine.hardwareAddress, client, selector)
        let url = Self.url(of: target, server: server)

        var reply = DHCPv6Message(kind: message.kind == .solicit ? .advertise : .reply, transactionID: message.transactionID)
        if let clientID { reply.options.append(.clientID, clientID) }
        reply.options.append(.serverID, serverID.bytes)
        var given: [[UInt8]] = []
        switch answer {
        case .addresses:
            let name = machine.hardwareAddress.isEmpty ? (clientID ?? []) : machine.hardwareAddress
            for ia in options.values(.iaNA) where ia.count >= 12 {
                reply.options.append(.iaNA, derived!.ia(for: name, iaid: ia.prefix(4)))
                given.append(derived!.address(for: name, iaid: ia.prefix(4)))
            }
        case .noAddresses(let status):
            let why = status == .noBinding ? "this server gives no addresses: no binding" : "this server gives no addresses"
            for ia in options.values(.iaNA) where ia.count >= 4 {
                // The IAID, T1 and T2 of 0, the status inside (RFC 8415 §21.4).
                var answered = DHCPv6Options()
                answered.append(.statusCode, DHCPv6Options.status(status, why))
                reply.options.append(.iaNA, Array(ia.prefix(4)) + [UInt8](repeating: 0, count: 8) + answered.encoded())
            }
        case .full, .status:
            break
        }
        reply.options.append(.vendorClass, DHCPv6Options.vendorClass(Array(client.kind.rawValue.utf8)))
        reply.options.append(.bootFileURL, Array(url.utf8))
        var answered = wrap(reply, in: relays, selector: selector, target: target, url: url, machine: machine, asked: message.kind,
                            clientID: clientID)
        answered.given = given
        return .success(answered)
    }

    /// What a message gets: boot information, with addresses (derived) or IAs that say there are
    /// none, or a status alone.
    private enum Answer { case full, addresses, noAddresses(DHCPv6Status), status(DHCPv6Status) }

    /// What `message` gets on `port`, by its kind and whether it names a server (the caller has
    /// checked that it names no other).
    private static func answer(to message: DHCPv6Message, on port: Port, derived: DerivedAddresses?) -> Result<Answer, Silence> {
        let namesUs = message.options[.serverID] != nil
        switch (message.kind, port) {
        case (.request, .bootServer), (.informationRequest, _):
            return .success(.full)
        case (.solicit, .dhcp):
            return .success(derived == nil ? .full : .addresses)
        case (.request, .dhcp) where namesUs, (.renew, .dhcp) where namesUs, (.rebind, .dhcp) where derived != nil:
            return .success(derived != nil ? .addresses : .noAddresses(message.kind == .renew ? .noBinding : .noAddressesAvailable))
        case (.confirm, .dhcp) where derived != nil:
            // Every address it holds on this link, or NotOnLink (RFC 8415 §18.3.3).
            let held = message.options.values(.iaNA).flatMap { addresses(in: $0) }
            guard !held.isEmpty else { return .failure(.notForProxy(.confirm)) }
            return .success(.status(held.allSatisfy { derived!.contains($0) } ? .success : .notOnLink))
        case (.release, .dhcp) where namesUs && derived != nil, (.decline, .dhcp) where namesUs && derived != nil:
            // Nothing is kept to free: done (RFC 8415 §18.3.7, §18.3.8).
            return .success(.status(.success))
        default:
            return .failure(.notForProxy(message.kind))
        }
    }

    /// The reply in a Relay-reply for each relay, each with its header and interface-id back
    /// (RFC 8415 §19.3).
    private static func wrap(_ reply: DHCPv6Message, in relays: [DHCPv6Message], selector: BootSelector?, target: BootTarget?, url: String?,
                             machine: MachineIdentity, asked: DHCPv6Message.Kind, clientID: [UInt8]?) -> ProxyAnswer6 {
        var out = reply.encoded()
        for relay in relays.reversed() {
            var options = DHCPv6Options()
            if let interface = relay.options[.interfaceID] { options.append(.interfaceID, interface) }
            options.append(.relayMessage, out)
            out = DHCPv6Message(relay: .relayReply, relay.relay!, options: options).encoded()
        }
        return ProxyAnswer6(reply: out, relayed: !relays.isEmpty, selector: selector, target: target, url: url, machine: machine,
                            asked: asked, clientID: clientID)
    }

    /// The addresses (IAADDR, option 5) an IA_NA's value holds.
    static func addresses(in ia: [UInt8]) -> [[UInt8]] {
        guard ia.count >= 12, let inside = try? DHCPv6Options.parse(Array(ia.dropFirst(12))) else { return [] }
        return inside.all.filter { $0.code == 5 && $0.value.count >= 16 }.map { Array($0.value.prefix(16)) }
    }

    /// What the message says of the machine's firmware: its vendor class under enterprise 343
    /// (`PXEClient`, `HTTPClient`, or a `--pxe-vendor`), its user class (`iPXE`), its
    /// architecture (option 61, else the vendor class's `Arch:` field, else 0), its UUID (a
    /// DUID-UUID client identifier). Nil for anything but a network-boot client.
    static func bootClient(_ options: DHCPv6Options, pxeVendors: [[UInt8]]) -> BootClient? {
        let classes = options.vendorClasses()
        let isIPXE = options.userClasses.contains(Array("iPXE".utf8))
        let kind: BootClient.Kind
        let vendor: [UInt8]?
        let isPXE = { (data: [UInt8]) in
            data.starts(with: Array(BootClient.Kind.pxe.rawValue.utf8)) || pxeVendors.contains { data.starts(with: $0) }
        }
        if let pxe = classes.first(where: isPXE) {
            (kind, vendor) = (.pxe, pxe)
        } else if let http = classes.first(where: { $0.starts(with: Array(BootClient.Kind.http.rawValue.utf8)) }) {
            (kind, vendor) = (.http, http)
        } else if isIPXE {
            (kind, vendor) = (.pxe, nil)
        } else {
            return nil
        }
        let architecture = options.architectures.first ?? vendor.flatMap(BootClient.architecture(inVendorClass:)) ?? 0
        let uuid = options[.clientID].flatMap { DUID($0).uuid }
        return BootClient(kind: kind, architecture: architecture, isIPXE: isIPXE, machineIdentifier: uuid.map { [0] + $0 })
    }

    /// The machine: its Ethernet address from the relay next to it (option 79, RFC 6939) or its
    /// DUID (LLT or LL); none from a DUID-UUID or DUID-EN alone.
    static func identity(_ client: BootClient, clientID: DUID?, relays: [DHCPv6Message], source: [UInt8]?) -> MachineIdentity {
        var firmware = client
        firmware.isIPXE = false
        return MachineIdentity(hardwareAddress: hardwareAddress(clientID: clientID, relays: relays, source: source), uuid: client.uuid,
                               firmware: BootSelector(firmware), architecture: client.architecture)
    }

    /// The machine's Ethernet address: the relay next to it says it (option 79), or its DUID
    /// holds it (LLT, LL), or its link-local address was made from it (EUI-64, `ff:fe` in the
    /// middle: what firmware forms; iPXE names itself by a DUID-UUID): the peer address of the
    /// relay next to it, else where the message came from.
    static func hardwareAddress(clientID: DUID?, relays: [DHCPv6Message], source: [UInt8]?) -> [UInt8] {
        if let linkLayer = relays.last?.options[.clientLinkLayerAddress], linkLayer.count == 8, linkLayer[0] == 0, linkLayer[1] == 1 {
            return Array(linkLayer[2...])
        }
        if let ethernet = clientID?.ethernetAddress { return ethernet }
        guard let peer = relays.last?.relay?.peerAddress ?? source, peer.count == 16, peer[0] == 0xfe, peer[1] & 0xc0 == 0x80,
              peer[11] == 0xff, peer[12] == 0xfe else { return [] }
        return [peer[8] ^ 0x02, peer[9], peer[10], peer[13], peer[14], peer[15]]
    }

    /// Option 59's URL for `target`: a file as `tftp://[ADDR]/NAME` (RFC 5970 §3.1, the form EDK2
    /// reads: a bracketed literal, the name percent-encoded where it is not a URL's), a URL as it is.
    static func url(of target: BootTarget, server: String) -> String {
        switch target {
        case .url(let url): return url
        case .file(let name):
            let path = name.hasPrefix("/") ? String(name.dropFirst()) : name
            return "tftp://[\(server)]/" + percentEncoded(path)
        }
    }

    /// A path with every byte but RFC 3986's unreserved ones and `/` written `%XX`.
    static func percentEncoded(_ path: String) -> String {
        var out = ""
        for byte in path.utf8 {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"), UInt8(ascii: "/"):
                out.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                out += "%" + hexText([byte]).uppercased()
            }
        }
        return out
    }
}
