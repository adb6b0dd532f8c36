import CStampedeSys
import Glibc
import StampedeIO
import StampedeProtocol

/// How many transfers may run: in all (`--max-transfers`) and per client machine
/// (`--max-per-client`: an IPv4 address, an IPv6 /64), counted across every worker. Asked once
/// when a transfer starts and told once when it ends, never per packet, so a mutex is cheap enough.
public final class Admission: @unchecked Sendable {
    public let maxTransfers: Int
    public let maxPerClient: Int?
    /// Loopback clients are not counted per client (the default limit: local tools and tests
    /// play whole racks from 127.0.0.1, and no packet from the network has a loopback source).
    public let loopbackUncounted: Bool
    private var lock = pthread_mutex_t()
    private var running = 0
    private var perClient: [SocketAddress: Int] = [:]
    /// When a transfer last started or ended: the idle exit of inetd mode counts from there.
    private var lastActivity = stampede_monotonic_ns()

    public init(maxTransfers: Int, maxPerClient: Int?, loopbackUncounted: Bool = false) {
        self.maxTransfers = maxTransfers
        self.maxPerClient = maxPerClient
        self.loopbackUncounted = loopbackUncounted
        pthread_mutex_init(&lock, nil)
    }

    /// The limits a server's configuration sets.
    public convenience init(_ configuration: ServerConfiguration) {
        self.init(maxTransfers: configuration.maxTransfers, maxPerClient: configuration.maxTransfersPerClient,
                  loopbackUncounted: configuration.loopbackUncountedPerClient)
    }

    deinit { pthread_mutex_destroy(&lock) }

    /// Whether `peer` is counted per client machine (whatever port its firmware picks).
    private func countsPerClient(_ peer: SocketAddress) -> Bool {
        maxPerClient != nil && !(loopbackUncounted && peer.isLoopback)
    }

    /// Takes a place for a transfer from `peer`, or says why there is none.
    public func admit(_ peer: SocketAddress) -> TFTPError? {
        pthread_mutex_lock(&lock)
        defer { pthread_mutex_unlock(&lock) }
        guard running < maxTransfers else { return TFTPError(.notDefined, "Server busy, try again later", busy: true) }
        if let maxPerClient, countsPerClient(peer) {
            let key = peer.clientMachine
            let current = perClient[key, default: 0]
            guard current < maxPerClient else { return TFTPError(.notDefined, "Too many transfers from your address", busy: true) }
            perClient[key] = current + 1
        }
        running += 1
        lastActivity = stampede_monotonic_ns()
        return nil
    }

    /// Gives back the place of a transfer that ended.
    public func release(_ peer: SocketAddress) {
        pthread_mutex_lock(&lock)
        defer { pthread_mutex_unlock(&lock) }
        running -= 1
        lastActivity = stampede_monotonic_ns()
        if countsPerClient(peer) {
            let key = peer.clientMachine
            if let current = perClient[key], current > 1 { perClient[key] = current - 1 } else { perClient[key] = nil }
        }
    }

    /// How long no transfer has run nor started (0 while one runs).
    public func idleTime(now: Nanoseconds) -> Nanoseconds {
        pthread_mutex_lock(&lock)
        defer { pthread_mutex_unlock(&lock) }
        return running > 0 ? 0 : max(0, now - lastActivity)
    }

    /// Transfers running now, across all workers.
    public var runningTransfers: Int {
        pthread_mutex_lock(&lock)
        defer { pthread_mutex_unlock(&lock) }
        return running
    }
}
