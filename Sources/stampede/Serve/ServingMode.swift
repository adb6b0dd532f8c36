import ArgumentParser
import CStampedeSys
import Glibc
import StampedeBase
import StampedeIO
import StampedeProtocol

/// Where the server's sockets come from, as in.tftpd decides it: -l (or -L) binds; --systemd,
/// or LISTEN_FDS meant for this process, serves systemd's sockets; otherwise fd 0 must be inetd's
/// socket.
enum ServingMode: Equatable {
    case standalone
    /// fd 0 is the socket (inetd "wait" mode): fds 0-2 are the socket, so nothing is printed.
    case inetd
    /// systemd's sockets: UDP ones for TFTP, listening TCP ones for HTTP (a socket unit's
    /// ListenDatagram and ListenStream lines), and for HTTPS those a socket unit names `https`
    /// (FileDescriptorName=https, in LISTEN_FDNAMES).
    case systemd(datagram: [Int32], stream: [Int32], secure: [Int32] = [])

    static func of(_ options: ServeOptions) throws -> ServingMode {
        if options.listen || options.foreground { return .standalone }
        if let (datagram, stream, secure) = try systemdSockets() { return .systemd(datagram: datagram, stream: stream, secure: secure) }
        if options.systemd {
            throw serveFailure("--systemd: no sockets passed (LISTEN_FDS and LISTEN_PID unset, or meant for another process)")
        }
        if stampede_fd_is_datagram_socket(0) != 0 { return .inetd }
        throw ValidationError("""
            nothing to serve on: give -l to bind -a (standalone), or start stampede from inetd \
            (a UDP socket on fd 0) or from a systemd socket unit (--systemd).
            """)
    }

    /// sd_listen_fds(3): the sockets start at fd 3; the variables are removed so that nothing
    /// this process starts takes them for its own. LISTEN_FDS is not taken on trust: a count no
    /// process could hold, a descriptor that is not open, or one that is neither a UDP socket
    /// nor a listening TCP socket stops the server, saying which.
    static func systemdSockets() throws -> (datagram: [Int32], stream: [Int32], secure: [Int32])? {
        defer {
            unsetenv("LISTEN_PID")
            unsetenv("LISTEN_FDS")
            unsetenv("LISTEN_FDNAMES")
        }
        guard let pidText = getenv("LISTEN_PID"), let pid = Int32(String(cString: pidText)), pid == getpid(),
              let countText = getenv("LISTEN_FDS") else { return nil }
        let text = String(cString: countText)
        guard let count = Int(text), count > 0 else {
            if text == "0" { return nil }
            throw serveFailure("LISTEN_FDS=\(sanitizedForLog(text.utf8)): not a count of sockets")
        }
        var limit = rlimit()
        getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        guard count <= Int(min(limit.rlim_max, rlim_t(Int32.max))) - 3 else {
            throw serveFailure("LISTEN_FDS=\(count): more descriptors than this process may hold (\(limit.rlim_max))")
        }
        // sd_listen_fds_with_names(3): one name a descriptor, colon-separated, in order.
        let names = getenv("LISTEN_FDNAMES").map { String(cString: $0).split(separator: ":", omittingEmptySubsequences: false).map(String.init) } ?? []
        var datagram: [Int32] = [], stream: [Int32] = [], secure: [Int32] = []
        for fd in Int32(3)..<Int32(3 + count) {
            switch stampede_passed_socket_kind(fd) {
            case 1: datagram.append(fd)
            case 2 where names.indices.contains(Int(fd) - 3) && names[Int(fd) - 3] == "https": secure.append(fd)
            case 2: stream.append(fd)
            case -EBADF: throw serveFailure("LISTEN_FDS=\(count): descriptor \(fd) is not open")
            case let error:
                throw serveFailure("LISTEN_FDS=\(count): descriptor \(fd) is neither a UDP socket nor a listening TCP socket (\(Errno(-error)))")
            }
        }
        guard !datagram.isEmpty else { throw serveFailure("LISTEN_FDS=\(count): no UDP socket to serve TFTP on") }
        return (datagram, stream, secure)
    }
}
