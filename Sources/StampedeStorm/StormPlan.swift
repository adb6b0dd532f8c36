import Glibc
import StampedeBase
import StampedeHTTPWire
import StampedeIO
import StampedeProtocol
import StampedeTLS

/// What a storm plays: machines booting against one server, each running a boot profile (by
/// default one file read with one set of options), as a rack powering on does.
public struct StormPlan: Sendable {
    /// The server's request port.
    public var server: SocketAddress
    /// `storm --machines DIR`: machine n is the n-th of these (its MAC and UUID a record's);
    /// empty: made up from n.
    public var machineList: [(mac: [UInt8], uuid: [UInt8]?)] = []
    /// What each machine's record boots, by MAC: its iPXE script must name these files.
    public var machineBoots: [[UInt8]: PlannedBoot] = [:]
    /// What every machine asks for, stage by stage.
    public var profile: BootProfile
    /// Machines booting at once (each runs the whole profile), across every slice.
    public var clients = 100
    /// Machines in all; nil: one per client, or as many as `duration` allows. A slot whose machine
    /// has finished takes the next.
    public var total: Int?
    /// Keep starting machines until this much time has passed (then let the running ones end).
    public var duration: Nanoseconds?
    /// The first `clients` machines power on spread evenly over this time, not all at once.
    public var ramp: Nanoseconds = 0
    /// This storm plays the machines whose number n has n % count == index: so that several
    /// threads, or several processes (`--slice`), share one rack with distinct identities.
    public var slice = (index: 0, count: 1)
    /// Each client waits this long before its first ACK: with a long enough hold every transfer
    /// is open at once (the `scale` scenario), as with a rack of slow firmware.
    public var hold: Nanoseconds = 0
    /// The bytes each file must have: every received byte is compared. `expected` holds one file's
    /// (`--verify`); `verifyRoot` a directory whose files a profile's names are read from.
    public var expected: [String: [UInt8]] = [:]
    public var verifyRoot: String?
    /// Each machine sends from an address of its own, 127.1.0.0 + its number, when the server is
    /// on IPv4 loopback: as on a real network, and 20,000 machines do not share (and exhaust)
    /// one address's ports with the server's transfer sockets.
    public var sourcePerMachine = false
    /// The HTTP server an `http` stage's name is a path of (`--http`); a stage that writes a
    /// whole URL names its own.
    public var httpServer: SocketAddress?
    /// `storm --https`: `httpServer` speaks TLS.
    public var httpSecure = false
    /// `storm --tls-ca`: the CAs the machines trust, for `--https` and `https://` URLs in stages.
    public var tls: TLSClient?
    /// The storm's own address on a boot network (`--dhcp`): a profile's `dhcp` stages broadcast
    /// from port 68 of its interface. Without it, a profile is played without its DHCP stages.
    public var dhcpSource: SocketAddress?
    /// A machine whose boot failed starts over as its profile's `reboot` line says (`--reboot`);
    /// otherwise it counts as failed at once.
    public var reboot = false
    /// Machine n sends from this address + n (`--source-range`): a rack on a network of its own,
    /// an IPv6 /64 say, whose addresses the host takes (a local route, non-local binds).
    public var firstSource: SocketAddress?

    public init(server: SocketAddress, profile: BootProfile) {
        self.server = server
        self.profile = profile
    }

    /// How many of `n` machines fall in this slice.
    func portion(_ n: Int) -> Int { n / slice.count + (slice.index < n % slice.count ? 1 : 0) }

    /// Machines this storm starts, or nil when only `duration` bounds it.
    public var plannedTotal: Int? {
        if let total { return portion(total) }
        return duration == nil ? portion(clients) : nil
    }

    /// Machines this storm runs at once.
    public var slots: Int { max(1, portion(clients)) }

    /// The number of this storm's k-th machine, counted across every slice.
    func machineNumber(_ k: Int) -> Int { slice.index + k * slice.count }

    /// When machine n powers on, after the storm starts.
    func powerOn(_ n: Int) -> Nanoseconds {
        guard ramp > 0, n < clients else { return 0 }
        return Nanoseconds(Double(ramp) * Double(n) / Double(clients))
    }

    /// The address machine `number` sends from.
    func source(of number: Int) -> SocketAddress {
        ownSource(of: number) ?? SocketAddress(parsing: server.isIPv6 ? "[::]:0" : "0.0.0.0:0", defaultPort: 0)!
    }

