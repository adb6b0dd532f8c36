import CStampedeSys
import Glibc
import StampedeIO

/// One that waits for the site's inventory's answers (the IPv4 proxy, the DHCPv6 responder), each
/// with a watch of its own (`MachineInventory.watch()`): an eventfd it polls, readable when a
/// machine was answered since it last took them, and which machines. Every watch is told of every
/// answer, so that one taking them never takes another's.
public final class InventoryWatch: Sendable {
    /// An eventfd (non-blocking), readable when a machine was answered since the last `take`.
    public let wake: Int32
    private let answered = SleepingLock<[[UInt8]]>([])

    init() {
        wake = stampede_eventfd()
        precondition(wake >= 0, "eventfd: \(Errno(-wake))")
    }

    deinit { close(wake) }

    /// The machines answered since the last time this was asked (at most
    /// `MachineInventory.waitingLimit`); the eventfd read empty.
    public func take() -> [[UInt8]] {
        var count: UInt64 = 0
        _ = read(wake, &count, 8)
        return answered.withLock { answered in
            defer { answered = [] }
            return answered
        }
    }

    /// Only the first machine since the last `take` wakes the watcher: those after it are taken
    /// with it (`take` reads the eventfd before it takes the machines, so that none told after
    /// the machines were taken goes unwoken).
    func tell(_ mac: [UInt8]) {
        let first = answered.withLock { answered in
            guard answered.count < MachineInventory.waitingLimit else { return false }
            answered.append(mac)
            return answered.count == 1
        }
        guard first else { return }
        var one: UInt64 = 1
        _ = write(wake, &one, 8)
    }
}
