import Atomics
import StampedeIO
import Synchronization

/// The protocol a loop serves, which labels everything it counts (the proxyDHCP responder's
/// thread counts only its answers and silences, and its heartbeat).
public enum ServedProtocol: String, CaseIterable, Sendable {
    /// `dhcp`: the proxyDHCP responder's (IPv4); `dhcp6`: the DHCPv6 boot responder's.
    case tftp, http, https, dhcp, dhcp6
}

/// An event loop's figures for the metrics (`--metrics`): a TFTP worker's or an HTTP loop's,
/// labelled with its protocol. The loop counts into plain memory of its own on its hot path and
/// publishes it once per loop turn, before it waits, as relaxed atomic stores; a scrape, on
/// another thread, loads and sums the loops'. No lock and no allocation per packet; what a scrape
/// reads is at most one loop turn old. The served transfers' durations go to a `DurationLog`.
public final class WorkerMetrics: @unchecked Sendable {
    /// Single figures, counters unless said.
    public enum Count: Int, CaseIterable, Sendable {
        /// Gauge: transfers running.
        case transfersRunning
        /// Gauge: transfers on a shared socket (out of descriptors, or single-port mode).
        case transfersOnSharedSockets
        case datagramsReceived
        /// TFTP bytes received and handed to the backend (headers included, resends too).
        case bytesReceived
        case bytesSent
        /// File bytes a finished download delivered (acknowledged) and an upload wrote.
        case fileBytesSent
        case fileBytesReceived
        /// DATA, OACK and ACK sent again, after a timeout or on a duplicate ACK.
        case retransmissions
        case duplicateAcks
        /// Transfer timers that fired 10 ms or more after their deadline (the loop was busy).
        case lateTimers
        /// Served transfers whose duration the scrape never saw: its log was full.
        case durationsDropped
        /// Gauge: the monotonic time of the worker's last loop turn (for the watchdog).
        case lastTurn
        case systemCalls, sendOperations, datagramsSent, sendFailures, segmentedSends, segmentationFallbacks
        /// Datagrams the kernel dropped on their way into sockets now closed (a full receive queue).
        case socketQueueDrops
        /// The part of `socketQueueDrops` lost at listeners (requests).
        case listenerQueueDrops
        /// -1: the backend has no such buffers.
        case receiveBufferExhausted
        /// -1: the backend has no completions to lose.
        case completionsLost
        /// Gauge: HTTP connections open.
        case httpConnections
        /// Times an HTTP loop stopped accepting because the server held `--http-max-connections`
        /// (new connections waited in the listen queue).
        case httpAcceptsPaused
        /// HTTP connections closed at once: the client held `--http-max-per-client` connections;
        /// or a quarter of them in TLS handshakes; or its IPv6 /64 held `--http-max-per-prefix`.
        case httpConnectionsRefusedPerClient, httpHandshakesRefusedPerClient, httpConnectionsRefusedPerPrefix
        /// HTTP bytes written, heads and bodies.
        case httpBytesSent
        /// File bytes HTTP responses delivered (all of a 200's or a 206's body the kernel took).
        case httpFileBytesSent
        /// TLS handshakes (`--https`): finished in full, finished by resuming a session, failed
        /// (or the client left before the end), and plain HTTP sent to the TLS port.
        case tlsHandshakes, tlsResumed, tlsHandshakeFailures, tlsPlainHTTP
        /// TLS body bytes by the way they went: encrypted by the kernel from the file (kernel TLS,
        /// SSL_sendfile), or by OpenSSL from memory (SSL_write).
        case tlsKernelBytes, tlsWrittenBytes
    }

    /// What a request asked for: an RRQ or a WRQ over TFTP, a GET or a HEAD over HTTP.
    public enum Kind: Int, CaseIterable, Sendable {
        case read, write, get, head
        /// An HTTP POST a generated file takes (a machine saying its boot is done).
        case post
        /// Not a request that could be served: a malformed one, an unknown opcode, an HTTP method
        /// other than GET and HEAD, a head too large or too slow.
        case invalid

        public var label: String {
            switch self {
            case .read: "rrq"
            case .write: "wrq"
            case .get: "get"
            case .head: "head"
            case .post: "post"
            case .invalid: "invalid"
            }
        }

        /// The kinds of `served`'s requests.
        public static func of(_ served: ServedProtocol) -> [Kind] {
            switch served {
            case .tftp: [.read, .write, .invalid]
            case .http, .https: [.get, .head, .invalid]
            case .dhcp, .dhcp6: []
            }
        }
    }

