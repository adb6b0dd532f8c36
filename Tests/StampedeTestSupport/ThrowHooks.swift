import Glibc
import Synchronization

/// Runs `body` with the Swift runtime's throw hooks unset. Swift Testing sets them to record a
/// backtrace of every error thrown (allocating); a served process has none, and a 404 is a thrown
/// `FileRefusal` (typed: its throw allocates nothing itself). Tests on other threads throw without
/// a backtrace meanwhile. The cases of a test run in parallel: the first in unsets the hooks and
/// the last out sets them back (each putting back what it found let one case restore them while
/// another still counted, which then counted Swift Testing's backtraces).
public func withoutThrowHooks<T>(_ body: () -> T) -> T {
    throwHooks.withLock { state in
        if state.users == 0 {
            state.saved = ThrowHooks.addresses.map { UInt(bitPattern: $0.pointee) }
            for hook in ThrowHooks.addresses { hook.pointee = nil }
        }
        state.users += 1
    }
    defer {
        throwHooks.withLock { state in
            state.users -= 1
            if state.users == 0 {
                for (hook, value) in zip(ThrowHooks.addresses, state.saved) { hook.pointee = UnsafeRawPointer(bitPattern: value) }
            }
        }
    }
    return body()
}

/// The runtime's hooks and who has them unset.
struct ThrowHooks {
    var users = 0
    /// What they were before the first user unset them.
    var saved: [UInt] = []

    nonisolated(unsafe) static let addresses = ["_swift_willThrow", "_swift_willThrowTypedImpl"].compactMap { (symbol: String) in
        dlsym(UnsafeMutableRawPointer(bitPattern: 0), symbol)?.assumingMemoryBound(to: UnsafeRawPointer?.self)
    }
}

let throwHooks = Mutex(ThrowHooks())
