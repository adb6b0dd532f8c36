import StampedeBase
import StampedeHTTPWire
import StampedeIO
import StampedeServing
import StampedeTLS

/// An HTTP server's addresses, limits and lines (`--http`; the metrics endpoint has its own). What a
/// file server serves (the root, the access policy, the remap rules) is its `FileService`'s,
/// shared with TFTP: one root, one policy for both protocols.
public struct HTTPConfiguration: Sendable {
    public var listenAddresses: [SocketAddress]
    /// Listening TCP sockets systemd passed (a socket unit's ListenStream), served beside
    /// `listenAddresses`: the way to port 80 for a server that runs as an unprivileged user.
    public var inheritedListeners: [Int32] = []
    /// Connections open at once, all event loops together; at it the loops stop accepting, and a
    /// new connection waits in the listen queue until one closes (one over it per loop at most:
    /// loops that accept at the same moment), unless `closesAtLimit`.
    public var maxConnections = 16384
    /// At `maxConnections`, a new connection is closed as soon as it is accepted instead of
    /// waiting: the metrics listener's, whose 16 connections a flood of idle ones must not hold
    /// up a scraper behind (it is asked again at the next scrape), where a machine booting waits.
    public var closesAtLimit = false
    /// A connection with no request in progress is closed after this long.
    public var idleTimeout: Nanoseconds = 60 * nanosecondsPerSecond
    /// From a request's first byte to the end of its head: past it, 408 and the connection
    /// closed (a slowloris client holds a connection no longer than this).
    public var requestTimeout: Nanoseconds = 10 * nanosecondsPerSecond
    /// A response the client stops reading is abandoned after this long without progress.
    public var sendTimeout: Nanoseconds = 60 * nanosecondsPerSecond
    public var limits = RequestHead.Limits()
    /// The listen queue of each listener.
    public var backlog: Int32 = 4096

    /// Bytes one connection may write in a row before the others get a turn.
    public var writeBudget = 4 << 20
    /// A connection older than this says Connection: close with its next answer (nil: any age).
    public var connectionLifetime: Nanoseconds?

    /// `--log-format`: how each answer's line is written (TFTP's lines are written alike).
    public var logFormat = LogFormat.text
    /// SIGTERM/SIGINT: how long answers under way may take to finish.
    public var shutdownGrace: Nanoseconds = 10 * nanosecondsPerSecond

    /// `--https`: every connection speaks TLS with this identity (certificate, key, profile);
    /// nil: plain HTTP.
    public var tls: TLSIdentity?

    public init(listenAddresses: [SocketAddress]) {
        self.listenAddresses = listenAddresses
    }

    /// What each connection's state is held to.
    var connectionLimits: ConnectionState.Limits {
        ConnectionState.Limits(requestTimeout: requestTimeout, idleTimeout: idleTimeout, sendTimeout: sendTimeout,
                               writeBudget: writeBudget, lifetime: connectionLifetime)
    }
}
