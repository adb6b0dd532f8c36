import CStampedeSys
import Glibc
import StampedeIO
import StampedeProtocol

/// The pure-Swift backend: epoll for readiness, recvmmsg per readable socket, sendmmsg per run of
/// sends to one socket. Every array is allocated once at start (docs/ARCHITECTURE.md, "The backends"); the
/// file bytes of a DATA packet are gathered by the kernel from the image, never copied here.
public final class GlibcBackend: DatagramBackend {
    public var description: String { "glibc (epoll, recvmmsg, sendmmsg)" }
    public var largestDatagram: Int { bufferSize }
    public var largestListenerDatagram: Int { bufferSize }

    /// A socket table entry: the backend owns `fd` (closed in `flush` after `close`, or at deinit).
    struct Socket {
        var fd: Int32 = -1
        var tag: UInt64 = 0
        var isListener = false
    }

    private let epoll: Int32
    private var sockets: [Socket] = []
    private var freeSockets: [Int32] = []
    private var closing: [SocketHandle] = []
    /// Peer errors (ICMP unreachable) that a send drew instead of a receive, for the next batch.
    private var peerErrors: [(tag: UInt64, error: Errno)] = []

    // Send queue: one mmsghdr + 2 iovecs per send; headers copied into an arena.
    private let sendCapacity: Int
    private let sendMessages: UnsafeMutablePointer<stampede_mmsghdr>
    private let sendVectors: UnsafeMutablePointer<iovec>
    private var sendSocket: [SocketHandle]
    private let sendNames: UnsafeMutablePointer<sockaddr_storage>
    private let sendControls: UnsafeMutableRawPointer
    private let controlSpace: Int
    private let arena: UnsafeMutableRawBufferPointer
    private var arenaUsed = 0
    private var queued = 0
    public private(set) var sendFailures = 0
    public private(set) var socketCount = 0

    // Receive batch.
    private let receiveCapacity: Int
    private let bufferSize: Int
    private let buffers: UnsafeMutableRawBufferPointer
    private let receiveMessages: UnsafeMutablePointer<stampede_mmsghdr>
    private let receiveVectors: UnsafeMutablePointer<iovec>
    private let receiveNames: UnsafeMutablePointer<sockaddr_storage>
    private let receiveControls: UnsafeMutableRawPointer
    private var received: [(tag: UInt64, length: Int32, error: Errno?)]
    private var receivedLocal: [SocketAddress]
    private let readyTags: UnsafeMutablePointer<UInt64>
    private let readyCapacity = 256

    public init(receiveBatch: Int = 256, sendBatch: Int = 4096, bufferSize: Int = 65536) throws(Errno) {
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
        controlSpace = stampede_pktinfo_space()

        sendCapacity = sendBatch
        sendMessages = .allocate(capacity: sendBatch)
        sendVectors = .allocate(capacity: sendBatch * 2)
        sendSocket = Array(repeating: SocketHandle(-1), count: sendBatch)
        sendNames = .allocate(capacity: sendBatch)
        sendControls = .allocate(byteCount: sendBatch * controlSpace, alignment: 16)
        // Room for a full window of the largest streamed blocks, plus small packets.
        arena = .allocate(byteCount: 8 << 20, alignment: 16)

        receiveCapacity = receiveBatch
        self.bufferSize = bufferSize
        receiveMessages = .allocate(capacity: receiveBatch)
        receiveVectors = .allocate(capacity: receiveBatch)
        receiveNames = .allocate(capacity: receiveBatch)
        receiveControls = .allocate(byteCount: receiveBatch * controlSpace, alignment: 16)
        received = Array(repeating: (0, 0, nil), count: receiveBatch)
        receivedLocal = Array(repeating: SocketAddress(), count: receiveBatch)
        readyTags = .allocate(capacity: readyCapacity)
        sockets.reserveCapacity(1024)
        freeSockets.reserveCapacity(1024)
        closing.reserveCapacity(1024)
        peerErrors.reserveCapacity(receiveBatch)
    }

