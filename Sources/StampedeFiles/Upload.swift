import CStampedeSys
import Glibc
import StampedeBase
import StampedeIO

/// An upload in progress: the bytes go to a hidden temporary file in the target's directory
/// (`ReplacingFile`), renamed over the target only when the last block has arrived. A failed or
/// interrupted upload leaves the old file as it was and no partial file under its name.
///
/// Its file is touched on a disk thread alone (`DiskWork`), never on the worker's loop: the worker
/// gathers the blocks it takes (`append`) and, a window or 64 KiB at a time, hands them to the
/// disk thread to write (`beginWrite`, then `writeStaged` there) while it gathers the next ones
/// in a second buffer; the commit writes the rest. The worker and the disk thread each touch only
/// their own buffer, and the worker swaps them only when it has heard that the write is done;
/// hence `@unchecked Sendable`. (Its file is made on a disk thread too, and handed to the worker:
/// `LoadOutcome.created`.) Equal only to itself.
public final class Upload: @unchecked Sendable, Equatable {
    public static func == (a: Upload, b: Upload) -> Bool { a === b }

    /// Prefix of temporary upload files (a later start may clean stale ones).
    public static let temporaryPrefix = ".stampede-upload-"

    private let file: ReplacingFile
    private var decoder: NetasciiDecoder?
    /// The size the WRQ announced (tsize), reserved by the first write.
    private var announced: Int?
    /// What the file system could give when the file was made (on the disk thread): what an
    /// announced size is measured against, with no call on the worker's loop.
    private let roomAtCreation: Result<Int, Errno>

    /// The blocks taken and not yet handed to the disk thread (the worker's), and those handed
    /// over (the disk thread's while `writeInFlight`).
    private var gathered: [UInt8] = []
    private var handedOver: [UInt8] = []
    /// Bytes gathered before they are written: a window, at least 64 KiB (`stage`); at most a
    /// window more gathers while a write runs.
    private var writeMark = 64 << 10
    private var window = 0
    /// Handed over and not yet heard of (the worker's flag).
    private var writeInFlight = false
    /// An announced size waits to be reserved: the first block is handed over at once, so that
    /// a full disk is found before the rest moves (the worker's flag).
    private var reservationDue = false
    /// A write's failure, kept on the disk thread for the commit that follows it.
    private var writeFailure: Errno?

    init(directory: consuming Descriptor, name: [UInt8], mode: mode_t, owner: (uid_t, gid_t)?) throws(Errno) {
        file = try ReplacingFile(in: directory, replacing: name, temporaryPrefix: Array(Self.temporaryPrefix.utf8),
                                 mode: mode, owner: owner)
        // The lock says "a live upload owns this file"; a later start removes only unlocked ones.
        flock(file.fd, LOCK_EX | LOCK_NB)
        roomAtCreation = Self.reservableSpace(file.fd)
    }

    /// The file's bytes taken so far (netascii decoded): written, or waiting to be.
    public private(set) var bytesTaken = 0

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

    /// The size a WRQ announced (tsize). Larger than the free space less a margin (measured
    /// when the file was made), it is refused (ENOSPC: ERROR 3 before any data moves). Otherwise
    /// it is reserved by the first write, so a WRQ from a spoofed address, which sends no DATA,
    /// holds no disk.
    public func announce(_ size: Int) throws(Errno) {
        guard size > 0 else { return }
        guard size <= (try roomAtCreation.get()) else { throw Errno(ENOSPC) }
        announced = size
        reservationDue = true
    }

    /// Free space the filesystem gives us, less a margin (5 % of its size, at most 64 MiB) that
    /// an announced size never takes.
    private static func reservableSpace(_ fd: Int32) -> Result<Int, Errno> {
        var info = statvfs()
        guard fstatvfs(fd, &info) == 0 else { return .failure(Errno.current) }
        let unit = Int(info.f_frsize)
        return .success(Int(info.f_bavail) * unit - min(64 << 20, Int(info.f_blocks) * unit / 20))
    }

