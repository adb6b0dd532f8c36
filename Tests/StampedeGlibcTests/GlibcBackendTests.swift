import CStampedeSys
import Glibc
import StampedeCore
import Testing
@testable import StampedeGlibc

/// A plain client socket on loopback for the test.
struct LoopbackClient {
    let fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
    var address: SocketAddress {
        var storage = sockaddr_storage()
        _ = stampede_socket_address(fd, &storage)
        return SocketAddress(storage: storage)
    }

    init() {
        var any = SocketAddress(parsing: "127.0.0.1:0", defaultPort: 0)!.storage
        _ = withUnsafePointer(to: &any) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        var timeout = timeval(tv_sec: 2, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }

    func send(_ bytes: [UInt8], to address: SocketAddress) {
        var storage = address.storage
        _ = withUnsafePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { sendto(fd, bytes, bytes.count, 0, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
    }

    func receive() -> (bytes: [UInt8], from: SocketAddress)? {
        var buffer = [UInt8](repeating: 0, count: 70000)
        var from = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let n = withUnsafeMutablePointer(to: &from) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { recvfrom(fd, &buffer, buffer.count, 0, $0, &length) }
        }
        return n < 0 ? nil : (Array(buffer[..<n]), SocketAddress(storage: from))
    }
}

@Suite struct GlibcBackendSpec {
    func pollUntilSomething(_ backend: GlibcBackend) -> Int {
        backend.poll(deadline: stampede_monotonic_ns() + 2_000_000_000)
    }

    @Test func aListenerReportsPeerAndTheLocalAddressFromPktinfo() throws {
        let backend = try GlibcBackend()
        let listener = try backend.openListener(SocketAddress(parsing: "127.0.0.1:0", defaultPort: 0)!, tag: 77)
        let bound = try #require(backend.localAddress(of: listener))
        let client = LoopbackClient()
        client.send([0, 1, 0x61, 0], to: bound)
        #expect(pollUntilSomething(backend) == 1)
        let d = backend.datagram(0)
        #expect(d.tag == 77)
        #expect(Array(d.bytes) == [0, 1, 0x61, 0])
        #expect(d.peer == client.address)
        #expect(d.local.host == "127.0.0.1")
    }

    @Test func aTransferSendGathersHeaderAndImageSlice() throws {
        let backend = try GlibcBackend()
        let client = LoopbackClient()
        let socket = try backend.openTransfer(local: SocketAddress(parsing: "127.0.0.1:0", defaultPort: 0)!, peer: client.address,
                                              ports: nil, largestDatagram: 516, tag: 5)
        let payload: [UInt8] = Array(0..<200)
        payload.withUnsafeBytes { slice in
            [UInt8]([0, 3, 0, 1]).withUnsafeBytes { backend.send(socket, header: $0, payload: slice) }
            _ = backend.poll(deadline: stampede_monotonic_ns())
        }
        let got = try #require(client.receive())
        #expect(got.bytes == [0, 3, 0, 1] + payload)
        #expect(got.from == backend.localAddress(of: socket))
        // Replies reach the transfer socket with its tag.
        client.send([0, 4, 0, 1], to: got.from)
        #expect(pollUntilSomething(backend) == 1)
        #expect(backend.datagram(0).tag == 5)
        #expect(Array(backend.datagram(0).bytes) == [0, 4, 0, 1])
    }

    @Test func aListenerReplyComesFromTheListenersPort() throws {
        let backend = try GlibcBackend()
        let listener = try backend.openListener(SocketAddress(parsing: "127.0.0.1:0", defaultPort: 0)!, tag: 1)
        let bound = try #require(backend.localAddress(of: listener))
        let client = LoopbackClient()
        client.send([0, 1, 0x61, 0], to: bound)
        _ = pollUntilSomething(backend)
        let d = backend.datagram(0)
        [UInt8]([0, 5, 0, 1, 0]).withUnsafeBytes { backend.send(fromListener: listener, to: d.peer, from: d.local, packet: $0) }
        _ = backend.poll(deadline: stampede_monotonic_ns())
        let got = try #require(client.receive())
        #expect(got.bytes == [0, 5, 0, 1, 0])
        #expect(got.from == bound)
    }

    @Test func aVanishedClientIsReportedAsAnError() throws {
        let backend = try GlibcBackend()
        var gone = SocketAddress()
        do {
            let client = LoopbackClient()
            gone = client.address
            close(client.fd)
        }
        let socket = try backend.openTransfer(local: SocketAddress(parsing: "127.0.0.1:0", defaultPort: 0)!, peer: gone, ports: nil, largestDatagram: 516, tag: 9)
        [UInt8]([0, 3, 0, 1]).withUnsafeBytes { backend.send(socket, header: $0, payload: UnsafeRawBufferPointer(start: nil, count: 0)) }
        #expect(pollUntilSomething(backend) == 1)
        #expect(backend.datagram(0).tag == 9)
        #expect(backend.datagram(0).error == ECONNREFUSED)
    }

    @Test func aPortRangeIsHonoured() throws {
        let backend = try GlibcBackend()
        let client = LoopbackClient()
        let socket = try backend.openTransfer(local: SocketAddress(parsing: "127.0.0.1:0", defaultPort: 0)!, peer: client.address,
                                              ports: 47000...47010, largestDatagram: 516, tag: 1)
        let port = try #require(backend.localAddress(of: socket)).port
        #expect((47000...47010).contains(port))
    }
}
