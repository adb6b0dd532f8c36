import CStampedeSys
import Glibc
import StampedeBase
import StampedeIO

/// Spare transfer sockets: a read's own socket outlives its transfer, for the next read.
///
/// Opening a transfer socket costs the kernel a socket, a bind (a port search), a connect and, at
/// the end, a close, for every small file of a rack's boot stages (bench-lockstep's floor prices
/// the storm's transfers with a socket each and with sockets kept). So a read's socket, when its
/// transfer ends, is kept (`SpareTransferSockets`: at most `spareSocketLimit`, at most two
/// seconds) and the next read to the same address from another client gets it, connected to that
/// client (`reconnectTransfer`: what the old client sent or caused never reaches the new
/// transfer). Uploads open their own, as before.
///
/// The trade-off, written down: tftpd-hpa's transfers each get a fresh port. Here a port may
/// serve another client within two seconds after its transfer ended. A connected socket still
/// hears its own client alone, so a datagram of the old client's (a late ACK) is the kernel's to
/// drop, and an off-path attacker must still forge the new client's address and port; what the
/// attacker gains is that the port is one of the few a worker keeps, not a fresh ephemeral one,
/// much as `Worker+SharedSockets.swift` writes down for shared sockets.
extension Worker {
    /// A quarter of the worker's own-socket budget (the spares are descriptors too), at most 256.
    static func spareSocketLimit(_ configuration: ServerConfiguration) -> Int {
        configuration.singlePort ? 0 : min(256, configuration.ownTransferSocketsPerWorker / 4)
    }

    /// A kept socket bound to `local`, connected to `peer` now and tagged `tag`; nil when none is
    /// kept, or the one kept cannot be given (a send still queued on it: it stays kept).
    func spareSocket(for local: SocketAddress, peer: SocketAddress, buffers: SocketBuffers, tag: UInt64) -> SocketHandle? {
        guard let (socket, last) = spareSockets.take(for: local, peer: peer) else { return nil }
        do throws(Errno) {
            try backend.reconnectTransfer(socket, peer: peer, buffers: buffers, tag: tag)
            return socket
        } catch {
            if error.rawValue == EBUSY {
                _ = spareSockets.keep(socket, local: local, peer: last, now: stampede_monotonic_ns())
            } else {
                logger.debug("\(peer): a kept transfer socket could not be connected to it (\(error)): a new one")
                backend.close(socket)
            }
            return nil
        }
    }

    /// Whether one more transfer may open a socket of its own: under the budget with the kept
    /// ones, or by closing a kept one.
    func roomForOwnSocket() -> Bool {
        if table.ownCount + spareSockets.count < configuration.ownTransferSocketsPerWorker { return true }
        guard let socket = spareSockets.takeAny() else { return false }
        backend.close(socket)
        return true
    }

    /// A transfer's own socket at its end: a read's is kept while the worker accepts requests and
    /// has room, any other closed.
    func keepOrClose(_ socket: SocketHandle, local: SocketAddress, peer: SocketAddress, read: Bool, now: Nanoseconds) {
        guard read, accepting, spareSockets.keep(socket, local: local, peer: peer, now: now) else {
            backend.close(socket)
            return
        }
    }

    /// Called each turn: sockets kept two seconds unused close.
    func closeExpiredSpareSockets(now: Nanoseconds) {
        for socket in spareSockets.removeExpired(now: now) { backend.close(socket) }
    }
}