    /// How a request ended: refused at once, or as a transfer that ran.
    public enum Result: Int, CaseIterable, Sendable {
        case served
        /// HTTP's 304: the client has this version of the file.
        case notModified
        /// The client read the OACK and ended with an ERROR (the UEFI tsize probe).
        case probe
        /// The client closed the transfer early on purpose (GRUB's ERROR 0 "closed").
        case closedByClient
        case notFound
        case accessDenied
        /// Refused, answered or not, because a limit or the host was full (`--when-busy`).
        case busy
        case timedOut
        /// The client sent an ERROR.
        case clientError
        /// The client's port or host became unreachable (ICMP).
        case unreachable
        /// Malformed or illegal packets, unsupported modes and options.
        case protocolError
        /// The server could not do it: disk full, a read error, no socket for another reason.
        case serverError
        case shutdown
        /// A new request from the client's port before it answered: the client started over.
        case superseded
        /// The running transfer's request again (a client's resend), or a stale request from its
        /// port: dropped, the transfer goes on.
        case duplicate

        public var label: String {
            switch self {
            case .served: "served"
            case .notModified: "not_modified"
            case .probe: "probe"
            case .closedByClient: "closed_by_client"
            case .notFound: "not_found"
            case .accessDenied: "access_denied"
            case .busy: "busy"
            case .timedOut: "timed_out"
            case .clientError: "client_error"
            case .unreachable: "unreachable"
            case .protocolError: "protocol_error"
            case .serverError: "server_error"
            case .shutdown: "shutdown"
            case .superseded: "superseded"
            case .duplicate: "duplicate"
            }
        }
    }

    static let countSlots = Count.allCases.count
    /// Results per kind of request (read once: `allCases` makes an array each time it is read).
    static let results = Result.allCases.count
    static let requestSlots = Kind.allCases.count * results
    private static let fixedSlots = countSlots + requestSlots
    /// Slots past the fixed ones, counted by the part that made them (the proxy's answers by
    /// selector and its silences by reason, `WorkerMetrics.dhcp()`).
    public let extraSlots: Int

    /// The worker's own copy, written on the hot path.
    private let local: UnsafeMutablePointer<Int>
    /// What the worker published, for the scrape.
    private let published: UnsafeMutablePointer<UnsafeAtomic<Int>.Storage>
    /// Served transfers' durations, for the histogram: pushed by the worker, drained by the scrape.
    public let durations = DurationLog(capacity: 16384)
    /// What it counts is this protocol's.
    public let served: ServedProtocol

    public init(_ served: ServedProtocol, extraSlots: Int = 0) {
        self.served = served
        self.extraSlots = extraSlots
        let slots = Self.fixedSlots + extraSlots
        local = .allocate(capacity: slots)
        local.initialize(repeating: 0, count: slots)
        published = .allocate(capacity: slots)
        published.initialize(repeating: .init(0), count: slots)
    }

    deinit {
        local.deallocate()
        published.deallocate()
    }

    // MARK: The worker's side

    @inline(__always)
    public func add(_ count: Count, _ amount: Int = 1) { local[count.rawValue] &+= amount }

    @inline(__always)
    public func set(_ count: Count, _ value: Int) { local[count.rawValue] = value }

    public func countRequest(_ kind: Kind, _ result: Result) {
        local[Self.countSlots + kind.rawValue * Self.results + result.rawValue] &+= 1
    }

    /// One more in extra slot `index` (below `extraSlots`).
    public func addExtra(_ index: Int) { local[Self.fixedSlots + index] &+= 1 }

    public     func setBackend(_ statistics: BackendStatistics) {
        set(.systemCalls, statistics.systemCalls)
        set(.sendOperations, statistics.sendOperations)
        set(.datagramsSent, statistics.datagramsSent)
        set(.sendFailures, statistics.sendFailures)
        set(.segmentedSends, statistics.segmentedSends)
        set(.segmentationFallbacks, statistics.segmentationFallbacks)
        set(.socketQueueDrops, statistics.socketQueueDrops)
        set(.listenerQueueDrops, statistics.listenerQueueDrops)
        set(.receiveBufferExhausted, statistics.receiveBufferExhausted ?? -1)
        set(.completionsLost, statistics.completionsLost ?? -1)
    }

    /// Makes what the worker counted visible to the scrape.
    public func publish() {
        for i in 0..<(Self.fixedSlots + extraSlots) {
            UnsafeAtomic<Int>(at: published + i).store(local[i], ordering: .relaxed)
        }
    }

    // MARK: The scrape's side

    public func value(_ count: Count) -> Int {
        UnsafeAtomic<Int>(at: published + count.rawValue).load(ordering: .relaxed)
    }

    public func extra(_ index: Int) -> Int {
        UnsafeAtomic<Int>(at: published + Self.fixedSlots + index).load(ordering: .relaxed)
    }

    public func requests(_ kind: Kind, _ result: Result) -> Int {
        UnsafeAtomic<Int>(at: published + Self.countSlots + kind.rawValue * Self.results + result.rawValue)
            .load(ordering: .relaxed)
    }
}
