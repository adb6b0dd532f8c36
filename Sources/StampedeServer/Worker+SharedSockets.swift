import Logging
import StampedeIO
import StampedeProtocol

/// Shared transfer sockets: how a worker serves more reads than it may hold descriptors.
///
/// A transfer normally gets a socket of its own, on a fresh port, connected to its client, as
/// tftpd-hpa does. Once a worker holds `ownTransferSocketsPerWorker` of them (by default the
/// descriptor limit, less a reserve, shared among the workers), or the kernel refuses another
/// (EMFILE, ENFILE) or a port (EADDRINUSE), a new read goes to one of the worker's shared sockets
/// instead: 64 per address family (fewer under a small descriptor limit), each unconnected on a port of its own (from `-R` when given), opened when
/// first needed and closed two seconds after the last transfer on them ended. A client always gets the same
/// one of them (chosen by its address and port), and the worker tells the transfers apart by the
/// client's address and port, as in single-port mode.
///
/// The trade-off, written down: a connected socket lets the kernel drop datagrams from anyone
/// but its client, and its port is fresh for every transfer. A shared socket hears anyone; the
/// worker answers a stranger ERROR 5 and the transfer never sees it, so an off-path attacker must
/// still forge the client's address and port, as with a connected socket, but it has 64 server
/// ports to guess among, not one fresh one. A shared socket also gets no ICMP errors, so a client
/// that vanishes is found by its timeout, not at once. Uploads never share: their DATA would
/// need the listener's large buffers; over the limit they are refused as busy.
extension Worker {
    static var sharedBit: UInt64 { 1 << 62 }
    /// 64, or fewer when the worker's own budget is small: the shared sockets are descriptors
    /// too, and the files being opened need some (a 64-descriptor limit gets 4).
    var sharedSocketsPerFamily: Int { min(64, max(4, configuration.ownTransferSocketsPerWorker / 16)) }

    /// The shared socket for a read from `peer` to `local`, opened (with its family's others)
    /// when first needed; nil when none can be opened.
    func sharedSocket(for peer: SocketAddress, local: SocketAddress) -> SocketHandle? {
        let family = local.isIPv6 ? 1 : 0
        if sharedSockets[family].isEmpty {
            let wildcard = SocketAddress(parsing: local.isIPv6 ? "[::]:0" : "0.0.0.0:0", defaultPort: 0)!
            for _ in 0..<sharedSocketsPerFamily {
                let tag = Self.sharedBit | UInt64(family << 16 | sharedSockets[family].count)
                do {
                    let descriptor = try UDPSocket.sharedTransfer(local: wildcard, ports: configuration.portRange)
                    sharedSockets[family].append(try backend.adoptListener(descriptor, receiveBuffer: 1 << 20, tag: tag))
                } catch {
                    break
                }
            }
            guard !sharedSockets[family].isEmpty else { return nil }
            sharedSocketsOpened += 1
            // Said once; a rack boot that ebbs and flows opens them again at debug level.
            let level: Logger.Level = sharedSocketsOpened == 1 ? .notice : .debug
            logger.log(level: level, """
                \(ownTransferSockets) transfers with sockets of their own, the most this worker may hold: \
                further reads share \(sharedSockets[family].count) transfer sockets
                """)
        }
        var hasher = Hasher()
        hasher.combine(peer)
        let index = Int(UInt(bitPattern: hasher.finalize()) % UInt(sharedSockets[family].count))
        return sharedSockets[family][index]
    }

    /// A datagram on a shared socket: its client's transfer takes it; a stranger is told ERROR 5.
    func handleSharedDatagram(_ datagram: Datagram, now: Nanoseconds) {
        let family = Int(datagram.tag >> 16 & 1)
        let index = Int(datagram.tag & 0xFFFF)
        guard index < sharedSockets[family].count else { return }
        let socket = sharedSockets[family][index]
        if let slot = sharedSessions[datagram.peer], table[Int(slot)].socket == socket {
            handleTransferDatagram(datagram, slot: Int(slot), now: now)
            return
        }
        guard datagram.error == nil, datagram.bytes.count >= 2, datagram.bytes[1] != UInt8(Opcode.error.rawValue) else { return }
        let count = PacketWriter.error(ErrorCode.unknownTransferID.rawValue, message: "Unknown transfer ID", into: scratch)
        backend.send(socket, to: datagram.peer, from: datagram.local, packet: UnsafeRawBufferPointer(rebasing: scratch[..<count]))
        logger.debug("\(datagram.peer): a datagram for no transfer on a shared transfer socket: error 5")
    }

    /// Called each turn: two seconds after the last transfer on the shared sockets ended they
    /// close, and their descriptors go back (a rack boot's next wave reopens them).
    func closeSharedSocketsIfIdle(now: Nanoseconds) {
        guard !configuration.singlePort, sharedSessions.isEmpty, !sharedSockets[0].isEmpty || !sharedSockets[1].isEmpty else {
            sharedSocketsIdleSince = nil
            return
        }
        guard let since = sharedSocketsIdleSince else {
            sharedSocketsIdleSince = now
            return
        }
        guard now - since >= 2 * nanosecondsPerSecond else { return }
        sharedSocketsIdleSince = nil
        for family in sharedSockets.indices {
            for socket in sharedSockets[family] { backend.close(socket) }
            sharedSockets[family].removeAll()
        }
    }
}
