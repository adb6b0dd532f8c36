import CStampedeSys
import Glibc
import Logging
import StampedeBase
import StampedeDHCP
import StampedeIO
import StampedeMachines
import StampedeServing

/// The DHCPv6 boot responder (`--proxy-dhcp6`), on a thread of its own: network-boot machines'
/// DHCPv6 messages on the boot networks are read and answered as `ProxyAnswer6` says (boot
/// information, never an address), once per machine and kind of message in each
/// `BootAnswerLimit.interval`; what is not answered is counted with the IPv4 proxy's silences.
///
/// Its sockets: UDP port 547 on every address, joined to ff02::1:2 on each boot network's
/// interface (a multicast is taken only from those interfaces; a relay's unicast from any), and
/// the boot server's port 4011 on each boot network's address. Port 547 is bound as a DHCPv6
/// server binds it: a DHCPv6 server of this host (Kea, dnsmasq) and this responder cannot both
/// run on one host; the site's server answers from another.
public final class ProxyDHCPv6Server: @unchecked Sendable {
    public enum StartFailure: Error, CustomStringConvertible {
        /// Port 547, most often by a DHCPv6 server of this host.
        case portInUse(SocketAddress, holders: [String])
        /// A boot network's port 4011.
        case bootServerPortInUse(SocketAddress, holders: [String])
        case socket(SocketAddress, Errno)

        public var description: String {
            switch self {
            case .portInUse(let address, let holders):
                let who = holders.isEmpty ? "another process" : holders.joined(separator: ", ")
                return "\(address) is held by \(who): a DHCPv6 server on this host (its port 547) cannot run beside --proxy-dhcp6"
            case .bootServerPortInUse(let address, let holders):
                let who = holders.isEmpty ? "another process" : holders.joined(separator: ", ")
                return "\(address) (the boot server's port) is held by \(who): stop it answering there"
            case .socket(let address, let error):
                let hint = error.rawValue == EACCES || error.rawValue == EPERM ? " (a port below 1024 needs root or CAP_NET_BIND_SERVICE)" : ""
                return "cannot answer DHCPv6 on \(address): \(error)\(hint)"
            }
        }
    }

    /// DHCPv6's server port and the boot server's; others only in tests.
    public struct Ports: Sendable {
        public var dhcp: UInt16 = 547
        public var bootServer: UInt16 = 4011
        public init() {}
    }

    public let networks: [BootNetwork6]
    /// Each network's address, 16 bytes (what a relay's unicast is sent to).
    private let networkAddresses: [[UInt8]]
    public let machines: MachineRecords?
    /// Which machine holds which address (with `--machines`): learned from the address a boot
    /// server Request or an Information-request comes from, and from the derived address a Reply
    /// gives.
    public let bindings: MachineBindings?
    public let progress: MachineProgress?
    public let pxeVendors: [[UInt8]]
    /// Its answers by selector and its silences by reason (with the IPv4 proxy's), its heartbeat.
    public let metrics = WorkerMetrics.dhcp(.dhcp6)
    /// How this server names itself: DUID-LL of the first boot network's interface.
    public let serverID: DUID
    private let listener: Int32
    private let bootServers: [Int32]
    private var answered = BootAnswerLimit()
    /// Messages waiting for the machine API's answer (with `--machines-api`), handled again when it
    /// came.
    private var waiting: InventoryWaits<Waiting>?
    private struct Waiting {
        var bytes: [UInt8]
        var network: Int
        var port: ProxyAnswer6.Port
        var source: SocketAddress
    }
    private var lastSweep: Nanoseconds = 0
    private var notices = MachineNotices()
    private var lastSendFailure: Nanoseconds = 0
    /// Boot server Replies to send once more (`echoDelay` after the first): EDK2 sends its Request
    /// to 4011 and only then opens the socket it reads the Reply on (PxeBcRequestBootService), and
    /// does not ask again, so a Reply that comes back before that is lost and the boot ends in
    /// PXE-E16 (seen in a loaded suite run: the Request answered at once, OVMF "No valid offer").
    private var echoes: [(due: Nanoseconds, fd: Int32, to: SocketAddress, bytes: [UInt8])] = []
    static let echoDelay: Nanoseconds = 300_000_000
    static let echoLimit = 4096
    private let logger: Logger
    private let json: Bool
    private let buffer: UnsafeMutableRawBufferPointer
    static let batch = 1024

