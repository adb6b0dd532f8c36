import Glibc

/// The process's resident memory and open descriptors, from /proc, through descriptors opened
/// when the server starts: once `-s` has chrooted there is no /proc to open, and once `-u` has
/// dropped privileges the kernel makes /proc/PID/fd root's (the process is no longer dumpable).
/// A descriptor opened before either still reads.
public final class ProcessFigures: Sendable {
    private let statm: Int32
    private let fdDirectory: Int32

    /// Opens /proc/self/statm and /proc/self/fd; a figure whose file cannot be opened reads 0.
    public init() {
        statm = open("/proc/self/statm", O_RDONLY | O_CLOEXEC)
        fdDirectory = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
    }

    deinit {
        if statm >= 0 { close(statm) }
        if fdDirectory >= 0 { close(fdDirectory) }
    }

    /// statm's second field (resident pages), in bytes.
    public var residentBytes: Int {
        guard statm >= 0 else { return 0 }
        var buffer = [UInt8](repeating: 0, count: 128)
        let count = buffer.withUnsafeMutableBytes { pread(statm, $0.baseAddress, $0.count, 0) }
        guard count > 0 else { return 0 }
        let fields = buffer[..<count].split(separator: UInt8(ascii: " "))
        guard fields.count > 1, let pages = Int(String(decoding: fields[1], as: UTF8.self)) else { return 0 }
        return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
    }

    /// The entries of /proc/self/fd, less the one this count reads through.
    public var openDescriptors: Int {
        guard fdDirectory >= 0 else { return 0 }
        // A copy to read, rewound: it shares the kept descriptor's offset.
        let copy = fcntl(fdDirectory, F_DUPFD_CLOEXEC, 0)
        guard copy >= 0, let directory = fdopendir(copy) else {
            if copy >= 0 { close(copy) }
            return 0
        }
        defer { closedir(directory) }
        rewinddir(directory)
        var count = 0
        while let entry = readdir(directory) {
            if entry.pointee.d_name.0 != CChar(UInt8(ascii: ".")) { count += 1 }
        }
        return count - 1  // the copy itself
    }
}
