import Glibc

/// A file written under a temporary name beside its target, and renamed over it only when
/// complete, after an fsync: a reader never sees a half-written file, and a failed or
/// interrupted write leaves the target as it was. Uploads (the server) and `stampede get` write
/// through it.
public final class ReplacingFile {
    private let directory: Descriptor
    private let name: [UInt8]
    public let temporaryName: [UInt8]
    private var file: Descriptor?
    public private(set) var bytesWritten = 0

    /// Creates the temporary file in `directory`: `temporaryPrefix` and a random suffix, a new
    /// file of its own (O_EXCL, O_NOFOLLOW: never one that is there already, nor through a
    /// planted symlink). Its mode is `mode` exactly (not the umask's), its owner `owner` when
    /// running as root.
    public init(in directory: consuming Descriptor, replacing name: [UInt8], temporaryPrefix: [UInt8],
                mode: mode_t, owner: (uid_t, gid_t)? = nil) throws(Errno) {
        var created: (name: [UInt8], fd: Int32)?
        for _ in 0..<16 {
            let candidate = temporaryPrefix + Array(String(UInt64.random(in: 0...UInt64.max), radix: 16).utf8)
            let fd = withCPath(candidate) { openat(directory.raw, $0, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode) }
            if fd >= 0 {
                created = (candidate, fd)
                break
            }
            guard errno == EEXIST else { throw Errno.current }
        }
        guard let created else { throw Errno(EEXIST) }
        let file = Descriptor(owning: created.fd)
        fchmod(file.raw, mode)
        if let (uid, gid) = owner, geteuid() == 0 { fchown(file.raw, uid, gid) }
        self.directory = directory
        self.name = name
        self.temporaryName = created.name
        self.file = consume file
    }

    deinit { abort() }

    /// The temporary file's descriptor, while it is being written.
    public var fd: Int32 { file?.raw ?? -1 }

    public func write(_ bytes: UnsafeRawBufferPointer) throws(Errno) {
        guard let fd = file?.raw else { throw Errno(EBADF) }
        try writeFully(fd, bytes)
        bytesWritten += bytes.count
    }

    /// Makes the written bytes the file: trims what was reserved beyond them, fsyncs, renames
    /// over the target, fsyncs the directory.
    public func commit() throws(Errno) {
        guard let fd = file?.raw else { throw Errno(EBADF) }
        guard ftruncate(fd, off_t(bytesWritten)) == 0, fsync(fd) == 0 else { throw Errno.current }
        file = nil
        let renamed = withCPath(temporaryName) { from in withCPath(name) { to in renameat(directory.raw, from, directory.raw, to) } }
        guard renamed == 0 else {
            let error = Errno.current
            withCPath(temporaryName) { _ = unlinkat(directory.raw, $0, 0) }
            throw error
        }
        fsync(directory.raw)
    }

    /// Drops the temporary file; the target is untouched. Nothing after a commit.
    public func abort() {
        guard file != nil else { return }
        file = nil
        withCPath(temporaryName) { _ = unlinkat(directory.raw, $0, 0) }
    }
}