    /// Opens the sockets (as the starting user: before privileges drop) for `networks`.
    public init(networks: [BootNetwork6], machines: MachineRecords? = nil, bindings: MachineBindings? = nil, progress: MachineProgress? = nil,
                ports: Ports = Ports(),
                pxeVendors: [String] = [], receiveBuffer: Int, logger: Logger, json: Bool) throws(StartFailure) {
        self.networks = networks
        networkAddresses = networks.map { $0.address.ipv6Bytes ?? [] }
        self.machines = machines
        waiting = machines?.inventory.map { InventoryWaits($0.watch()) }
        self.bindings = bindings
        self.progress = progress
        self.pxeVendors = pxeVendors.map { Array($0.utf8) }
        self.logger = logger
        self.json = json
        var hardware = [UInt8](repeating: 0, count: 6)
        if let first = networks.first { _ = stampede_hardware_address(first.interface.name, &hardware) }
        serverID = DUID.linkLayer(ethernet: hardware)
        var interfaces = networks.map(\.interface.index)
        let listener = stampede_dhcp6_socket(ports.dhcp, &interfaces, Int32(networks.count), Int32(clamping: receiveBuffer))
        let any = SocketAddress(parsing: "[::]:\(ports.dhcp)", defaultPort: ports.dhcp)!
        if let error = Errno(result: listener) {
            if error.rawValue == EADDRINUSE { throw .portInUse(any, holders: PortHolders.udp(port: ports.dhcp)) }
            throw .socket(any, error)
        }
        var bootServers: [Int32] = []
        for network in networks {
            var address = network.address
            address.port = ports.bootServer
            var storage = address.storage
            let fd = stampede_boot_server_socket(&storage, Int32(clamping: receiveBuffer))
            if let error = Errno(result: fd) {
                for fd in [listener] + bootServers { close(fd) }
                if error.rawValue == EADDRINUSE { throw .bootServerPortInUse(address, holders: PortHolders.udp(port: ports.bootServer)) }
                throw .socket(address, error)
            }
            bootServers.append(fd)
        }
        self.listener = listener
        self.bootServers = bootServers
        buffer = .allocate(byteCount: 65536, alignment: 16)
        metrics.set(.lastTurn, Int(stampede_monotonic_ns()))
        metrics.publish()
    }

    deinit {
        for fd in [listener] + bootServers { close(fd) }
        buffer.deallocate()
    }

    /// Answers on a thread of its own until a stop is asked (SIGTERM, SIGINT).
    public func start() -> SystemThread { SystemThread(named: "proxy-dhcp6") { self.run() } }

    func run() {
        var watched = ([listener] + bootServers + (waiting.map { [$0.watch.wake] } ?? [])).map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
        while stampede_stop_requested() == 0 {
            metrics.set(.lastTurn, Int(stampede_monotonic_ns()))
            metrics.publish()
            let wait = echoes.first.map { max(0, Int32(($0.due - stampede_monotonic_ns()) / 1_000_000) + 1) } ?? 250
            _ = poll(&watched, nfds_t(watched.count), min(wait, 250))
            let now = stampede_monotonic_ns()
            sendEchoes(now: now)
            read(listener, port: .dhcp, now: now)
            for (number, fd) in bootServers.enumerated() { read(fd, port: .bootServer, network: number, now: now) }
            if waiting != nil, watched[watched.count - 1].revents != 0 { answerWaiting(now: now) }
            if now - lastSweep >= nanosecondsPerSecond {
                lastSweep = now
                waiting?.sweep(now: now)
            }
        }
        metrics.publish()
    }

    /// The boot server Replies whose second copy is due (queued in the order they are due).
    private func sendEchoes(now: Nanoseconds) {
        let due = echoes.prefix { $0.due <= now }.count
        guard due > 0 else { return }
        for echo in echoes[..<due] {
            var storage = echo.to.storage
            _ = echo.bytes.withUnsafeBytes { stampede_dhcp6_send(echo.fd, $0.baseAddress, $0.count, &storage) }
        }
        echoes.removeFirst(due)
    }

