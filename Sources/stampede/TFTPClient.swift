import CStampedeSys
import Glibc
import StampedeIO
import StampedeProtocol
import StampedeServer

/// A TFTP client over one blocking UDP socket, driving the same state machines as the server:
/// `get` is a DataReceiver, `put` a DataSender. The server's TID is learned from its first reply;
/// packets from any other port get ERROR 5 and change nothing (RFC 1350 §4).
struct TFTPClient {
    struct Settings {
        var server: SocketAddress
        var mode = TransferMode.octet
        var blockSize: Int?
        var windowSize: Int?
        var timeoutSeconds: Int?
        var askSize = true
        var retransmit: Nanoseconds = Clock.nanosecondsPerSecond
        var retries = 5
    }

    enum Failure: Error, CustomStringConvertible {
        case server(code: UInt16, message: String)
        case timedOut
        case protocolError(String)
        case system(String)

        var description: String {
            switch self {
            case .server(let code, let message): return "server error \(code): \(message)"
            case .timedOut: return "timed out"
            case .protocolError(let what): return "protocol error: \(what)"
            case .system(let what): return what
            }
        }
    }

    let settings: Settings
    let fd: Int32
    var serverTID: SocketAddress?
    var buffer = [UInt8](repeating: 0, count: 65536 + 4)
    var progress: Progress?

    init(settings: Settings) throws {
        self.settings = settings
        fd = socket(settings.server.family, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw Failure.system("socket: \(Errno.current)") }
    }

    func closeSocket() { close(fd) }

    func requestOptions(size: Int?) -> [(name: String, value: String)] {
        var options: [(name: String, value: String)] = []
        if let b = settings.blockSize { options.append(("blksize", String(b))) }
        if let t = settings.timeoutSeconds { options.append(("timeout", String(t))) }
        if settings.askSize { options.append(("tsize", String(size ?? 0))) }
        if let w = settings.windowSize { options.append(("windowsize", String(w))) }
        return options
    }

    func sendBytes(_ bytes: UnsafeRawBufferPointer, to address: SocketAddress) {
        var storage = address.storage
        let length = socklen_t(address.isIPv6 ? MemoryLayout<sockaddr_in6>.size : MemoryLayout<sockaddr_in>.size)
        withUnsafePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { _ = sendto(fd, bytes.baseAddress, bytes.count, 0, $0, length) }
        }
    }

    func send(_ bytes: [UInt8], to address: SocketAddress) {
        bytes.withUnsafeBytes { sendBytes($0, to: address) }
    }

    /// Waits until `deadline` for a datagram from the server; nil on timeout.
    mutating func receive(until deadline: Nanoseconds) throws -> Int? {
        while true {
            let left = deadline - stampede_monotonic_ns()
            guard left > 0 else { return nil }
            var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let ready = Glibc.poll(&descriptor, 1, Int32(min(left / 1_000_000 + 1, Int64(Int32.max))))
            if ready < 0 && errno == EINTR { continue }
            guard ready > 0 else { return nil }
            var from = sockaddr_storage()
            var fromLength = socklen_t(MemoryLayout<sockaddr_storage>.size)
            let n = buffer.withUnsafeMutableBytes { raw in
                withUnsafeMutablePointer(to: &from) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { recvfrom(fd, raw.baseAddress, raw.count, 0, $0, &fromLength) }
                }
            }
            if n < 0 {
                if errno == EINTR { continue }
                if errno == ECONNREFUSED { throw Failure.system("server port unreachable") }
                throw Failure.system("recvfrom: \(Errno.current)")
            }
            let sender = SocketAddress(storage: from)
            if serverTID == nil {
                guard sender.host == settings.server.host || settings.server.host == "0.0.0.0" else { continue }
                serverTID = sender
            } else if sender != serverTID {
                // RFC 1350: a stranger gets ERROR 5; our transfer carries on.
                send(PacketWriter.error(TFTPError(.unknownTransferID, "Unknown transfer ID")), to: sender)
                continue
            }
            return n
        }
    }

    func packet(_ length: Int) -> TransferPacket {
        buffer.withUnsafeBytes { TransferPacket(UnsafeRawBufferPointer(rebasing: $0[..<length])) }
    }

    func errorText(_ message: UnsafeRawBufferPointer) -> String {
        sanitizedForLog(message.prefix(while: { $0 != 0 }), limit: 200)
    }

    /// Applies an OACK to what we asked for (RFC 2347). One we cannot accept is refused with
    /// ERROR 8, so the server stops at once, and reported as a protocol error.
    func accept(optionAck body: UnsafeRawBufferPointer, asked: [(name: String, value: String)]) throws -> TransferOptions {
        do {
            return try TransferOptions(optionAck: body, asked: asked)
        } catch {
            send(PacketWriter.error(TFTPError(.optionNegotiation, "Option refused: \(error.description)")), to: serverTID!)
            throw Failure.protocolError("\(error.description); refused with ERROR 8")
        }
    }

    func timer(_ options: TransferOptions) -> RetransmitTimer {
        RetransmitTimer(base: options.timeoutSeconds.map { Nanoseconds($0) * Clock.nanosecondsPerSecond } ?? settings.retransmit,
                        maxRetries: settings.retries)
    }

    /// Sends the request until the server answers; returns the length of the first reply.
    mutating func request(_ request: Request) throws -> Int {
        let bytes = request.encoded()
        var timer = RetransmitTimer(base: settings.retransmit, maxRetries: settings.retries)
        timer.sentNew(now: stampede_monotonic_ns())
        send(bytes, to: settings.server)
        while true {
            if let n = try receive(until: timer.deadline!) { return n }
            guard timer.retransmit(now: stampede_monotonic_ns()) else { throw Failure.timedOut }
            send(bytes, to: settings.server)
        }
    }
}

/// A progress line on a terminal (stderr), at most ten times a second.
struct Progress {
    let name: String
    let started = stampede_monotonic_ns()
    var lastDrawn: Nanoseconds = 0
    var total: Int?

    static func ifTerminal(_ name: String) -> Progress? { isatty(2) != 0 ? Progress(name: name) : nil }

    mutating func update(_ bytes: Int, force: Bool = false) {
        let now = stampede_monotonic_ns()
        guard force || now - lastDrawn > 100_000_000 else { return }
        lastDrawn = now
        let seconds = max(Double(now - started) / 1e9, 0.001)
        let rate = Double(bytes) / seconds / 1_048_576
        let of = total.map { " of \($0)" } ?? ""
        fputs("\r\(name): \(bytes)\(of) bytes, \(String(Int(rate * 10) / 10)).\(Int(rate * 10) % 10) MiB/s   ", stderr)
    }

    func done() { fputs("\n", stderr) }
}
