import ArgumentParser
import CStampedeSys
import Glibc
import StampedeIO
import StampedeProtocol
import StampedeServer

/// Options shared by `get` and `put`.
struct ClientOptions: ParsableArguments {
    @Option(name: [.customShort("b"), .customLong("blksize")], help: "Ask for this block size.")
    var blksize: Int?

    @Option(name: [.customShort("w"), .customLong("windowsize")], help: "Ask for this window size (RFC 7440).")
    var windowsize: Int?

    @Option(name: .customLong("timeout"), help: "Ask for this retransmit timeout, in seconds (RFC 2349).")
    var timeout: Int?

    @Flag(name: .customLong("no-tsize"), help: "Do not ask for / announce the transfer size.")
    var noTsize = false

    @Option(name: .customLong("mode"), help: "octet or netascii.")
    var mode = "octet"

    @Option(name: .customLong("retries"), help: "Retransmissions before giving up.")
    var retries = 5

    /// RFC 2348, 2349 and 7440's ranges (windowsize capped where block numbers stay unambiguous).
    func validate() throws {
        try Self.check(blksize, "--blksize", OptionNegotiation.blockSizeRange)
        try Self.check(windowsize, "--windowsize", OptionNegotiation.grantedWindowSizeRange,
                       why: " (larger windows make block numbers ambiguous)")
        try Self.check(timeout, "--timeout", OptionNegotiation.timeoutRange)
        guard retries >= 0 else { throw ValidationError("--retries must not be negative.") }
        guard TransferMode(rawValue: mode.lowercased()) != nil else { throw ValidationError("--mode: octet or netascii.") }
    }

    static func check(_ value: Int?, _ flag: String, _ range: ClosedRange<Int>, why: String = "") throws {
        if let value, !range.contains(value) {
            throw ValidationError("\(flag) \(value): must be within \(range.lowerBound)...\(range.upperBound)\(why).")
        }
    }

    func settings(host: String) throws -> TFTPClient.Settings {
        guard let server = SocketAddress(parsing: host, defaultPort: 69, defaultHost: "127.0.0.1") else {
            throw ValidationError("\(host): expected an IP address with an optional :PORT ([v6]:PORT for IPv6).")
        }
        guard let transferMode = TransferMode(rawValue: mode.lowercased()) else { throw ValidationError("--mode: octet or netascii") }
        var settings = TFTPClient.Settings(server: server)
        settings.mode = transferMode
        settings.blockSize = blksize
        settings.windowSize = windowsize
        settings.timeoutSeconds = timeout
        settings.askSize = !noTsize
        settings.retries = retries
        return settings
    }
}

struct Get: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Download a file: stampede get HOST[:PORT] FILE [LOCAL].")

    @Argument(help: "Server address, HOST[:PORT].") var host: String
    @Argument(help: "Remote file name.") var file: String
    @Argument(help: "Local file (default: the remote name's last part; - for stdout).") var local: String?
    @OptionGroup var options: ClientOptions

    func run() throws {
        let target = local ?? String(file.split(separator: "/").last ?? Substring(file))
        var client = try TFTPClient(settings: options.settings(host: host))
        defer { client.closeSocket() }
        let sink = try LocalSink(path: target)
        do {
            let bytes = try client.download(file, into: sink)
            try sink.commit()
            if isatty(2) == 0 || target == "-" { return }
            fputs("received \(bytes) bytes into \(target)\n", stderr)
        } catch {
            sink.abort()
            fputs("stampede get: \(file): \(error)\n", stderr)
            throw ExitCode(1)
        }
    }
}

/// Where a download goes: a temporary file renamed into place only when complete (never a
/// half-written file), or standard output.
final class LocalSink {
    let path: String
    let temporary: String
    let fd: Int32
    private var done = false

    init(path: String) throws {
        self.path = path
        if path == "-" {
            temporary = ""
            fd = 1
            return
        }
        // A new file of our own (O_EXCL, O_NOFOLLOW): never one that is there already, nor
        // through a symlink someone planted under the temporary name in a shared directory.
        var opened: (name: String, fd: Int32)?
        for attempt in 0..<16 {
            let name = path + ".stampede-part" + (attempt == 0 ? "" : "-" + String(UInt32.random(in: 0...UInt32.max), radix: 16))
            let fd = open(name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o666)
            if fd >= 0 { opened = (name, fd); break }
            guard errno == EEXIST else { throw ValidationError("\(name): \(Errno.current)") }
        }
        guard let opened else { throw ValidationError("\(path).stampede-part: \(Errno(EEXIST))") }
        (temporary, fd) = opened
    }

