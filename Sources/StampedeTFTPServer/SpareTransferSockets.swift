import StampedeBase
import StampedeIO

/// Transfer sockets kept, as state: a read that ended leaves its own socket here, bound to the
/// address its request came to, for the next read to that address (`Worker+SpareSockets.swift`
/// connects it to its new client). Never for the client it served last: the same address and
/// port on both sides would be the old transfer's TIDs, and its late packets the new one's (a PXE
/// ROM asks again from the same port). The most recently kept is taken first; each is kept at
/// most `lifetime`, and at most `limit` at once. An address's list stays when empty: keeping and
/// taking allocate nothing once each address has had its most.
struct SpareTransferSockets {
    private var byLocal: [SocketAddress: [(socket: SocketHandle, peer: SocketAddress, since: Nanoseconds)]] = [:]
    let limit: Int
    let lifetime: Nanoseconds
    private(set) var count = 0

    init(limit: Int, lifetime: Nanoseconds = 2 * nanosecondsPerSecond) {
        self.limit = limit
        self.lifetime = lifetime
    }

    var isEmpty: Bool { count == 0 }

    /// Keeps `socket`, bound to `local` (any port), last connected to `peer`; false when `limit`
    /// are kept already.
    mutating func keep(_ socket: SocketHandle, local: SocketAddress, peer: SocketAddress, now: Nanoseconds) -> Bool {
        guard count < limit else { return false }
        byLocal[Self.key(local), default: []].append((socket, peer, now))
        count += 1
        return true
    }

    /// A socket bound to `local` for `peer` (one last connected to another), no longer kept, and
    /// the client it served last; nil when there is none.
    mutating func take(for local: SocketAddress, peer: SocketAddress) -> (socket: SocketHandle, peer: SocketAddress)? {
        guard let index = byLocal.index(forKey: Self.key(local)),
              let last = byLocal.values[index].lastIndex(where: { $0.peer != peer }) else { return nil }
        count -= 1
        let spare = byLocal.values[index].remove(at: last)
        return (spare.socket, spare.peer)
    }

    /// Any one socket, no longer kept (to make room for another address's); nil when none is.
    mutating func takeAny() -> SocketHandle? {
        guard let index = byLocal.firstIndex(where: { !$0.value.isEmpty }) else { return nil }
        // The oldest of that address: it is the next to expire anyway.
        count -= 1
        return byLocal.values[index].removeFirst().socket
    }

    /// The sockets kept `lifetime` or longer, no longer kept: to close.
    mutating func removeExpired(now: Nanoseconds) -> [SocketHandle] {
        guard count > 0 else { return [] }
        var expired: [SocketHandle] = []
        for index in byLocal.indices {
            // Kept in order: the expired ones are a prefix.
            let stale = byLocal.values[index].prefix { now - $0.since >= lifetime }.count
            guard stale > 0 else { continue }
            expired += byLocal.values[index].prefix(stale).map(\.socket)
            byLocal.values[index].removeFirst(stale)
        }
        count -= expired.count
        return expired
    }

    /// Every socket, no longer kept: to close.
    mutating func removeAll() -> [SocketHandle] {
        defer {
            byLocal.removeAll()
            count = 0
        }
        return byLocal.values.flatMap { $0.map(\.socket) }
    }

    private static func key(_ local: SocketAddress) -> SocketAddress {
        var key = local
        key.port = 0
        return key
    }
}