    /// Gathers a window of `windowBytes` before each write (at least 64 KiB): the worker holds its
    /// ACK while one write runs and the next window has gathered, so at most two windows wait.
    public func stage(windowBytes: Int) {
        writeMark = max(64 << 10, windowBytes)
        window = windowBytes
    }

    /// Takes one block's payload, decoding netascii through `scratch` (≥ payload + 1 bytes), or
    /// the decoder's held byte after the last block (`payload` nil). True when a write is due.
    @discardableResult
    public func append(_ payload: UnsafeRawBufferPointer?, scratch: UnsafeMutableRawBufferPointer) -> Bool {
        if gathered.capacity == 0 { gathered.reserveCapacity(writeMark + window) }
        if decoder != nil {
            let n = payload.map { decoder!.decode($0, into: scratch) } ?? decoder!.finish(into: scratch)
            gathered.append(contentsOf: UnsafeRawBufferPointer(rebasing: scratch[..<n]))
            bytesTaken += n
        } else if let payload {
            gathered.append(contentsOf: payload)
            bytesTaken += payload.count
        }
        return writeIsDue
    }

    /// Whether a block of `count` bytes may be gathered: while a write runs and its ACK is held,
    /// a client may send the rest of the window it was given, no more; one that sends on past it
    /// has its blocks dropped (as if lost: it sends them again), so that the blocks waiting in
    /// memory stay within two windows and the write mark.
    public func hasRoom(for count: Int) -> Bool {
        gathered.count + count <= writeMark + 2 * window + 1
    }

    /// A window or more has gathered, or the first block of an announced size.
    public var writeIsDue: Bool { gathered.count >= writeMark || (reservationDue && !gathered.isEmpty) }

    /// Hands what gathered to the disk thread (which then runs `writeStaged`); false when a write
    /// is still in flight, or nothing gathered. The worker's.
    public func beginWrite() -> Bool {
        guard !writeInFlight, !gathered.isEmpty else { return false }
        swap(&gathered, &handedOver)
        writeInFlight = true
        reservationDue = false
        return true
    }

    /// The worker heard that the write it handed over is done.
    public func wrote() { writeInFlight = false }

    /// On the disk thread: writes what `beginWrite` handed over, the announced size reserved first.
    public func writeStaged() throws(Errno) {
        defer { handedOver.removeAll(keepingCapacity: true) }
        do throws(Errno) {
            try writeOut(handedOver)
        } catch {
            writeFailure = error
            throw error
        }
    }

    private func writeOut(_ bytes: [UInt8]) throws(Errno) {
        if let failure = writeFailure { throw failure }
        if let size = announced {
            // The client exists: reserve now, so a full disk is found before the rest moves.
            announced = nil
            let reserve = min(size, (try? Self.reservableSpace(file.fd).get()) ?? 0)
            // fallocate(2) itself, not posix_fallocate: where the file system cannot reserve
            // (EOPNOTSUPP: FAT, some FUSE, NFS before 4.2) glibc's fallback writes a byte into
            // every block. No reservation there; the writes find a full disk.
            let result = reserve > 0 ? -stampede_fallocate(file.fd, Int64(reserve)) : 0
            if result == ENOSPC || result == EDQUOT || result == EFBIG { throw Errno(result) }
        }
        guard !bytes.isEmpty else { return }
        let failure = bytes.withUnsafeBytes { raw -> Errno? in
            do throws(Errno) { try file.write(raw) } catch { return error }
            return nil
        }
        if let failure { throw failure }
    }

    /// Makes the upload the file: what gathered since the last write written (after that write,
    /// on the same disk thread; its failure is this one's), then trim, fsync, rename, the
    /// directory's fsync. Blocks as long as the disk likes: the server runs it on its disk thread,
    /// the last block taken (`append(nil, ...)` for netascii's held byte).
    public func commitFile() throws(Errno) {
        try writeOut(gathered)
        gathered = []
        try file.commit()
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
