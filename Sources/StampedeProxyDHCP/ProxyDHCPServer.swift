import CStampedeSys
import Glibc
import Logging
import StampedeBase
import StampedeDHCP
import StampedeIO
import StampedeMachines
import StampedeServing

/// The proxyDHCP responder (`--proxy-dhcp`), on a thread of its own: a machine's first DHCP
/// packets on the boot networks are read (`DHCPMessage`), answered as `ProxyAnswer` says, once
/// per machine and kind of request in each `BootAnswerLimit.interval`; what is not answered is
/// counted, and said when an operator can act on it (`MachineNotices`).
///
/// Its sockets never take what another server is owed:
/// - port 67 is heard through a packet socket whose filter keeps the limited broadcasts of the
///   boot networks' interfaces and what is sent to their addresses from any interface (a relay's,
///   routed); the kernel still delivers every one of them to a DHCP server on the same host, which
///   may hold port 67 with or without SO_REUSEADDR;
/// - every answer from port 67 leaves by a raw socket that receives nothing (IPPROTO_RAW): a
///   broadcast out of the boot network's interface, a relay's answer by the routing table;
/// - the PXE boot server's port 4011 is a UDP socket on each boot network's address.
/// The packet and raw sockets need CAP_NET_RAW, as dnsmasq's DHCP does.
public final class ProxyDHCPServer: @unchecked Sendable {
    /// Why the responder could not start.
    public enum StartFailure: Error, CustomStringConvertible {
        /// The packet or the raw socket: most often no CAP_NET_RAW.
        case rawSocket(Errno)
        /// A boot network's port 4011 is held by another process.
        case bootServerPortInUse(SocketAddress, holders: [String])
        case bootServerSocket(SocketAddress, Errno)
        case tooManyNetworks(Int)

        public var description: String {
            switch self {
            case .rawSocket(let error):
                let hint = error.rawValue == EPERM || error.rawValue == EACCES
                    ? " (it hears port 67 without binding it, through a packet socket: it needs root or CAP_NET_RAW)" : ""
                return "cannot answer DHCP: \(error)\(hint)"
            case .bootServerPortInUse(let address, let holders):
                let who = holders.isEmpty ? "another process" : holders.joined(separator: ", ")
                return "\(address) (the PXE boot server's port) is held by \(who): stop it answering there"
            case .bootServerSocket(let address, let error):
                let hint = error.rawValue == EACCES || error.rawValue == EPERM ? " (a port below 1024 needs root or CAP_NET_BIND_SERVICE)" : ""
                return "cannot answer boot server requests on \(address): \(error)\(hint)"
            case .tooManyNetworks(let count):
                return "\(count) boot networks (--proxy-dhcp): at most \(STAMPEDE_MAX_BOOT_NETWORKS)"
            }
        }
    }

    /// DHCP's server port and the PXE boot server's; others only in tests.
    public struct Ports: Sendable {
        public var dhcp: UInt16 = 67
        public var bootServer: UInt16 = 4011
        public init() {}
    }

    public let networks: [BootNetwork]
    /// `--machines`: which machines boot, and what (as the directory says now); nil: every
    /// network-boot machine, by its network's menu.
    public let machines: MachineRecords?
    /// Which machine holds which address, learned from every boot client's request (the records'
    /// files for a TFTP or HTTP request are its machine's).
    public let bindings: MachineBindings?
    /// How far each machine's boot got (with `--machines`).
    public let progress: MachineProgress?
    public let ports: Ports
    /// `--pxe-vendor`: vendor classes answered as `PXEClient`.
    public let pxeVendors: [[UInt8]]
    /// Its answers by selector and its silences by reason, and its heartbeat (`lastTurn`).
    public let metrics = WorkerMetrics.dhcp()
    /// The sockets, owned here and closed with the responder: the packet socket, the raw sender,
    /// each network's boot server socket.
    private let listener: Int32
    private let sender: Int32
    private let bootServers: [Int32]
    private var answered = BootAnswerLimit()
    /// Requests waiting for the machine API's answer (with `--machines-api`), handled again when it
    /// came.
    private var waiting: InventoryWaits<Waiting>?
    private struct Waiting {
        /// As it was read: not read again.
        var message: DHCPMessage
        var network: Int
        var port: ProxyAnswer.Port
        var source: (address: IPv4, port: UInt16)
    }
    private var lastSweep: Nanoseconds = 0
    private var notices = MachineNotices()
    /// The machines whose iPXE was chained to the full iPXE, with when and in which DHCP exchange:
    /// the same exchange is answered the same; a later one within `chainMemory` gets what its
    /// iPXE can fetch, so that an iPXE that still lacks HTTP is never chained in a loop.
    private var chainedIPXE: [[UInt8]: (at: Nanoseconds, transaction: UInt32)] = [:]
    static let chainMemory: Nanoseconds = 120 * nanosecondsPerSecond
    private var lastSendFailure: Nanoseconds = 0
    private let logger: Logger
    private let json: Bool
    private let buffer: UnsafeMutableRawBufferPointer
    /// Datagrams read from one socket in a turn at most, so that a flood leaves the heartbeat.
    static let batch = 1024

