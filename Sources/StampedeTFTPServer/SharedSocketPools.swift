import StampedeBase
import StampedeIO
import StampedeProtocol

/// The worker's shared transfer sockets, as state: one pool per local address that requests
/// came to (bound there, as a transfer's own socket would be), each of up to `perPool` sockets on
/// ports of their own. A client always gets the same socket of its pool. The worker opens and
/// closes the sockets (`Worker+SharedSockets.swift`); a socket's tag names its pool and place.
struct SharedSocketPools {
    private var pools: [(local: SocketAddress, sockets: [SocketHandle])] = []
    /// How many times pools were opened (the first is said at notice level, the rest at debug).
    private(set) var openings = 0
    /// When the last transfer on a shared socket ended, while none runs.
    var idleSince: Nanoseconds?

    var isEmpty: Bool { pools.isEmpty }

    /// The pool of sockets bound to `local` (any port), if it is open.
    func pool(for local: SocketAddress) -> Int? {
        let key = Self.key(local)
        return pools.firstIndex { $0.local == key }
    }

    /// The socket a tag names, if its pool is open.
    func socket(pool: Int, index: Int) -> SocketHandle? {
        guard pool < pools.count, index < pools[pool].sockets.count else { return nil }
        return pools[pool].sockets[index]
    }

    /// The socket of `pool` that `peer` always gets.
    func socket(for peer: SocketAddress, in pool: Int) -> SocketHandle {
        var hasher = Hasher()
        hasher.combine(peer)
        let sockets = pools[pool].sockets
        return sockets[Int(UInt(bitPattern: hasher.finalize()) % UInt(sockets.count))]
    }

    /// The pool number the next `add` gets (its sockets' tags are made with it).
    var nextPool: Int { pools.count }

    mutating func add(local: SocketAddress, sockets: [SocketHandle]) {
        precondition(!sockets.isEmpty && pools.count < Tag.poolLimit)
        pools.append((Self.key(local), sockets))
        openings += 1
    }

    /// Empties every pool; returns the sockets to close.
    mutating func removeAll() -> [SocketHandle] {
        defer { pools.removeAll() }
        idleSince = nil
        return pools.flatMap(\.sockets)
    }

    private static func key(_ local: SocketAddress) -> SocketAddress {
        var key = local
        key.port = 0
        return key
    }
}
