import CStampedeSys
import Glibc
import StampedeBase
import StampedeIO

/// An upload in progress: the bytes go to a hidden temporary file in the target's directory
/// (`ReplacingFile`), renamed over the target only when the last block has arrived. A failed or
/// interrupted upload leaves the old file as it was and no partial file under its name.
///
/// One thread uses it at a time: its worker's, and while it commits, the disk thread's
/// (`DiskWork`), to which the worker hands it over and from which it hears the outcome; hence
/// `@unchecked Sendable`. (Its file is made on a disk thread too, and handed to the worker:
/// `LoadOutcome.created`.) Equal only to itself.
public final class Upload: @unchecked Sendable, Equatable {
    public static func == (a: Upload, b: Upload) -> Bool { a === b }

    /// Prefix of temporary upload files (a later start may clean stale ones).
    public static let temporaryPrefix = ".stampede-upload-"

    private let file: ReplacingFile
    private var decoder: NetasciiDecoder?
    /// The size the WRQ announced (tsize), reserved when the first block arrives.
    private var announced: Int?

    init(directory: consuming Descriptor, name: [UInt8], mode: mode_t, owner: (uid_t, gid_t)?) throws(Errno) {
        file = try ReplacingFile(in: directory, replacing: name, temporaryPrefix: Array(Self.temporaryPrefix.utf8),
                                 mode: mode, owner: owner)
        // The lock says "a live upload owns this file"; a later start removes only unlocked ones.
        flock(file.fd, LOCK_EX | LOCK_NB)
    }

    public var bytesWritten: Int { file.bytesWritten }

    /// Its temporary file is still there: neither committed nor dropped.
    public var holdsTemporaryFile: Bool { file.fd >= 0 }

    /// The most bytes the client may send (DATA payloads, as on the wire), and what says so: its
    /// own tsize, or `--max-upload` (in.tftpd 7.x ends an upload that sends more, with ERROR 2).
    public var limit: (bytes: Int, reason: String)?
    /// DATA payload bytes taken so far.
    public private(set) var received = 0

    /// Whether `count` more bytes stay within `limit`; counted when they do.
    public func take(_ count: Int) -> Bool {
        if let limit, received + count > limit.bytes { return false }
        received += count
        return true
    }

    public func useNetascii() { decoder = NetasciiDecoder() }

    /// The size a WRQ announced (tsize). Larger than the free space less a margin, it is refused
    /// (ENOSPC: ERROR 3 before any data moves). Otherwise it is reserved when the first block
    /// arrives, so a WRQ from a spoofed address, which sends no DATA, holds no disk.
    public func announce(_ size: Int) throws(Errno) {
        guard size > 0 else { return }
        let room = try reservableSpace()
        guard size <= room else { throw Errno(ENOSPC) }
        announced = size
    }

    /// Free space the filesystem gives us, less a margin (5 % of its size, at most 64 MiB) that
    /// an announced size never takes.
    private func reservableSpace() throws(Errno) -> Int {
        var info = statvfs()
        guard fstatvfs(file.fd, &info) == 0 else { throw Errno.current }
        let unit = Int(info.f_frsize)
        return Int(info.f_bavail) * unit - min(64 << 20, Int(info.f_blocks) * unit / 20)
    }

    /// Appends one block's payload, decoding netascii through `scratch` (≥ payload + 1 bytes).
    public func write(_ payload: UnsafeRawBufferPointer, scratch: UnsafeMutableRawBufferPointer) throws(Errno) {
        if let size = announced {
            // The client exists: reserve now, so a full disk is found before the rest moves.
            announced = nil
            let room = try reservableSpace()
            let reserve = min(size, room)
            // fallocate(2) itself, not posix_fallocate: where the file system cannot reserve
            // (EOPNOTSUPP: FAT, some FUSE, NFS before 4.2) glibc's fallback writes a byte into
            // every block, on the worker's loop. No reservation there; the writes find a full disk.
            let result = reserve > 0 ? -stampede_fallocate(file.fd, Int64(reserve)) : 0
            if result == ENOSPC || result == EDQUOT || result == EFBIG { throw Errno(result) }
        }
        if decoder != nil {
            let n = decoder!.decode(payload, into: scratch)
            try file.write(UnsafeRawBufferPointer(rebasing: scratch[..<n]))
        } else {
            try file.write(payload)
        }
    }

