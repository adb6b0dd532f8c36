import Atomics
import Glibc
import StampedeIO
import Logging
import StampedeFiles
import StampedeServing

/// `--http` (and `--https`, the same over TLS): HTTP/1.1 and 1.0 over the TFTP server's root, one event loop per core on threads
/// of their own, each answering through its own `FileResponder` from the server's file service.
/// Making it binds every listener, so that the caller can drop privileges before `start`. The
/// process ignores SIGPIPE (the stampede binary does at its start): sendfile and OpenSSL's writes
/// to a connection its client closed would raise it.
public final class HTTPServer: Sendable {
    public let loops: [HTTPLoop]
    public let boundAddresses: [SocketAddress]

    /// `logger`: each loop's lines, under its index. `admission`: the TFTP server's, told of every connection, so that an open one keeps `-t`'s
    /// idle exit away. `open`: the connections open, shared with another server of the process
    /// (`--http` and `--https` share `--http-max-connections`).
    /// `clients`: connections per client, shared likewise (nil: none counted).
    public init(http: HTTPConfiguration, files: FileService, fileLabels: FileLabels, logger: Logger,
                admission: Admission? = nil, loopCount: Int, open: ManagedAtomic<Int> = ManagedAtomic(0),
                clients: ClientConnections? = nil) throws(Errno) {
        var loops: [HTTPLoop] = []
        // Another server on one of them fails the start (`claimExclusively`); the loops share them.
        var addresses = try claimExclusively(http.listenAddresses, stream: true)
        var passed: [SocketAddress] = []
        for index in 0..<max(1, loopCount) {
            var logger = logger
            logger[metadataKey: http.tls == nil ? "http" : "https"] = "\(index)"
            let metrics = WorkerMetrics(http.tls == nil ? .http : .https)
            let responder = try FileResponder(files: files, logFormat: http.logFormat, metrics: metrics, fileLabels: fileLabels,
                                          logger: logger)
            let loop = try HTTPLoop(http: http, responder: responder, metrics: metrics, open: open, clients: clients,
                                    admission: admission, logger: logger, shutdownGrace: http.shutdownGrace)
            addresses = try loop.bind(addresses)
            // Each loop its own descriptor of each passed socket, all of them watching it.
            passed = try loop.adopt(passedSockets(http.inheritedListeners, forLoop: index))
            loops.append(loop)
        }
        self.loops = loops
        boundAddresses = addresses + passed
    }

    /// Starts every loop on a thread of its own; they end at SIGTERM/SIGINT (and the grace).
    public func start() -> [SystemThread] {
        loops.enumerated().map { index, loop in SystemThread(named: "http-\(index)") { loop.run() } }
    }

    public var metrics: [WorkerMetrics] { loops.map(\.metrics) }
}
