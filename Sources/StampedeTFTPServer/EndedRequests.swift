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
/// told. State alone: the worker notes each transfer that ends and asks before each request.
struct EndedRequests {
    /// How long an ended transfer's request is kept: longer than a request waits in a listener's
    /// queue.
    static let memory: Nanoseconds = 10 * nanosecondsPerSecond
    /// Ended transfers kept at most; past it the oldest are forgotten early.
    static let capacity = 32_768

    private struct Ended {
        var request: [UInt8]
        var at: Nanoseconds
    }

    private var byPeer: [SocketAddress: Ended] = [:]
    /// Each note's peer and time, oldest first from `head`: what `forget` walks.
    private var order: [(peer: SocketAddress, at: Nanoseconds)] = []
    private var head = 0

    /// Transfers kept now.
    var count: Int { byPeer.count }

    /// `peer`'s transfer of `request` ended `at`.
    mutating func note(_ peer: SocketAddress, request: [UInt8], at: Nanoseconds) {
        forget(before: at - Self.memory)
        while byPeer.count >= Self.capacity, head < order.count { drop(order[head]) }
        byPeer[peer] = Ended(request: request, at: at)
        order.append((peer, at))
    }

    /// Whether `request` from `peer`, which the kernel took at `received`, is a copy of the
    /// request of a transfer that ended after that.
    func isLateCopy(_ request: [UInt8], from peer: SocketAddress, received: Nanoseconds) -> Bool {
        guard let ended = byPeer[peer] else { return false }
        return received < ended.at && ended.request == request
    }

    /// Forgets what ended before `time`.
    mutating func forget(before time: Nanoseconds) {
        while head < order.count, order[head].at < time { drop(order[head]) }
    }

    private mutating func drop(_ entry: (peer: SocketAddress, at: Nanoseconds)) {
        head += 1
        // A later note of the same peer stays.
        if byPeer[entry.peer]?.at == entry.at { byPeer[entry.peer] = nil }
        if head > 1024 && head * 2 > order.count {
            order.removeFirst(head)
            head = 0
        }
    }
}
