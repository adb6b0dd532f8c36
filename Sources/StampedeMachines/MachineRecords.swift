import CStampedeSys
import Glibc
import StampedeIO
import Synchronization

/// The records in force: one owner, read by the proxy at each request and replaced whole when
/// the directory changes (`RecordWatch`). A set that fails to read replaces nothing. With
/// `--unknown-machines record`, it also holds the machines waiting to be written
/// (`enlist`), once each, for the watch's thread to write.
public final class MachineRecords: Sendable {
    /// Discovered machines written at most (a flood of made-up MACs fills no disk): past it,
    /// unknown machines are left alone unwritten.
    public static let enlistLimit = 65_536

    public let directory: MachineDirectory
    public let unknown: MachineBook.UnknownMachines
    private let book: Mutex<MachineBook>
    private let enlisting = Mutex<(waiting: [DiscoveredMachine], taken: Set<[UInt8]>)>(([], []))
    /// An eventfd the watch's thread waits on: a machine is waiting to be written.
    let wake: Int32

    /// Reads the directory (at start: a fault is the caller's to refuse).
    public init(_ directory: MachineDirectory, unknown: MachineBook.UnknownMachines) throws(RecordFaults) {
        self.directory = directory
        self.unknown = unknown
        book = Mutex(try directory.read(unknown: unknown))
        wake = stampede_eventfd()
        precondition(wake >= 0, "eventfd: \(Errno(-wake))")
    }

    deinit { close(wake) }

    public var current: MachineBook { book.withLock { $0 } }

    /// Reads the directory again: the new set is in force and returned, or the faults are thrown
    /// and the set before stays.
    @discardableResult
    public func reload() throws(RecordFaults) -> MachineBook {
        let fresh = try directory.read(unknown: unknown)
        book.withLock { $0 = fresh }
        return fresh
    }

    /// Asks for `machine`'s record to be written: true the first time it is asked (and while
    /// fewer than `enlistLimit` were), false after. Nothing is written here: the watch's thread
    /// does it.
    public func enlist(_ machine: DiscoveredMachine) -> Bool {
        let queued = enlisting.withLock { state in
            guard state.taken.count < Self.enlistLimit, state.taken.insert(machine.identity.hardwareAddress).inserted else { return false }
            state.waiting.append(machine)
            return true
        }
        if queued {
            var one: UInt64 = 1
            _ = write(wake, &one, 8)  // EAGAIN only when the counter is full: readable anyway
        }
        return queued
    }

    /// The machines waiting to be written, taken.
    func takeEnlisted() -> [DiscoveredMachine] {
        var count: UInt64 = 0
        _ = read(wake, &count, 8)
        return enlisting.withLock { state in
            defer { state.waiting = [] }
            return state.waiting
        }
    }
}
