import Glibc
import Logging
import StampedeBase
import StampedeHTTP
import StampedeIO

/// `--metrics`: the exposition over HTTP (`GET /metrics`), answered by the same HTTP engine as
/// `--http`, on an event loop and a thread of its own, never a worker's. Its memory is the TFTP
/// server's, so a scraper cannot make it grow nor hold it: a connection must send a request
/// within `requestDeadline` of opening, of its last answer or of the request's first byte
/// (a slowloris is cut off at the deadline); a connection lives at most `connectionLifetime`
/// (its answer after that says Connection: close); one that asks faster than it reads is not read
/// until its answers are taken (the engine writes an answer before it reads the next request); a
/// request that does not parse is answered 400 and closed; beyond `maxConnections` at once a new
/// connection is closed as soon as it is accepted, so connections cost at most that many
/// descriptors.
public final class MetricsListener: Sendable {
    public static let defaultPort = 9469
    public static let maxConnections = 16
    public static let requestDeadline: Nanoseconds = 10 * nanosecondsPerSecond
    public static let connectionLifetime: Nanoseconds = 60 * nanosecondsPerSecond

    /// The address it listens on (with the port the kernel chose for port 0).
    public let address: String
    private let server: EndpointServer

    /// `lifetime`: how long a connection may live (`connectionLifetime`; shorter in tests).
    /// `machines`: `/machines`, the JSON view of each machine's boot (with `--machines`).
    public init(host: String, port: Int, exporter: MetricsExporter, machines: (@Sendable () -> [UInt8])? = nil,
                lifetime: Nanoseconds = connectionLifetime, logger: Logger = Logger(label: "stampede.metrics")) throws(Errno) {
        guard let address = SocketAddress(numericHost: host, port: UInt16(port)) else { throw Errno(EINVAL) }
        let metrics = Endpoint(path: "/metrics", contentType: "text/plain; version=0.0.4; charset=utf-8", body: { exporter.scrape() })
        server = try EndpointServer(
            address: address, endpoints: [metrics] + (machines.map { [Endpoint(path: "/machines", contentType: "application/json", body: $0)] } ?? []),
            limits: .init(maxConnections: Self.maxConnections, requestDeadline: Self.requestDeadline, lifetime: lifetime),
            logger: logger,
            // Served transfers' durations wait in small logs per worker: empty them every second.
            everySecond: { exporter.drainDurations() })
        self.address = server.boundAddress.description
    }

    /// Stops listening and closes its connections, for a process about to exit.
    public func stopListening() {
        server.stop()
    }

    /// The same (kept for the callers that shut a listener down in tests).
    public func shutdown() {
        server.stop()
    }
}
