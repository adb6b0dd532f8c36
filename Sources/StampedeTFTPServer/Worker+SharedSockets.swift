import Logging
import StampedeBase
import StampedeIO
import StampedeProtocol

/// Shared transfer sockets: how a worker serves more reads than it may hold descriptors.
///
/// A transfer normally gets a socket of its own, on a fresh port, connected to its client, as
/// tftpd-hpa does. Once a worker holds `ownTransferSocketsPerWorker` of them (by default the
/// descriptor limit, less a reserve, shared among the workers), or the kernel refuses another
/// (EMFILE, ENFILE) or a port (EADDRINUSE), a new read goes to one of the worker's shared sockets
/// instead: a pool of them per address requests came to, bound there as an own socket would be,
/// 64 (fewer under a small descriptor limit), each unconnected on a port of its own (from `-R`
/// when given), opened when first needed and closed two seconds after the last transfer on them
/// ended. A client always gets the same one of them (chosen by its address and port), and the
/// worker tells the transfers apart by the client's address and port (`route`).
///
/// The trade-off, written down: a connected socket lets the kernel drop datagrams from anyone
/// but its client, and its port is fresh for every transfer. A shared socket hears anyone; the
/// worker answers a stranger ERROR 5 and the transfer never sees it, so an off-path attacker must
/// still forge the client's address and port, as with a connected socket, but it has 64 server
/// ports to guess among, not one fresh one. A shared socket also gets no ICMP errors, so a client
/// that vanishes is found by its timeout, not at once. Uploads never share: their DATA would
/// need the listener's large buffers; over the limit they are refused as busy.
extension Worker {
    /// 64, or fewer when the worker's own budget is small: the shared sockets are descriptors
    /// too, and the files being opened need some (a 64-descriptor limit gets 4).
    var sharedSocketsPerPool: Int { min(64, max(4, configuration.ownTransferSocketsPerWorker / 16)) }

    /// The shared socket for a read from `peer` to `local`, its pool opened when first needed;
    /// nil when none can be opened. `reason` says why the read cannot have a socket of its own.
    func sharedSocket(for peer: SocketAddress, local: SocketAddress, because reason: String) -> SocketHandle? {
        if let pool = sharedSockets.pool(for: local) { return sharedSockets.socket(for: peer, in: pool) }
        var bound = local
        bound.port = 0
        let pool = sharedSockets.nextPool
        guard pool < Tag.poolLimit else { return nil }
        var sockets: [SocketHandle] = []
        var failure: Errno?
        for index in 0..<sharedSocketsPerPool {
            do {
                let descriptor = try UDPSocket.sharedTransfer(local: bound, ports: configuration.portRange)
                sockets.append(try backend.adoptShared(descriptor, receiveBuffer: 1 << 20,
                                                         tag: Tag.shared(pool: pool, index: index).rawValue))
            } catch {
                failure = error
                break
            }
        }
        guard !sockets.isEmpty else {
            logger.warning("\(peer): no shared transfer socket on \(bound.host) either: \(failure.map { "\($0)" } ?? "none")")
            return nil
        }
        sharedSockets.add(local: bound, sockets: sockets)
        // Said once; a rack boot that ebbs and flows opens them again at debug level.
        let level: Logger.Level = sharedSockets.openings == 1 ? .notice : .debug
        logger.log(level: level, "\(reason): further reads share \(sockets.count) transfer sockets (on \(bound.host))")
        return sharedSockets.socket(for: peer, in: pool)
    }

    /// A datagram on a shared socket from no transfer's client (or not this socket's): ERROR 5,
    /// unless it is an ERROR itself or a socket error.
    func answerStranger(_ datagram: Datagram, on socket: SocketHandle) {
        guard datagram.error == nil, datagram.bytes.count >= 2, datagram.bytes[1] != UInt8(Opcode.error.rawValue) else { return }
        let count = PacketWriter.error(ErrorCode.unknownTransferID.rawValue, message: "Unknown transfer ID", into: scratch)
        backend.send(socket, to: datagram.peer, from: datagram.local, packet: UnsafeRawBufferPointer(rebasing: scratch[..<count]))
        metrics.add(.bytesSent, count)
        logger.debug("\(datagram.peer): a datagram for no transfer on a shared transfer socket: error 5")
    }

    /// Called each turn: two seconds after the last transfer on the shared sockets ended they
    /// close, and their descriptors go back (a rack boot's next wave reopens them).
    func closeSharedSocketsIfIdle(now: Nanoseconds) {
        guard !sharedSockets.isEmpty, table.sharedCount == 0 else {
            sharedSockets.idleSince = nil
            return
        }
        guard let since = sharedSockets.idleSince else {
            sharedSockets.idleSince = now
            return
        }
        guard now - since >= 2 * nanosecondsPerSecond else { return }
        for socket in sharedSockets.removeAll() { backend.close(socket) }
    }
}
