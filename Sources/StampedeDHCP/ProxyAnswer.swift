/// What a proxyDHCP server answers (PXE 2.1 §2.2, and what firmware was seen to need): boot
/// information only, never an address (yiaddr 0), never a NAK, and nothing at all to a client
/// that does not boot from the network. Pure: a request, where it came, and the boot menu in;
/// the reply and where it goes, or why there is none, out.
///
/// - DISCOVER on port 67: an OFFER naming this server (option 54, siaddr) and the boot file; for a
///   BIOS PXE ROM with PXE's discovery control set to "boot this file" (option 43, sub-option 6 =
///   8): the bypass. UEFI (architecture 6 and up) gets no option 43, as dnsmasq has answered it
///   since 2.76: EDK2's PXE of before 2019 does not check the bypass bit and, finding no menu,
///   picks local boot; with no option 43 every EDK2 asks the boot server on port 4011 (below).
///   A Raspberry Pi's boot ROM gets the option 43 it looks for (`PXEOption.raspberryPiBoot`).
/// - REQUEST (or INFORM) on port 4011, or on port 67 with a PXE boot item (option 43, sub-option
///   71: boot server discovery): an ACK with the boot file, for firmware that ignores the bypass
///   and asks the boot server anyway (EDK2 does without option 43), its boot item echoed.
/// - A REQUEST on port 67 without a boot item asks the site's DHCP server for an address: silence.
/// - A boot item of another type than the bootstrap server this proxy's offers imply, a BIS
///   request, or a REQUEST that names another server (option 54) is another PXE server's (WDS,
///   dnsmasq's menu): silence, so that this proxy never takes over their boot.
///
/// Every reply echoes option 60's kind (`PXEClient` or `HTTPClient`), option 97, and a relay's
/// option 82 (RFC 3046: relays that check it drop answers without it). A reply with no address to
/// deliver to asks for broadcast, as dnsmasq and pixiecore do: a relay that forwards a DISCOVER
/// with the flag clear would otherwise look for yiaddr 0.0.0.0. The boot file is written in
/// `file` and, NUL-terminated as dnsmasq writes it, in option 67.
public struct ProxyAnswer: Equatable, Sendable {
    /// Where a request arrived.
    public enum Port: Equatable, Sendable {
        /// 67: DHCP's, broadcast.
        case dhcp
        /// 4011: the PXE boot server's, unicast (PXE 2.1 §2.2.5).
        case bootServer
    }

    /// Where the reply goes (RFC 2131 §4.1, PXE 2.1 §2.2).
    public enum Destination: Equatable, Sendable {
        /// 255.255.255.255:68, out of the interface the request came in on: the client has no
        /// address yet.
        case broadcast
        /// Through the relay agent that sent it (giaddr), to its port 67.
        case relay(IPv4)
        /// Straight to an address and port: the boot server's reply to the request's source
        /// (firmware waits on the port it sent from), or to a client that has an address.
        case unicast(IPv4, port: UInt16)
    }

    /// Why a request gets no answer.
    public enum Silence: Error, Equatable, Sendable, CustomStringConvertible {
        /// No option 60 `PXEClient`/`HTTPClient`: not a network-boot client.
        case notBootClient
        /// A reply, or a message type the proxy does not take (RELEASE, DECLINE, ...).
        case notForProxy
        /// A REQUEST on port 67 for an address, which the site's DHCP server answers.
        case addressRequest
        /// An architecture no `--boot-file` selector names.
        case unknownArchitecture(UInt16)
        /// A selector with no boot file (UEFI HTTP Boot without `--http` or a URL).
        case noBootFile(BootSelector)
        /// More relays than RFC 1542 allows (16).
        case tooManyHops(UInt8)
        /// A REQUEST naming another server (option 54): the client chose that server's offer.
        case otherServer(IPv4)
        /// A boot server request (option 43, sub-option 71) for a boot server type this proxy
        /// does not offer (it offers the PXE bootstrap server, type 0): another server's menu item.
        case otherBootServerType(UInt16)
        /// A boot server request for Boot Integrity Services' credentials (layer bit 15), which
        /// this proxy does not have.
        case bootIntegrityServices
        /// The boot file, written for this machine, is longer than the reply holds (a file name
        /// over 127 bytes, `file`'s room; a URL over 254, option 67's).
        case bootFileTooLong(BootSelector, Int)
        /// The machine records leave this machine alone.
        case leftAlone(LeftAlone)

