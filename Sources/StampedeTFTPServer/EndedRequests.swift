import StampedeBase
import StampedeIO

/// The requests of the transfers that ended lately, by client address and port, so that a copy
/// of one read after its transfer ended is known for what it is. A client resends its request
/// when the first answer is slow (iPXE after 250 ms); under load the copies wait in the
/// listener's queue behind the first, which is answered, served and ended before they are read,
/// and each started a transfer of its own to a client that had moved on (a rack of 20,000
/// machines on two cores: 32,000 such transfers beside 60,000 real ones). When the kernel took
/// the request (`Datagram.received`) tells a copy from a client asking again: taken before its
/// transfer ended, it was sent before the client had its answer. Without that time nothing is
/// told. An ended transfer's request is kept as long as a copy of it may still wait in a
/// listener's queue: 10 s, and twice the longest wait of the requests read lately when that is
/// longer (a Glibc worker 20,000 machines overran read its requests up to 13 s after the kernel
/// took them, and copies read past a 10 s memory each began a transfer to a port its client had
/// closed, or had since given to another of its transfers). State alone: the worker notes each
/// transfer that ends and each request's wait, and asks before each request.
struct EndedRequests {
    /// How long an ended transfer's request is kept at least.
    static let memory: Nanoseconds = 10 * nanosecondsPerSecond
    /// How long at most, however late requests are read.
    static let longestMemory: Nanoseconds = 120 * nanosecondsPerSecond
    /// Ended transfers kept at most; past it the oldest are forgotten early.
    static let capacity = 32_768

    private struct Ended {
        var request: [UInt8]
        var at: Nanoseconds
    }

    private var byPeer: [AddressKey: Ended] = [:]
    /// Each note's peer and time, oldest first from `head`: what `forget` walks.
    private var order: [(peer: AddressKey, at: Nanoseconds)] = []
    private var head = 0
    /// The longest wait of the requests read in the window that began at `since` (`memory`
    /// long), and in the one before it.
    private var waits: (current: Nanoseconds, previous: Nanoseconds, since: Nanoseconds) = (0, 0, 0)

    /// Transfers kept now.
    var count: Int { byPeer.count }

    /// How long an ended transfer's request is kept now.
    var kept: Nanoseconds { min(Self.longestMemory, max(Self.memory, 2 * max(waits.current, waits.previous))) }

    /// A request the kernel took at `received` was read `now`.
    mutating func heard(received: Nanoseconds, now: Nanoseconds) {
        if now - waits.since >= Self.memory {
            waits = (0, now - waits.since >= 2 * Self.memory ? 0 : waits.current, now)
        }
        waits.current = max(waits.current, now - received)
    }

    /// `peer`'s transfer of `request` ended `at`.
    mutating func note(_ peer: SocketAddress, request: [UInt8], at: Nanoseconds) {
        forget(before: at - kept)
        while byPeer.count >= Self.capacity, head < order.count { drop(order[head]) }
        let peer = AddressKey(peer)
        byPeer[peer] = Ended(request: request, at: at)
        order.append((peer, at))
    }

    /// Whether `request` from `peer`, which the kernel took at `received`, is a copy of the
    /// request of a transfer that ended after that.
    func isLateCopy(_ request: [UInt8], from peer: SocketAddress, received: Nanoseconds) -> Bool {
        guard let ended = byPeer[AddressKey(peer)] else { return false }
        return received < ended.at && ended.request == request
    }

    /// Forgets what ended before `time`.
    mutating func forget(before time: Nanoseconds) {
        while head < order.count, order[head].at < time { drop(order[head]) }
    }

    private mutating func drop(_ entry: (peer: AddressKey, at: Nanoseconds)) {
        head += 1
        // A later note of the same peer stays.
        if byPeer[entry.peer]?.at == entry.at { byPeer[entry.peer] = nil }
        if head > 1024 && head * 2 > order.count {
            order.removeFirst(head)
            head = 0
        }
    }
}