    /// Opens the sockets (as the starting user: before privileges drop) for `networks`.
    public init(networks: [BootNetwork], machines: MachineRecords? = nil, bindings: MachineBindings? = nil, progress: MachineProgress? = nil,
                ports: Ports = Ports(), pxeVendors: [String] = [], receiveBuffer: Int, logger: Logger, json: Bool) throws(StartFailure) {
        guard networks.count <= Int(STAMPEDE_MAX_BOOT_NETWORKS) else { throw .tooManyNetworks(networks.count) }
        self.networks = networks
        self.pxeVendors = pxeVendors.map { Array($0.utf8) }
        self.machines = machines
        waiting = machines?.inventory.map { InventoryWaits($0.watch()) }
        self.bindings = bindings
        self.progress = progress
        self.ports = ports
        self.logger = logger
        self.json = json
        var addresses = networks.map { network in network.address.array.withUnsafeBytes { $0.load(as: UInt32.self) } }
        var interfaces = networks.map(\.interface.index)
        let listener = stampede_dhcp_listener(&addresses, &interfaces, Int32(networks.count), ports.dhcp, Int32(clamping: receiveBuffer))
        if let error = Errno(result: listener) { throw .rawSocket(error) }
        let sender = stampede_dhcp_sender()
        if let error = Errno(result: sender) {
            close(listener)
            throw .rawSocket(error)
        }
        var bootServers: [Int32] = []
        for network in networks {
            var storage = SocketAddress(ipv4: network.address, port: ports.bootServer).storage
            let fd = stampede_boot_server_socket(&storage, Int32(clamping: receiveBuffer))
            if let error = Errno(result: fd) {
                for fd in [listener, sender] + bootServers { close(fd) }
                let address = SocketAddress(ipv4: network.address, port: ports.bootServer)
                if error.rawValue == EADDRINUSE { throw .bootServerPortInUse(address, holders: PortHolders.udp(port: ports.bootServer)) }
                throw .bootServerSocket(address, error)
            }
            bootServers.append(fd)
        }
        self.listener = listener
        self.sender = sender
        self.bootServers = bootServers
        buffer = .allocate(byteCount: 65536, alignment: 16)
        metrics.set(.lastTurn, Int(stampede_monotonic_ns()))
        metrics.publish()
    }

    deinit {
        for fd in [listener, sender] + bootServers { close(fd) }
        buffer.deallocate()
    }

    /// Answers on a thread of its own until a stop is asked (SIGTERM, SIGINT): a draining server
    /// offers no machine a boot it may not be there to serve.
    public func start() -> SystemThread { SystemThread(named: "proxy-dhcp") { self.run() } }

    func run() {
        var watched = ([listener] + bootServers + (waiting.map { [$0.watch.wake] } ?? [])).map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
        while stampede_stop_requested() == 0 {
            metrics.set(.lastTurn, Int(stampede_monotonic_ns()))
            metrics.publish()
            _ = poll(&watched, nfds_t(watched.count), 250)
            let now = stampede_monotonic_ns()
            readPort67(now: now)
            for network in bootServers.indices { readBootServer(network, now: now) }
            if waiting != nil, watched[watched.count - 1].revents != 0 { answerWaiting(now: now) }
            if now - lastSweep >= nanosecondsPerSecond {
                lastSweep = now
                waiting?.sweep(now: now)
                if !chainedIPXE.isEmpty { chainedIPXE = chainedIPXE.filter { now - $0.value.at <= Self.chainMemory } }
                if let progress { sayStalledLoaders(progress) }
            }
        }
        metrics.publish()
    }