    /// The address of machine `number`'s own (`--source-range`, or 127.1.0.0 + n on loopback);
    /// nil when the machines share the host's.
    func ownSource(of number: Int) -> SocketAddress? {
        if let firstSource { return Self.address(firstSource, plus: number) }
        guard sourcePerMachine, !server.isIPv6, server.isLoopback else { return nil }
        let host = 0x7F00_0000 | (0x0001_0000 &+ UInt32(truncatingIfNeeded: number)) & 0x00FF_FFFF
        return SocketAddress(ipv4: in_addr(s_addr: host.bigEndian), port: 0)
    }

    /// `base` + n, counted in its last 32 bits (IPv4) or 64 (IPv6), port 0.
    static func address(_ base: SocketAddress, plus n: Int) -> SocketAddress {
        var address = base
        address.port = 0
        withUnsafeMutableBytes(of: &address.storage) { raw in
            if base.isIPv6 {
                var sin6 = raw.load(as: sockaddr_in6.self)
                withUnsafeMutableBytes(of: &sin6.sin6_addr) { bytes in
                    var low = UInt64(bigEndian: bytes.load(fromByteOffset: 8, as: UInt64.self))
                    low &+= UInt64(n)
                    bytes.storeBytes(of: low.bigEndian, toByteOffset: 8, as: UInt64.self)
                }
                raw.storeBytes(of: sin6, as: sockaddr_in6.self)
            } else {
                var sin = raw.load(as: sockaddr_in.self)
                sin.sin_addr.s_addr = (UInt32(bigEndian: sin.sin_addr.s_addr) &+ UInt32(truncatingIfNeeded: n)).bigEndian
                raw.storeBytes(of: sin, as: sockaddr_in.self)
            }
        }
        return address
    }

    /// How often a failed boot starts over.
    var reboots: Int { reboot ? profile.reboots : 0 }

    /// The largest DATA a client of this plan may receive.
    public var largestBlock: Int {
        let sizes: Set = [TFTPOption.blksize.rawValue, TFTPOption.blksize2.rawValue]
        return max(512, profile.stages.flatMap(\.options).filter { sizes.contains($0.name) }.compactMap { Int($0.value) }.max() ?? 512)
    }

    /// This plan for one of `parts` threads: every part a slice of this one's machines.
    public func share(_ part: Int, of parts: Int) -> StormPlan {
        var plan = self
        plan.slice = (slice.index + part * slice.count, slice.count * parts)
        return plan
    }
}

extension StormPlan {
    /// Machine `number`: its record's MAC and UUID (`machineList`), or made up from the number.
    func identity(of number: Int) -> MachineIdentity {
        guard !machineList.isEmpty else {
            let made = MachineIdentity(number: number)
            // A Pi's ROM is told by its maker's hardware address: a Pi 4's prefix.
            guard profile.stages.contains(where: { $0.dhcp?.client == .rpi }) else { return made }
            return MachineIdentity(number: number, mac: [0xDC, 0xA6, 0x32] + made.mac.suffix(3), uuid: nil)
        }
        let listed = machineList[number % machineList.count]
        return MachineIdentity(number: number, mac: listed.mac, uuid: listed.uuid)
    }
}

/// What a machine's record says it boots (`storm --machines`): the paths its iPXE script must
/// name, as the server's root names them.
public struct PlannedBoot: Sendable, Equatable {
    public var kernel: String
    public var initrds: [String]

    public init(kernel: String, initrds: [String]) {
        self.kernel = HTTPLocation.path(of: kernel)
        self.initrds = initrds.map(HTTPLocation.path(of:))
    }

    /// How `script` differs from it (nil: it names this kernel and these initrds; a script that
    /// names no kernel, a chain's first, is not compared).
    func differs(from script: IPXEScript) -> String? {
        var kernels: [String] = [], initrds: [String] = []
        for fetch in script.fetches {
            switch fetch {
            case .kernel(let location): kernels.append(HTTPLocation.path(of: location))
            case .initrd(let location): initrds.append(HTTPLocation.path(of: location))
            case .chain: continue
            }
        }
        guard !kernels.isEmpty else { return nil }
        guard kernels == [kernel], initrds == self.initrds else {
            return "names kernel \(kernels.joined(separator: " ")) and initrds [\(initrds.joined(separator: " "))]; its record \(kernel) and [\(self.initrds.joined(separator: " "))]"
        }
        return nil
    }
}