        public var description: String {
            switch self {
            case .notBootClient: "not a network-boot client"
            case .notForProxy: "nothing a proxy answers"
            case .addressRequest: "an address request, for the DHCP server"
            case .unknownArchitecture(let arch): "architecture \(arch): no --boot-file selector names it (arch:\(arch)=NAME would)"
            case .noBootFile(let selector): "no boot file for \(selector.name) (--boot-file \(selector.name)=NAME)"
            case .tooManyHops(let hops): "\(hops) relay hops"
            case .otherServer(let address): "it chose the server at \(address)"
            case .otherBootServerType(let type): "a request for boot server type \(type), which this proxy does not offer"
            case .bootIntegrityServices: "a request for Boot Integrity Services (BIS), which this proxy does not offer"
            case .bootFileTooLong(let selector, let length):
                "the boot file for \(selector.name) is \(length) bytes for this machine, more than the reply holds"
            case .leftAlone(let why): "\(why)"
            }
        }
    }

    public var reply: DHCPMessage
    public var destination: Destination
    /// What was offered, and for which machine: for the log and the metrics.
    public var selector: BootSelector
    public var target: BootTarget
    /// An iPXE without HTTP offered the full iPXE first (`fullIPXE`), not its script.
    public var chained = false

    /// The answer to `request`, which arrived on `port` from `source` (its address and port), for
    /// a server at `server` booting every machine by `menu`; or why there is none.
    public static func to(_ request: DHCPMessage, on port: Port, from source: (address: IPv4, port: UInt16),
                          server: IPv4, pxeVendors: [[UInt8]] = [], mayChain: Bool = true, menu: BootMenu) -> Result<ProxyAnswer, Silence> {
        to(request, on: port, from: source, server: server, pxeVendors: pxeVendors, mayChain: mayChain) { _, _ in .boot(menu) }
    }

    /// The answer to `request`, with what each machine boots, or that it is left alone, as
    /// `choose` says (the machine records) of the machine and the boot client it is (a firmware
    /// or an iPXE): asked only of a request this proxy would answer.
    /// `pxeVendors`: vendor classes answered as `PXEClient` (`BootClient`). `mayChain`: an iPXE
    /// without HTTP may be chained to the full iPXE (false once this machine was, `fullIPXE`).
    public static func to(_ request: DHCPMessage, on port: Port, from source: (address: IPv4, port: UInt16),
                          server: IPv4, pxeVendors: [[UInt8]] = [], mayChain: Bool = true,
                          choose: (MachineIdentity, BootClient) -> MachineChoice) -> Result<ProxyAnswer, Silence> {
        guard request.operation == .request, let type = request.type else { return .failure(.notForProxy) }
        guard request.hops <= 16 else { return .failure(.tooManyHops(request.hops)) }
        guard let client = BootClient(request, pxeVendors: pxeVendors) else { return .failure(.notBootClient) }
        // Type and layer, two bytes each (PXE 2.1 §2.2.6); shorter is not a boot item.
        let bootItem = request.options[.vendorSpecific].flatMap(PXEOption.read)?[PXEOption.bootItem.rawValue].flatMap { $0.count >= 4 ? $0 : nil }
        let replyType: DHCPMessageType
        switch (type, port) {
        case (.discover, .dhcp):
            replyType = .offer
        case (.request, .bootServer), (.inform, .bootServer):
            replyType = .ack
        case (.request, .dhcp), (.inform, .dhcp):
            guard bootItem != nil else { return .failure(.addressRequest) }
            replyType = .ack
        default:
            return .failure(.notForProxy)
        }
        if type == .request, let chosen = request.options[.serverIdentifier].flatMap(IPv4.init), chosen != server {
            return .failure(.otherServer(chosen))
        }
        if let bootItem {
            // Bit 15 of the layer asks for BIS credentials.
            let itemType = UInt16(bootItem[0]) << 8 | UInt16(bootItem[1])
            if bootItem[2] & 0x80 != 0 { return .failure(.bootIntegrityServices) }
            guard itemType == PXEOption.bootstrapServer else { return .failure(.otherBootServerType(itemType)) }
        }
        let menu: BootMenu
        switch choose(MachineIdentity(request, client), client) {
        case .boot(let chosen): menu = chosen
        case .leaveAlone(let why): return .failure(.leftAlone(why))
        }
        guard let selector = menu.selector(for: client) else { return .failure(.unknownArchitecture(client.architecture)) }
        guard let chosen = menu.target(for: selector) else { return .failure(.noBootFile(selector)) }
        var target = chosen.expanded(for: request, client, selector)
        let full = mayChain ? Self.fullIPXE(for: client, instead: target, in: menu) : nil
        target = full.map { $0.target.expanded(for: request, client, $0.selector) } ?? Self.fetchable(target, by: client, server: server)
        let name = Array(target.description.utf8)
        guard name.count <= target.longest else { return .failure(.bootFileTooLong(selector, name.count)) }

        var reply = DHCPMessage(operation: .reply, transactionID: request.transactionID,
                                clientHardwareAddress: request.clientHardwareAddress)
        reply.hardwareType = request.hardwareType
        reply.hardwareLength = request.hardwareLength
        reply.flags = request.flags
        // No address to deliver to: broadcast (a relay reads the flag to choose how it forwards).
        if request.clientAddress.isAny { reply.flags |= DHCPMessage.broadcastFlag }
        reply.relayAddress = request.relayAddress
        reply.serverAddress = server
        // A boot server's ACK to a REQUEST names the address the client has (dnsmasq and the PXE
        // spec's examples put ciaddr there); an offer names none, and an ACK to an INFORM none
        // (RFC 2131 §4.3.5).
        if replyType == .ack && type == .request { reply.yourAddress = request.clientAddress }
        if name.count <= DHCPMessage.largestBootFile { reply.bootFile = name }
        reply.options[.messageType] = [replyType.rawValue]
        reply.options[.serverIdentifier] = server.array
        reply.options[.vendorClass] = Array(client.kind.rawValue.utf8)
        if let identifier = client.machineIdentifier { reply.options[.machineIdentifier] = identifier }
        if client.isRaspberryPi {
            reply.options[.vendorSpecific] = PXEOption.raspberryPiBoot
        } else if client.kind == .pxe {
            if let bootItem, replyType == .ack {
                reply.options[.vendorSpecific] = PXEOption.write([(.bootItem, bootItem)])
            } else if !client.isUEFI {
                reply.options[.vendorSpecific] = PXEOption.write([(.discoveryControl, [PXEOption.useThisBootFile])])
            }
        }
        // Option 67 too: UEFI HTTP Boot and iPXE read it, and a URL may not fit `file`. With its
        // NUL, as dnsmasq writes it: a ROM that reads it as a C string stops there.
        reply.options[.bootFileName] = name + [0]
        // The relay's own option, last (RFC 3046 §2.2: echoed whole).
        if let agent = request.options[.relayAgentInformation] { reply.options[.relayAgentInformation] = agent }

        let destination: Destination
        if !request.relayAddress.isAny {
            destination = .relay(request.relayAddress)
        } else if port == .bootServer {
            destination = .unicast(source.address, port: source.port)
        } else if !request.clientAddress.isAny && !request.wantsBroadcast {
            destination = .unicast(request.clientAddress, port: 68)
        } else {
            destination = .broadcast
        }
        return .success(ProxyAnswer(reply: reply, destination: destination, selector: selector, target: target, chained: full != nil))
    }
}