    /// How long a machine that loaded its shim's GRUB may ask for nothing before it is said: a
    /// GRUB that finds its server asks for its configuration within a second or two.
    static let loaderStall = 15

    /// Each machine that loaded its shim's GRUB and asked for nothing after, said once with what
    /// to do: a GRUB older than 2.14 takes its boot server from the site's DHCP ACK, which names
    /// none behind a proxy, and stops at its prompt (docs/secure-boot.md).
    private func sayStalledLoaders(_ progress: MachineProgress) {
        for entry in progress.stalledLoaders(quietFor: Self.loaderStall, now: time(nil)) {
            let mac = entry.mac.hardwareAddressText(separator: ":")
            let hint = "a GRUB before 2.14 takes its boot server from the site's DHCP ACK, not from a proxy's offer, and stops at its prompt: "
                + "let the site's DHCP server name this server (next-server) or boot a GRUB that reads a proxy's offer (2.14 does) or a signed iPXE"
            if json {
                logger.warning("stalled", metadata: [
                    "event": "stalled", "client": "\(mac)", "stage": "\(entry.stage.label)", "record": "\(entry.record ?? "")",
                    "address": "\(entry.address?.host ?? "")", "hint": "\(hint)",
                ])
            } else {
                logger.warning("""
                    machine \(mac)\(entry.address.map { " at \($0.host)" } ?? ""): loaded the GRUB beside its shim \
                    (\(entry.offered.map { sanitizedForLog(Array($0.utf8)) } ?? "")) and has asked for nothing in \(Self.loaderStall) s: \(hint)
                    """)
            }
        }
    }

    /// The requests whose machines the API answered since the last turn, handled again (the
    /// answer is in memory now); those that waited too long, dropped.
    private func answerWaiting(now: Nanoseconds) {
        for request in waiting?.answered(now: now) ?? [] {
            handle(request.message, network: request.network, port: request.port, from: request.source, now: now)
        }
    }

    /// Port 67's packets, each an IP packet: its envelope says where it came from, and which boot
    /// network it is for (a broadcast by the interface it came in on, any other by its address).
    private func readPort67(now: Nanoseconds) {
        for _ in 0..<Self.batch {
            var interface: Int32 = 0
            var delivery: Int32 = 0
            let count = stampede_dhcp_receive(listener, buffer.baseAddress, buffer.count, &interface, &delivery)
            if count == -Int(EINTR) { continue }
            guard count >= 0 else { return }
            // Addressed to another host's link address (a promiscuous interface): not ours.
            guard delivery != Int32(STAMPEDE_DELIVERY_OTHER) else { continue }
            guard count <= buffer.count, let (envelope, payload) = try? UDPEnvelope.read(UnsafeRawBufferPointer(rebasing: buffer[..<count])) else {
                metrics.countBoot(ignored: .malformed)
                continue
            }
            let network = envelope.destination == .broadcast
                ? networks.firstIndex { $0.interface.index == interface }
                : networks.firstIndex { $0.address == envelope.destination }
            guard let network else { continue }  // the filter lets none through
            handle(UnsafeRawBufferPointer(rebasing: buffer[payload]), network: network, port: .dhcp,
                   from: (envelope.source, envelope.sourcePort), now: now)
        }
    }

