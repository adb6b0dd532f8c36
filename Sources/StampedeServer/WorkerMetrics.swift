import Atomics
import StampedeIO
import StampedeProtocol
import Synchronization

/// A worker's figures for the metrics (`--metrics`). The worker counts into plain memory of its
/// own on its hot path and publishes it once per loop turn, before it waits, as relaxed atomic
/// stores; a scrape, on another thread, loads and sums the workers'. No lock and no allocation per
/// packet; what a scrape reads is at most one loop turn old.
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
        /// Served transfers whose duration the scrape never saw: its log was full.
        case durationsDropped
        /// Gauge: the monotonic time of the worker's last loop turn (for the watchdog).
        case lastTurn
        case systemCalls, sendOperations, datagramsSent, sendFailures, segmentedSends, segmentationFallbacks
        /// -1: the backend has no such buffers.
        case receiveBufferExhausted
        /// -1: the backend has no completions to lose.
        case completionsLost
        /// Gauge: HTTP connections open.
        case httpConnections
        /// HTTP connections closed at once: the connection limit was reached.
        case httpConnectionsRefused
        /// HTTP bytes written, heads and bodies.
        case httpBytesSent
        /// File bytes HTTP responses delivered (all of a 200's or a 206's body the kernel took).
        case httpFileBytesSent
    }

    /// What a request asked for, over TFTP or HTTP.
    public enum Kind: Int, CaseIterable, Sendable {
        case read, write
        /// Not a request that parsed: a malformed one, an unknown opcode.
        case invalid
        case get, head
        /// An HTTP request refused before its method counted: a malformed head, a method other
        /// than GET and HEAD, a head too large or too slow.
        case httpInvalid

        public var label: String {
            switch self {
            case .read: "rrq"
            case .write: "wrq"
            case .invalid: "invalid"
            case .get: "get"
            case .head: "head"
            case .httpInvalid: "invalid"
            }
        }

        public var protocolLabel: String {
            switch self {
            case .read, .write, .invalid: "tftp"
            case .get, .head, .httpInvalid: "http"
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

        /// The class of a refusal (an ERROR sent, or due when busy).
        public init(_ error: TFTPError) {
            if error.isBusy {
                self = .busy
                return
            }
            switch error.code {
            case .fileNotFound: self = .notFound
            case .accessViolation, .fileExists: self = .accessDenied
            case .illegalOperation, .unknownTransferID, .optionNegotiation: self = .protocolError
            default: self = .serverError
            }
        }
    }

    static let countSlots = Count.allCases.count
    static let requestSlots = Kind.allCases.count * Result.allCases.count
    static let slots = countSlots + requestSlots

    /// The worker's own copy, written on the hot path.
    private let local: UnsafeMutablePointer<Int>
    /// What the worker published, for the scrape.
    private let published: UnsafeMutablePointer<UnsafeAtomic<Int>.Storage>
    /// Served transfers' durations, for the histogram: pushed by the worker, drained by the scrape.
    public let durations = DurationLog(capacity: 16384)

    public init() {
        local = .allocate(capacity: Self.slots)
        local.initialize(repeating: 0, count: Self.slots)
        published = .allocate(capacity: Self.slots)
        published.initialize(repeating: .init(0), count: Self.slots)
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
        local[Self.countSlots + kind.rawValue * Result.allCases.count + result.rawValue] &+= 1
    }

    func setBackend(_ statistics: BackendStatistics) {
        set(.systemCalls, statistics.systemCalls)
        set(.sendOperations, statistics.sendOperations)
        set(.datagramsSent, statistics.datagramsSent)
        set(.sendFailures, statistics.sendFailures)
        set(.segmentedSends, statistics.segmentedSends)
        set(.segmentationFallbacks, statistics.segmentationFallbacks)
        set(.receiveBufferExhausted, statistics.receiveBufferExhausted ?? -1)
        set(.completionsLost, statistics.completionsLost ?? -1)
    }

    /// Makes what the worker counted visible to the scrape.
    public func publish() {
        for i in 0..<Self.slots {
            UnsafeAtomic<Int>(at: published + i).store(local[i], ordering: .relaxed)
        }
    }

    // MARK: The scrape's side

    public func value(_ count: Count) -> Int {
        UnsafeAtomic<Int>(at: published + count.rawValue).load(ordering: .relaxed)
    }

    public func requests(_ kind: Kind, _ result: Result) -> Int {
        UnsafeAtomic<Int>(at: published + Self.countSlots + kind.rawValue * Result.allCases.count + result.rawValue)
            .load(ordering: .relaxed)
    }
}

/// Puts a served transfer's duration in its worker's `DurationLog`, under its file's label; keeps
/// the labels of the names it has seen, so that a name is looked up in `FileLabels` once.
public struct DurationRecorder {
    let metrics: WorkerMetrics
    let fileLabels: FileLabels
    private var known: [String: Int32] = [:]

    public init(metrics: WorkerMetrics, fileLabels: FileLabels) {
        self.metrics = metrics
        self.fileLabels = fileLabels
    }

    public mutating func record(_ filename: String, kind: WorkerMetrics.Kind, _ duration: Nanoseconds) {
        let label: Int32
        if let index = known[filename] {
            label = index
        } else {
            label = fileLabels.index(of: FileLabels.label(of: filename))
            // The names behind `other` are not kept: a flood of names grows nothing.
            if label != 0 && known.count < 4 * fileLabels.limit { known[filename] = label }
        }
        if !metrics.durations.push(.init(label: label, kind: kind, nanoseconds: Int64(duration))) {
            metrics.add(.durationsDropped)
        }
    }
}

/// A single-producer, single-consumer ring of served transfers' durations: the worker pushes one
/// per served transfer, the scrape drains them into the histogram. A full ring drops (and the
/// worker counts what it dropped): the scrape drains it every second.
public final class DurationLog: @unchecked Sendable {
    public struct Entry: Sendable {
        /// An index into the server's `FileLabels`.
        public var label: Int32
        public var kind: WorkerMetrics.Kind
        public var nanoseconds: Int64
    }

    private let entries: UnsafeMutablePointer<Entry>
    private let capacity: Int
    private let head = ManagedAtomic<Int>(0)
    private let tail = ManagedAtomic<Int>(0)

    init(capacity: Int) {
        self.capacity = capacity
        entries = .allocate(capacity: capacity)
    }

    deinit { entries.deallocate() }

    /// The worker's side: false if the ring is full.
    func push(_ entry: Entry) -> Bool {
        let h = head.load(ordering: .relaxed)
        guard h - tail.load(ordering: .acquiring) < capacity else { return false }
        (entries + h % capacity).initialize(to: entry)
        head.store(h + 1, ordering: .releasing)
        return true
    }

    /// The scrape's side (one thread at a time): every entry pushed so far.
    public func drain(_ body: (Entry) -> Void) {
        let t = tail.load(ordering: .relaxed)
        let h = head.load(ordering: .acquiring)
        for i in t..<h { body(entries[i % capacity]) }
        tail.store(h, ordering: .releasing)
    }
}

/// The file label of the transfer-duration histogram, shared by a server's workers. Its cardinality
/// is bounded whatever clients ask: a name is labelled by the file actually served (after `-m`
/// remapping), with every path component's machine-specific part (a MAC address, a UUID, an IPv4
/// address dotted or in hex, anything in pxelinux.cfg/ but `default`) folded to `*`; the first
/// `limit` labels are kept, later ones count as `other`. A worker looks a name up here once per
/// served transfer, and only when it has not seen the name before.
public final class FileLabels: Sendable {
    public static let other = "other"
    public let limit: Int
    private let state = Mutex<(names: [String], indices: [String: Int32])>(([FileLabels.other], [FileLabels.other: 0]))

    public init(limit: Int = 32) {
        self.limit = limit
    }

    /// The label's index (0: `other`).
    public func index(of label: String) -> Int32 {
        state.withLock { state in
            if let index = state.indices[label] { return index }
            guard state.names.count <= limit else { return 0 }
            let index = Int32(state.names.count)
            state.names.append(label)
            state.indices[label] = index
            return index
        }
    }

    public var names: [String] { state.withLock { $0.names } }

    /// The label of a served file name (see the type).
    public static func label(of name: String) -> String {
        var components = name.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        for i in components.indices {
            if i > 0, components[i - 1].lowercased() == "pxelinux.cfg", components[i] != "default" {
                components[i] = "*"
            } else {
                components[i] = folded(components[i])
            }
        }
        let label = components.joined(separator: "/")
        // Printable ASCII only, and not too long: a label is no place for a client's bytes.
        let printable = label.unicodeScalars.map { (0x20..<0x7F).contains($0.value) && $0 != "\"" && $0 != "\\" ? Character($0) : "?" }
        return String(printable.prefix(128))
    }

    /// One path component with its machine-specific runs replaced by `*`.
    static func folded(_ component: String) -> String {
        let bytes = Array(component.utf8)
        var out: [UInt8] = []
        var i = 0
        while i < bytes.count {
            if let length = machineRun(bytes, at: i) {
                if out.last != UInt8(ascii: "*") { out.append(UInt8(ascii: "*")) }
                i += length
            } else {
                out.append(bytes[i])
                i += 1
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The length of a MAC address (`52-54-00-12-34-56`, with `:` or `-`, or 12 hex digits, and
    /// pxelinux's `01-` prefix), a UUID, a dotted IPv4 address or 8 hex digits starting at `i`,
    /// not inside a longer word.
    static func machineRun(_ b: [UInt8], at i: Int) -> Int? {
        func isHex(_ c: UInt8) -> Bool { (48...57).contains(c) || (65...70).contains(c) || (97...102).contains(c) }
        func isDigit(_ c: UInt8) -> Bool { (48...57).contains(c) }
        func isWord(_ c: UInt8) -> Bool { isHex(c) || (71...90).contains(c) || (103...122).contains(c) }
        if i > 0 && isWord(b[i - 1]) { return nil }
        func matches(_ pattern: String) -> Int? {
            let p = Array(pattern.utf8)
            guard i + p.count <= b.count else { return nil }
            for (k, c) in p.enumerated() {
                let x = b[i + k]
                switch c {
                case UInt8(ascii: "h"): if !isHex(x) { return nil }
                case UInt8(ascii: "s"): if x != UInt8(ascii: "-") && x != UInt8(ascii: ":") { return nil }
                default: if x != c { return nil }
                }
            }
            let end = i + p.count
            return end < b.count && isWord(b[end]) ? nil : p.count
        }
        for pattern in ["01shhshhshhshhshhshh", "hhshhshhshhshhshh", "hhhhhhhh-hhhh-hhhh-hhhh-hhhhhhhhhhhh",
                        "hhhhhhhhhhhh", "hhhhhhhh"] {
            if let length = matches(pattern) { return length }
        }
        // A dotted IPv4 address: four runs of 1-3 digits.
        var j = i
        for part in 0..<4 {
            let start = j
            while j < b.count && j - start < 3 && isDigit(b[j]) { j += 1 }
            guard j > start else { return nil }
            if part < 3 {
                guard j < b.count && b[j] == UInt8(ascii: ".") else { return nil }
                j += 1
            }
        }
        return j < b.count && isDigit(b[j]) ? nil : j - i
    }
}
