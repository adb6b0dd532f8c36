import CStampedeSys
import Glibc
import StampedeIO
import Synchronization

/// A file's bytes in anonymous memory, immutable once loaded and shared by every transfer of
/// the same file version (docs/ARCHITECTURE.md, "The file cache"). DATA payloads are slices of it; a file replaced
/// on disk never changes an image, so a download is never mixed and never SIGBUS.
public final class FileImage: @unchecked Sendable {
    public let bytes: UnsafeRawBufferPointer
    public let key: FileKey
    /// The memfd the image's memory is, when the cache shares images with HTTP
    /// (`FileCache.Limits.sharedFrom`): HTTP sends it with sendfile, from the same pages TFTP
    /// slices (nil: anonymous memory).
    public let descriptor: Int32?
    /// Whether its memory is the heap's (a generated file's few bytes: no mapping to make,
    /// protect and unmap per request).
    let onHeap: Bool

    /// Where an HTTP server's cache starts to put images in memfds: below it, what sendfile saves
    /// a response (one copy) is less than a descriptor held for the image's life.
    public static let sharedFrom = 64 << 10

    /// The memfds of images alive in the process: each is a descriptor (`DescriptorBudget`).
    static let openMemfds = Atomic<Int>(0)

    init(_ memory: Memory, key: FileKey) {
        self.bytes = UnsafeRawBufferPointer(memory.buffer)
        self.descriptor = memory.descriptor
        self.onHeap = memory.onHeap
        self.key = key
    }

    deinit { Self.free(Memory(buffer: UnsafeMutableRawBufferPointer(mutating: bytes), descriptor: descriptor, onHeap: onHeap)) }

    /// An image's memory while it is loaded: a mapping, and the memfd behind it if any.
    struct Memory {
        var buffer: UnsafeMutableRawBufferPointer
        var descriptor: Int32?
        var onHeap = false
        /// The mapping's length: a memfd's padding is mapped too.
        var mappedCount: Int { FileImage.residentCount(of: buffer.count, inMemfd: descriptor != nil) }
    }

    public var count: Int { bytes.count }

    @inline(__always)
    public func slice(_ range: Range<Int>) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(rebasing: bytes[range])
    }

    static func allocate(_ count: Int, shared: Bool = false) throws(Errno) -> Memory {
        guard count > 0 else { return Memory(buffer: UnsafeMutableRawBufferPointer(start: nil, count: 0)) }
        var descriptor: Int32?
        let length = residentCount(of: count, inMemfd: shared)
        if shared {
            let fd = stampede_memfd("stampede-image", Int64(length))
            if let error = Errno(result: fd) { throw error }
            descriptor = fd
            openMemfds.add(1, ordering: .relaxed)
        }
        let base = descriptor.map { stampede_map_image($0, length) }
            ?? mmap(nil, count, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
        guard let base, base != MAP_FAILED else {
            let error = Errno.current
            if let descriptor {
                Glibc.close(descriptor)
                openMemfds.subtract(1, ordering: .relaxed)
            }
            throw error
        }
        return Memory(buffer: UnsafeMutableRawBufferPointer(start: base, count: count), descriptor: descriptor)
    }

    /// Memory from the heap, for an image made in memory.
    static func allocateOnHeap(_ count: Int) -> Memory {
        guard count > 0 else { return Memory(buffer: UnsafeMutableRawBufferPointer(start: nil, count: 0)) }
        return Memory(buffer: .allocate(byteCount: count, alignment: 16), onHeap: true)
    }

    /// The memory `count` bytes of an image take: in a memfd, a tail of half a huge page or
    /// more is padded to a whole one, so that it is a huge page too (stampede_map_image):
    /// sendfile from a memfd looks up and locks each small page it sends, a huge page once
    /// (docs/ARCHITECTURE.md, "HTTP"). The padding costs at most half a huge page per image (and
    /// at most doubles a 1 MiB one); the cache counts it.
    static func residentCount(of count: Int, inMemfd: Bool) -> Int {
        guard inMemfd, count % hugePage >= hugePage / 2 else { return count }
        return (count + hugePage - 1) / hugePage * hugePage
    }

    static let hugePage = 2 << 20

    /// The memory the image holds: its bytes, and in a memfd their padding.
    public var residentCount: Int { Self.residentCount(of: count, inMemfd: descriptor != nil) }

    static func free(_ memory: Memory) {
        if memory.onHeap {
            memory.buffer.deallocate()
            return
        }
        if let base = memory.buffer.baseAddress { munmap(base, memory.mappedCount) }
        if let descriptor = memory.descriptor {
            Glibc.close(descriptor)
            openMemfds.subtract(1, ordering: .relaxed)
        }
    }

    /// Reads `size` bytes of `fd` from offset 0; EAGAIN if the file is shorter now.
    static func read(fd: Int32, size: Int, shared: Bool) throws(Errno) -> Memory {
        let memory = try allocate(size, shared: shared)
        let read: Int
        do {
            read = try readFully(fd, into: memory.buffer, at: 0)
        } catch {
            free(memory)
            throw error
        }
        guard read == size else {
            free(memory)
            throw Errno(EAGAIN)
        }
        return memory
    }

    /// Mutates in place the protection of a loaded image to read-only: a stray write crashes
    /// at once instead of corrupting what other transfers send. (The memfd behind one stays
    /// writable only through a new mapping, which nothing makes.)
    static func seal(_ memory: Memory) {
        // The whole mapping, padding too: protections that differ within a huge page would split
        // its mapping into small ones.
        if let base = memory.buffer.baseAddress { mprotect(base, memory.mappedCount, PROT_READ) }
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
