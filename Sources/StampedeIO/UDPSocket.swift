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

    /// A bound datagram socket handed over by inetd (fd 0) or systemd (LISTEN_FDS), made a
    /// listener: non-blocking, PKTINFO on. Throws ENOTSOCK when it is not a UDP socket.
    public static func adoptListener(_ socket: consuming Descriptor, receiveBuffer: Int) throws(Errno) -> Descriptor {
        if let error = Errno(result: stampede_adopt_listener(socket.raw, Int32(clamping: receiveBuffer))) { throw error }
        return socket
    }

    /// A transfer socket bound to `local` (port 0, or a free one of `ports`) and connected to
    /// `peer`; non-blocking.
    public static func transfer(local: SocketAddress, peer: SocketAddress, ports: ClosedRange<UInt16>?) throws(Errno) -> Descriptor {
        var localStorage = local.storage
        var peerStorage = peer.storage
        return try owned(stampede_transfer_socket(&localStorage, &peerStorage, ports?.lowerBound ?? 0, ports?.upperBound ?? 0,
                                                  UInt32.random(in: 0...UInt32.max)))
    }

    /// A shared transfer socket: bound to `local` (port 0, or a free one of `ports`), not
    /// connected, never SO_REUSEPORT (its port is its own); adopted as a listener so that each
    /// datagram names its peer and the address it was sent to.
    public static func sharedTransfer(local: SocketAddress, ports: ClosedRange<UInt16>?) throws(Errno) -> Descriptor {
        var localStorage = local.storage
        return try owned(stampede_transfer_socket(&localStorage, nil, ports?.lowerBound ?? 0, ports?.upperBound ?? 0,
                                                  UInt32.random(in: 0...UInt32.max)))
    }

    /// A client socket: bound to `local` (port 0: an ephemeral port of its own, never shared as
    /// SO_REUSEPORT would allow), not connected, so the server's reply from its transfer port
    /// arrives; non-blocking.
    public static func client(local: SocketAddress) throws(Errno) -> Descriptor {
        var localStorage = local.storage
        return try owned(stampede_transfer_socket(&localStorage, nil, 0, 0, 0))
    }

    /// The shims return a descriptor or a negative errno.
    private static func owned(_ result: Int32) throws(Errno) -> Descriptor {
        if let error = Errno(result: result) { throw error }
        return Descriptor(owning: result)
    }
}