extension ProxyAnswer {
    /// An iPXE build without HTTP (a NIC's or a hypervisor's ROM built small: option 175 names no
    /// HTTP), offered an http:// URL, is chained to the site's full iPXE first, as pixiecore and
    /// smee do: the file its firmware's own selector boots (undionly.kpxe for a BIOS, ipxe.efi for
    /// x64 UEFI, ...), when that is an iPXE by its name (`isIPXEBuild`). The full iPXE does its own
    /// DHCP and is given the URL. Nil where there is none (then `fetchable`).
    static func fullIPXE(for client: BootClient, instead target: BootTarget, in menu: BootMenu) -> (selector: BootSelector, target: BootTarget)? {
        guard client.isIPXE, let protocols = client.iPXEProtocols, !protocols.contains(.http),
              case .url(let url) = target, url.hasPrefixIgnoringCase("http://"),
              let firmware = menu.firmwareSelector(for: client), let full = menu.target(for: firmware),
              case .file(let name) = full, isIPXEBuild(name) else { return nil }
        return (firmware, full)
    }

    /// Whether a boot file is an iPXE build by its name: `undionly.kpxe`, `ipxe.efi`,
    /// `ipxe-arm64.efi`, `snponly.efi`, ...
    static func isIPXEBuild(_ name: String) -> Bool {
        let base = name.lastPathComponent.lowercased()
        return base.contains("ipxe") || base.hasSuffix(".kpxe") || base.hasSuffix(".kkpxe") || base.hasPrefix("snp")
    }

