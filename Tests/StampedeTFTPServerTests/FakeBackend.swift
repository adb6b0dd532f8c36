import CStampedeSys
import Glibc
import StampedeBase
import StampedeIO
import StampedeProtocol

/// A backend with no sockets: the test plays the network.
final class FakeBackend: DatagramBackend {
    let description = "fake"
    var tags: [UInt64] = []
    var closed: Set<SocketHandle> = []
    var sent: [(socket: SocketHandle, bytes: [UInt8], to: SocketAddress?)] = []
    var inbox: [(tag: UInt64, bytes: [UInt8], peer: SocketAddress, local: SocketAddress)] = []
    /// When the kernel took the datagrams of the next poll, as a listener's say (nil: not said).
    var received: Nanoseconds?
    private var deliveredReceived: Nanoseconds?
    var delivered: [(tag: UInt64, bytes: [UInt8], peer: SocketAddress, local: SocketAddress)] = []
    var statistics = BackendStatistics()
    var socketCount: Int { tags.count - closed.count }
    var largestDatagram: Int { 65536 }
    var largestListenerDatagram: Int { 8192 }
    /// Datagrams longer than this arrive cut to it, as a real backend's buffers would cut them.
    var cutAt: Int?

    func open(_ tag: UInt64) -> SocketHandle {
        tags.append(tag)
        return SocketHandle(Int32(tags.count - 1))
    }
    func openListener(_ address: SocketAddress, receiveBuffer: Int, tag: UInt64) throws(Errno) -> SocketHandle { open(tag) }
    func adoptListener(_ socket: consuming Descriptor, receiveBuffer: Int, tag: UInt64) throws(Errno) -> SocketHandle { open(tag) }
    func adoptShared(_ socket: consuming Descriptor, receiveBuffer: Int, tag: UInt64) throws(Errno) -> SocketHandle { open(tag) }
    /// What `openTransfer` throws, as a kernel out of descriptors or ports would.
    var transferSocketError: Errno?
    /// The queues the last transfer socket was opened with.
    var lastTransferBuffers: SocketBuffers?
    func openTransfer(local: SocketAddress, peer: SocketAddress, ports: ClosedRange<UInt16>?, largestDatagram: Int,
                      buffers: SocketBuffers, tag: UInt64) throws(Errno) -> SocketHandle {
        if let transferSocketError { throw transferSocketError }
        lastTransferBuffers = buffers
        return open(tag)
    }
    func openClient(local: SocketAddress, largestDatagram: Int, buffers: SocketBuffers, tag: UInt64) throws(Errno) -> SocketHandle {
        open(tag)
    }
    func localAddress(of socket: SocketHandle) -> SocketAddress? { nil }
    func close(_ socket: SocketHandle) { closed.insert(socket) }
    func send(_ socket: SocketHandle, header: UnsafeRawBufferPointer, payload: UnsafeRawBufferPointer) {
        sent.append((socket, Array(header) + Array(payload), nil))
    }
    func send(_ socket: SocketHandle, to peer: SocketAddress, from local: SocketAddress?,
              header: UnsafeRawBufferPointer, payload: UnsafeRawBufferPointer) {
        sent.append((socket, Array(header) + Array(payload), peer))
    }
    func watch(_ descriptor: Int32) throws(Errno) { throw Errno(ENOTSUP) }
    func poll(deadline: Nanoseconds?) -> Int {
        delivered = inbox
        inbox = []
        deliveredReceived = received
        received = nil
        return delivered.count
    }
    func datagram(_ index: Int) -> Datagram {
        let d = delivered[index]
        let cut = cutAt.map { d.bytes.count > $0 } ?? false
        return d.bytes.withUnsafeBytes {
            Datagram(tag: d.tag, bytes: cut ? UnsafeRawBufferPointer(rebasing: $0[..<cutAt!]) : $0, peer: d.peer, local: d.local,
                     truncated: cut, received: deliveredReceived)
        }
    }
}
