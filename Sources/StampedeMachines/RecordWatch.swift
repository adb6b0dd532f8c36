import Glibc
import StampedeIO

/// Watches `--machines DIR` (inotify: a file made, written, moved in or out, removed) and reloads
/// the records once the directory has been quiet for `settle` (an editor's save, or Ironic's
/// truncate-then-write, is one reload), and writes the discovered machines the proxy enlists, on
/// a thread of its own: no transfer and no DHCP answer waits for the disk. What it did goes to
/// `report`.
public final class RecordWatch: Sendable {
    /// What the watch did.
    public enum Event: Sendable {
        /// The directory read again, or refused with its faults (the records before kept).
        case reloaded(Result<MachineBook, RecordFaults>)
        /// A discovered machine's record written (its path), or found there already (nil).
        case enlisted(DiscoveredMachine, path: String?)
        case enlistFailed(DiscoveredMachine, Errno)
        /// That a machine's boot is done, written (its path), or not.
        case markedDone([UInt8], Result<String, Errno>)
    }

    /// How long the directory must be quiet before a reload, in milliseconds.
    public static let settle: Int32 = 100
    private let records: MachineRecords
    private let inotify: Int32

    /// The watch is set up now, before `-s` and `-u` (the directory's path may be outside the
    /// chroot).
    public init(_ records: MachineRecords) throws(Errno) {
        self.records = records
        let fd = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
        guard fd >= 0 else { throw Errno.current }
        let events = UInt32(IN_CLOSE_WRITE | IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF)
        guard inotify_add_watch(fd, records.directory.path, events) >= 0 else {
            let error = Errno.current
            close(fd)
            throw error
        }
        inotify = fd
    }

    deinit { close(inotify) }

    /// Watches until `stopping` says so (asked at least every 250 ms).
    public func start(stopping: @escaping @Sendable () -> Bool, report: @escaping @Sendable (Event) -> Void) -> SystemThread {
        SystemThread(named: "machine-records") {
            while !stopping() {
                let (changed, enlisted) = self.wait(milliseconds: 250)
                if enlisted { self.write(report) }
                guard changed else { continue }
                // Quiet for `settle` before reading: the rest of a burst of changes is drained
                // (and the machines enlisted meanwhile written, which is such a change).
                while !stopping() {
                    let (more, enlisted) = self.wait(milliseconds: Self.settle)
                    if enlisted { self.write(report) }
                    if !more && !enlisted { break }
                }
                report(.reloaded(Result { () throws(RecordFaults) in try self.records.reload() }))
            }
        }
    }

    private func write(_ report: @Sendable (Event) -> Void) {
        for write in records.takeWrites() {
            switch write {
            case .enlist(let machine):
                do {
                    report(.enlisted(machine, path: try records.directory.create(machine.fileName, machine.text)))
                } catch {
                    report(.enlistFailed(machine, error))
                }
            case .done(let mac, let time):
                report(.markedDone(mac, Result { () throws(Errno) in
                    try records.directory.replace(MachineDirectory.doneFile(for: mac), "done \(time)\n")
                }))
            }
        }
    }

    /// Whether the directory changed (its events drained) and whether a machine was enlisted,
    /// within `milliseconds`.
    private func wait(milliseconds: Int32) -> (changed: Bool, enlisted: Bool) {
        var watched = [pollfd(fd: inotify, events: Int16(POLLIN), revents: 0), pollfd(fd: records.wake, events: Int16(POLLIN), revents: 0)]
        guard poll(&watched, 2, milliseconds) > 0 else { return (false, false) }
        var changed = false
        if watched[0].revents != 0 {
            var buffer = [UInt8](repeating: 0, count: 4096)
            while buffer.withUnsafeMutableBytes({ read(inotify, $0.baseAddress, $0.count) }) > 0 { changed = true }
        }
        return (changed, watched[1].revents != 0)
    }
}
