import CStampedeSys
import Glibc

/// A temporary directory tree for one test, removed at the end.
public final class ScratchDirectory {
    public let path: String
    public let fd: Int32

    /// In `parent`: /tmp by default; `onDisk` where a test needs pages that can leave memory.
    public init(in parent: String = "/tmp") {
        var template = Array("\(parent)/stampede-test-XXXXXX".utf8CString)
        path = template.withUnsafeMutableBufferPointer { String(cString: mkdtemp($0.baseAddress!)!) }
        fd = open(path, O_RDONLY | O_DIRECTORY)
    }

    /// A directory on the disk the package is built on (its .build): /tmp may be a tmpfs, whose
    /// pages never leave the page cache.
    public static func onDisk() -> ScratchDirectory {
        var cwd = [CChar](repeating: 0, count: Int(PATH_MAX))
        return ScratchDirectory(in: String(cString: getcwd(&cwd, cwd.count)) + "/.build")
    }

    /// Drops the pages of `file` (opened, `size` bytes, written here) from the page cache, and
    /// says whether none is left. One fadvise is not always enough on a loaded machine: pages still
    /// in another CPU's LRU batch stay, and a test that wanted a block on the disk found it cached.
    public static func evict(_ file: Int32, size: Int) -> Bool {
        guard fsync(file) == 0 else { return false }
        // Each page alone: stampede_range_cached says whether all of a range is cached (-ENOSYS
        // before Linux 6.5, where nothing can be known and the fadvise is taken as done).
        func nothingCached() -> Bool {
            stride(from: 0, to: size, by: 4096).allSatisfy { stampede_range_cached(file, off_t($0), 4096) != 1 }
        }
        for _ in 0..<100 {
            if posix_fadvise(file, 0, 0, POSIX_FADV_DONTNEED) == 0, nothingCached() { return true }
            usleep(20_000)
        }
        return false
    }

    deinit {
        close(fd)
        _ = system("rm -rf '\(path)'")
    }

    @discardableResult
    public func write(_ name: String, _ bytes: [UInt8], mode: mode_t = 0o644) -> String {
        let full = path + "/" + name
        let f = open(full, O_WRONLY | O_CREAT | O_TRUNC, mode)
        precondition(f >= 0, "open \(full)")
        _ = bytes.withUnsafeBytes { Glibc.write(f, $0.baseAddress, $0.count) }
        fchmod(f, mode)
        close(f)
        return full
    }

    public func read(_ name: String) -> [UInt8]? {
        let f = open(path + "/" + name, O_RDONLY)
        guard f >= 0 else { return nil }
        defer { close(f) }
        var out: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = buffer.withUnsafeMutableBytes { Glibc.read(f, $0.baseAddress, $0.count) }
            if n <= 0 { return out }
            out += buffer[..<n]
        }
    }

    public func entries() -> [String] {
        guard let dir = opendir(path) else { return [] }
        defer { closedir(dir) }
        var names: [String] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(cString: $0.bindMemory(to: CChar.self).baseAddress!) }
            if name != "." && name != ".." { names.append(name) }
        }
        return names.sorted()
    }
}

extension Array where Element == UInt8 {
    public init(_ text: String) { self = Array(text.utf8) }
}
