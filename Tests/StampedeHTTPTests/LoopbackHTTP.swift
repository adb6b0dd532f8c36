import CStampedeSys
import Glibc
import Logging
import StampedeBase
import StampedeFiles
import StampedeHTTP
import StampedeIO
import StampedeServing
import StampedeTestSupport
import Testing

/// A real HTTP server of one loop on loopback, serving `root`, and a client connected to it
/// (non-blocking): the test turns the loop in its own thread beside the client.
final class LoopbackHTTP {
    let server: HTTPServer
    let client: Int32
    var loop: HTTPLoop { server.loops[0] }

    /// `cache`: the files' cache (a file over its `fileLimit` is streamed).
    init(serving root: ScratchDirectory, cache: FileCache = FileCache(),
         logger: Logger = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })) throws {
        _ = brokenPipesIgnored
        let listen = SocketAddress(parsing: "127.0.0.1:0", defaultPort: 0)!
        let files = FileService(policy: AccessPolicy(root: root.fd), remapRules: nil, cache: cache, disk: DiskWork())
        server = try HTTPServer(http: HTTPConfiguration(listenAddresses: [listen]), files: files, fileLabels: FileLabels(),
                                logger: logger, loopCount: 1)
        client = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = server.boundAddresses[0].storage
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(client, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else {
            Glibc.close(client)
            throw Errno.current
        }
        _ = fcntl(client, F_SETFL, O_NONBLOCK)
    }

    deinit { Glibc.close(client) }

    /// Sends `request`, then turns the loop (each turn waiting up to `maxWait`) and reads until
    /// `until` holds of what came, the client sees the connection end, or 5 s pass; what came.
    func exchange(_ request: String, maxWait: Nanoseconds = 1_000_000, until: ([UInt8]) -> Bool) -> (bytes: [UInt8], ended: Bool) {
        _ = Array(request.utf8).withUnsafeBytes { send(client, $0.baseAddress, $0.count, 0) }
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        let deadline = stampede_monotonic_ns() + 5 * nanosecondsPerSecond
        while !until(received) && stampede_monotonic_ns() < deadline {
            loop.turn(now: stampede_monotonic_ns(), maxWait: maxWait)
            let n = buffer.withUnsafeMutableBytes { recv(client, $0.baseAddress, $0.count, 0) }
            if n == 0 { return (received, true) }
            if n > 0 { received += buffer[..<n] }
        }
        return (received, false)
    }

    /// Where `needle` first begins in `bytes`.
    static func offset(of needle: String, in bytes: [UInt8]) -> Int? {
        let needle = Array(needle.utf8)
        guard bytes.count >= needle.count else { return nil }
        return (0...(bytes.count - needle.count)).first { bytes[$0..<($0 + needle.count)].elementsEqual(needle) }
    }
}