    /// An iPXE build is never handed a URL it cannot fetch (option 175 says which protocols it
    /// has: a NIC's or a hypervisor's ROM often lacks HTTPS, a small build HTTP): a URL on this
    /// server becomes its file over TFTP, from the same root. One elsewhere, or one with a query,
    /// is left as it is; so is every URL for an iPXE that names no features.
    static func fetchable(_ target: BootTarget, by client: BootClient, server: IPv4) -> BootTarget {
        guard let protocols = client.iPXEProtocols, case .url(let url) = target else { return target }
        let secure = url.hasPrefixIgnoringCase("https://")
        guard !protocols.contains(secure ? .https : .http) else { return target }
        let rest = url.utf8.dropFirst(secure ? 8 : 7)
        guard let slash = rest.firstIndex(of: UInt8(ascii: "/")) else { return target }
        let host = rest[..<slash].prefix { $0 != UInt8(ascii: ":") }
        let path = rest[rest.index(after: slash)...]
        guard host.elementsEqual(server.description.utf8), !path.isEmpty, !path.contains(UInt8(ascii: "?")) else { return target }
        return .file(String(decoding: path, as: UTF8.self))
    }
}

/// What each selector boots: the operator's `--boot-file SELECTOR=NAME`s over the defaults of
/// a chain (`BootChain`; iPXE's: BIOS → undionly.kpxe; UEFI → iPXE built for its architecture,
/// named as boot.ipxe.org names them: ipxe.efi for x64, ipxe-arm64.efi, ...; Secure Boot's: shim
/// for x64 and ARM64; UEFI HTTP Boot → the same
/// file's URL; iPXE → boot.ipxe, over HTTP when the server serves it; a Raspberry Pi →
/// start4.elf, which its ROM asks for by itself: the name is only what the offer and the log
/// say). U-Boot's own PXE has
/// none: it loads a kernel or a pxelinux.cfg, not iPXE (its EFI boot says architecture 11).
public struct BootMenu: Equatable, Sendable {
    public let targets: [BootSelector: BootTarget]
    /// The `arch:N` selectors, by code: a machine's own code is looked up before its named
    /// selector, with no selector made per request.
    private let architectureCodes: [UInt16: BootSelector]

    public init(_ targets: [BootSelector: BootTarget]) {
        self.targets = targets
        architectureCodes = Dictionary(targets.keys.filter(\.isArchitectureCode).map { ($0.architectures[0], $0) }) { first, _ in first }
    }

    /// `chain`'s defaults, with the operator's choices over them. `httpBase`: `http://ADDR:PORT/`
    /// where this server's `--http` serves the address machines reach it at (nil: no HTTP).
    public static func withDefaults(_ chosen: [BootSelector: BootTarget], httpBase: String?, chain: BootChain = .ipxe) -> BootMenu {
        var targets: [BootSelector: BootTarget] = [.bios: .file("undionly.kpxe"), .rpi: .file("start4.elf")]
        for build in chain.loaders {
            targets[build.pxe] = .file(build.file)
            if let httpBase, let http = build.http { targets[http] = .url(httpBase + build.file) }
        }
        targets[.ipxe] = httpBase.map { .url($0 + "boot.ipxe") } ?? .file("boot.ipxe")
        targets.merge(chosen) { _, theirs in theirs }
        return BootMenu(targets)
    }

    /// The selector a machine is answered by: its architecture code's (`arch:N`) where the menu
    /// has one, else its named selector (iPXE always by `ipxe`: its script, whatever it runs on);
    /// nil where neither names it.
    public func selector(for client: BootClient) -> BootSelector? {
        // A Pi that says 0 is no BIOS: arch:0 is not its.
        if !client.isIPXE && !(client.isRaspberryPi && client.architecture == 0), let exact = architectureCodes[client.architecture] {
            return exact
        }
        return BootSelector(client)
    }

    /// The selector of the firmware a machine's iPXE runs on (its architecture code's, else the
    /// named one), for the full iPXE it is chained to.
    public func firmwareSelector(for client: BootClient) -> BootSelector? {
        architectureCodes[client.architecture] ?? BootSelector.firmware(of: client)
    }

    /// The target for `selector`; nil where there is none, or where UEFI HTTP Boot would be given
    /// a file name (it takes only a URL).
    public func target(for selector: BootSelector) -> BootTarget? {
        guard let target = targets[selector] else { return nil }
        if selector.wantsURL, case .file = target { return nil }
        return target
    }

    /// Every selector it answers and what with, named ones first, for the start line.
    public var listing: [(selector: BootSelector, target: BootTarget)] {
        let named = BootSelector.named.compactMap { selector in target(for: selector).map { (selector, $0) } }
        let codes = architectureCodes.keys.sorted().map { architectureCodes[$0]! }
        return named + codes.compactMap { selector in target(for: selector).map { (selector, $0) } }
    }
}
