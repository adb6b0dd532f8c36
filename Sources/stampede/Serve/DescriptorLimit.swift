import Glibc
import StampedeIO

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
