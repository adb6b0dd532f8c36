import Glibc
import StampedeIO
import StampedeProtocol
import StampedeServer

/// A whole regular local file (`put`'s source, `storm --verify`, `-m`), `path` taken from
/// `directory` when it is relative.
func readWholeFile(_ path: String, relativeTo directory: Int32 = AT_FDCWD) throws(Errno) -> [UInt8] {
    let fd = openat(directory, path, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { throw Errno.current }
    defer { close(fd) }
    var info = stat()
    guard fstat(fd, &info) == 0 else { throw Errno.current }
    guard info.st_mode & S_IFMT == S_IFREG else { throw Errno(EINVAL) }
    var out = [UInt8](repeating: 0, count: Int(info.st_size))
    var done = 0
    while done < out.count {
        let n = out.withUnsafeMutableBytes { pread(fd, $0.baseAddress! + done, $0.count - done, off_t(done)) }
        if n < 0 && errno == EINTR { continue }
        if n < 0 { throw Errno.current }
        if n == 0 { return Array(out[..<done]) }
        done += n
    }
    return out
}

/// Thousands of transfers (or storm clients) need thousands of sockets: lifts the soft fd limit
/// to the hard one. Returns the limit now in force, or the errno when it could not be read or set.
func liftFileLimit() -> Result<rlim_t, Errno> {
    var limit = rlimit()
    guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return .failure(.current) }
    guard limit.rlim_cur < limit.rlim_max else { return .success(limit.rlim_cur) }
    let raised = limit.rlim_max
    limit.rlim_cur = raised
    guard setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return .failure(.current) }
    return .success(raised)
}
