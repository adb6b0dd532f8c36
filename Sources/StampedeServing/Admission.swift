import CStampedeSys
import StampedeBase
import StampedeIO
import Synchronization

/// How many transfers may run: in all (`--max-transfers`), per client host (`--max-per-client`:
/// an IPv4 or IPv6 address, whatever its port) and per IPv6 /64 (`--max-per-prefix`: a whole LAN,
/// so its cap is far larger; it stops one host that rotates its address through its /64),
/// counted across every worker. Asked once when a transfer starts and told once when it ends,
/// never per packet, so a mutex is cheap enough.
public final class Admission: Sendable {
    public let maxTransfers: Int
    public let maxPerClient: Int?
    public let maxPerPrefix: Int?
    /// Loopback clients are not counted per client (the default limit: local tools and tests
    /// play whole racks from 127.0.0.1, and no packet from the network has a loopback source).
    public let loopbackUncounted: Bool

    private struct Counts {
        var running = 0
        var perClient: [AddressKey: Int] = [:]
        var perPrefix: [AddressKey: Int] = [:]
        /// HTTP connections open (`--http`): a server with one is not idle either.
        var connections = 0
        /// When a transfer or an HTTP connection last ended: the idle exit (`-t`) counts from there.
        var lastActivity = stampede_monotonic_ns()
    }
    private let counts = Mutex(Counts())

    public init(maxTransfers: Int, maxPerClient: Int?, maxPerPrefix: Int? = nil, loopbackUncounted: Bool = false) {
        self.maxTransfers = maxTransfers
        self.maxPerClient = maxPerClient
        self.maxPerPrefix = maxPerPrefix
        self.loopbackUncounted = loopbackUncounted
    }

    /// Whether `peer` is counted per host and per /64 (whatever port its firmware picks).
    private func countsPerClient(_ peer: SocketAddress) -> Bool {
        !(loopbackUncounted && peer.isLoopback)
    }

    /// Why there is no place for a transfer: which limit it reached.
    public enum Refusal: Error, Sendable {
        /// `--max-transfers`: the server's.
        case server
        /// `--max-per-client`: the client host's.
        case client
        /// `--max-per-prefix`: its /64's.
        case network

        /// What the client is told.
        public var message: String {
            switch self {
            case .server: "Server busy, try again later"
            case .client: "Too many transfers from your address"
            case .network: "Too many transfers from your network"
            }
        }
    }

    /// Takes a place for a transfer from `peer`, or says which limit leaves none.
    public func admit(_ peer: SocketAddress) -> Refusal? {
        let (host, prefix) = keys(of: peer)
        return counts.withLock { counts in
            guard counts.running < maxTransfers else { return .server }
            if let host, counts.perClient[host, default: 0] >= maxPerClient! {
                return .client
            }
            if let prefix, counts.perPrefix[prefix, default: 0] >= maxPerPrefix! {
                return .network
            }
            if let host { counts.perClient[host, default: 0] += 1 }
            if let prefix { counts.perPrefix[prefix, default: 0] += 1 }
            counts.running += 1
            counts.lastActivity = stampede_monotonic_ns()
            return nil
        }
    }

    /// Gives back the place of a transfer that ended.
    public func release(_ peer: SocketAddress) {
        let (host, prefix) = keys(of: peer)
        counts.withLock { counts in
            counts.running -= 1
            counts.lastActivity = stampede_monotonic_ns()
            if let host { Self.decrement(&counts.perClient, host) }
            if let prefix { Self.decrement(&counts.perPrefix, prefix) }
        }
    }

    /// The keys `peer` is counted under, its address and its network, where they are limited.
    private func keys(of peer: SocketAddress) -> (host: AddressKey?, prefix: AddressKey?) {
        guard countsPerClient(peer) else { return (nil, nil) }
        return (maxPerClient != nil ? AddressKey(peer.clientHost) : nil, maxPerPrefix != nil ? peer.clientPrefix.map(AddressKey.init) : nil)
    }

    private static func decrement(_ table: inout [AddressKey: Int], _ key: AddressKey) {
        if let current = table[key], current > 1 { table[key] = current - 1 } else { table[key] = nil }
    }

    /// How long no transfer has run nor an HTTP connection been open (0 while one is).
    public func idleTime(now: Nanoseconds) -> Nanoseconds {
        counts.withLock { $0.running > 0 || $0.connections > 0 ? 0 : max(0, now - $0.lastActivity) }
    }

    /// An HTTP connection was accepted: the server is not idle while it is open (`-t`). Told once
    /// per connection, never per request.
    public func connectionOpened() {
        counts.withLock { $0.connections += 1 }
    }

    /// An HTTP connection closed.
    public func connectionClosed() {
        counts.withLock { counts in
            counts.connections -= 1
            counts.lastActivity = stampede_monotonic_ns()
        }
    }

    /// Transfers running now, across all workers.
    public var runningTransfers: Int { counts.withLock { $0.running } }
}
