import CStampedeSys
import Glibc
import StampedeIO
import StampedeProtocol
import StampedeTestSupport
import Testing

/// `sendWindow`: a window of DATA, sent segmented (UDP GSO) or one datagram at a time, reaches the
/// client as exactly the datagrams it would get one by one.
@Suite struct WindowSends {
    /// A window's payload of `blocks` blocks, the last `lastBlock` bytes long, and its headers.
    struct Window {
        let payload: [UInt8]
        let headers: [UInt8]
        let blockSize: Int
        let blocks: Int

        init(blockSize: Int, blocks: Int, lastBlock: Int, firstNumber: Int = 1) {
            self.blockSize = blockSize
            self.blocks = blocks
            payload = (0..<((blocks - 1) * blockSize + lastBlock)).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 9) }
            headers = (0..<blocks).flatMap { i -> [UInt8] in
                let number = UInt16(truncatingIfNeeded: firstNumber + i)
                return [0, 3, UInt8(number >> 8), UInt8(number & 0xFF)]
            }
        }

        /// Datagram i as a client must see it.
        func datagram(_ i: Int) -> [UInt8] {
            let start = min(i * blockSize, payload.count), end = min(start + blockSize, payload.count)
            return Array(headers[(4 * i)..<(4 * i + 4)]) + Array(payload[start..<end])
        }

        func send(_ backend: any DatagramBackend, _ socket: SocketHandle, to peer: SocketAddress? = nil,
                  from local: SocketAddress? = nil) {
            headers.withUnsafeBytes { h in
                payload.withUnsafeBytes { p in
                    backend.sendWindow(socket, to: peer, from: local, headers: h, payload: p, blockSize: blockSize)
                }
            }
        }
    }

    /// A client socket with a receive queue big enough for the largest window here.
    func client() -> LoopbackClient {
        let client = LoopbackClient()
        var size: Int32 = 16 << 20
        setsockopt(client.fd, SOL_SOCKET, SO_RCVBUFFORCE, &size, socklen_t(MemoryLayout<Int32>.size))
        return client
    }

    func expectReceived(_ window: Window, by client: LoopbackClient, from sender: SocketAddress?) {
        for i in 0..<window.blocks {
            guard let (bytes, from) = client.receive() else {
                Issue.record("datagram \(i) of \(window.blocks) never came")
                return
            }
            #expect(bytes == window.datagram(i), "datagram \(i): \(bytes.count) bytes, expected \(window.datagram(i).count)")
            if let sender { #expect(from == sender) }
        }
        var timeout = timeval(tv_sec: 0, tv_usec: 200_000)
        setsockopt(client.fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        #expect(client.receive() == nil, "no datagram beyond the window")
    }

    static let shapes: [(blockSize: Int, blocks: Int, lastBlock: Int)] = [
        (1468, 4, 1468),    // the UEFI window, all full
        (1468, 100, 77),    // more than one send carries (44 of 1,472 bytes), the file's short end
        (512, 70, 0),       // a file of a whole number of blocks: the last block is empty
        (8192, 9, 8192),    // blocks larger than a send of 64 KiB takes 8 of
        (32768, 3, 100),    // one block per send: no segmentation possible
    ]

    @Test(arguments: BackendKind.allCases, [true, false])
    func aWindowOnAConnectedSocketArrivesAsTheSameDatagrams(kind: BackendKind, segmentation: Bool) throws {
        let backend = try kind.make(segmentation: segmentation)
        #expect(backend.segmentation == (segmentation ? .on : .off))
        for shape in Self.shapes {
            let client = client()
            defer { close(client.fd) }
            let socket = try backend.openTransfer(local: loopbackAny, peer: client.address, ports: nil,
                                                  largestDatagram: 516, buffers: SocketBuffers(), tag: 1)
            let window = Window(blockSize: shape.blockSize, blocks: shape.blocks, lastBlock: shape.lastBlock, firstNumber: 65530)
            window.send(backend, socket)
            _ = backend.poll(deadline: stampede_monotonic_ns())
            expectReceived(window, by: client, from: backend.localAddress(of: socket))
            backend.close(socket)
        }
        _ = backend.poll(deadline: stampede_monotonic_ns())
        #expect(backend.sendFailures == 0)
        #expect(backend.segmentationFallbacks == 0)
        // Sends of two datagrams or more: 1; 44 + 44 + 12; 64 + 6; 7 + 2 (8,196 bytes each); none.
        #expect(backend.segmentedSends == (segmentation ? 8 : 0))
    }

    /// Single-port mode: a window from the listener, addressed to the peer, from the address the
    /// request came to.
    @Test(arguments: BackendKind.allCases, [true, false])
    func aWindowFromAListenerGoesToThePeerFromItsLocalAddress(kind: BackendKind, segmentation: Bool) throws {
        let backend = try kind.make(segmentation: segmentation)
        let (listener, bound) = try loopbackListener(backend, tag: 5)
        let client = client()
        defer { close(client.fd) }
        let window = Window(blockSize: 1428, blocks: 16, lastBlock: 3)
        window.send(backend, listener, to: client.address, from: SocketAddress(parsing: "127.0.0.1:0", defaultPort: 0))
        _ = backend.poll(deadline: stampede_monotonic_ns())
        expectReceived(window, by: client, from: bound)
        #expect(backend.segmentedSends == (segmentation ? 1 : 0))
    }

    /// A socket whose sends the kernel will not segment (SO_NO_CHECK: no UDP checksum, which GSO
    /// needs; the same EINVAL as a blksize above the path MTU): the window goes again one datagram
    /// at a time, and the socket's later windows unsegmented, with nothing lost.
    @Test(arguments: BackendKind.allCases)
    func aRefusedSegmentedSendIsSentAgainOneByOne(kind: BackendKind) throws {
        let backend = try kind.make(segmentation: true)
        let client = client()
        defer { close(client.fd) }
        let (listener, _) = try loopbackListener(backend, tag: 5)
        let fd = try #require(listenerDescriptor(backend, listener))
        var on: Int32 = 1
        #expect(setsockopt(fd, SOL_SOCKET, SO_NO_CHECK, &on, socklen_t(MemoryLayout<Int32>.size)) == 0)
        var refused: [Int] = []
        for _ in 0..<2 {
            let window = Window(blockSize: 1468, blocks: 50, lastBlock: 10)
            window.send(backend, listener, to: client.address, from: nil)
            _ = backend.poll(deadline: stampede_monotonic_ns())
            expectReceived(window, by: client, from: nil)
            refused.append(backend.segmentationFallbacks)
        }
        // The first window's sends (44 + 6 datagrams) were refused: one at least, both when they
        // were queued before the first refusal came back (io_uring). The second is not segmented.
        #expect((1...2).contains(refused[0]))
        #expect(refused[1] == refused[0])
        #expect(backend.segmentedSends == 0)
        #expect(backend.sendFailures == 0)
    }

    /// The descriptor behind a listener, found by its bound address among this process's sockets.
    func listenerDescriptor(_ backend: any DatagramBackend, _ socket: SocketHandle) -> Int32? {
        guard let bound = backend.localAddress(of: socket) else { return nil }
        for fd in Int32(3)..<Int32(4096) {
            var storage = sockaddr_storage()
            if stampede_socket_address(fd, &storage) == 0, SocketAddress(storage: storage) == bound { return fd }
        }
        return nil
    }
}
