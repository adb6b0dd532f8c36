import Atomics
import StampedeBase

/// Puts a served transfer's duration in its worker's `DurationLog`, under its file's label; keeps
/// the labels of the names it has seen, so that a name is looked up in `FileLabels` once.
public struct DurationRecorder {
    let metrics: WorkerMetrics
    let fileLabels: FileLabels
    private var known: [[UInt8]: Int32] = [:]

    public init(metrics: WorkerMetrics, fileLabels: FileLabels) {
        self.metrics = metrics
        self.fileLabels = fileLabels
    }

    public mutating func record(_ filename: [UInt8], kind: WorkerMetrics.Kind, _ duration: Nanoseconds) {
        let label: Int32
        if let index = known[filename] {
            label = index
        } else {
            label = fileLabels.index(of: FileLabels.label(of: String(decoding: filename, as: UTF8.self)))
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
