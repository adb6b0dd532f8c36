import ArgumentParser
import CStampedeSys
import Glibc
import StampedeBase
import StampedeIO
import StampedeProtocol

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

    @Option(name: .customLong("option"),
            help: "Ask for any option of the table as NAME=VALUE (repeatable): blksize2, utimeout, rollover, cookie, ...",
            transform: ClientOptions.requested)
    var option: [(name: String, value: String)] = []

    @Option(name: .customLong("mode"), help: "octet or netascii.")
    var mode = "octet"

    @Option(name: .customLong("retries"), help: "Retransmissions before giving up.")
    var retries = 5

    /// The option table's ranges (`TFTPOption`).
    func validate() throws {
        try Self.check(blksize, .blksize)
        try Self.check(windowsize, .windowsize)
        try Self.check(timeout, .timeout)
        try FlagRange.check(retries, FlagRange.retries, "--retries")
        guard TransferMode(rawValue: mode.lowercased()) != nil else { throw ValidationError("--mode: octet or netascii.") }
    }

    /// `--OPTION value` within the option table's range, or a usage error (exit 64) that gives it.
    static func check(_ value: Int?, _ option: TFTPOption) throws {
        guard let value, !option.range.contains(value) else { return }
        let why = option == .windowsize ? " (larger windows make block numbers ambiguous)" : ""
        throw ValidationError("--\(option.rawValue) \(value): must be within \(option.range.lowerBound)...\(option.range.upperBound)\(why).")
    }

    /// `--option NAME=VALUE`, checked against the option table as the command line is read (a
    /// bad one: "The value ... is invalid for '--option'", and why; exit 64).
    static func requested(_ word: String) throws -> (name: String, value: String) {
        try TFTPOption.requested(word).get()
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
        settings.moreOptions = option
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
        let client: TFTPClient
        do { client = try TFTPClient(settings: options.settings(host: host)) } catch let error as Errno {
            throw failure("socket: \(error)")
        }
        let sink: ReplacingFile?
        do { sink = target == "-" ? nil : try Self.replacingFile(target) } catch {
            throw failure("\(target): \(error)")
        }
        var decoder = client.settings.mode == .netascii ? NetasciiDecoder() : nil
        let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 2 * 65536 + 8, alignment: 8)
        defer { scratch.deallocate() }
        func write(_ bytes: UnsafeRawBufferPointer) throws(TFTPClient.Failure) {
            do {
                if let sink { try sink.write(bytes) } else { try writeFully(1, bytes) }
            } catch {
                throw .localFile(path: target, error)
            }
        }
        var progress = Progress.ifTerminal(file)
        do {
            try client.run(client.request(file), progress: { progress?.update($0) }) { bytes throws(TFTPClient.Failure) in
                if decoder != nil {
                    try write(UnsafeRawBufferPointer(rebasing: scratch[..<decoder!.decode(bytes, into: scratch)]))
                } else {
                    try write(bytes)
                }
            }
            if decoder != nil { try write(UnsafeRawBufferPointer(rebasing: scratch[..<decoder!.finish(into: scratch)])) }
            do { try sink?.commit() } catch { throw TFTPClient.Failure.localFile(path: target, error) }
        } catch {
            sink?.abort()
            progress?.done()
            throw failure("\(file): \(error)")
        }
        progress?.update(sink?.bytesWritten ?? 0, force: true)
        progress?.done()
    }

    /// The download's temporary file beside `path` (`path.stampede-part-…`), renamed over it at the end.
    static func replacingFile(_ path: String) throws(Errno) -> ReplacingFile {
        let slash = path.lastIndex(of: "/")
        let directory = slash.map { $0 == path.startIndex ? "/" : String(path[..<$0]) } ?? "."
        let name = slash.map { String(path[path.index(after: $0)...]) } ?? path
        return try ReplacingFile(in: Descriptor(opening: directory, flags: O_RDONLY | O_DIRECTORY), replacing: Array(name.utf8),
                                 temporaryPrefix: Array((name + ".stampede-part-").utf8), mode: 0o666 & ~currentUmask())
    }

    func failure(_ message: String) -> ExitCode {
        writeToStandardError("stampede get: \(message)\n")
        return ExitCode(1)
    }
}

/// The process's umask (umask(2) can only be read by setting it).
func currentUmask() -> mode_t {
    let mask = umask(0)
    umask(mask)
    return mask
}
