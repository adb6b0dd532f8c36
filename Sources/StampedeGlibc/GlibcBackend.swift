import CStampedeSys
import Glibc
import StampedeBase
import StampedeIO

/// The pure-Swift backend: epoll for readiness, recvmmsg per readable socket, sendmmsg per run of
/// sends to one socket, a window of DATA as one segmented send (UDP GSO) where the kernel takes it. Every array is allocated once at start (docs/ARCHITECTURE.md, "The backends"); the
/// file bytes of a DATA packet are gathered by the kernel from the image, never copied here.
public final class GlibcBackend: DatagramBackend {
    public var description: String { "glibc (epoll, recvmmsg, sendmmsg)" }
    public let segmentation: Segmentation
    public private(set) var statistics = BackendStatistics()
    public var largestDatagram: Int { bufferSize }
    public var largestListenerDatagram: Int { bufferSize }

    /// A socket table entry: the backend owns `fd` (closed in `flush` after `close`, or at deinit).
    struct Socket {
        var fd: Int32 = -1
        var tag: UInt64 = 0
        /// What it is, which says when it is read in a turn (`poll`).
        var kind = Kind.transfer
        var isListener: Bool { kind == .listener }
        /// A listener or a shared transfer socket: datagrams from many peers, each read with its
        /// peer and local address, first in a turn, in the listeners' share.
        var hearsMany: Bool { kind != .transfer }
        /// Windows go out segmented until the socket's path refuses once.
        var segments = false
        /// The last turn (`poll`) whose ready list named it (listeners and shared sockets only).
        var readyInTurn: UInt64 = 0
        /// The last turn that read it (transfers only: one read a turn).
        var readInTurn: UInt64 = 0
        /// Named ready by a turn whose batch had no room for it: in `carried`, read first next turn.
        var carried = false
    }

    private let epoll: Int32
    private var sockets: [Socket] = []
    private var freeSockets: [Int32] = []
    /// The listeners' and the shared transfer sockets' handles, read first in every turn (`poll`).
    private var listeners: [Int32] = []
    /// Where the next turn begins reading listeners in `listeners`: the one after the last read,
    /// so that each is read in its turn however many there are and however busy the others.
    private var nextListener = 0
    /// Turns of `poll`, which mark the listeners their ready list names.
    private var turn: UInt64 = 0
    /// Transfer sockets a turn's ready list named and its batch had no room for, in the order
    /// named: the next turn reads them before any the ready list names anew (`poll`).
    private var carried: [Int] = []
    /// Where the carried sockets not read yet begin in `carried`.
    private var carriedFirst = 0
    private var closing: [SocketHandle] = []
    /// A descriptor is watched (`watch`).
    private var watching = false
    /// Peer errors (ICMP unreachable) that a send drew instead of a receive, for the next batch.
    private var peerErrors: [(handle: Int, tag: UInt64, error: Errno)] = []

    // Send queue: one mmsghdr per send with its iovecs (2 per datagram: header, payload) from a
    // pool; headers copied into an arena.
    private let sendCapacity: Int
    private let sendMessages: UnsafeMutablePointer<stampede_mmsghdr>
    private let sendVectors: UnsafeMutablePointer<iovec>
    private let vectorCapacity: Int
    private var vectorsUsed = 0
    private var sendSocket: [SocketHandle]
    /// Datagrams in each queued send: more than one for a segmented send.
    private let sendDatagrams: UnsafeMutablePointer<Int32>
    /// The datagrams of a refused segmented send, sent again one by one.
    private let fallbackMessages: UnsafeMutablePointer<stampede_mmsghdr>
    private let sendNames: UnsafeMutablePointer<sockaddr_storage>
    private let sendControls: UnsafeMutableRawPointer
    private let controlSpace: Int
    private let arena: UnsafeMutableRawBufferPointer
    private var arenaUsed = 0
    private var queued = 0
    public private(set) var socketCount = 0

