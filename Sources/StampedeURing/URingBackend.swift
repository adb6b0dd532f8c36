import CStampedeRing
import CStampedeSys
import Glibc
import StampedeBase
import StampedeIO

/// The io_uring backend: the Swift face of CStampedeRing. One ring per worker; sockets are
/// opened here (the same shims as the Glibc backend) and handed to the ring; every send and
/// receive of a loop turn goes through one io_uring_enter.
public final class URingBackend: DatagramBackend {
    private let ring: OpaquePointer
    /// The setup flags the kernel accepted, for the log.
    public let setupFlags: String
    public var description: String { "uring (\(setupFlags))" }
    /// Transfer sockets that may take datagrams over the small buffers get the large ones.
    public let largestDatagram: Int
    /// Listeners receive into the request buffers.
    public let largestListenerDatagram: Int
    public let segmentation: Segmentation
    private var datagrams: UnsafePointer<stampede_ring_datagram>?
    /// What the kernel dropped on the way into the sockets closed so far (`close`).
    private var socketQueueDrops = 0
    private var listenerQueueDrops = 0
    /// The shared transfer sockets' slots (`adoptShared`): listeners to the ring, not for the drops.
    private var shared: Set<Int32> = []

    public struct Configuration: Sendable {
        public var entries: UInt32 = 4096
        public var smallBuffers: UInt32 = 4096
        public var smallSize: UInt32 = 2048
        public var largeBuffers: UInt32 = 64
        public var largeSize: UInt32 = 65536
        /// Listeners': a request with the longest name and options whole (TFTP's
        /// `Request.largestDatagram`; the backend contract's tests hold every backend to it).
        public var requestBuffers: UInt32 = 1024
        public var requestSize: UInt32 = 8192
        public var sendSlots: UInt32 = 4096
        public var errorReports: UInt32 = 1024
        /// Send windows as segmented sends where the kernel takes them (UDP GSO).
        public var segmentation = true
        public init() {}
    }

    /// Whether io_uring can run here, and if not, why (for `--backend auto` and its log line).
    public static func probe() -> (available: Bool, reason: String) {
        if let disabled = try? readWholeFile("/proc/sys/kernel/io_uring_disabled"), disabled.first == UInt8(ascii: "2") {
            return (false, "kernel.io_uring_disabled = 2")
        }
        var reason: UnsafePointer<CChar>?
        let result = stampede_ring_probe(&reason)
        guard result == 0 else {
            return (false, reason.map { String(cString: $0) } ?? "io_uring setup failed (\(Errno(-result)))")
        }
        return (true, "io_uring with provided buffer rings and multishot recvmsg works here")
    }

    public init(configuration: Configuration = Configuration()) throws(Errno) {
        let segmentation = Segmentation.probe(requested: configuration.segmentation)
        var config = stampede_ring_config(
            entries: configuration.entries, small_buffers: configuration.smallBuffers, small_size: configuration.smallSize,
            large_buffers: configuration.largeBuffers, large_size: configuration.largeSize,
            request_buffers: configuration.requestBuffers, request_size: configuration.requestSize,
            send_slots: configuration.sendSlots, max_datagrams: configuration.errorReports,
            segmentation: segmentation.isOn ? 1 : 0)
        var flags: UnsafePointer<CChar>?
        var error: Int32 = 0
        guard let ring = stampede_ring_create(&config, &flags, &error) else { throw Errno(-error) }
        self.ring = ring
        self.setupFlags = flags.map { String(cString: $0) } ?? "?"
        self.largestDatagram = Int(max(configuration.smallSize, configuration.largeSize))
        self.largestListenerDatagram = Int(configuration.requestSize)
        self.segmentation = segmentation
        self.smallSize = Int(configuration.smallSize)
    }

    deinit {
        stampede_ring_destroy(ring)
    }

    /// Hands a socket to the ring, which owns it from then on (and closes it if it cannot take it).
    private func adopt(_ socket: consuming Descriptor, tag: UInt64, listener: Bool, large: Bool) throws(Errno) -> SocketHandle {
        let slot = stampede_ring_add_socket(ring, socket.release(), tag, listener ? 1 : 0, large ? 1 : 0)
        if let error = Errno(result: slot) { throw error }
        return SocketHandle(slot)
    }

    /// Sockets whose peer may send more than a small buffer takes get the large buffers.
    private let smallSize: Int
    private func needsLargeBuffers(_ largestDatagram: Int) -> Bool { largestDatagram > smallSize }

    public func openListener(_ address: SocketAddress, receiveBuffer: Int, tag: UInt64) throws(Errno) -> SocketHandle {
        try adopt(UDPSocket.listener(address, receiveBuffer: receiveBuffer), tag: tag, listener: true, large: false)
    }

    public func adoptListener(_ socket: consuming Descriptor, receiveBuffer: Int, tag: UInt64) throws(Errno) -> SocketHandle {
        try adopt(UDPSocket.adoptListener(socket, receiveBuffer: receiveBuffer), tag: tag, listener: true, large: false)
    }

    public func adoptShared(_ socket: consuming Descriptor, receiveBuffer: Int, tag: UInt64) throws(Errno) -> SocketHandle {
        // Received as a listener's (each datagram's peer and local address); every socket's
        // completions are taken as they come, so only the drops' count tells it apart.
        let handle = try adopt(UDPSocket.adoptListener(socket, receiveBuffer: receiveBuffer), tag: tag, listener: true, large: false)
        shared.insert(handle.index)
        return handle
    }

