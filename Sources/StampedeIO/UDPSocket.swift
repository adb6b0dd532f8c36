import CStampedeSys

/// The UDP sockets every backend serves from, opened the same way whichever backend then owns
/// them (the shims in CStampedeSys do the setsockopt, bind and connect).
public enum UDPSocket {
    /// A request listener: SO_REUSEPORT, PKTINFO, a receive queue of at least `receiveBuffer`
    /// bytes so a burst of RRQs is drained, not dropped; non-blocking.
    public static func listener(_ address: SocketAddress, receiveBuffer: Int) throws(Errno) -> Descriptor {
        var storage = address.storage
        return try owned(stampede_listener_socket(&storage, Int32(clamping: receiveBuffer)))
    }

    /// A DHCP client's socket on IPv4 `address` (0.0.0.0:68), bound to interface `device` when
    /// given: SO_REUSEADDR, SO_BROADCAST, PKTINFO; non-blocking. The storm's machines ask DHCP
    /// through one.
    public static func dhcpClient(_ address: SocketAddress, device: String?, receiveBuffer: Int) throws(Errno) -> Descriptor {
        var storage = address.storage
        return try owned(stampede_dhcp_client_socket(&storage, device, Int32(clamping: receiveBuffer)))
    }

    /// A bound datagram socket handed over by inetd (fd 0) or systemd (LISTEN_FDS), made a
    /// listener: non-blocking, PKTINFO on. Throws ENOTSOCK when it is not a UDP socket.
    public static func adoptListener(_ socket: consuming Descriptor, receiveBuffer: Int) throws(Errno) -> Descriptor {
        if let error = Errno(result: stampede_adopt_listener(socket.raw, Int32(clamping: receiveBuffer))) { throw error }
        return socket
    }

    /// A transfer socket bound to `local` (port 0, or a free one of `ports`) and connected to
    /// `peer`, its queues grown to `buffers`; non-blocking.
    public static func transfer(local: SocketAddress, peer: SocketAddress, ports: ClosedRange<UInt16>?,
                                buffers: SocketBuffers) throws(Errno) -> Descriptor {
        var localStorage = local.storage
        var peerStorage = peer.storage
        let socket = try owned(stampede_transfer_socket(&localStorage, &peerStorage, ports?.lowerBound ?? 0, ports?.upperBound ?? 0,
                                                        portSeed(ports)))
        buffers.grow(socket.raw)
        return socket
    }

    /// A shared transfer socket: bound to `local` (port 0, or a free one of `ports`), not
    /// connected, never SO_REUSEPORT (its port is its own); adopted as a listener so that each
    /// datagram names its peer and the address it was sent to.
    public static func sharedTransfer(local: SocketAddress, ports: ClosedRange<UInt16>?) throws(Errno) -> Descriptor {
        var localStorage = local.storage
        return try owned(stampede_transfer_socket(&localStorage, nil, ports?.lowerBound ?? 0, ports?.upperBound ?? 0,
                                                  portSeed(ports)))
    }

    /// Where the search of `-R`'s range starts: random (a getrandom call, so only with a range;
    /// without one the kernel picks the port).
    private static func portSeed(_ ports: ClosedRange<UInt16>?) -> UInt32 {
        ports == nil ? 0 : UInt32.random(in: 0...UInt32.max)
    }

    /// A client socket: bound to `local` (port 0: an ephemeral port of its own, never shared as
    /// SO_REUSEPORT would allow), not connected, so the server's reply from its transfer port
    /// arrives; its queues grown to `buffers`; non-blocking.
    public static func client(local: SocketAddress, buffers: SocketBuffers) throws(Errno) -> Descriptor {
        var localStorage = local.storage
        let socket = try owned(stampede_transfer_socket(&localStorage, nil, 0, 0, 0))
        buffers.grow(socket.raw)
        return socket
    }

    /// The shims return a descriptor or a negative errno.
    private static func owned(_ result: Int32) throws(Errno) -> Descriptor {
        if let error = Errno(result: result) { throw error }
        return Descriptor(owning: result)
    }
}

/// What a socket's kernel queues must hold beyond Linux's defaults (net.core.rmem_default and
/// wmem_default, 208 KiB): a window of datagrams in flight. A window the receiver's queue cannot
/// hold loses its tail every time, and each loss costs a whole retransmit timeout (`get -w 256`
/// of 50 MB over loopback: 22 s with the default queue, under a second with one that holds it);
/// a non-blocking sender whose queue is full drops the rest of the window the same way.
public struct SocketBuffers: Sendable, Equatable {
    /// Bytes, as setsockopt counts them; 0 leaves the kernel's default.
    public var receive: Int
    public var send: Int

    public init(receive: Int = 0, send: Int = 0) {
        self.receive = receive
        self.send = send
    }

    /// The bytes to ask for a queue that holds a window of `count` datagrams of `size` bytes:
    /// the kernel doubles what it is asked and charges each datagram its whole allocation
    /// (measured over loopback: 832 bytes for an empty one, 2,304 for 1,472 bytes, 16,644 for
    /// 8,196 — the allocation rounds up to a power of two), so `size + 832` each holds the window
    /// with room. 0 (the default queue) for lockstep: one datagram in flight, which any queue
    /// holds. Never above Int32.max, what setsockopt takes.
    public static func holding(_ count: Int, datagramsOf size: Int) -> Int {
        guard count > 1 else { return 0 }
        let (bytes, overflow) = count.multipliedReportingOverflow(by: max(size, 0) + 832)
        return overflow ? Int(Int32.max) : min(bytes, Int(Int32.max))
    }

    /// Grows `fd`'s queues to these sizes (never shrinks them; best effort).
    public func grow(_ fd: Int32) {
        stampede_grow_socket_buffer(fd, 1, Int32(clamping: receive))
        stampede_grow_socket_buffer(fd, 0, Int32(clamping: send))
    }
}
