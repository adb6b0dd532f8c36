import ArgumentParser
import Glibc
import StampedeBase
import StampedeIO
import StampedeProtocol

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
            throw failure("\(local): \(error)")
        }
        let client: TFTPClient
        do { client = try TFTPClient(settings: options.settings(host: host)) } catch let error as Errno {
            throw failure("socket: \(error)")
        }
        if client.settings.mode == .netascii { bytes = Netascii.encode(bytes) }
        var progress = Progress.ifTerminal(name, total: bytes.count)
        do {
            try client.run(client.request(name, uploadSize: bytes.count), upload: bytes, progress: { progress?.update($0) })
        } catch {
            progress?.done()
            throw failure("\(name): \(error)")
        }
        progress?.update(bytes.count, force: true)
        progress?.done()
    }

    func failure(_ message: String) -> ExitCode {
        writeToStandardError("stampede put: \(message)\n")
        return ExitCode(1)
    }
}