    /// A boot network's port 4011: requests of firmware that has an address.
    private func readBootServer(_ network: Int, now: Nanoseconds) {
        for _ in 0..<Self.batch {
            var peer = sockaddr_in()
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            let count = withUnsafeMutablePointer(to: &peer) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    recvfrom(bootServers[network], buffer.baseAddress, buffer.count, Int32(MSG_TRUNC), $0, &length)
                }
            }
            if count < 0 && errno == EINTR { continue }
            guard count >= 0 else { return }
            guard count <= buffer.count, let source = SocketAddress(ipv4: peer.sin_addr, port: UInt16(bigEndian: peer.sin_port)).ipv4 else {
                metrics.countBoot(ignored: .malformed)
                continue
            }
            handle(UnsafeRawBufferPointer(rebasing: buffer[..<count]), network: network, port: .bootServer,
                   from: (source, UInt16(bigEndian: peer.sin_port)), now: now)
        }
    }

    private func handle(_ bytes: UnsafeRawBufferPointer, network: Int, port: ProxyAnswer.Port,
                        from source: (address: IPv4, port: UInt16), now: Nanoseconds) {
        let message: DHCPMessage
        do {
            message = try DHCPMessage.parse(bytes)
        } catch {
            metrics.countBoot(ignored: .malformed)
            logger.debug("\(source.address):\(source.port): not a DHCP message this server reads (\(error)): ignored")
            return
        }
        handle(message, network: network, port: port, from: source, now: now)
    }

    private func handle(_ message: DHCPMessage, network number: Int, port: ProxyAnswer.Port,
                        from source: (address: IPv4, port: UInt16), now: Nanoseconds) {
        let network = networks[number]
        // Written only for a line the log writes (a request waiting for the API is handled twice).
        func what() -> String { "DHCP \(message.type?.name ?? "message") \(message.hardwareAddress()) on \(network.interface.name)" }
        // Answered or not (a REQUEST to the site's server too): the address it holds or asks for.
        bindings?.learn(from: message, pxeVendors: pxeVendors)
        // The machine asked about, and its record: one look at the records per request.
        var asked: MachineIdentity?
        var record: MachineRecord?
        let mayChain = chainedIPXE.isEmpty
            || chainedIPXE[message.machine].map { $0.transaction == message.transactionID || now - $0.at > Self.chainMemory } ?? true
        let answer = ProxyAnswer.to(message, on: port, from: source, server: network.address, pxeVendors: pxeVendors,
                                    mayChain: mayChain) { machine, client in
            asked = machine
            guard let machines else { return .boot(network.menu) }
            let relay = message.relayAddress.isAny ? nil : message.relayAddress
            // iPXE's DHCP is a boot going on: only a firmware's starts one (and renews its answer).
            guard let (found, book) = machines.record(for: machine, asking: .dhcp, relay: relay, renews: !client.isIPXE) else {
                return .leaveAlone(.asking)
            }
            record = found
            return book.choice(of: found, for: machine, over: network.menu)
        }
        switch answer {
        case .failure(.leftAlone(.asking)):
            metrics.countBoot(ignored: .machineAPIAsking)
            guard let asked, waiting?.keep(Waiting(message: message, network: number, port: port, source: source), of: asked.hardwareAddress,
                                           now: now) == true else { return }
            logger.debug("\(what()): waiting for the machine API's answer")
        case .failure(let silence):
            metrics.countBoot(ignored: BootIgnored(silence))
            if case .leftAlone = silence, let asked, let progress {
                progress.note(asked.hardwareAddress, .leftAlone, record: record?.name, why: "\(silence)",
                              now: time(nil))
            }
            if case .leftAlone(.discovered) = silence, let asked, let machines {
                // Written by the records' watch, once per machine.
                let vendor = sanitizedForLog(message.options[.vendorClass] ?? [], limit: 64)
                _ = machines.enlist(DiscoveredMachine(identity: asked, said: "\(message.type?.name ?? "a request") on \(network.interface.name), vendor class \(vendor)",
                                                      seen: time(nil)))
            }
            switch silence {
            case .unknownArchitecture, .noBootFile, .bootFileTooLong, .leftAlone:
                // The operator can act on these: said, once a minute per machine (a machine left
                // alone as its record says, as information).
                guard let unsaid = notices.tell(message.machine, "\(silence)", now: now) else { return }
                let since = unsaid > 0 ? " (\(unsaid) more of its requests since the last time this was said)" : ""
                if case .leftAlone = silence {
                    logger.info("\(what()): left alone: \(silence)\(since)")
                } else {
                    logger.warning("\(what()): not answered: \(silence)\(since)")
                }
            default:
                logger.debug("\(what()): not answered: \(silence)")
            }
        case .success(let answer):
            let key = BootAnswerLimit.Key(machine: message.machine, request: message.type?.rawValue ?? 0, bootServerPort: port == .bootServer)
            guard answered.allow(key, now: now) else {
                metrics.countBoot(ignored: .repeated)
                logger.debug("\(what()): answered less than \(BootAnswerLimit.interval / 1_000_000) ms ago: not again")
                return
            }
            guard send(answer, network: number, arrivedOn: port, now: now) else { return }
            if answer.chained { chainedIPXE[message.machine] = (now, message.transactionID) }
            if let progress, let asked {
                progress.note(asked.hardwareAddress, .dhcp, record: record?.name,
                              offered: answer.target.description, now: time(nil))
            }
            let offer = answer.reply.type == .offer
            metrics.countBoot(answer.selector, offer: offer)
            log(answer, for: message, what, offer: offer)
        }
    }

    /// Sends the answer: from the boot server's socket to a request that came to it, from port 67
    /// by the raw socket otherwise. False when the kernel would not take it.
    private func send(_ answer: ProxyAnswer, network number: Int, arrivedOn port: ProxyAnswer.Port, now: Nanoseconds) -> Bool {
        let network = networks[number]
        let bytes = answer.reply.encoded()
        let result: Int
        switch (answer.destination, port) {
        case (.unicast(let address, let peerPort), .bootServer):
            var to = SocketAddress(ipv4: address, port: peerPort).storage
            result = bytes.withUnsafeBytes { raw in
                withUnsafePointer(to: &to) { pointer in
                    pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                        sendto(bootServers[number], raw.baseAddress, raw.count, Int32(MSG_DONTWAIT), $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                    }
                }
            }
        default:
            let (destination, destinationPort, interface): (IPv4, UInt16, Int32) = switch answer.destination {
            case .broadcast: (.broadcast, 68, network.interface.index)
            case .relay(let relay): (relay, ports.dhcp, 0)
            case .unicast(let address, let peerPort): (address, peerPort, 0)
            }
            let envelope = UDPEnvelope(source: network.address, sourcePort: ports.dhcp, destination: destination, destinationPort: destinationPort)
            let packet = envelope.packet(carrying: bytes)
            result = packet.withUnsafeBytes { stampede_dhcp_send(sender, $0.baseAddress, $0.count, interface) }
        }
        guard result < 0 else { return true }
        let error = result == -1 ? Errno.current : Errno(Int32(-result))
        if now - lastSendFailure >= nanosecondsPerSecond {
            lastSendFailure = now
            logger.warning("cannot send a DHCP answer on \(network.interface.name) (\(answer.destination)): \(error)")
        }
        return false
    }

    private func log(_ answer: ProxyAnswer, for message: DHCPMessage, _ what: () -> String, offer: Bool) {
        guard logger.logLevel <= .info else { return }
        let client = BootClient(message, pxeVendors: pxeVendors)
        let destination = "\(answer.destination)"
        if json {
            logger.info("boot", metadata: [
                "event": "boot", "protocol": "dhcp", "client": "\(message.hardwareAddress())",
                "request": "\(message.type?.description ?? "unknown")", "architecture": .stringConvertible(client?.architecture ?? 0),
                "uuid": "\(client?.uuid ?? "")", "selector": "\(answer.selector.name)", "boot_file": "\(sanitizedForLog(Array(answer.target.description.utf8)))",
                "outcome": "\(offer ? "offered" : "acknowledged")", "to": "\(destination)", "chained": .stringConvertible(answer.chained),
            ])
            return
        }
        logger.info("""
            \(what()): \(answer.selector.name) (arch \(client?.architecture ?? 0)\(client?.uuid.map { ", uuid \($0)" } ?? "")): \
            \(offer ? "offered" : "acknowledged") "\(sanitizedForLog(Array(answer.target.description.utf8)))" to \(destination)\
            \(answer.chained ? " (its iPXE has no HTTP: chained to the full iPXE, which asks again)" : "")
            """)
    }
}

extension ProxyAnswer.Destination: CustomStringConvertible {
    /// As the log says where an answer went: `255.255.255.255:68`, `10.9.0.1:67 (relay)`.
    public var description: String {
        switch self {
        case .broadcast: "255.255.255.255:68"
        case .relay(let relay): "\(relay):67 (relay)"
        case .unicast(let address, let port): "\(address):\(port)"
        }
    }
}
