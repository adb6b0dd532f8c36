import Glibc
import Logging
import StampedeBase
import StampedeFiles
import StampedeIO
import StampedeProtocol
import StampedeServing

/// Everything a worker needs to know about how to serve; built once by the CLI.
public struct ServerConfiguration: Sendable {
    public var listenAddresses: [SocketAddress]
    public var policy: AccessPolicy
    public var optionLimits = OptionLimits()
    /// `-T`: the retransmit timeout when the client did not negotiate one.
    public var retransmitTimeout: Nanoseconds = nanosecondsPerSecond
    /// Downloads without a negotiated `timeout` retransmit after their measured round trip, never
    /// sooner than this (nil: always `retransmitTimeout`, as tftpd-hpa does).
    public var adaptiveTimeoutFloor: Nanoseconds? = 100_000_000
    public var maxRetries = 5
    /// `-R`: transfer sockets take their ports from this range.
    public var portRange: ClosedRange<UInt16>?
    /// Concurrent transfers in all before new requests get ERROR 0 "server busy".
    public var maxTransfers = 65536
    /// Concurrent transfers per client host (an IPv4 or IPv6 address; nil: no limit). A booting
    /// machine runs one or two at once; a flood from one address runs into this.
    public var maxTransfersPerClient: Int? = 64
    /// Concurrent transfers per IPv6 /64 (nil: no limit): a whole provisioning LAN boots within
    /// it, one host rotating its address through its /64 cannot take the whole server.
    public var maxTransfersPerPrefix: Int? = 16384
    /// The per-client limits leave loopback clients alone: true for the default limits, false
    /// when the operator sets one.
    public var loopbackUncountedPerClient = true
    /// What a request hears when the server is busy (a limit reached; out of sockets,
    /// descriptors or memory).
    public var whenBusy = BusyReply.silence
    /// SIGTERM/SIGINT: how long running transfers may take to finish.
    public var shutdownGrace: Nanoseconds = 10 * nanosecondsPerSecond
    /// Sockets handed over by inetd (fd 0) or systemd (LISTEN_FDS), served instead of binding
    /// `listenAddresses`.
    public var inheritedListeners: [Int32] = []
    /// `-t`: exit after this long with no transfer (in inetd and socket-activated modes the
    /// superserver starts a new server for the next request).
    public var idleExit: Nanoseconds?
    /// SIGHUP, beside reloading `-m`: reopens `--logfile` (rotation); says what went wrong, if anything.
    public var onHangup: (@Sendable () -> String?)?
    /// `--single-port`: transfers answer from the listener's own port and share its socket; the
    /// worker tells them apart by client address and port.
    public var singlePort = false
    /// `-B mtu-SLACK`: bytes the blksize ceiling keeps below the interface's MTU, besides the
    /// headers (when `optionLimits.maxBlockSize`, `-B BYTES`, does not set it).
    public var blockSizeSlack = 0
    /// Transfers of one worker that get a socket of their own; the reads beyond share the
    /// worker's pool of transfer sockets (`Worker+SharedSockets.swift`), so that a process with
    /// fewer descriptors than transfers still serves them all.
    public var ownTransferSocketsPerWorker = Int.max
    /// `ownTransferSocketsPerWorker` by default, when the descriptors allow more. With
    /// thousands of transfers a worker's own sockets cost more than shared ones: each own socket
    /// is a receive of its own (a recvmmsg, or an armed receive on the ring) and a send of its
    /// own for every datagram, where a shared socket's batch carries many transfers' datagrams
    /// in one. The one count measured; the figures are in docs/serving.md.
    public static let ownTransferSocketsPerWorkerByDefault = 1024
    /// `-m`: tftpd-hpa's filename remapping, applied to every request before the access checks.
    public var remapRules: RemapRuleSet?
    /// Files made for the machine that asks (`--machines`: its boot script, its loader's
    /// configuration), before the root; TFTP's and HTTP's.
    public var generatedFiles: (any GeneratedFiles)?
    /// `--log-format`: how a finished transfer's log line is written.
    public var logFormat = LogFormat.text
    /// Requested listener receive buffer (bursts of thousands of RRQs).
    public var listenerReceiveBuffer = 8 << 20
    public var logger: Logger

    public init(listenAddresses: [SocketAddress], policy: AccessPolicy, logger: Logger) {
        self.listenAddresses = listenAddresses
        self.policy = policy
        self.logger = logger
    }
}

/// `--when-busy`: the answer to a request the server has no room for.
public enum BusyReply: String, Sendable, CaseIterable {
    /// None: the client sends its request again after its timeout (PXE, iPXE and U-Boot all do),
    /// and is served once a transfer has ended.
    case silence
    /// ERROR 0 at once: the client learns it now, but a firmware gives up its boot on it.
    case error
}

/// What the worker learned when it ended, for the process exit.
public struct WorkerSummary: Sendable {
    /// Transfers that started (a reply went out), and those of them that failed.
    public var transfers = 0
    public var failed = 0
    /// Requests answered with an ERROR instead of a transfer, and those of them for a file that
    /// is not there (a PXELINUX configuration search asks for a dozen names, most of them absent).
    public var refused = 0
    public var notFound = 0
    /// Requests left unanswered because the server was busy (their clients retry).
    public var unanswered = 0
    /// Requests dropped as repeats of a running transfer's (a client's resend), copies of an ended one's, or stale ones.
    public var repeated = 0
    public var bytes = 0
    /// Transfer timers that fired `TimerWheel.lateness` or more after their deadline: the loop
    /// was busy (a resend that went late, a rack's loss repaired late).
    public var lateTimers = 0
    /// The backends' figures, summed: send failures, segmented sends and their fallbacks.
    public var backend = BackendStatistics()
}
