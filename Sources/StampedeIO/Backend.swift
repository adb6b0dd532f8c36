import StampedeBase

/// A socket as a backend knows it: an index into its own socket table (a ring slot, an epoll
/// table entry), not a file descriptor. Only the backend that issued it understands it.
public struct SocketHandle: Hashable, Sendable, CustomStringConvertible {
    public let index: Int32
    public init(_ index: Int32) { self.index = index }
    public var description: String { "socket \(index)" }
}

/// The contract between a worker (or a storm) and an I/O backend.
///
/// Sockets are handles; every socket carries a tag its owner chose, returned with each datagram.
/// Sends are queued descriptors flushed together by `poll`; a DATA send is a 4-byte header plus a
/// slice of a file image that the backend gathers with an iovec, never copies. The backend says
/// what it can take (`largestDatagram`, `largestListenerDatagram`); its users ask.
public protocol DatagramBackend: AnyObject, CustomStringConvertible, SendableMetatype {
    /// Opens a request listener (see `UDPSocket.listener`). Throws the errno.
    func openListener(_ address: SocketAddress, receiveBuffer: Int, tag: UInt64) throws(Errno) -> SocketHandle
    /// Takes over a bound datagram socket as a listener: inetd's fd 0, systemd's LISTEN_FDS
    /// (see `UDPSocket.adoptListener`). The backend owns it from then on.
    func adoptListener(_ socket: consuming Descriptor, receiveBuffer: Int, tag: UInt64) throws(Errno) -> SocketHandle
    /// Takes over a bound, unconnected datagram socket that carries many transfers (a worker's
    /// shared transfer socket): its datagrams name their peer and local address as a listener's
    /// do, but they are transfers' ACKs, not requests: what its full queue dropped is not counted
    /// as requests lost (`BackendStatistics.listenerQueueDrops`).
    func adoptShared(_ socket: consuming Descriptor, receiveBuffer: Int, tag: UInt64) throws(Errno) -> SocketHandle
    /// Opens a transfer socket bound to `local` and connected to `peer`. `largestDatagram` is the
    /// biggest packet the client may send on it (blksize + 4 for an upload), so a backend with
    /// pooled receive buffers can pick buffers that fit. `buffers` are the kernel queues its
    /// window needs (`SocketBuffers.holding`).
    func openTransfer(local: SocketAddress, peer: SocketAddress, ports: ClosedRange<UInt16>?,
                      largestDatagram: Int, buffers: SocketBuffers, tag: UInt64) throws(Errno) -> SocketHandle
    /// Opens a client socket (see `UDPSocket.client`): datagrams from any peer arrive, each with
    /// its `peer`; sends name their destination. `stampede storm` plays its clients on these.
    func openClient(local: SocketAddress, largestDatagram: Int, buffers: SocketBuffers, tag: UInt64) throws(Errno) -> SocketHandle
    /// The local address a socket is bound to.
    func localAddress(of socket: SocketHandle) -> SocketAddress?
    /// Closes a socket; sends queued on it before are still flushed first. What the kernel
    /// dropped on its way in is added to `statistics.socketQueueDrops`.
    func close(_ socket: SocketHandle)

    /// Queues `header` (copied) followed by `payload` (referenced until the next poll returns).
    func send(_ socket: SocketHandle, header: UnsafeRawBufferPointer, payload: UnsafeRawBufferPointer)
    /// Queues `header` (copied) and `payload` (referenced, as above) from an unconnected socket (a
    /// listener, a client) to `peer`; a listener's datagram names its source address `local`
    /// (PKTINFO). Replies to requests, clients, and transfers in single-port mode send this way.
    func send(_ socket: SocketHandle, to peer: SocketAddress, from local: SocketAddress?,
              header: UnsafeRawBufferPointer, payload: UnsafeRawBufferPointer)

