import Synchronization

/// The records in force: one owner, read by the proxy at each request and replaced whole when
/// the directory changes (`RecordWatch`). A set that fails to read replaces nothing.
public final class MachineRecords: Sendable {
    public let directory: MachineDirectory
    public let unknown: MachineBook.UnknownMachines
    private let book: Mutex<MachineBook>

    /// Reads the directory (at start: a fault is the caller's to refuse).
    public init(_ directory: MachineDirectory, unknown: MachineBook.UnknownMachines) throws(RecordFaults) {
        self.directory = directory
        self.unknown = unknown
        book = Mutex(try directory.read(unknown: unknown))
    }

    public var current: MachineBook { book.withLock { $0 } }

    /// Reads the directory again: the new set is in force and returned, or the faults are thrown
    /// and the set before stays.
    @discardableResult
    public func reload() throws(RecordFaults) -> MachineBook {
        let fresh = try directory.read(unknown: unknown)
        book.withLock { $0 = fresh }
        return fresh
    }
}