    /// The messages whose machines the API answered since the last turn, handled again (the
    /// answer is in memory now); those that waited too long, dropped.
    private func answerWaiting(now: Nanoseconds) {
        for message in waiting?.answered(now: now) ?? [] {
            message.bytes.withUnsafeBytes { bytes in
                handle(bytes, network: message.network, port: message.port, from: message.source, now: now)
            }
        }
    }

    /// A socket's datagrams: on 547, a unicast (a relay's, from any interface) for the boot network
    /// whose address it was sent to, as the IPv4 proxy takes a relay's, and a multicast for the
    /// network of the interface it came in on (the first where none is known); on 4011, for that
    /// socket's network.
    private func read(_ fd: Int32, port: ProxyAnswer6.Port, network fixed: Int? = nil, now: Nanoseconds) {
        var destination = in6_addr()  // on the stack: no allocation per turn
        for _ in 0..<Self.batch {
            var peer = sockaddr_storage()
            var interface: Int32 = 0
            let count = withUnsafeMutableBytes(of: &destination) { address in
                stampede_dhcp6_receive(fd, buffer.baseAddress, buffer.count, &peer, &interface,
                                       address.baseAddress!.assumingMemoryBound(to: UInt8.self))
            }
            if count == -Int(EINTR) { continue }
            guard count >= 0 else { return }
            guard count <= buffer.count else {
                metrics.countBoot(ignored: .malformed)
                continue
            }
            let source = SocketAddress(storage: peer)
            let network = fixed ?? withUnsafeBytes(of: destination) { address in networkAddresses.firstIndex { $0.elementsEqual(address) } }
                ?? networks.firstIndex { $0.interface.index == interface } ?? 0
            handle(UnsafeRawBufferPointer(rebasing: buffer[..<count]), network: network, port: port, from: source, now: now)
        }
    }