    /// The last bytes written: the netascii decoder's held byte, if any. On the worker's loop.
    public func finishWriting(scratch: UnsafeMutableRawBufferPointer) throws(Errno) {
        if decoder != nil {
            let n = decoder!.finish(into: scratch)
            try file.write(UnsafeRawBufferPointer(rebasing: scratch[..<n]))
        }
    }

    /// Makes the upload the file: trim, fsync, rename, the directory's fsync. Blocks as long as
    /// the disk likes: the server runs it on its disk thread.
    public func commitFile() throws(Errno) {
        try file.commit()
    }

    /// Both steps at once (a caller with no loop to keep moving).
    public func commit(scratch: UnsafeMutableRawBufferPointer) throws(Errno) {
        try finishWriting(scratch: scratch)
        try commitFile()
    }

    /// Drops the temporary file; the target is untouched.
    public func abort() { file.abort() }
}

extension Upload {
    /// Removes temporary files that interrupted uploads left under `root` (the server was killed,
    /// the machine lost power): hidden files with the upload prefix, last changed before
    /// `changedBefore` (wall-clock ns: the uploads of a server that runs meanwhile are newer, and
    /// one it has just created is not yet locked), that no live upload holds locked, so a second
    /// server on the same root keeps its uploads. Returns how many went.
    public static func removeStale(beneath root: Int32, changedBefore: Int64, maxDepth: Int = 32) -> Int {
        let directory = openat(root, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard directory >= 0 else { return 0 }
        return removeStale(in: directory, changedBefore: changedBefore, depthLeft: maxDepth)
    }

    /// Takes ownership of `directory` (closed when done).
    private static func removeStale(in directory: Int32, changedBefore: Int64, depthLeft: Int) -> Int {
        guard let stream = fdopendir(directory) else {
            close(directory)
            return 0
        }
        defer { closedir(stream) }
        let prefix = Array(temporaryPrefix.utf8)
        var removed = 0
        while let entry = readdir(stream) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { Array($0.prefix(while: { $0 != 0 })) }
            if name == [46] || name == [46, 46] { continue }
            var type = Int32(entry.pointee.d_type)
            if type == Int32(DT_UNKNOWN) {
                var info = stat()
                guard withCPath(name, { fstatat(directory, $0, &info, AT_SYMLINK_NOFOLLOW) }) == 0 else { continue }
                type = (info.st_mode & S_IFMT) == S_IFDIR ? Int32(DT_DIR) : (info.st_mode & S_IFMT) == S_IFREG ? Int32(DT_REG) : 0
            }
            if type == Int32(DT_DIR) && depthLeft > 0 {
                let child = withCPath(name) { openat(directory, $0, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
                if child >= 0 { removed += removeStale(in: child, changedBefore: changedBefore, depthLeft: depthLeft - 1) }
            } else if type == Int32(DT_REG) && name.starts(with: prefix) {
                let file = withCPath(name) { openat(directory, $0, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC) }
                guard file >= 0 else { continue }
                var info = stat()
                if fstat(file, &info) == 0, Int64(info.st_ctim.tv_sec) * 1_000_000_000 + Int64(info.st_ctim.tv_nsec) < changedBefore,
                   flock(file, LOCK_EX | LOCK_NB) == 0, withCPath(name, { unlinkat(directory, $0, 0) }) == 0 {
                    removed += 1
                }
                close(file)
            }
        }
        return removed
    }
}