    public func openTransfer(local: SocketAddress, peer: SocketAddress, ports: ClosedRange<UInt16>?,
                             largestDatagram: Int, buffers: SocketBuffers, tag: UInt64) throws(Errno) -> SocketHandle {
        try adopt(UDPSocket.transfer(local: local, peer: peer, ports: ports, buffers: buffers), tag: tag, listener: false,
                  large: needsLargeBuffers(largestDatagram))
    }

    public func openClient(local: SocketAddress, largestDatagram: Int, buffers: SocketBuffers, tag: UInt64) throws(Errno) -> SocketHandle {
        try adopt(UDPSocket.client(local: local, buffers: buffers), tag: tag, listener: false,
                  large: needsLargeBuffers(largestDatagram))
    }

    public func localAddress(of socket: SocketHandle) -> SocketAddress? {
        var storage = sockaddr_storage()
        guard stampede_socket_address(stampede_ring_socket_fd(ring, socket.index), &storage) == 0 else { return nil }
        return SocketAddress(storage: storage)
    }

    public func close(_ socket: SocketHandle) {
        let fd = stampede_ring_socket_fd(ring, socket.index)
        // Forgotten as shared whatever its descriptor, so that a listener given its slot later
        // is counted as one (only listener slots are looked up: no hash per transfer's close).
        let listener = stampede_ring_socket_is_listener(ring, socket.index) != 0
        let requests = listener && shared.remove(socket.index) == nil
        if fd >= 0 {
            let drops = Int(stampede_socket_drops(fd))
            socketQueueDrops += drops
            if requests { listenerQueueDrops += drops }
        }
        stampede_ring_close_socket(ring, socket.index)
    }

    public func send(_ socket: SocketHandle, header: UnsafeRawBufferPointer, payload: UnsafeRawBufferPointer) {
        _ = stampede_ring_send(ring, socket.index, header.baseAddress, UInt32(header.count), payload.baseAddress,
                               UInt32(payload.count), nil, nil)
    }

    public func send(_ socket: SocketHandle, to peer: SocketAddress, from local: SocketAddress?,
                     header: UnsafeRawBufferPointer, payload: UnsafeRawBufferPointer) {
        var to = peer.storage
        guard var from = local?.storage else {
            _ = stampede_ring_send(ring, socket.index, header.baseAddress, UInt32(header.count), payload.baseAddress,
                                   UInt32(payload.count), &to, nil)
            return
        }
        _ = stampede_ring_send(ring, socket.index, header.baseAddress, UInt32(header.count), payload.baseAddress,
                               UInt32(payload.count), &to, &from)
    }

    public func sendWindow(_ socket: SocketHandle, to peer: SocketAddress?, from local: SocketAddress?,
                           headers: UnsafeRawBufferPointer, payload: UnsafeRawBufferPointer, blockSize: Int) {
        let count = UInt32(headers.count / 4)
        let headerBytes = headers.baseAddress!.assumingMemoryBound(to: UInt8.self)
        let payloadBytes = payload.baseAddress?.assumingMemoryBound(to: UInt8.self)
        guard var to = peer?.storage else {
            _ = stampede_ring_send_window(ring, socket.index, headerBytes, count, payloadBytes, UInt32(payload.count),
                                          UInt32(blockSize), nil, nil)
            return
        }
        guard var from = local?.storage else {
            _ = stampede_ring_send_window(ring, socket.index, headerBytes, count, payloadBytes, UInt32(payload.count),
                                          UInt32(blockSize), &to, nil)
            return
        }
        _ = stampede_ring_send_window(ring, socket.index, headerBytes, count, payloadBytes, UInt32(payload.count),
                                      UInt32(blockSize), &to, &from)
    }

    public func watch(_ descriptor: Int32) throws(Errno) {
        if let error = Errno(result: stampede_ring_watch(ring, descriptor)) { throw error }
    }

    public func poll(deadline: Nanoseconds?) -> Int {
        let timeout = deadline.map { max(0, $0 - stampede_monotonic_ns()) } ?? -1
        let count = stampede_ring_wait(ring, timeout)
        datagrams = stampede_ring_datagrams(ring)
        // Transient results (EINTR, ETIME, EAGAIN, EBUSY, ENOMEM) and lost completions (EBADR,
        // counted) never reach here; anything else means this ring cannot run (used from a thread
        // that is not its issuer, its descriptor gone): a programming error.
        precondition(count >= 0, "io_uring_enter failed: \(Errno(-count))")
        return Int(count)
    }

    public func datagram(_ index: Int) -> Datagram {
        let d = datagrams![index]
        return Datagram(tag: d.tag, bytes: UnsafeRawBufferPointer(start: d.bytes, count: max(0, Int(d.length))),
                        peer: SocketAddress(storage: d.peer), local: SocketAddress(storage: d.local),
                        error: d.length < 0 ? Errno(-d.length) : nil, truncated: d.truncated != 0,
                        received: d.received != 0 ? d.received : nil)
    }

    public var statistics: BackendStatistics {
        let stats = stampede_ring_get_stats(ring)
        var statistics = BackendStatistics()
        statistics.systemCalls = Int(stats.system_calls)
        statistics.sendOperations = Int(stats.send_operations)
        statistics.datagramsSent = Int(stats.datagrams_sent)
        statistics.sendFailures = Int(stats.send_failures)
        statistics.segmentedSends = Int(stats.segmented_sends)
        statistics.segmentationFallbacks = Int(stats.segmentation_fallbacks)
        statistics.receiveBufferExhausted = Int(stats.receive_buffer_exhausted)
        statistics.completionsLost = Int(stats.completions_lost)
        statistics.socketQueueDrops = socketQueueDrops
        statistics.listenerQueueDrops = listenerQueueDrops
        return statistics
    }
    public var socketCount: Int { Int(stampede_ring_socket_count(ring)) }
}
