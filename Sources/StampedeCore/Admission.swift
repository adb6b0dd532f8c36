import CStampedeSys
import Glibc

/// How many transfers may run: in all (`--max-transfers`) and per client address
/// (`--max-per-client`), counted across every worker. Asked once when a transfer starts and told
/// once when it ends, never per packet, so a mutex is cheap enough.
public final class Admission: @unchecked Sendable {
    public let maxTransfers: Int
    public let maxPerClient: Int?
    private var lock = pthread_mutex_t()
    private var running = 0
    private var perClient: [SocketAddress: Int] = [:]
    /// When a transfer last started or ended: the idle exit of inetd mode counts from there.
    private var lastActivity = stampede_monotonic_ns()

    public init(maxTransfers: Int, maxPerClient: Int?) {
        self.maxTransfers = maxTransfers
        self.maxPerClient = maxPerClient
        pthread_mutex_init(&lock, nil)
    }

    deinit { pthread_mutex_destroy(&lock) }

    /// The client's address without its port: one machine, whatever port its firmware picks.
    private static func key(_ peer: SocketAddress) -> SocketAddress {
        var key = peer
        key.port = 0
        return key
    }

    /// Takes a place for a transfer from `peer`, or says why there is none.
    public func admit(_ peer: SocketAddress) -> TFTPError? {
        pthread_mutex_lock(&lock)
        defer { pthread_mutex_unlock(&lock) }
        guard running < maxTransfers else { return TFTPError(.notDefined, "Server busy, try again later", busy: true) }
        if let maxPerClient {
            let key = Self.key(peer)
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
        if maxPerClient != nil {
            let key = Self.key(peer)
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
