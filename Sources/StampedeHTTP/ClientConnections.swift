import StampedeIO
import Synchronization

/// How many HTTP and HTTPS connections each client holds open (`--http-max-per-client`), and how
/// many of them are in a TLS handshake: so that one host (19,995 idle connections from one
/// address stopped every other client's fetch) cannot hold the connections, nor the handshakes,
/// that the machines of a rack need, as `--max-per-client` bounds a host's TFTP transfers. A
/// client is an IPv4 or IPv6 address; each IPv6 /64 holds `--http-max-per-prefix` in all, far
/// more (it is a whole LAN: an IPv6-only rack's machines share one /64, and a /64 held to one
/// host's share let 64 of 2,000 machines fetch at once; the cap stops one host that rotates its
/// address through its prefix), as `--max-per-prefix` does for TFTP. Loopback clients are not
/// counted unless a flag is given (local tools and tests play whole racks from one address).
/// Shared by every loop of a process, `--http`'s and `--https`'s, behind a lock taken at an
/// accept, at the end of a handshake and at a close, never per request.
public final class ClientConnections: Sendable {
    /// Connections one client may hold; of them, `maxHandshakes` in a TLS handshake.
    public let maxConnections: Int
    public let maxHandshakes: Int
    /// Connections the hosts of one IPv6 /64 may hold together.
    public let maxPerPrefix: Int
    public let loopbackUncounted: Bool

    private struct Held {
        var connections = 0
        var handshakes = 0
    }
    private struct Counts {
        var hosts: [SocketAddress: Held] = [:]
        var prefixes: [SocketAddress: Int] = [:]
    }
    private let held = Mutex(Counts())

    /// A quarter of the connections may be in a handshake, at least one.
    public init(maxConnections: Int, maxPerPrefix: Int = 16384, loopbackUncounted: Bool) {
        self.maxConnections = maxConnections
        maxHandshakes = max(1, maxConnections / 4)
        self.maxPerPrefix = maxPerPrefix
        self.loopbackUncounted = loopbackUncounted
    }

    /// Why a connection was refused.
    public enum Refusal: Equatable, Sendable {
        /// The client holds `maxConnections`.
        case connections
        /// The client has `maxHandshakes` handshakes under way.
        case handshakes
        /// The client's IPv6 /64 holds `maxPerPrefix`.
        case network
    }

    /// What a client is counted under, or nil when it is not counted.
    func client(_ peer: SocketAddress) -> SocketAddress? {
        if loopbackUncounted && peer.isLoopback { return nil }
        return peer.clientHost
    }

    /// Takes a place for a connection from `peer` that begins with a handshake (`handshake`), or
    /// says why there is none.
    public func open(_ peer: SocketAddress, handshake: Bool) -> Refusal? {
        guard let client = client(peer) else { return nil }
        let prefix = peer.clientPrefix
        return held.withLock { held in
            var counts = held.hosts[client] ?? Held()
            if counts.connections >= maxConnections { return .connections }
            if handshake && counts.handshakes >= maxHandshakes { return .handshakes }
            if let prefix, held.prefixes[prefix, default: 0] >= maxPerPrefix { return .network }
            counts.connections += 1
            if handshake { counts.handshakes += 1 }
            held.hosts[client] = counts
            if let prefix { held.prefixes[prefix, default: 0] += 1 }
            return nil
        }
    }

    /// A connection's handshake ended (done or not): its place among the handshakes goes back.
    public func handshakeEnded(_ peer: SocketAddress) {
        guard let client = client(peer) else { return }
        held.withLock { held in held.hosts[client]?.handshakes -= 1 }
    }

    /// A connection closed; `inHandshake`: before its handshake ended.
    public func closed(_ peer: SocketAddress, inHandshake: Bool) {
        guard let client = client(peer) else { return }
        let prefix = peer.clientPrefix
        held.withLock { held in
            guard var counts = held.hosts[client] else { return }
            counts.connections -= 1
            if inHandshake { counts.handshakes -= 1 }
            held.hosts[client] = counts.connections > 0 ? counts : nil
            if let prefix, let count = held.prefixes[prefix] { held.prefixes[prefix] = count > 1 ? count - 1 : nil }
        }
    }

    /// Clients holding a connection now.
    public var clients: Int { held.withLock { $0.hosts.count } }

    /// IPv6 /64s holding a connection now.
    public var prefixes: Int { held.withLock { $0.prefixes.count } }
}
