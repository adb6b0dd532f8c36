import ArgumentParser
import CStampedeSys
import Glibc
import Logging
import StampedeIO

/// Says why the server cannot run (on standard error, and in syslog once it is the log), and
/// returns the exit status for it, as in.tftpd has them.
func serveFailure(_ message: String, status: Int32 = 1) -> ExitCode {
    if stampede_fd_is_datagram_socket(2) == 0 { writeToStandardError("stampede: \(message)\n") }
    if SyslogHandler.inUse { stampede_syslog(LOG_ERR, message) }
    return ExitCode(status)
}

/// The `-u` account the server becomes once its sockets are bound, when started as root: its
/// user, its group and its supplementary groups, as in.tftpd and nginx set them (initgroups), so
/// that a group the account is in (Debian's `ssl-cert`, which may read the TLS key) still lets it
/// read on SIGHUP.
struct Account {
    let name: String
    let uid: uid_t
    let gid: gid_t
    /// Every group of the account, its own first (getgrouplist).
    let groups: [gid_t]

    /// Nil when not started as root (there is nothing to drop); looked up before `-s`, which
    /// hides /etc/passwd and /etc/group.
    static func lookUp(_ name: String) throws -> Account? {
        guard geteuid() == 0 else { return nil }
        guard let entry = getpwnam(name) else { throw serveFailure("-u \(name): no such user") }
        let gid = entry.pointee.pw_gid
        var groups = [gid_t](repeating: 0, count: 64)
        var count = Int32(groups.count)
        if getgrouplist(name, gid, &groups, &count) < 0 {
            // More than 64: the count says how many.
            groups = [gid_t](repeating: 0, count: Int(count))
            _ = getgrouplist(name, gid, &groups, &count)
        }
        return Account(name: name, uid: entry.pointee.pw_uid, gid: gid, groups: Array(groups.prefix(Int(max(1, count)))))
    }

    /// As in.tftpd: become the account.
    func become(_ logger: Logger) throws {
        guard setgroups(groups.count, groups) == 0, setgid(gid) == 0, setuid(uid) == 0 else {
            throw serveFailure("-u \(name): cannot drop privileges: \(Errno.current)")
        }
        logger.debug("running as \(name) (uid \(uid), gid \(gid), groups \(groups.map(String.init).joined(separator: ",")))")
    }
}
