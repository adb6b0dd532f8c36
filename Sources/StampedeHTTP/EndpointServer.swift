import Atomics
import CStampedeSys
import Logging
import StampedeBase
import StampedeHTTPWire
import StampedeIO
import StampedeServing

/// A path answered with bytes made at each request (the metrics' exposition).
public struct Endpoint: Sendable {
    public var path: String
    public var contentType: String
    public var body: @Sendable () -> [UInt8]

    public init(path: String, contentType: String, body: @escaping @Sendable () -> [UInt8]) {
        self.path = path
        self.contentType = contentType
        self.body = body
    }
}

/// Paths answered with bytes made at each request (the metrics' exposition, `/machines`) by the
/// HTTP engine: one event loop of its own, on a thread of its own, never a worker's, with limits of
/// its own, so that a scraper cannot hold or grow the server. `everySecond` runs on that thread
/// between turns (the metrics move the workers' durations then).
public final class EndpointServer: Sendable {
    /// The address it listens on (with the port the kernel chose for port 0).
    public let boundAddress: SocketAddress
    private let stopped = ManagedAtomic<Bool>(false)
    private let thread: SystemThread

    /// The endpoint's limits: `maxConnections` at once (more are closed as they are accepted), a
    /// request within `requestDeadline` of opening, of the last answer, or of its first byte,
    /// the answer after `lifetime` the connection's last.
    public struct Limits: Sendable {
        public var maxConnections: Int
        public var requestDeadline: Nanoseconds
        public var lifetime: Nanoseconds

        public init(maxConnections: Int, requestDeadline: Nanoseconds, lifetime: Nanoseconds) {
            self.maxConnections = maxConnections
            self.requestDeadline = requestDeadline
            self.lifetime = lifetime
        }
    }

    public init(address: SocketAddress, endpoints: [Endpoint], limits: Limits, logger: Logger,
                everySecond: @escaping @Sendable () -> Void) throws(Errno) {
        var http = HTTPConfiguration(listenAddresses: [])
        http.maxConnections = limits.maxConnections
        http.closesAtLimit = true
        http.idleTimeout = limits.requestDeadline
        http.requestTimeout = limits.requestDeadline
        http.sendTimeout = limits.requestDeadline
        http.connectionLifetime = limits.lifetime
        http.backlog = 64
        http.limits.headBytes = 8192
        http.limits.lineBytes = 4096
        let loop = try HTTPLoop(http: http, responder: EndpointResponder(endpoints),
                                metrics: WorkerMetrics(.http), open: ManagedAtomic(0), admission: nil, logger: logger, shutdownGrace: 0)
        // One server per address, as the others (`claimExclusively`).
        boundAddress = try loop.bind(claimExclusively([address], stream: true))[0]
        let stopped = self.stopped
        thread = SystemThread(named: "endpoint") {
            var nextSecond = stampede_monotonic_ns() + nanosecondsPerSecond
            while !stopped.load(ordering: .acquiring) {
                let now = stampede_monotonic_ns()
                loop.turn(now: now, maxWait: 100_000_000)
                if now >= nextSecond {
                    everySecond()
                    nextSecond = now + nanosecondsPerSecond
                }
            }
            // Its connections close with the loop.
            loop.stopListening(now: stampede_monotonic_ns())
        }
    }

    /// Stops listening and closes every connection: for a process about to exit.
    public func stop() {
        guard !stopped.exchange(true, ordering: .acquiringAndReleasing) else { return }
        thread.join()
    }
}