    /// Queues a window of DATA: datagram i is the 4-byte header `headers[4i ..< 4i + 4]` (copied)
    /// followed by `payload[i * blockSize ..< min((i + 1) * blockSize, payload.count)]`
    /// (referenced, as above). Every datagram but the last carries `blockSize` bytes; the last may
    /// carry fewer, or none. `peer` and `local` as for the unconnected `send`, nil on a connected
    /// socket. With `segmentation` on, the backend sends runs of them as one segmented send each
    /// (falling back to one datagram per send on a socket whose path refuses); the client sees the
    /// same datagrams either way.
    func sendWindow(_ socket: SocketHandle, to peer: SocketAddress?, from local: SocketAddress?,
                    headers: UnsafeRawBufferPointer, payload: UnsafeRawBufferPointer, blockSize: Int)
    /// Whether windows go out as segmented sends (for the start line).
    var segmentation: Segmentation { get }

    /// Flushes queued sends, waits for datagrams until `deadline` (monotonic ns; nil: forever),
    /// and returns how many arrived. They stay valid until the next call.
    func poll(deadline: Nanoseconds?) -> Int
    /// Makes `poll` return, with whatever datagrams there are (perhaps none), when `descriptor`
    /// becomes readable: the storm's epoll of HTTP connections is waited on with its datagrams
    /// this way. One descriptor per backend, watched until the backend goes; the caller keeps it
    /// open that long, and drains it before the next `poll` (a readable descriptor that nothing
    /// new wakes may not wake `poll` again).
    func watch(_ descriptor: Int32) throws(Errno)
    /// The i-th datagram of the last poll.
    func datagram(_ index: Int) -> Datagram

    /// What the backend has done since it was made (`BackendStatistics`): read by its own
    /// thread, which publishes it for the metrics.
    var statistics: BackendStatistics { get }
    /// Sockets the backend holds: open ones, and closed ones whose last operations the kernel has
    /// not yet confirmed. Back to the listener count when no transfer runs, or something leaks.
    var socketCount: Int { get }
    /// The largest datagram a transfer or client socket receives whole (a longer one arrives
    /// `truncated`): a server refuses to start when an upload's DATA could be larger.
    var largestDatagram: Int { get }
    /// The largest datagram a listener receives whole, at least `Request.largestDatagram`: in
    /// single-port mode an upload's DATA arrives on the listener, which bounds its blksize.
    var largestListenerDatagram: Int { get }
}

extension DatagramBackend {
    /// A window one datagram per send, through `send`: what a backend without segmentation does.
    public func sendWindow(_ socket: SocketHandle, to peer: SocketAddress?, from local: SocketAddress?,
                           headers: UnsafeRawBufferPointer, payload: UnsafeRawBufferPointer, blockSize: Int) {
        for i in 0..<(headers.count / 4) {
            let header = UnsafeRawBufferPointer(rebasing: headers[(4 * i)..<(4 * i + 4)])
            let slice = windowBlock(payload, i, blockSize: blockSize)
            if let peer {
                send(socket, to: peer, from: local, header: header, payload: slice)
            } else {
                send(socket, header: header, payload: slice)
            }
        }
    }

    public var segmentation: Segmentation { .unavailable("this backend sends one datagram at a time") }
    public var sendFailures: Int { statistics.sendFailures }
    public var segmentationFallbacks: Int { statistics.segmentationFallbacks }
    public var segmentedSends: Int { statistics.segmentedSends }

    /// A whole datagram (copied) to `peer`.
    public func send(_ socket: SocketHandle, to peer: SocketAddress, from local: SocketAddress?, packet: UnsafeRawBufferPointer) {
        send(socket, to: peer, from: local, header: packet, payload: UnsafeRawBufferPointer(start: nil, count: 0))
    }
}

/// The payload of datagram `i` of a window (see `sendWindow`): `blockSize` bytes of `payload` from
/// `i * blockSize`, fewer (or none) at its end.
@inline(__always)
public func windowBlock(_ payload: UnsafeRawBufferPointer, _ i: Int, blockSize: Int) -> UnsafeRawBufferPointer {
    let start = min(i * blockSize, payload.count)
    return UnsafeRawBufferPointer(rebasing: payload[start..<min(start + blockSize, payload.count)])
}

