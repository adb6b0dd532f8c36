import Glibc

/// A file descriptor with one owner, which closes it: when the owner goes away (deinit), or when
/// it hands the descriptor on (`release`, to an owner that closes it later, such as a backend's
/// socket table). Noncopyable, so no path can forget it or close it twice.
public struct Descriptor: ~Copyable, Sendable {
    public let raw: Int32

    /// Takes ownership of `raw` (a non-negative descriptor).
    public init(owning raw: Int32) {
        precondition(raw >= 0, "a descriptor owner for \(raw)")
        self.raw = raw
    }

    /// Opens `path` (relative to `directory`), or throws the errno.
    public init(opening path: String, relativeTo directory: Int32 = AT_FDCWD, flags: Int32, mode: mode_t = 0) throws(Errno) {
        let fd = openat(directory, path, flags | O_CLOEXEC, mode)
        guard fd >= 0 else { throw Errno.current }
        raw = fd
    }

    deinit { Glibc.close(raw) }

    /// Hands the descriptor to a new owner, who closes it.
    public consuming func release() -> Int32 {
        let fd = raw
        discard self
        return fd
    }
}

/// Descriptors of the sockets a superserver passed (inetd, systemd), one set for each event loop
/// that serves them: loop 0 takes the passed ones, every other loop its own duplicates, so that
/// each owns and closes what it holds.
public func passedSockets(_ fds: [Int32], forLoop index: Int) throws(Errno) -> [Int32] {
    guard index > 0 else { return fds }
    var own: [Int32] = []
    for fd in fds {
        let copy = fcntl(fd, F_DUPFD_CLOEXEC, 3)
        guard copy >= 0 else {
            let error = Errno.current
            for made in own { Glibc.close(made) }
            throw error
        }
        own.append(copy)
    }
    return own
}
