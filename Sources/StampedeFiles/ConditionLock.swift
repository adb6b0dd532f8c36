import Glibc

/// A mutex and a condition variable: a thread that waits for another sleeps until it is told.
/// What the disk thread waits for work on (`DiskWork`), and what a `Gate` is made of.
final class ConditionLock: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)

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

    /// Runs `body` holding the lock.
    func withLock<T>(_ body: () -> T) -> T {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return body()
    }

    /// Holding the lock (inside `withLock`): sleeps until `ready` holds, woken by `wake`.
    func wait(until ready: () -> Bool) {
        while !ready() { pthread_cond_wait(condition, mutex) }
    }

    /// Holding the lock: wakes every thread that waits.
    func wake() { pthread_cond_broadcast(condition) }
}

/// A one-shot event: opened once, by one thread; any number of threads wait for it. What a worker
/// waits for when another worker reads the file version it wants (`FileCache`), and a drain of
/// the disk thread (`DiskWork`).
final class Gate: @unchecked Sendable {
    private let lock = ConditionLock()
    private var isOpen = false

    func open() {
        lock.withLock {
            isOpen = true
            lock.wake()
        }
    }

    func wait() {
        lock.withLock { lock.wait { isOpen } }
    }
}
