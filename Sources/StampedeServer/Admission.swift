import CStampedeSys
import StampedeIO
import StampedeProtocol
import Synchronization

/// How many transfers may run: in all (`--max-transfers`) and per client machine
/// (`--max-per-client`: an IPv4 address, an IPv6 /64), counted across every worker. Asked once
/// when a transfer starts and told once when it ends, never per packet, so a mutex is cheap enough.
public final class Admission: Sendable {
    public let maxTransfers: Int
    public let maxPerClient: Int?
    /// Loopback clients are not counted per client (the default limit: local tools and tests
    /// play whole racks from 127.0.0.1, and no packet from the network has a loopback source).
    public let loopbackUncounted: Bool

    private struct Counts {
        var running = 0
        var perClient: [SocketAddress: Int] = [:]
        /// When a transfer last started or ended: the idle exit of inetd mode counts from there.
        var lastActivity = stampede_monotonic_ns()
    }
    private let counts = Mutex(Counts())

    public init(maxTransfers: Int, maxPerClient: Int?, loopbackUncounted: Bool = false) {
        self.maxTransfers = maxTransfers
        self.maxPerClient = maxPerClient
        self.loopbackUncounted = loopbackUncounted
    }

    /// The limits a server's configuration sets.
    public convenience init(_ configuration: ServerConfiguration) {
        self.init(maxTransfers: configuration.maxTransfers, maxPerClient: configuration.maxTransfersPerClient,
                  loopbackUncounted: configuration.loopbackUncountedPerClient)
    }

    /// Whether `peer` is counted per client machine (whatever port its firmware picks).
    private func countsPerClient(_ peer: SocketAddress) -> Bool {
        maxPerClient != nil && !(loopbackUncounted && peer.isLoopback)
    }

    /// Takes a place for a transfer from `peer`, or says why there is none.
    public func admit(_ peer: SocketAddress) -> TFTPError? {
        let perClient = countsPerClient(peer) ? maxPerClient : nil
        return counts.withLock { counts in
            guard counts.running < maxTransfers else { return TFTPError(.notDefined, "Server busy, try again later", busy: true) }
            if let perClient {
                let key = peer.clientMachine
                let current = counts.perClient[key, default: 0]
                guard current < perClient else { return TFTPError(.notDefined, "Too many transfers from your address", busy: true) }
                counts.perClient[key] = current + 1
            }
            counts.running += 1
            counts.lastActivity = stampede_monotonic_ns()
            return nil
        }
    }

    /// Gives back the place of a transfer that ended.
    public func release(_ peer: SocketAddress) {
        let counted = countsPerClient(peer)
        counts.withLock { counts in
            counts.running -= 1
            counts.lastActivity = stampede_monotonic_ns()
            if counted {
                let key = peer.clientMachine
                if let current = counts.perClient[key], current > 1 { counts.perClient[key] = current - 1 } else { counts.perClient[key] = nil }
            }
        }
    }

    /// How long no transfer has run nor started (0 while one runs).
    public func idleTime(now: Nanoseconds) -> Nanoseconds {
        counts.withLock { $0.running > 0 ? 0 : max(0, now - $0.lastActivity) }
    }

    /// Transfers running now, across all workers.
    public var runningTransfers: Int { counts.withLock { $0.running } }
}
