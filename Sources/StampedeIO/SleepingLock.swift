import Glibc

/// A lock whose waiter sleeps at once (glibc's default mutex: no spinning, no priority
/// inheritance), for state that the event loops, the proxy and a pool of helper threads all
/// share on a host with fewer cores than threads. The standard library's `Mutex` spins a
/// thousand times before it sleeps, which burns the core the holder needs to finish when the
/// holder was preempted: the machines' tables (bindings, progress, the inventory's answers) are
/// such state. Used as `Mutex` is: `withLock`.
public final class SleepingLock<State>: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private var state: State

    public init(_ state: State) {
        self.state = state
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    /// Runs `body` on the state, holding the lock.
    public func withLock<T, E: Error>(_ body: (inout State) throws(E) -> T) throws(E) -> T {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&state)
    }
}
