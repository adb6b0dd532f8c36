import Glibc
import StampedeIO
import StampedeProtocol

/// A file's bytes in anonymous memory, immutable once loaded and shared by every transfer of
/// the same file version (docs/ARCHITECTURE.md, "The file cache"). DATA payloads are slices of it; a file replaced
/// on disk never changes an image, so a download is never mixed and never SIGBUS.
public final class FileImage: @unchecked Sendable {
    public let bytes: UnsafeRawBufferPointer
    public let key: FileKey

    init(mapping: UnsafeMutableRawBufferPointer, key: FileKey) {
        self.bytes = UnsafeRawBufferPointer(mapping)
        self.key = key
    }

    deinit {
        if let base = bytes.baseAddress { munmap(UnsafeMutableRawPointer(mutating: base), bytes.count) }
    }

    public var count: Int { bytes.count }

    @inline(__always)
    public func slice(_ range: Range<Int>) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(rebasing: bytes[range])
    }

    static func allocate(_ count: Int) throws(Errno) -> UnsafeMutableRawBufferPointer {
        guard count > 0 else { return UnsafeMutableRawBufferPointer(start: nil, count: 0) }
        let base = mmap(nil, count, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
        guard let base, base != MAP_FAILED else { throw Errno.current }
        return UnsafeMutableRawBufferPointer(start: base, count: count)
    }

    static func free(_ buffer: UnsafeMutableRawBufferPointer) {
        if let base = buffer.baseAddress { munmap(base, buffer.count) }
    }

    /// Reads `size` bytes of `fd` from offset 0; EAGAIN if the file is shorter now.
    static func read(fd: Int32, size: Int) throws(Errno) -> UnsafeMutableRawBufferPointer {
        let buffer = try allocate(size)
        let read: Int
        do {
            read = try readFully(fd, into: buffer, at: 0)
        } catch {
            free(buffer)
            throw error
        }
        guard read == size else {
            free(buffer)
            throw Errno(EAGAIN)
        }
        return buffer
    }

    /// Mutates in place the protection of a loaded image to read-only: a stray write crashes
    /// at once instead of corrupting what other transfers send.
    static func seal(_ buffer: UnsafeMutableRawBufferPointer) {
        if let base = buffer.baseAddress { mprotect(base, buffer.count, PROT_READ) }
    }
}

/// Which version of which file an image holds. The change time is there for what rewrites a
/// file in place and puts its modification time back (`cp -p`, `touch -r`): nobody can set it.
public struct FileKey: Hashable, Sendable {
    public var device: UInt64
    public var inode: UInt64
    public var size: Int
    public var modified: Int64
    public var changed: Int64
    public var netascii: Bool

    public init(_ s: stat, netascii: Bool) {
        device = UInt64(s.st_dev)
        inode = UInt64(s.st_ino)
        size = Int(s.st_size)
        modified = Int64(s.st_mtim.tv_sec) * 1_000_000_000 + Int64(s.st_mtim.tv_nsec)
        changed = Int64(s.st_ctim.tv_sec) * 1_000_000_000 + Int64(s.st_ctim.tv_nsec)
        self.netascii = netascii
    }

    /// The later of the two times, in wall-clock nanoseconds.
    var lastChange: Int64 { max(modified, changed) }
}
