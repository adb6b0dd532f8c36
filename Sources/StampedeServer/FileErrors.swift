import Glibc
import StampedeIO
import StampedeProtocol

extension Errno {
    /// The TFTP error a client gets for a failed file operation, as tftpd-hpa maps them. The
    /// host's own shortages (descriptors, memory, ports) make the server busy, not the request wrong.
    public var tftpError: TFTPError {
        switch rawValue {
        case ENOENT, ENOTDIR, ENAMETOOLONG: return TFTPError(.fileNotFound, "File not found")
        case EACCES, EPERM, EXDEV, ELOOP, EISDIR: return TFTPError(.accessViolation, "Access violation")
        case ENOSPC, EDQUOT, EFBIG: return TFTPError(.diskFull, "Disk full or allocation exceeded")
        case EEXIST: return TFTPError(.fileExists, "File already exists")
        case EMFILE, ENFILE, ENOMEM, ENOBUFS, EAGAIN, EADDRINUSE: return TFTPError(.notDefined, description, busy: true)
        default: return TFTPError(.notDefined, description)
        }
    }
}
