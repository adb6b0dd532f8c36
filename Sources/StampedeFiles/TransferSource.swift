import CStampedeSys
import Glibc
import StampedeIO

/// Where a download's bytes come from (a TFTP transfer's, an HTTP response's).
public enum TransferSource {
    /// A cached image: DATA payloads are slices of it.
    case image(FileImage)
    /// A file too large to cache: each block is read when it is sent.
    case stream(StreamedFile)

    /// The bytes the transfer sends.
    public var size: Int {
        switch self {
        case .image(let image): image.count
        case .stream(let file): file.size
        }
    }
}

/// A file served without an image (over --cache-file-limit or the budget), owning its descriptor.
/// Its bytes are read as they are sent, so a rewrite in place would send a mix of two versions:
/// a transfer asks `change()` as it goes and before its last byte, and fails when the file is no
/// longer the version it opened.
///
/// Made on the disk thread that opens it and handed to one loop (`LoadOutcome.opened`), which
/// alone touches it from then on: hence `@unchecked Sendable`. Equal only to itself.
public final class StreamedFile: @unchecked Sendable, Equatable {
    private let file: Descriptor
    /// The size the transfer announced (tsize) and sends: a file that shrinks sends a short block.
    public let size: Int
    /// The version opened: its inode, size, modification and change times.
    let version: FileKey
    /// Its bytes before this were read ahead on a disk thread (`FileService.readAhead`): a send
    /// from them waits for no disk. Touched by the loop that sends it only.
    public private(set) var readyThrough = 0
    /// A read-ahead is under way.
    public internal(set) var readingAhead = false

    /// The open file (HTTP sends from it with sendfile); this object closes it.
    public var descriptor: Int32 { file.raw }

    init(_ file: consuming Descriptor, size: Int, version: FileKey) {
        self.file = file
        self.size = size
        self.version = version
    }

    public static func == (a: StreamedFile, b: StreamedFile) -> Bool { a === b }

    /// A read-ahead is done: the bytes before `through` are in the page cache.
    public func readAhead(done through: Int) {
        readingAhead = false
        readyThrough = max(readyThrough, through)
    }

    /// Reads `range` into `buffer`; returns how many bytes were there (fewer if the file shrank).
    public func read(_ range: Range<Int>, into buffer: UnsafeMutableRawBufferPointer) throws(Errno) -> Int {
        try readFully(file.raw, into: UnsafeMutableRawBufferPointer(rebasing: buffer[..<range.count]), at: range.lowerBound)
    }

    /// Reads `range` into `buffer` from the page cache alone (preadv2 RWF_NOWAIT): how many bytes
    /// were there (fewer if the file shrank), or nil when some are still on the disk, and a read
    /// would wait for it (`FileService.readAhead` brings them; ask again then). Where the file
    /// system cannot read without waiting (EOPNOTSUPP: FUSE), nil too: only a read-ahead on a
    /// disk thread says the bytes are there (`pageCacheIsExact`).
    public func readCached(_ range: Range<Int>, into buffer: UnsafeMutableRawBufferPointer) throws(Errno) -> Int? {
        var done = 0
        while done < range.count {
            let count = stampede_pread_cached(file.raw, buffer.baseAddress! + done, range.count - done, off_t(range.lowerBound + done))
            if count > 0 {
                done += count
                continue
            }
            if count == 0 { break }
            switch Int32(-count) {
            case EINTR: continue
            case EAGAIN: return nil
            case EOPNOTSUPP:
                return nil
            default: throw Errno(Int32(-count))
            }
        }
        return done
    }

    /// Whether what the page cache holds of this file can be read without waiting: its file
    /// system reads from the page cache alone when asked (RWF_NOWAIT; ext4, XFS, Btrfs, tmpfs).
    /// Where it cannot (FUSE, some network file systems), a page the cache holds (cachestat
    /// counts it) may still be being read by another request, for as long as the file system
    /// takes: there only a read-ahead on a disk thread says bytes are there. Asked once.
    public private(set) lazy var pageCacheIsExact: Bool = {
        var byte: UInt8 = 0
        return stampede_pread_cached(file.raw, &byte, 1, 0) != -Int(EOPNOTSUPP)
    }()

    /// How the file differs from the version opened ("4000 bytes, now 5000", "written to": its
    /// size or its times moved), or nil when it is that version still. A rename over the name is not
    /// a change: the open file is the old inode, whole. A write within the clock tick of the open
    /// moves no time (the cache's racy window, `FileCache.racyWindow`) and is not seen unless it
    /// changes the size.
    public func change() -> String? {
        var info = stat()
        guard fstat(file.raw, &info) == 0 else { return "cannot be looked at: \(Errno.current)" }
        let now = FileKey(info, netascii: version.netascii)
        if now.size != version.size { return "\(version.size) bytes, now \(now.size)" }
        if now.modified != version.modified || now.changed != version.changed { return "written to" }
        return nil
    }
}
