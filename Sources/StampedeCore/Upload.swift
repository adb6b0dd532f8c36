import Glibc

/// An upload in progress: the bytes go to a hidden temporary file in the target's directory,
/// which is fsynced and renamed over the target only when the last block has arrived. A failed
/// or interrupted upload leaves the old file as it was and no partial file under its name.
public final class Upload {
    /// Prefix of temporary upload files (a later start may clean stale ones).
    public static let temporaryPrefix = ".stampede-upload-"

    private let directory: Int32
    private let name: [UInt8]
    private let temporaryName: [UInt8]
    private var fd: Int32
    public private(set) var bytesWritten = 0
    private var decoder: NetasciiDecoder?

    init(directory: Int32, name: [UInt8], mode: mode_t, owner: (uid_t, gid_t)?) throws(Errno) {
        self.directory = directory
        self.name = name
        var created: (name: [UInt8], fd: Int32)?
        for _ in 0..<8 {
            let candidate = Array((Self.temporaryPrefix + String(UInt64.random(in: 0...UInt64.max), radix: 16)).utf8)
            let fd = withCPath(candidate) { openat(directory, $0, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode) }
            if fd >= 0 { created = (candidate, fd); break }
            if errno != EEXIST { throw Errno.current }
        }
        guard let created else { throw Errno(EEXIST) }
        temporaryName = created.name
        fd = created.fd
        // open() applies the process umask; the replaced file's exact mode and owner carry over.
        fchmod(fd, mode)
        if let (uid, gid) = owner, geteuid() == 0 { fchown(fd, uid, gid) }
    }

    deinit {
        abort()
        close(directory)
    }

    public func useNetascii() { decoder = NetasciiDecoder() }

    /// Reserves the announced size (WRQ tsize), so a full disk is found before any data moves.
    public func reserve(_ size: Int) throws(Errno) {
        guard size > 0 else { return }
        let result = posix_fallocate(fd, 0, off_t(size))
        if result == ENOSPC || result == EDQUOT || result == EFBIG { throw Errno(result) }
    }

    /// Appends one block's payload, decoding netascii through `scratch` (≥ payload + 1 bytes).
    public func write(_ payload: UnsafeRawBufferPointer, scratch: UnsafeMutableRawBufferPointer) throws(Errno) {
        if decoder != nil {
            let n = decoder!.decode(payload, into: scratch)
            try writeAll(UnsafeRawBufferPointer(rebasing: scratch[..<n]))
        } else {
            try writeAll(payload)
        }
    }

    private func writeAll(_ bytes: UnsafeRawBufferPointer) throws(Errno) {
        var done = 0
        while done < bytes.count {
            let n = Glibc.write(fd, bytes.baseAddress! + done, bytes.count - done)
            if n < 0 && errno == EINTR { continue }
            if n < 0 { throw Errno.current }
            done += n
        }
        bytesWritten += bytes.count
    }

    /// Makes the upload the file: trims a reservation, fsyncs, renames, fsyncs the directory.
    public func commit(scratch: UnsafeMutableRawBufferPointer) throws(Errno) {
        if decoder != nil {
            let n = decoder!.finish(into: scratch)
            try writeAll(UnsafeRawBufferPointer(rebasing: scratch[..<n]))
        }
        guard ftruncate(fd, off_t(bytesWritten)) == 0, fsync(fd) == 0 else { throw Errno.current }
        close(fd)
        fd = -1
        let renamed = withCPath(temporaryName) { from in withCPath(name) { to in renameat(directory, from, directory, to) } }
        guard renamed == 0 else {
            let error = Errno.current
            withCPath(temporaryName) { _ = unlinkat(directory, $0, 0) }
            throw error
        }
        fsync(directory)
    }

    /// Drops the temporary file; the target is untouched.
    public func abort() {
        guard fd >= 0 else { return }
        close(fd)
        fd = -1
        withCPath(temporaryName) { _ = unlinkat(directory, $0, 0) }
    }
}