    private func handle(_ bytes: UnsafeRawBufferPointer, network number: Int, port: ProxyAnswer6.Port, from source: SocketAddress, now: Nanoseconds) {
        let network = networks[number]
        var record: MachineRecord?
        var asked: MachineIdentity?
        let answer = ProxyAnswer6.to(bytes, on: port, from: source.ipv6Bytes, serverID: serverID, server: network.address.host, pxeVendors: pxeVendors,
                                     derived: network.derived) { machine, client in
            asked = machine
            guard let machines else { return .boot(network.menu) }
            // As over DHCPv4: iPXE's requests are a boot going on, and renew no kept API answer.
            guard let (found, book) = machines.record(for: machine, asking: .dhcp, renews: !client.isIPXE) else {
                return .leaveAlone(.asking)
            }
            record = found
            return book.choice(of: found, for: machine, over: network.menu)
        }
        // Written only for a line that is logged (a flood of silences writes none).
        func what() -> String { "DHCPv6 from \(source) on \(network.interface.name)" }
        // What tells a machine apart where it sent no DUID: its address's bytes.
        let sourceKey = source.ipv6Bytes ?? []
        switch answer {
        case .failure(.leftAlone(.asking)):
            metrics.countBoot(ignored: .machineAPIAsking)
            guard let asked, waiting?.keep(Waiting(bytes: Array(bytes), network: number, port: port, source: source), of: asked.hardwareAddress,
                                           now: now) == true else { return }
            logger.debug("\(what()): waiting for the machine API's answer")
        case .failure(let silence):
            metrics.countBoot(ignored: BootIgnored(silence))
            if case .leftAlone = silence, let asked, let progress, !asked.hardwareAddress.isEmpty {
                progress.note(asked.hardwareAddress, .leftAlone, record: record?.name, why: "\(silence)", now: time(nil))
            }
            switch silence {
            case .unknownArchitecture, .noBootFile, .leftAlone:
                guard let unsaid = notices.tell(sourceKey, "\(silence)", now: now) else { return }
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
            let key = BootAnswerLimit.Key(machine: answer.clientID ?? sourceKey, request: answer.asked.rawValue,
                                          bootServerPort: port == .bootServer)
            guard answered.allow(key, now: now) else {
                metrics.countBoot(ignored: .repeated)
                logger.debug("\(what()): answered less than \(BootAnswerLimit.interval / 1_000_000) ms ago: not again")
                return
            }
            var destination = source
            destination.port = answer.destinationPort(to: port, from: source.port)
            var storage = destination.storage
            let fd = port == .dhcp ? listener : bootServers[number]
            let sent = answer.reply.withUnsafeBytes { stampede_dhcp6_send(fd, $0.baseAddress, $0.count, &storage) }
            if port == .bootServer, sent >= 0, echoes.count < Self.echoLimit {
                echoes.append((now + Self.echoDelay, fd, destination, answer.reply))
            }
            guard sent >= 0 else {
                if now - lastSendFailure >= nanosecondsPerSecond {
                    lastSendFailure = now
                    logger.warning("cannot send a DHCPv6 answer on \(network.interface.name) to \(destination): \(Errno(Int32(-sent)))")
                }
                return
            }
            guard let selector = answer.selector, let url = answer.url else {
                if answer.asked == .decline {
                    logger.warning("\(what()): declined its derived address (another node holds it, by duplicate address detection)")
                } else {
                    logger.debug("\(what()): \(answer.asked) answered (a status)")
                }
                return
            }
            if let progress, !answer.machine.hardwareAddress.isEmpty {
                progress.note(answer.machine.hardwareAddress, .dhcp, record: record?.name, offered: answer.target?.description, now: time(nil))
            }
            if let bindings { learn(answer, from: source, on: port, into: bindings) }
            let offer = answer.asked == .solicit
            metrics.countBoot(selector, offer: offer)
            log(answer, selector, url, what(), to: destination, offer: offer)
        }
    }

    /// What an answered message says of the machine's address: a Request to 4011 and an
    /// Information-request come from it (a global one; a link-local address is every link's), and a
    /// Reply that gives a derived address gives it that one. A machine known by neither its MAC nor
    /// its UUID is not bound.
    private func learn(_ answer: ProxyAnswer6, from source: SocketAddress, on port: ProxyAnswer6.Port, into bindings: MachineBindings) {
        let machine = answer.machine
        guard !machine.hardwareAddress.isEmpty || machine.uuid != nil else { return }
        if !answer.relayed, port == .bootServer || answer.asked == .informationRequest, let bytes = source.ipv6Bytes,
           !(bytes[0] == 0xfe && bytes[1] & 0xc0 == 0x80) {
            bindings.learn(source, is: machine)
        }
        guard answer.asked != .solicit else { return }
        for address in answer.given {
            var in6 = in6_addr()
            withUnsafeMutableBytes(of: &in6) { $0.copyBytes(from: address) }
            bindings.learn(SocketAddress(ipv6: in6, port: 0), is: machine)
        }
    }

    private func log(_ answer: ProxyAnswer6, _ selector: BootSelector, _ url: String, _ what: @autoclosure () -> String, to destination: SocketAddress,
                     offer: Bool) {
        let machine = answer.machine
        let client = machine.hardwareAddress.isEmpty ? (machine.uuid ?? "") : machine.hardwareAddress.hardwareAddressText()
        if json {
            logger.info("boot", metadata: [
                "event": "boot", "protocol": "dhcp6", "client": "\(client)", "request": "\(answer.asked)",
                "architecture": .stringConvertible(machine.architecture ?? 0), "uuid": "\(machine.uuid ?? "")",
                "selector": "\(selector.name)", "boot_file": "\(sanitizedForLog(Array(url.utf8)))",
                "outcome": "\(offer ? "offered" : "acknowledged")", "to": "\(destination)",
            ])
            return
        }
        logger.info("""
            \(what()): \(answer.asked) \(client) \(selector.name) (arch \(machine.architecture ?? 0)): \
            \(offer ? "advertised" : "replied") "\(sanitizedForLog(Array(url.utf8)))" to \(destination)\(answer.relayed ? " (relay)" : "")
            """)
    }
}