/// One received datagram, pointing into a backend-owned buffer.
public struct Datagram {
    public var tag: UInt64
    public var bytes: UnsafeRawBufferPointer
    /// Where it came from.
    public var peer: SocketAddress
    /// The local address to answer from (listeners only, from PKTINFO).
    public var local: SocketAddress
    /// A socket error in place of a datagram (ECONNREFUSED: the peer's port is gone).
    public var error: Errno?
    /// The datagram was longer than the socket's buffers: `bytes` is its start. Every backend
    /// says so rather than hand it over as if whole or drop it without a word; its reader
    /// refuses it as it would the whole datagram (`largestDatagram`, `largestListenerDatagram`).
    public var truncated: Bool
    /// Listeners: when the kernel took it (SO_TIMESTAMPNS, on the monotonic clock), which for a
    /// request read late from a long queue is well before it is read; nil where not known.
    public var received: Nanoseconds?

    public init(tag: UInt64, bytes: UnsafeRawBufferPointer, peer: SocketAddress, local: SocketAddress, error: Errno? = nil,
                truncated: Bool = false, received: Nanoseconds? = nil) {
        self.tag = tag
        self.bytes = bytes
        self.peer = peer
        self.local = local
        self.error = error
        self.truncated = truncated
        self.received = received
    }
}

/// A backend's own figures, counted as it works: how much each entry into the kernel carried.
public struct BackendStatistics: Sendable, Equatable {
    /// Entries into the kernel for I/O: io_uring_enter and the engine's other calls; epoll_wait,
    /// recvmmsg, sendmmsg.
    public var systemCalls = 0
    /// Send operations: a sendmmsg message, or an io_uring SENDMSG (one datagram, or a segmented
    /// send of several). `datagramsSent / sendOperations` is what one send carried.
    public var sendOperations = 0
    /// Datagrams the kernel took.
    public var datagramsSent = 0
    /// Datagrams the kernel refused (a full socket buffer: loss that retransmission repairs).
    public var sendFailures = 0
    /// Segmented sends (UDP GSO) the kernel took, each of two datagrams or more.
    public var segmentedSends = 0
    /// Segmented sends a socket's path refused (a blksize above the path MTU, a device that cannot
    /// segment), sent again one datagram at a time, and the socket's later windows too.
    public var segmentationFallbacks = 0
    /// Receives that found no free buffer (io_uring's provided buffers; nil for a backend that
    /// receives into buffers of its own, which the kernel never runs out of).
    public var receiveBufferExhausted: Int?
    /// Times the kernel said it dropped completions under memory pressure (io_uring's EBADR; nil
    /// for a backend without completions): survived, and counted.
    public var completionsLost: Int?
    /// Datagrams the kernel dropped on their way into the sockets this backend has closed, before
    /// it could read them: a receive queue full (what the kernel counts per socket, SO_MEMINFO's
    /// drops, read as each socket closes).
    public var socketQueueDrops = 0
    /// The part of `socketQueueDrops` that was lost at listeners: requests, not a transfer's ACKs.
    public var listenerQueueDrops = 0

    public init() {}

    /// Two backends' figures together (a server's workers).
    public static func += (total: inout BackendStatistics, other: BackendStatistics) {
        total.systemCalls += other.systemCalls
        total.sendOperations += other.sendOperations
        total.datagramsSent += other.datagramsSent
        total.sendFailures += other.sendFailures
        total.segmentedSends += other.segmentedSends
        total.segmentationFallbacks += other.segmentationFallbacks
        total.socketQueueDrops += other.socketQueueDrops
        total.listenerQueueDrops += other.listenerQueueDrops
        if let exhausted = other.receiveBufferExhausted { total.receiveBufferExhausted = (total.receiveBufferExhausted ?? 0) + exhausted }
        if let lost = other.completionsLost { total.completionsLost = (total.completionsLost ?? 0) + lost }
    }
}
