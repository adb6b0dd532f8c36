import StampedeIO
import Synchronization

/// Disk work that may block for as long as the disk likes, on threads of its own (one job after
/// another on one thread, or `threads` jobs at once), never on an event loop: a slow or busy disk held every transfer of that loop still (a
/// watchdog of 30 s could restart the server in the middle of a rack boot). A server has two:
/// one for writes (an upload's commit: its fsync, the rename, the directory's fsync; the start's
/// sweep of stale temporary files), one job after another, which a worker hands over and hears
/// of at a later turn (`Worker+Disk.swift`); and one for the file service's looks and reads into
/// the cache (`FileService`), several at once, so that a read never waits behind a commit's
/// fsync, nor a file's read behind another's stuck one. The threads start with the first job.
public final class DiskWork: Sendable {
    private let queue = JobQueue()
    private let threads = Mutex<[SystemThread]>([])
    /// Jobs that may run at once.
    public let width: Int

    public init(threads: Int = 1) {
        width = max(1, threads)
    }

    deinit {
        queue.stop()
        threads.withLock { $0.forEach { $0.join() } }
    }

    /// Runs `job` on a disk thread: with one, after the jobs handed over before it.
    public func submit(_ job: @escaping @Sendable () -> Void) {
        threads.withLock { threads in
            if threads.isEmpty {
                let queue = self.queue
                threads = (0..<width).map { index in SystemThread(named: "disk-\(index)") { queue.run() } }
            }
        }
        queue.push(job)
    }

    /// Waits until every job handed over so far has run.
    public func drain() {
        submit {}
        queue.waitUntilIdle()
    }
}

/// The jobs, and the threads' wait for them (they sleep until there is work).
private final class JobQueue: @unchecked Sendable {
    private let lock = ConditionLock()
    private var jobs: [@Sendable () -> Void] = []
    /// Jobs taken and not finished.
    private var running = 0
    private var stopping = false

    func push(_ job: @escaping @Sendable () -> Void) {
        lock.withLock {
            jobs.append(job)
            lock.wake()
        }
    }

    func stop() {
        lock.withLock {
            stopping = true
            lock.wake()
        }
    }

    /// A disk thread: runs the jobs in order until stopped with none left.
    func run() {
        while let job = next() {
            job()
            lock.withLock {
                running -= 1
                lock.wake()
            }
        }
    }

    private func next() -> (@Sendable () -> Void)? {
        lock.withLock {
            lock.wait { !jobs.isEmpty || stopping }
            guard !jobs.isEmpty else { return nil }
            running += 1
            return jobs.removeFirst()
        }
    }

    /// Sleeps until no job waits and none runs.
    func waitUntilIdle() {
        lock.withLock { lock.wait { jobs.isEmpty && running == 0 } }
    }
}
