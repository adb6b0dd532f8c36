import Glibc
import StampedeIO
import Synchronization

/// Disk work that may block for as long as the disk likes: an upload's commit (its fsync, the
/// rename, the directory's fsync) and the start's sweep of stale temporary files. It runs here,
/// one job after another on a thread of its own, never on a worker's loop: a slow or busy disk
/// held every transfer of that worker still (a watchdog of 30 s could restart the server in the
/// middle of a rack boot). A worker hands a job over and hears its outcome at a later turn
/// (`Worker+Disk.swift`). Shared by a server's workers; the thread starts with the first job.
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

/// The jobs, and the thread's wait for them (a mutex and a condition variable: the thread sleeps
/// until there is work).
private final class JobQueue: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    private var jobs: [@Sendable () -> Void] = []
    private var stopping = false

    init() {
        pthread_mutex_init(mutex, nil)
        pthread_cond_init(condition, nil)
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    func push(_ job: @escaping @Sendable () -> Void) {
        pthread_mutex_lock(mutex)
        jobs.append(job)
        pthread_cond_signal(condition)
        pthread_mutex_unlock(mutex)
    }

    func stop() {
        pthread_mutex_lock(mutex)
        stopping = true
        pthread_cond_signal(condition)
        pthread_mutex_unlock(mutex)
    }

    /// The disk thread: runs the jobs in order until stopped with none left.
    func run() {
        while true {
            pthread_mutex_lock(mutex)
            while jobs.isEmpty && !stopping { pthread_cond_wait(condition, mutex) }
            if jobs.isEmpty {
                pthread_mutex_unlock(mutex)
                return
            }
            let job = jobs.removeFirst()
            pthread_mutex_unlock(mutex)
            job()
        }
    }
}
