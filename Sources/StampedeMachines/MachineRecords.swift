import CStampedeSys
import Glibc
import StampedeDHCP
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
    /// `--machines-api`: asked first, of every machine; what it does not list is the directory's.
    public let inventory: MachineInventory?
    /// The book in force, in a box of its own: a reader takes the box (one reference) under the
    /// lock and reads the book after it, so that the proxy and every file request of every
    /// machine hold the lock for no more than that; a change puts a new box in.
    private let book: SleepingLock<Shelved>
    private final class Shelved: Sendable {
        let book: MachineBook
        init(_ book: MachineBook) { self.book = book }
    }
    /// What the watch's thread is to write into the directory.
    enum Write: Sendable {
        /// A discovered machine's record.
        case enlist(DiscoveredMachine)
        /// That a machine's `once` boot is done (`.done-<mac>`), and when.
        case done([UInt8], at: Int)
    }

    private let enlisting = Mutex<(waiting: [Write], taken: Set<[UInt8]>)>(([], []))
    /// An eventfd the watch's thread waits on: something is waiting to be written.
    let wake: Int32

    /// Reads the directory (at start: a fault is the caller's to refuse).
    public init(_ directory: MachineDirectory, unknown: MachineBook.UnknownMachines, inventory: MachineInventory? = nil) throws(RecordFaults) {
        self.directory = directory
        self.unknown = unknown
        self.inventory = inventory
        book = SleepingLock(Shelved(try directory.read(unknown: unknown)))
        wake = stampede_eventfd()
        precondition(wake >= 0, "eventfd: \(Errno(-wake))")
    }

    deinit { close(wake) }

    public var current: MachineBook { book.withLock { $0 }.book }

    /// The record `machine` is and the book it is chosen by: the inventory's answer when it lists
    /// the machine (`--machines-api`), else the directory's record (or none). nil: the inventory
    /// is being asked (a watch of it says when it answered). `stage` nil: what is known now, asking
    /// nothing. A machine known by no MAC (a DHCPv6 DUID-UUID) is not asked of the inventory, which
    /// names machines by MAC. `renews`: a firmware starting a boot (`MachineInventory.said`).
    public func record(for machine: MachineIdentity, asking stage: MachineInventory.Stage?, relay: IPv4? = nil, renews: Bool = true)
        -> (record: MachineRecord?, book: MachineBook)? {
        let book = current
        guard let inventory, !machine.hardwareAddress.isEmpty else { return (book.record(for: machine), book) }
        switch inventory.said(of: machine, stage: stage, relay: relay, renews: renews) {
        case .record(let record)?: return (record, book)
        case .notListed?, .unreachable?: return (book.record(for: machine), book)
        case nil: return stage == nil ? (book.record(for: machine), book) : nil
        }
    }

    /// Reads the directory again: the new set is in force and returned, or the faults are thrown
    /// and the set before stays.
    @discardableResult
    public func reload() throws(RecordFaults) -> MachineBook {
        let fresh = try directory.read(unknown: unknown)
        book.withLock { $0 = Shelved(fresh) }
        return fresh
    }

    /// Asks for `machine`'s record to be written: true the first time it is asked (and while
    /// fewer than `enlistLimit` were), false after. Nothing is written here: the watch's thread
    /// does it.
    public func enlist(_ machine: DiscoveredMachine) -> Bool {
        let queued = enlisting.withLock { state in
            guard state.taken.count < Self.enlistLimit, state.taken.insert(machine.identity.hardwareAddress).inserted else { return false }
            state.waiting.append(.enlist(machine))
            return true
        }
        if queued { wakeTheWatch() }
        return queued
    }

    /// What a machine's report that its boot is done comes to.
    public enum DoneReport: Equatable, Sendable {
        /// Done from now on (written on the watch's thread): its next boot is from its disk.
        case accepted(record: String)
        /// Not its token.
        case wrongToken
        /// No record that boots it once selects it.
        case notOnce
    }

    /// `machine` says its boot is done, with `token` (its done URL's): from now on it is left
    /// alone, and the directory says so for the next start.
    public func done(_ machine: MachineIdentity, token: String, now: Int) -> DoneReport {
        let mac = machine.hardwareAddress
        guard directory.tokens.accepts(token, for: mac) else { return .wrongToken }
        if let inventory, case .record(let record)? = inventory.said(of: machine, stage: nil) {
            // The API's machine: told to the API, which decides its next boot; nothing kept here.
            inventory.done(mac)
            return .accepted(record: record.name)
        }
        let marked: String? = book.withLock { shelved in
            guard let record = shelved.book.record(for: machine), record.once else { return nil }
            var book = shelved.book
            book.done.insert(mac)
            shelved = Shelved(book)
            return record.name
        }
        guard let marked else {
            // A done URL of this server's, for a machine the directory does not boot once: the
            // API's (its answer may have expired during the install).
            guard let inventory else { return .notOnce }
            inventory.done(mac)
            return .accepted(record: InventoryAnswer.recordName)
        }
        enlisting.withLock { $0.waiting.append(.done(mac, at: now)) }
        wakeTheWatch()
        return .accepted(record: marked)
    }

    private func wakeTheWatch() {
        var one: UInt64 = 1
        _ = write(wake, &one, 8)  // EAGAIN only when the counter is full: readable anyway
    }

    /// What waits to be written, taken.
    func takeWrites() -> [Write] {
        var count: UInt64 = 0
        _ = read(wake, &count, 8)
        return enlisting.withLock { state in
            defer { state.waiting = [] }
            return state.waiting
        }
    }
}