    // Receive batch.
    private let receiveCapacity: Int
    private let bufferSize: Int
    private let buffers: UnsafeMutableRawBufferPointer
    private let receiveMessages: UnsafeMutablePointer<stampede_mmsghdr>
    private let receiveVectors: UnsafeMutablePointer<iovec>
    private let receiveNames: UnsafeMutablePointer<sockaddr_storage>
    private let receiveControls: UnsafeMutableRawPointer
    private let receiveControlSpace: Int
    private var received: [(tag: UInt64, length: Int32, error: Errno?, truncated: Bool)]
    private var receivedLocal: [SocketAddress]
    /// Listeners' datagrams: when the kernel took each (0: not said).
    private var receivedAt: [Nanoseconds]
    private let readyTags: UnsafeMutablePointer<UInt64>
    private let readyCapacity = 256

    /// `segmentation`: send windows as segmented sends where the kernel takes them.
    public init(receiveBatch: Int = 256, sendBatch: Int = 4096, bufferSize: Int = 65536,
                segmentation: Bool = true) throws(Errno) {
        // The steps that can fail come first, each undone if a later one does: nothing leaks.
        let ep = stampede_epoll_create()
        if let error = Errno(result: ep) { throw error }
        let (count, overflow) = receiveBatch.multipliedReportingOverflow(by: bufferSize)
        let mapped = overflow ? MAP_FAILED : mmap(nil, count, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
        guard let mapped, mapped != MAP_FAILED else {
            let error = overflow ? Errno(ENOMEM) : Errno.current
            Glibc.close(ep)
            throw error
        }
        epoll = ep
        buffers = UnsafeMutableRawBufferPointer(start: mapped, count: count)
        controlSpace = stampede_pktinfo_space() + stampede_segment_space()
        self.segmentation = Segmentation.probe(requested: segmentation)

        sendCapacity = sendBatch
        sendMessages = .allocate(capacity: sendBatch)
        vectorCapacity = max(sendBatch * 2, 4 * Segmentation.maximumSegments)
        sendVectors = .allocate(capacity: vectorCapacity)
        sendSocket = Array(repeating: SocketHandle(-1), count: sendBatch)
        sendDatagrams = .allocate(capacity: sendBatch)
        fallbackMessages = .allocate(capacity: Segmentation.maximumSegments)
        sendNames = .allocate(capacity: sendBatch)
        sendControls = .allocate(byteCount: sendBatch * controlSpace, alignment: 16)
        // Room for a full window of the largest streamed blocks, plus small packets.
        arena = .allocate(byteCount: 8 << 20, alignment: 16)

        receiveCapacity = receiveBatch
        self.bufferSize = bufferSize
        receiveMessages = .allocate(capacity: receiveBatch)
        receiveVectors = .allocate(capacity: receiveBatch)
        receiveNames = .allocate(capacity: receiveBatch)
        receiveControlSpace = stampede_receive_control_space()
        receiveControls = .allocate(byteCount: receiveBatch * receiveControlSpace, alignment: 16)
        received = Array(repeating: (0, 0, nil, false), count: receiveBatch)
        receivedLocal = Array(repeating: SocketAddress(), count: receiveBatch)
        receivedAt = Array(repeating: 0, count: receiveBatch)
        readyTags = .allocate(capacity: readyCapacity)
        sockets.reserveCapacity(1024)
        freeSockets.reserveCapacity(1024)
        closing.reserveCapacity(1024)
        peerErrors.reserveCapacity(receiveBatch)
        carried.reserveCapacity(4096)
    }

    deinit {
        for socket in sockets where socket.fd >= 0 { Glibc.close(socket.fd) }
        Glibc.close(epoll)
        sendMessages.deallocate()
        sendVectors.deallocate()
        sendDatagrams.deallocate()
        fallbackMessages.deallocate()
        sendNames.deallocate()
        sendControls.deallocate()
        arena.deallocate()
        munmap(buffers.baseAddress, buffers.count)
        receiveMessages.deallocate()
        receiveVectors.deallocate()
        receiveNames.deallocate()
        receiveControls.deallocate()
        readyTags.deallocate()
    }

    // MARK: Sockets

    /// A socket's part in a turn: a listener or a shared transfer socket is read first, in the
    /// listeners' share; a transfer's (or the storm's client) socket when the ready list names
    /// it, 64 datagrams at most. Only a request listener's drops are requests lost.
    enum Kind { case transfer, listener, shared }

    private func register(_ socket: consuming Descriptor, tag: UInt64, kind: Kind) throws(Errno) -> SocketHandle {
        let index: Int32
        if let reused = freeSockets.popLast() {
            index = reused
        } else {
            index = Int32(sockets.count)
            sockets.append(Socket())
        }
        if let error = Errno(result: stampede_epoll_add(epoll, socket.raw, UInt64(index))) {
            freeSockets.append(index)
            throw error  // the descriptor closes with its owner
        }
        sockets[Int(index)] = Socket(fd: socket.release(), tag: tag, kind: kind, segments: segmentation.isOn)
        if sockets[Int(index)].hearsMany { listeners.append(index) }
        socketCount += 1
        return SocketHandle(index)
    }

    public func openListener(_ address: SocketAddress, receiveBuffer: Int, tag: UInt64) throws(Errno) -> SocketHandle {
        try register(UDPSocket.listener(address, receiveBuffer: receiveBuffer), tag: tag, kind: .listener)
    }

    public func adoptListener(_ socket: consuming Descriptor, receiveBuffer: Int, tag: UInt64) throws(Errno) -> SocketHandle {
        try register(UDPSocket.adoptListener(socket, receiveBuffer: receiveBuffer), tag: tag, kind: .listener)
    }

    public func adoptShared(_ socket: consuming Descriptor, receiveBuffer: Int, tag: UInt64) throws(Errno) -> SocketHandle {
        try register(UDPSocket.adoptListener(socket, receiveBuffer: receiveBuffer), tag: tag, kind: .shared)
    }

    public func openTransfer(local: SocketAddress, peer: SocketAddress, ports: ClosedRange<UInt16>?,
                             largestDatagram: Int, buffers: SocketBuffers, tag: UInt64) throws(Errno) -> SocketHandle {
        try register(UDPSocket.transfer(local: local, peer: peer, ports: ports, buffers: buffers), tag: tag, kind: .transfer)
    }

    public func openClient(local: SocketAddress, largestDatagram: Int, buffers: SocketBuffers, tag: UInt64) throws(Errno) -> SocketHandle {
        try register(UDPSocket.client(local: local, buffers: buffers), tag: tag, kind: .transfer)
    }

    public func localAddress(of socket: SocketHandle) -> SocketAddress? {
        var storage = sockaddr_storage()
        guard stampede_socket_address(sockets[Int(socket.index)].fd, &storage) == 0 else { return nil }
        return SocketAddress(storage: storage)
    }

    public func close(_ socket: SocketHandle) {
        guard socket.index >= 0, sockets[Int(socket.index)].fd >= 0 else { return }
        let drops = Int(stampede_socket_drops(sockets[Int(socket.index)].fd))
        statistics.socketQueueDrops += drops
        if sockets[Int(socket.index)].isListener { statistics.listenerQueueDrops += drops }
        // Queued sends go out first; the fd closes at the next flush.
        closing.append(socket)
        sockets[Int(socket.index)].tag = UInt64.max
    }

    // MARK: Sends

    /// Room for a send of `headerBytes` copied bytes and `vectors` iovecs, flushing first if the
    /// queue is full; returns where the headers go.
    private func reserve(headerBytes count: Int, vectors: Int) -> UnsafeMutableRawPointer {
        if queued == sendCapacity || arenaUsed + count > arena.count || vectorsUsed + vectors > vectorCapacity { flush() }
        let start = arena.baseAddress! + arenaUsed
        arenaUsed += (count + 7) & ~7
        return start
    }

    public func send(_ socket: SocketHandle, header: UnsafeRawBufferPointer, payload: UnsafeRawBufferPointer) {
        let copy = reserve(headerBytes: header.count, vectors: 2)
        if header.count > 0 { copy.copyMemory(from: header.baseAddress!, byteCount: header.count) }
        let vectors = sendVectors + vectorsUsed
        vectors[0] = iovec(iov_base: copy, iov_len: header.count)
        vectors[1] = iovec(iov_base: UnsafeMutableRawPointer(mutating: payload.baseAddress), iov_len: payload.count)
        let count = payload.count > 0 ? 2 : 1
        queue(socket, vectors: vectors, count: count, datagrams: 1)
    }

    private func queue(_ socket: SocketHandle, vectors: UnsafeMutablePointer<iovec>, count: Int, datagrams: Int) {
        var message = msghdr()
        message.msg_iov = vectors
        message.msg_iovlen = count
        sendMessages[queued] = stampede_mmsghdr(msg_hdr: message, msg_len: 0)
        sendSocket[queued] = socket
        sendDatagrams[queued] = Int32(datagrams)
        vectorsUsed += count
        queued += 1
    }

    public func send(_ socket: SocketHandle, to peer: SocketAddress, from local: SocketAddress?,
                     header: UnsafeRawBufferPointer, payload: UnsafeRawBufferPointer) {
        send(socket, header: header, payload: payload)
        address(queued - 1, to: peer, from: local)
    }

    /// Names the destination (and the source, PKTINFO) of the queued send at `index`.
    private func address(_ index: Int, to peer: SocketAddress, from local: SocketAddress?) {
        sendNames[index] = peer.storage
        sendMessages[index].msg_hdr.msg_name = UnsafeMutableRawPointer(sendNames + index)
        sendMessages[index].msg_hdr.msg_namelen = socklen_t(peer.isIPv6 ? MemoryLayout<sockaddr_in6>.size : MemoryLayout<sockaddr_in>.size)
        guard var localStorage = local?.storage else { return }
        let control = sendControls + index * controlSpace
        let controlLength = stampede_pktinfo_control(control, controlSpace, &localStorage)
        if controlLength > 0 {
            sendMessages[index].msg_hdr.msg_control = control
            sendMessages[index].msg_hdr.msg_controllen = controlLength
        }
    }

    public func sendWindow(_ socket: SocketHandle, to peer: SocketAddress?, from local: SocketAddress?,
                           headers: UnsafeRawBufferPointer, payload: UnsafeRawBufferPointer, blockSize: Int) {
        let datagrams = headers.count / 4
        let perSend = sockets[Int(socket.index)].segments ? Segmentation.segmentsPerSend(datagramSize: 4 + blockSize) : 1
        var first = 0
        while first < datagrams {
            let count = min(perSend, datagrams - first)
            let copy = reserve(headerBytes: 4 * count, vectors: 2 * count)
            copy.copyMemory(from: headers.baseAddress! + 4 * first, byteCount: 4 * count)
            let vectors = sendVectors + vectorsUsed
            var used = 0
            for i in 0..<count {
                let block = windowBlock(payload, first + i, blockSize: blockSize)
                vectors[used] = iovec(iov_base: copy + 4 * i, iov_len: 4)
                used += 1
                if block.count > 0 {
                    vectors[used] = iovec(iov_base: UnsafeMutableRawPointer(mutating: block.baseAddress), iov_len: block.count)
                    used += 1
                }
            }
            queue(socket, vectors: vectors, count: used, datagrams: count)
            if let peer { address(queued - 1, to: peer, from: local) }
            if count > 1 {
                // Appended after PKTINFO, if any: datagrams of 4 + blockSize bytes.
                let index = queued - 1
                let control = sendControls + index * controlSpace
                let used = sendMessages[index].msg_hdr.msg_controllen
                let length = stampede_segment_control(control, controlSpace, used, UInt16(4 + blockSize))
                sendMessages[index].msg_hdr.msg_control = control
                sendMessages[index].msg_hdr.msg_controllen = length
            }
            first += count
        }
    }

    /// One sendmmsg per run of consecutive sends to the same socket. A full socket buffer
    /// (EAGAIN) drops the rest of the run: that is packet loss, which retransmission repairs.
    private func flush() {
        var start = 0
        while start < queued {
            let socket = sendSocket[start]
            var end = start + 1
            while end < queued && sendSocket[end] == socket { end += 1 }
            let fd = sockets[Int(socket.index)].fd
            var next = start
            while next < end {
                let sent = stampede_sendmmsg(fd, sendMessages + next, UInt32(end - next))
                statistics.systemCalls += 1
                if sent > 0 {
                    for i in next..<(next + Int(sent)) {
                        if sendDatagrams[i] > 1 { statistics.segmentedSends += 1 }
                        statistics.datagramsSent += Int(sendDatagrams[i])
                    }
                    statistics.sendOperations += Int(sent)
                    next += Int(sent)
                } else if sent == -EAGAIN || sent == -ENOBUFS {
                    for i in next..<end { statistics.sendFailures += Int(sendDatagrams[i]) }
                    break
                } else if sendDatagrams[next] > 1 && stampede_segmentation_refused(-sent) != 0 {
                    // The path will not take this segmented send (a blksize above its MTU, a
                    // device that cannot segment): these datagrams one by one, and the socket's
                    // later windows too.
                    sockets[Int(socket.index)].segments = false
                    statistics.segmentationFallbacks += 1
                    sendOneByOne(next, fd: fd)
                    next += 1
                } else {
                    // This message is lost; the rest are tried. A peer's error (ECONNREFUSED: the
                    // client's port is gone) reaches a connected socket's first call, this send:
                    // the transfer hears it as from a receive.
                    if Errno(-sent).meansPeerUnreachable {
                        if peerErrors.count < receiveCapacity {
                            peerErrors.append((Int(socket.index), sockets[Int(socket.index)].tag, Errno(-sent)))
                        }
                    } else {
                        statistics.sendFailures += Int(sendDatagrams[next])
                    }
                    next += 1
                }
            }
            start = end
        }
        queued = 0
        arenaUsed = 0
        vectorsUsed = 0
        for socket in closing {
            if sockets[Int(socket.index)].hearsMany { listeners.removeAll { $0 == socket.index } }
            Glibc.close(sockets[Int(socket.index)].fd)
            sockets[Int(socket.index)] = Socket()
            socketCount -= 1
            freeSockets.append(socket.index)
        }
        closing.removeAll(keepingCapacity: true)
    }

    /// Sends the datagrams of the segmented send at `index` as a sendmmsg of one datagram each:
    /// the same iovecs, name and PKTINFO, without the UDP_SEGMENT message (appended last).
    private func sendOneByOne(_ index: Int, fd: Int32) {
        let segmented = sendMessages[index].msg_hdr
        let control = segmented.msg_controllen - stampede_segment_space()
        let count = Int(sendDatagrams[index])
        var vector = 0
        for i in 0..<count {
            var message = segmented
            message.msg_iov = segmented.msg_iov + vector
            // A header and its payload; only the last block may be empty (a header alone).
            message.msg_iovlen = i < count - 1 || vector + 2 == segmented.msg_iovlen ? 2 : 1
            message.msg_controllen = control
            if control == 0 { message.msg_control = nil }
            fallbackMessages[i] = stampede_mmsghdr(msg_hdr: message, msg_len: 0)
            vector += message.msg_iovlen
        }
        var next = 0
        while next < count {
            let sent = stampede_sendmmsg(fd, fallbackMessages + next, UInt32(count - next))
            statistics.systemCalls += 1
            if sent > 0 {
                statistics.sendOperations += Int(sent)
                statistics.datagramsSent += Int(sent)
                next += Int(sent)
            } else {
                // A full buffer loses the rest; any other error this datagram. Retransmission repairs.
                let lost = sent == -EAGAIN || sent == -ENOBUFS ? count - next : 1
                statistics.sendFailures += lost
                next += lost
            }
        }
    }

    // MARK: Receives

    public func watch(_ descriptor: Int32) throws(Errno) {
        guard !watching else { throw Errno(EBUSY) }
        // Its tag is no socket's handle: `poll` wakes for it and reads nothing.
        if let error = Errno(result: stampede_epoll_add(epoll, descriptor, UInt64(Int.max))) { throw error }
        watching = true
    }

    public func poll(deadline: Nanoseconds?) -> Int {
        flush()
        var count = 0
        var told = 0
        while told < peerErrors.count && count < receiveCapacity {
            let (handle, tag, error) = peerErrors[told]
            told += 1
            if tag != UInt64.max { count += report(error, tag: tag, of: handle, at: count) }
        }
        // What the batch had no room for is told next turn.
        peerErrors.removeFirst(told)
        var timeout: Int64 = count > 0 || carriedFirst < carried.count ? 0 : -1
        if count == 0 && carriedFirst == carried.count, let deadline { timeout = max(0, deadline - stampede_monotonic_ns()) }
        let ready = max(0, Int(stampede_epoll_wait(epoll, readyTags, Int32(readyCapacity), timeout)))
        statistics.systemCalls += 1
        guard ready > 0 || carriedFirst < carried.count else { return count }
        // Requests first. Behind thousands of ready transfer sockets a listener came up in one turn
        // of many (epoll hands out its ready list in turns of `readyCapacity`) and its queue
        // overflowed in a rack's boot. A full ready list may leave a listener out: then every
        // listener is read. Listeners take half a batch at most, so that a flood of requests
        // leaves room for the transfers' ACKs, and are read in turn from where the last turn
        // stopped: read from the first each time (and epoll names ready sockets in the same order
        // turn after turn), 20,000 machines' requests filled the share with the port-69
        // listener's and a shared transfer socket's, and the transfers on the other shared sockets
        // (read here as listeners are) heard nothing until they timed out.
        turn &+= 1
        let everyListener = ready == readyCapacity
        var listenerReady = everyListener
        if !everyListener {
            for i in 0..<ready {
                let handle = Int(readyTags[i])
                guard handle < sockets.count, sockets[handle].hearsMany else { continue }
                sockets[handle].readyInTurn = turn
                listenerReady = true
            }
        }
        if listenerReady {
            let listenerShare = receiveCapacity / 2
            var looked = 0
            while looked < listeners.count && count < listenerShare {
                let position = (nextListener + looked) % listeners.count
                let handle = Int(listeners[position])
                looked += 1
                guard sockets[handle].tag != UInt64.max, everyListener || sockets[handle].readyInTurn == turn else { continue }
                count += receive(from: handle, at: count, limit: listenerShare)
                nextListener = (position + 1) % listeners.count
            }
        }
        // Then the transfers: first those the last turn's ready list named and its batch had no
        // room for, then the rest of this turn's ready list, in the order named; those the batch
        // has no room for are carried to the next turn. Epoll names a level-triggered socket it
        // named before behind the ones it had not, in the same order turn after turn: skipped,
        // the sockets named after a run of busy ones (transfers whose ACKs keep coming) were
        // named, and skipped, again in every turn, and in a rack of 20,000 machines on two cores
        // their transfers timed out.
        while carriedFirst < carried.count && count < receiveCapacity {
            let handle = carried[carriedFirst]
            carriedFirst += 1
            guard sockets[handle].carried else { continue }  // closed, its handle given again
            sockets[handle].carried = false
            count += readTransfer(handle, at: count)
        }
        if carriedFirst == carried.count {
            carried.removeAll(keepingCapacity: true)
            carriedFirst = 0
        } else if carriedFirst >= 1024 && carriedFirst * 2 >= carried.count {
            carried.removeFirst(carriedFirst)
            carriedFirst = 0
        }
        for i in 0..<ready {
            let handle = Int(readyTags[i])
            guard handle < sockets.count, sockets[handle].fd >= 0, sockets[handle].tag != UInt64.max,
                  !sockets[handle].hearsMany, !sockets[handle].carried, sockets[handle].readInTurn != turn else { continue }
            guard count < receiveCapacity else {
                sockets[handle].carried = true
                carried.append(handle)
                continue
            }
            count += readTransfer(handle, at: count)
        }
        return count
    }

    /// Reads a transfer's socket into the batch from `first`, once a turn (a closed one: nothing).
    private func readTransfer(_ handle: Int, at first: Int) -> Int {
        guard sockets[handle].fd >= 0, sockets[handle].tag != UInt64.max else { return 0 }
        sockets[handle].readInTurn = turn
        return receive(from: handle, at: first, limit: receiveCapacity)
    }

    /// Reads what the socket at `handle` holds into the batch from `first`, up to `limit`: a
    /// listener as many as the listeners' share, a transfer's socket 64 at most, so that one busy
    /// socket does not take a whole turn.
    private func receive(from handle: Int, at first: Int, limit: Int) -> Int {
        let socket = sockets[handle]
        let room = min(limit - first, socket.hearsMany ? receiveCapacity / 2 : 64)
        guard room > 0 else { return 0 }
        for i in first..<(first + room) {
            receiveVectors[i] = iovec(iov_base: buffers.baseAddress! + i * bufferSize, iov_len: bufferSize)
            var message = msghdr()
            message.msg_iov = receiveVectors + i
            message.msg_iovlen = 1
            message.msg_name = UnsafeMutableRawPointer(receiveNames + i)
            message.msg_namelen = socklen_t(MemoryLayout<sockaddr_storage>.size)
            if socket.hearsMany {
                message.msg_control = receiveControls + i * receiveControlSpace
                message.msg_controllen = receiveControlSpace
            }
            receiveMessages[i] = stampede_mmsghdr(msg_hdr: message, msg_len: 0)
        }
        let n = stampede_recvmmsg(socket.fd, receiveMessages + first, UInt32(room))
        statistics.systemCalls += 1
        if n < 0 {
            guard n != -EAGAIN else { return 0 }
            // A pending ICMP error on a connected socket: report it to the transfer.
            return report(Errno(-n), tag: socket.tag, of: handle, at: first)
        }
        for i in first..<(first + Int(n)) {
            let message = receiveMessages[i]
            // Longer than our buffer: its start, said to be cut (the caller refuses it).
            received[i] = (socket.tag, Int32(message.msg_len), nil, message.msg_hdr.msg_flags & Int32(MSG_TRUNC) != 0)
            receivedAt[i] = 0
            if socket.hearsMany {
                var local = sockaddr_storage()
                var header = message.msg_hdr
                stampede_listener_controls(&header, &local, &receivedAt[i])
                receivedLocal[i] = SocketAddress(storage: local)
            }
        }
        return Int(n)
    }

    /// A socket's error (ECONNREFUSED: its client's port is closed) into the batch at `first`,
    /// after the datagrams a transfer's socket holds: the kernel tells a pending error before
    /// the datagrams queued ahead of it (udp_recvmsg looks at the error first), and a client
    /// whose last ACK waited there, while a retransmission that found its port closed drew the
    /// ICMP, finished its transfer rather than failed it. The number of entries written.
    private func report(_ error: Errno, tag: UInt64, of handle: Int, at first: Int) -> Int {
        var queued = 0
        if sockets[handle].fd >= 0, sockets[handle].tag == tag, !sockets[handle].hearsMany {
            queued = receive(from: handle, at: first, limit: receiveCapacity - 1)
        }
        guard first + queued < receiveCapacity else { return queued }
        received[first + queued] = (tag, 0, error, false)
        receivedAt[first + queued] = 0
        return queued + 1
    }

    public func datagram(_ index: Int) -> Datagram {
        let entry = received[index]
        return Datagram(tag: entry.tag,
                        bytes: UnsafeRawBufferPointer(start: buffers.baseAddress! + index * bufferSize, count: Int(entry.length)),
                        peer: SocketAddress(storage: receiveNames[index]),
                        local: receivedLocal[index], error: entry.error, truncated: entry.truncated,
                        received: receivedAt[index] != 0 ? receivedAt[index] : nil)
    }
}
