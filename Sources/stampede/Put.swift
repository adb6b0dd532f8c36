import ArgumentParser
import CStampedeSys
import Glibc
import StampedeIO
import StampedeProtocol
import StampedeServer

struct Put: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Upload a file: stampede put HOST[:PORT] LOCAL [REMOTE].")

    @Argument(help: "Server address, HOST[:PORT].") var host: String
    @Argument(help: "Local file to send.") var local: String
    @Argument(help: "Remote name (default: the local name's last part).") var remote: String?
    @OptionGroup var options: ClientOptions

    func run() throws {
        let name = remote ?? String(local.split(separator: "/").last ?? Substring(local))
        var bytes: [UInt8]
        do {
            bytes = try readWholeFile(local)
        } catch {
            fputs("stampede put: \(local): \(error)\n", stderr)
            throw ExitCode(1)
        }
        var client = try TFTPClient(settings: options.settings(host: host))
        defer { client.closeSocket() }
        if client.settings.mode == .netascii { bytes = Netascii.encode(bytes) }
        do {
            try client.upload(bytes, as: name)
        } catch {
            fputs("stampede put: \(name): \(error)\n", stderr)
            throw ExitCode(1)
        }
    }
}

extension TFTPClient {
    /// WRQ → (OACK | ACK 0) → DATA... with a DataSender.
    mutating func upload(_ bytes: [UInt8], as name: String) throws {
        let asked = requestOptions(size: bytes.count)
        progress = Progress.ifTerminal(name)
        progress?.total = bytes.count
        var length = try request(Request(isWrite: true, filename: Array(name.utf8), mode: settings.mode.rawValue, options: asked))
        var options = TransferOptions()
        switch packet(length) {
        case .optionAck(let body): options = try accept(optionAck: body, asked: asked)
        case .ack(0): break
        case .error(let code, let message): throw Failure.server(code: code, message: errorText(message))
        default: throw Failure.protocolError("unexpected reply to WRQ")
        }
        var sender = DataSender(totalBytes: bytes.count, blockSize: options.blockSize, windowSize: options.windowSize,
                                sendsOptionAck: false, timer: timer(options))
        var action = sender.start(now: stampede_monotonic_ns())
        var packetBuffer = [UInt8](repeating: 0, count: options.blockSize + 4)
        while true {
            switch action {
            case .none, .sendOptionAck:
                break
            case .sendBlocks(let first, let count):
                for block in first..<(first + count) {
                    let range = sender.range(ofBlock: block)
                    packetBuffer.withUnsafeMutableBytes { out in
                        _ = PacketWriter.dataHeader(block: DataSender.wire(block), into: out)
                        if range.count > 0 { bytes.withUnsafeBytes { out.baseAddress!.advanced(by: 4).copyMemory(from: $0.baseAddress! + range.lowerBound, byteCount: range.count) } }
                        sendBytes(UnsafeRawBufferPointer(rebasing: out[..<(4 + range.count)]), to: serverTID!)
                    }
                }
            case .finished:
                progress?.update(bytes.count, force: true)
                progress?.done()
                return
            case .timedOut:
                throw Failure.timedOut
            }
            guard let n = try receive(until: sender.deadline!) else {
                action = sender.timeout(now: stampede_monotonic_ns())
                continue
            }
            length = n
            switch packet(length) {
            case .ack(let block):
                action = sender.receiveAck(block, now: stampede_monotonic_ns())
                progress?.update(sender.bytesAcknowledged)
            case .error(let code, let message):
                throw Failure.server(code: code, message: errorText(message))
            default:
                action = .none
            }
        }
    }
}
