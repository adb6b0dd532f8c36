import CStampedeSys
import Glibc
import StampedeBase
import StampedeIO
import StampedeProtocol
import StampedeStorm

/// `stampede get` and `put`: one `ClientTransfer` (the machine storm runs too) over one blocking
/// UDP socket. The machine decides; this sends what it says and hands it what arrives.
final class TFTPClient {
    struct Settings {
        var server: SocketAddress
        var mode = TransferMode.octet
        var blockSize: Int?
        var windowSize: Int?
        var timeoutSeconds: Int?
        /// `--option NAME=VALUE`: sent after the others.
        var moreOptions: [(name: String, value: String)] = []
        var askSize = true
        var retransmit: Nanoseconds = nanosecondsPerSecond
        var retries = 5
    }

    /// Why a transfer did not complete: what the protocol said, or what the host did.
    enum Failure: Error, CustomStringConvertible {
        case transfer(ClientFailure)
        /// ICMP port unreachable: nothing listens on the server's port.
        case unreachable
        /// Our socket failed.
        case socket(Errno)
        /// The local file (or standard output) could not be written.
        case localFile(path: String, Errno)

        var description: String {
            switch self {
            case .transfer(let failure): return failure.description
            case .unreachable: return "server port unreachable"
            case .socket(let error): return "recvfrom: \(error)"
            case .localFile(let path, let error): return "\(path): \(error)"
            }
        }
    }

    let settings: Settings
    private let socket: Descriptor
    private var buffer = [UInt8](repeating: 0, count: 65536 + 4)

    init(settings: Settings) throws(Errno) {
        self.settings = settings
        socket = Descriptor(owning: try Self.udpSocket(family: settings.server.family))
    }

    private static func udpSocket(family: Int32) throws(Errno) -> Int32 {
        let fd = Glibc.socket(family, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw Errno.current }
        return fd
    }

    /// The request for `name`, with the options the settings ask (an upload announces its size).
    func request(_ name: String, uploadSize: Int? = nil) -> Request {
        let options = TFTPOption.requestList(blockSize: settings.blockSize, timeoutSeconds: settings.timeoutSeconds,
                                             transferSize: settings.askSize ? uploadSize ?? 0 : nil,
                                             windowSize: settings.windowSize, more: settings.moreOptions)
        return Request(isWrite: uploadSize != nil, filename: Array(name.utf8), mode: settings.mode.rawValue, options: options)
    }

    /// Runs `request` to its end: a download hands its bytes, in order, to `deliver`; an upload
    /// sends `upload`. `progress` hears the bytes done so far.
    func run(_ request: Request, upload: [UInt8] = [], progress: (Int) -> Void = { _ in },
                      deliver: (UnsafeRawBufferPointer) throws(Failure) -> Void = { _ in }) throws(Failure) {
        if !request.isWrite { SocketBuffers.receiving(request).grow(socket.raw) }
        var plan = ClientPlan(request: request, retransmit: settings.retransmit, retries: settings.retries)
        plan.uploadSize = upload.count
        var transfer = ClientTransfer(plan: plan, server: settings.server, now: stampede_monotonic_ns())
        var step = transfer.start(now: stampede_monotonic_ns())
        var from: SocketAddress?
        while true {
            send(step.send, for: transfer, to: from, upload: upload)
            progress(request.isWrite ? transfer.bytesAcknowledged : transfer.bytesReceived)
            switch step.end {
            case .ok?: return
            case .failed(let failure)?: throw .transfer(failure)
            case nil: break
            }
            guard let deadline = transfer.deadline else { throw .transfer(.timedOut) }
            if let (length, sender) = try receive(until: deadline) {
                from = sender
                // Delivered bytes point into the buffer: handed over while it is at hand.
                let received: Result<ClientStep, Failure> = buffer.withUnsafeBytes { raw in
                    let step = transfer.receive(UnsafeRawBufferPointer(rebasing: raw[..<length]), from: sender,
                                                now: stampede_monotonic_ns())
                    if let (_, bytes) = step.delivered {
                        do throws(Failure) { try deliver(bytes) } catch { return .failure(error) }
                    }
                    return .success(step)
                }
                step = try received.get()
            } else {
                step = transfer.timerFired(now: stampede_monotonic_ns())
            }
        }
    }

