import StampedeIO
import Synchronization

/// Disk work that may block for as long as the disk likes, one job after another on a thread of
/// its own, never on an event loop: a slow or busy disk held every transfer of that loop still (a
/// watchdog of 30 s could restart the server in the middle of a rack boot). A server has two:
/// one for writes (an upload's commit: its fsync, the rename, the directory's fsync; the start's
/// sweep of stale temporary files), which a worker hands over and hears of at a later turn
/// (`Worker+Disk.swift`), and one for the file service's reads into the cache (`FileService`), so
/// that a read never waits behind a commit's fsync. The thread starts with the first job.
public final class DiskWork: Sendable {
    private let queue = JobQueue()
    private let thread = Mutex<SystemThread?>(nil)

    public init() {}

    deinit {
        queue.stop()
        thread.withLock { $0?.join() }
    }

    /// Runs `job` on the disk thread, after the jobs handed over before it.
    public func submit(_ job: @escaping @Sendable () -> Void) {
        thread.withLock { thread in
            if thread == nil {
                let queue = self.queue
                thread = SystemThread { queue.run() }
            }
        }
        queue.push(job)
    }

    /// Waits until every job handed over so far has run.
    public func drain() {
        let done = Gate()
        submit { done.open() }
        done.wait()
    }
}

/// The jobs, and the thread's wait for them (it sleeps until there is work).
private final class JobQueue: @unchecked Sendable {
    private let lock = ConditionLock()
    private var jobs: [@Sendable () -> Void] = []
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

    /// The disk thread: runs the jobs in order until stopped with none left.
    func run() {
        while let job = next() { job() }
    }

    private func next() -> (@Sendable () -> Void)? {
        lock.withLock {
            lock.wait { !jobs.isEmpty || stopping }
            return jobs.isEmpty ? nil : jobs.removeFirst()
        }
    }
}