    func write(_ bytes: UnsafeRawBufferPointer) throws {
        var done = 0
        while done < bytes.count {
            let n = Glibc.write(fd, bytes.baseAddress! + done, bytes.count - done)
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { throw TFTPClient.Failure.system("write \(path): \(Errno.current)") }
            done += n
        }
    }

    func commit() throws {
        guard path != "-" else { return }
        guard fsync(fd) == 0, close(fd) == 0, rename(temporary, path) == 0 else {
            throw TFTPClient.Failure.system("\(path): \(Errno.current)")
        }
        done = true
    }

    func abort() {
        guard path != "-", !done else { return }
        close(fd)
        unlink(temporary)
    }
}

extension TFTPClient {
    /// RRQ → (OACK → ACK 0) → DATA... with a DataReceiver. Returns the bytes written.
    mutating func download(_ name: String, into sink: LocalSink) throws -> Int {
        let asked = requestOptions(size: nil)
        progress = Progress.ifTerminal(name)
        var length = try request(Request(isWrite: false, filename: Array(name.utf8), mode: settings.mode.rawValue, options: asked))
        var options = TransferOptions()
        var decoder = settings.mode == .netascii ? NetasciiDecoder() : nil
        let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 65536 + 8, alignment: 8)
        defer { scratch.deallocate() }
        var receiver: DataReceiver?
        var written = 0
        while true {
            let now = stampede_monotonic_ns()
            switch packet(length) {
            case .optionAck(let body) where receiver == nil:
                options = try accept(optionAck: body, asked: asked)
                progress?.total = options.transferSize
                receiver = DataReceiver(blockSize: options.blockSize, windowSize: options.windowSize, sendsOptionAck: false, timer: timer(options))
                receiver!.startAwaiting(now: now)
                send(PacketWriter.ack(0), to: serverTID!)
            case .data(let block, let payload):
                if receiver == nil {
                    // No OACK: the server ignored our options and runs RFC 1350 defaults.
                    options = TransferOptions()
                    receiver = DataReceiver(blockSize: 512, windowSize: 1, sendsOptionAck: false, timer: timer(options))
                    receiver!.startAwaiting(now: now)
                }
                guard payload.count <= receiver!.blockSize else { throw Failure.protocolError("block larger than blksize") }
                let receipt = receiver!.receiveData(block, length: payload.count, now: now)
                if receipt.deliver {
                    if decoder != nil {
                        let n = decoder!.decode(payload, into: scratch)
                        try sink.write(UnsafeRawBufferPointer(rebasing: scratch[..<n]))
                        written += n
                    } else {
                        try sink.write(payload)
                        written += payload.count
                    }
                    progress?.update(written)
                }
                if case .ack(let b) = receipt.reply { send(PacketWriter.ack(b), to: serverTID!) }
                if receipt.finished {
                    if decoder != nil {
                        let n = decoder!.finish(into: scratch)
                        try sink.write(UnsafeRawBufferPointer(rebasing: scratch[..<n]))
                        written += n
                    }
                    progress?.update(written, force: true)
                    progress?.done()
                    return written
                }
            case .error(let code, let message):
                throw Failure.server(code: code, message: errorText(message))
            default:
                throw Failure.protocolError("unexpected packet")
            }
            // Wait for the next packet, resending our last ACK on timeouts.
            while true {
                guard let deadline = receiver?.deadline else { throw Failure.timedOut }
                if let n = try receive(until: deadline) { length = n; break }
                guard let reply = receiver!.timeout(now: stampede_monotonic_ns()) else { throw Failure.timedOut }
                if case .ack(let b) = reply { send(PacketWriter.ack(b), to: serverTID!) }
            }
        }
    }
}

extension PacketWriter {
    static func ack(_ block: UInt16) -> [UInt8] { [0, 4, UInt8(block >> 8), UInt8(block & 0xFF)] }
}