    private func send(_ what: ClientSend, for transfer: ClientTransfer<SocketAddress>, to stranger: SocketAddress?, upload: [UInt8]) {
        switch what {
        case .none:
            break
        case .request:
            send(transfer.plan.request.encoded(), to: settings.server)
        case .ack(let block):
            send([0, 4, UInt8(block >> 8), UInt8(block & 0xFF)], to: transfer.server)
        case .blocks(let first, let count):
            for block in first..<(first + count) {
                let wire = transfer.wire(block)
                send([0, 3, UInt8(wire >> 8), UInt8(wire & 0xFF)] + upload[transfer.range(ofBlock: block)], to: transfer.server)
            }
        case .unknownTransferID:
            if let stranger { send(PacketWriter.error(TFTPError(.unknownTransferID, "Unknown transfer ID")), to: stranger) }
        case .abort:
            send(PacketWriter.error(TFTPError(.notDefined, "Transfer abandoned")), to: transfer.server)
        case .refuseOptions:
            send(PacketWriter.error(TFTPError(.optionNegotiation, "Option refused")), to: transfer.server)
        case .close:
            send(PacketWriter.error(TFTPError(.notDefined, "closed")), to: transfer.server)
        }
    }

    private func send(_ bytes: [UInt8], to address: SocketAddress) {
        var storage = address.storage
        let length = socklen_t(address.isIPv6 ? MemoryLayout<sockaddr_in6>.size : MemoryLayout<sockaddr_in>.size)
        bytes.withUnsafeBytes { packet in
            withUnsafePointer(to: &storage) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { _ = sendto(socket.raw, packet.baseAddress, packet.count, 0, $0, length) }
            }
        }
    }

    /// Waits until `deadline` for a datagram; its length and sender, or nil on timeout.
    private func receive(until deadline: Nanoseconds) throws(Failure) -> (Int, SocketAddress)? {
        while true {
            let left = deadline - stampede_monotonic_ns()
            guard left > 0 else { return nil }
            var descriptor = pollfd(fd: socket.raw, events: Int16(POLLIN), revents: 0)
            let ready = Glibc.poll(&descriptor, 1, Int32(min(left / 1_000_000 + 1, Int64(Int32.max))))
            if ready < 0 && errno == EINTR { continue }
            guard ready > 0 else { return nil }
            var from = sockaddr_storage()
            var fromLength = socklen_t(MemoryLayout<sockaddr_storage>.size)
            let fd = socket.raw
            let n = buffer.withUnsafeMutableBytes { raw in
                withUnsafeMutablePointer(to: &from) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { recvfrom(fd, raw.baseAddress, raw.count, 0, $0, &fromLength) }
                }
            }
            if n < 0 {
                if errno == EINTR { continue }
                if errno == ECONNREFUSED { throw .unreachable }
                throw .socket(Errno.current)
            }
            return (n, SocketAddress(storage: from))
        }
    }
}

/// A progress line on a terminal (standard error), at most ten times a second.
struct Progress {
    let name: String
    let started = stampede_monotonic_ns()
    var lastDrawn: Nanoseconds = 0
    var total: Int?

    static func ifTerminal(_ name: String, total: Int? = nil) -> Progress? {
        isatty(2) != 0 ? Progress(name: name, total: total) : nil
    }

    mutating func update(_ bytes: Int, force: Bool = false) {
        let now = stampede_monotonic_ns()
        guard force || now - lastDrawn > 100_000_000 else { return }
        lastDrawn = now
        let seconds = max(Double(now - started) / 1e9, 0.001)
        let rate = Double(bytes) / seconds / 1_048_576
        let of = total.map { " of \($0)" } ?? ""
        writeToStandardError("\r\(name): \(bytes)\(of) bytes, \(decimalText(rate, places: 1)) MiB/s   ")
    }

    func done() { writeToStandardError("\n") }
}