    deinit {
        for socket in sockets where socket.fd >= 0 { Glibc.close(socket.fd) }
        Glibc.close(epoll)
        sendMessages.deallocate()
        sendVectors.deallocate()
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

    private func register(_ socket: consuming Descriptor, tag: UInt64, isListener: Bool) throws(Errno) -> SocketHandle {
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
        sockets[Int(index)] = Socket(fd: socket.release(), tag: tag, isListener: isListener)
        socketCount += 1
        return SocketHandle(index)
    }

    public func openListener(_ address: SocketAddress, receiveBuffer: Int, tag: UInt64) throws(Errno) -> SocketHandle {
        try register(UDPSocket.listener(address, receiveBuffer: receiveBuffer), tag: tag, isListener: true)
    }

    public func adoptListener(_ socket: consuming Descriptor, receiveBuffer: Int, tag: UInt64) throws(Errno) -> SocketHandle {
        try register(UDPSocket.adoptListener(socket, receiveBuffer: receiveBuffer), tag: tag, isListener: true)
    }

    public func openTransfer(local: SocketAddress, peer: SocketAddress, ports: ClosedRange<UInt16>?,
                             largestDatagram: Int, tag: UInt64) throws(Errno) -> SocketHandle {
        try register(UDPSocket.transfer(local: local, peer: peer, ports: ports), tag: tag, isListener: false)
    }

    public func openClient(local: SocketAddress, largestDatagram: Int, tag: UInt64) throws(Errno) -> SocketHandle {
        try register(UDPSocket.client(local: local), tag: tag, isListener: false)
    }

    public func localAddress(of socket: SocketHandle) -> SocketAddress? {
        var storage = sockaddr_storage()
        guard stampede_socket_address(sockets[Int(socket.index)].fd, &storage) == 0 else { return nil }
        return SocketAddress(storage: storage)
    }

    public func close(_ socket: SocketHandle) {
        guard socket.index >= 0, sockets[Int(socket.index)].fd >= 0 else { return }
        // Queued sends go out first; the fd closes at the next flush.
        closing.append(socket)
        sockets[Int(socket.index)].tag = UInt64.max
    }

    // MARK: Sends

    private func reserveArena(_ count: Int) -> UnsafeMutableRawPointer {
        if queued == sendCapacity || arenaUsed + count > arena.count { flush() }
        let start = arena.baseAddress! + arenaUsed
        arenaUsed += (count + 7) & ~7
        return start
    }

    public func send(_ socket: SocketHandle, header: UnsafeRawBufferPointer, payload: UnsafeRawBufferPointer) {
        let copy = reserveArena(header.count)
        if header.count > 0 { copy.copyMemory(from: header.baseAddress!, byteCount: header.count) }
        let vectors = sendVectors + 2 * queued
        vectors[0] = iovec(iov_base: copy, iov_len: header.count)
        vectors[1] = iovec(iov_base: UnsafeMutableRawPointer(mutating: payload.baseAddress), iov_len: payload.count)
        var message = msghdr()
        message.msg_iov = vectors
        message.msg_iovlen = payload.count > 0 ? 2 : 1
        sendMessages[queued] = stampede_mmsghdr(msg_hdr: message, msg_len: 0)
        sendSocket[queued] = socket
        queued += 1
    }

    public func send(_ socket: SocketHandle, to peer: SocketAddress, from local: SocketAddress?,
                     header: UnsafeRawBufferPointer, payload: UnsafeRawBufferPointer) {
        send(socket, header: header, payload: payload)
        let index = queued - 1
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
                if sent > 0 {
                    next += Int(sent)
                } else if sent == -EAGAIN || sent == -ENOBUFS {
                    sendFailures += end - next
                    break
                } else {
                    // This message is lost; the rest are tried. A peer's error (ECONNREFUSED: the
                    // client's port is gone) reaches a connected socket's first call, this send:
                    // the transfer hears it as from a receive.
                    if Self.isPeerError(-sent) {
                        if peerErrors.count < receiveCapacity { peerErrors.append((sockets[Int(socket.index)].tag, Errno(-sent))) }
                    } else {
                        sendFailures += 1
                    }
                    next += 1
                }
            }
            start = end
        }
        queued = 0
        arenaUsed = 0
        for socket in closing {
            Glibc.close(sockets[Int(socket.index)].fd)
            sockets[Int(socket.index)] = Socket()
            socketCount -= 1
            freeSockets.append(socket.index)
        }
        closing.removeAll(keepingCapacity: true)
    }

    static func isPeerError(_ error: Int32) -> Bool {
        error == ECONNREFUSED || error == EHOSTUNREACH || error == ENETUNREACH
    }

    // MARK: Receives

    public func poll(deadline: Nanoseconds?) -> Int {
        flush()
        var count = 0
        for (tag, error) in peerErrors where tag != UInt64.max {
            received[count] = (tag, 0, error)
            count += 1
        }
        peerErrors.removeAll(keepingCapacity: true)
        var timeout: Int64 = count > 0 ? 0 : -1
        if count == 0, let deadline { timeout = max(0, deadline - stampede_monotonic_ns()) }
        let ready = stampede_epoll_wait(epoll, readyTags, Int32(readyCapacity), timeout)
        guard ready > 0 else { return count }
        for i in 0..<Int(ready) where count < receiveCapacity {
            let handle = Int(readyTags[i])
            guard handle < sockets.count, sockets[handle].fd >= 0, sockets[handle].tag != UInt64.max else { continue }
            count += receive(from: handle, at: count)
        }
        return count
    }

    private func receive(from handle: Int, at first: Int) -> Int {
        let socket = sockets[handle]
        let room = min(receiveCapacity - first, socket.isListener ? receiveCapacity : 64)
        for i in first..<(first + room) {
            receiveVectors[i] = iovec(iov_base: buffers.baseAddress! + i * bufferSize, iov_len: bufferSize)
            var message = msghdr()
            message.msg_iov = receiveVectors + i
            message.msg_iovlen = 1
            message.msg_name = UnsafeMutableRawPointer(receiveNames + i)
            message.msg_namelen = socklen_t(MemoryLayout<sockaddr_storage>.size)
            if socket.isListener {
                message.msg_control = receiveControls + i * controlSpace
                message.msg_controllen = controlSpace
            }
            receiveMessages[i] = stampede_mmsghdr(msg_hdr: message, msg_len: 0)
        }
        let n = stampede_recvmmsg(socket.fd, receiveMessages + first, UInt32(room))
        if n < 0 {
            guard n != -EAGAIN else { return 0 }
            // A pending ICMP error on a connected socket: report it to the transfer.
            received[first] = (socket.tag, 0, Errno(-n))
            return 1
        }
        var kept = 0
        for i in first..<(first + Int(n)) {
            let message = receiveMessages[i]
            // A datagram larger than our buffer is no TFTP packet we accept.
            if message.msg_hdr.msg_flags & Int32(MSG_TRUNC) != 0 { continue }
            let slot = first + kept
            if slot != i {
                receiveNames[slot] = receiveNames[i]
                (buffers.baseAddress! + slot * bufferSize).copyMemory(from: buffers.baseAddress! + i * bufferSize,
                                                                      byteCount: Int(message.msg_len))
            }
            received[slot] = (socket.tag, Int32(message.msg_len), nil)
            if socket.isListener {
                var local = sockaddr_storage()
                var header = message.msg_hdr
                _ = stampede_pktinfo_local(&header, &local, 0)
                receivedLocal[slot] = SocketAddress(storage: local)
            }
            kept += 1
        }
        return kept
    }

    public func datagram(_ index: Int) -> Datagram {
        let entry = received[index]
        return Datagram(tag: entry.tag,
                        bytes: UnsafeRawBufferPointer(start: buffers.baseAddress! + index * bufferSize, count: Int(entry.length)),
                        peer: SocketAddress(storage: receiveNames[index]),
                        local: receivedLocal[index], error: entry.error)
    }
}
