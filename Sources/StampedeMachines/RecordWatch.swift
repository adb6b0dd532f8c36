import Glibc
import StampedeIO

/// Watches `--machines DIR` (inotify: a file made, written, moved in or out, removed) and reloads
/// the records once the directory has been quiet for `settle` (an editor's save, or Ironic's
/// truncate-then-write, is one reload), on a thread of its own: no transfer and no DHCP answer
/// waits for it. Each reload's outcome goes to `report`.
public final class RecordWatch: Sendable {
    /// How long the directory must be quiet before a reload.
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
    public func start(stopping: @escaping @Sendable () -> Bool,
                      report: @escaping @Sendable (Result<MachineBook, RecordFaults>) -> Void) -> SystemThread {
        SystemThread(named: "machine-records") {
            while !stopping() {
                guard self.wait(milliseconds: 250) else { continue }
                // Quiet for `settle` before reading: the rest of a burst of changes is drained.
                while self.wait(milliseconds: Self.settle), !stopping() {}
                report(Result { () throws(RecordFaults) in try self.records.reload() })
            }
        }
    }

    /// Whether a change came within `milliseconds` (its events drained).
    private func wait(milliseconds: Int32) -> Bool {
        var watched = pollfd(fd: inotify, events: Int16(POLLIN), revents: 0)
        guard poll(&watched, 1, milliseconds) > 0 else { return false }
        var buffer = [UInt8](repeating: 0, count: 4096)
        var changed = false
        while buffer.withUnsafeMutableBytes({ read(inotify, $0.baseAddress, $0.count) }) > 0 { changed = true }
        return changed
    }
}
