import StampedeIO
import Synchronization

/// How many HTTP and HTTPS connections each client holds open (`--http-max-per-client`), and how
/// many of them are in a TLS handshake: so that one host (19,995 idle connections from one
/// address stopped every other client's fetch) cannot hold the connections, nor the handshakes,
/// that the machines of a rack need, as `--max-per-client` bounds a host's TFTP transfers. A
/// client is an IPv4 address, or an IPv6 /64 (one host may rotate its address through its
/// prefix). Loopback clients are not counted unless the flag is given (local tools and tests play
/// whole racks from one address). Shared by every loop of a process, `--http`'s and `--https`'s,
/// behind a lock taken at an accept, at the end of a handshake and at a close, never per request.
public final class ClientConnections: Sendable {
    /// Connections one client may hold; of them, `maxHandshakes` in a TLS handshake.
    public let maxConnections: Int
    public let maxHandshakes: Int
    public let loopbackUncounted: Bool

    private struct Held {
        var connections = 0
        var handshakes = 0
    }
    private let held = Mutex<[SocketAddress: Held]>([:])

    /// A quarter of the connections may be in a handshake, at least one.
    public init(maxConnections: Int, loopbackUncounted: Bool) {
        self.maxConnections = maxConnections
        maxHandshakes = max(1, maxConnections / 4)
        self.loopbackUncounted = loopbackUncounted
    }

    /// Why a connection was refused.
    public enum Refusal: Equatable, Sendable {
        /// The client holds `maxConnections`.
        case connections
        /// The client has `maxHandshakes` handshakes under way.
        case handshakes
    }

    /// What a client is counted under, or nil when it is not counted.
    func client(_ peer: SocketAddress) -> SocketAddress? {
        if loopbackUncounted && peer.isLoopback { return nil }
        return peer.clientPrefix ?? peer.clientHost
    }

    /// Takes a place for a connection from `peer` that begins with a handshake (`handshake`), or
    /// says why there is none.
    public func open(_ peer: SocketAddress, handshake: Bool) -> Refusal? {
        guard let client = client(peer) else { return nil }
        return held.withLock { held in
            var counts = held[client] ?? Held()
            if counts.connections >= maxConnections { return .connections }
            if handshake && counts.handshakes >= maxHandshakes { return .handshakes }
            counts.connections += 1
            if handshake { counts.handshakes += 1 }
            held[client] = counts
            return nil
        }
    }

    /// A connection's handshake ended (done or not): its place among the handshakes goes back.
    public func handshakeEnded(_ peer: SocketAddress) {
        guard let client = client(peer) else { return }
        held.withLock { held in held[client]?.handshakes -= 1 }
    }

    /// A connection closed; `inHandshake`: before its handshake ended.
    public func closed(_ peer: SocketAddress, inHandshake: Bool) {
        guard let client = client(peer) else { return }
        held.withLock { held in
            guard var counts = held[client] else { return }
            counts.connections -= 1
            if inHandshake { counts.handshakes -= 1 }
            held[client] = counts.connections > 0 ? counts : nil
        }
    }

    /// Clients holding a connection now.
    public var clients: Int { held.withLock { $0.count } }
}
