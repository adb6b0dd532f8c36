import Glibc
import StampedeIO

/// Why a file is not served or written, whatever protocol asked: the file service and the access
/// policy say this, and each protocol says it its own way, TFTP with its ERROR code
/// (`TFTPError(_:)`), HTTP with its status. The message is what the client is told.
public struct FileRefusal: Error, Equatable, Sendable {
    public enum Reason: Equatable, Sendable {
        /// No such file (TFTP 1, HTTP 404).
        case notFound
        /// The policy or a remap rule refuses it (TFTP 2, HTTP 403).
        case denied
        /// No room for an upload (TFTP 3).
        case diskFull
        /// An upload over a file that must not be replaced (TFTP 6).
        case exists
        /// The host is short of descriptors, memory or ports, or a limit is reached: the same
        /// request may succeed later (TFTP 0, left unanswered by default; HTTP 503).
        case busy
        /// Anything else: an I/O error, a file that cannot be served this way (TFTP 0, HTTP 500).
        case failed
    }

    public var reason: Reason
    public var message: String

    public init(_ reason: Reason, _ message: String) {
        self.reason = reason
        self.message = message
    }
}

extension Errno {
    /// What a failed file operation refuses, as tftpd-hpa maps errno to its errors. The host's own
    /// shortages (descriptors, memory, ports) make the server busy, not the request wrong.
    public var fileRefusal: FileRefusal {
        switch rawValue {
        case ENOENT, ENOTDIR, ENAMETOOLONG: FileRefusal(.notFound, "File not found")
        case EACCES, EPERM, EXDEV, ELOOP, EISDIR: FileRefusal(.denied, "Access violation")
        case ENOSPC, EDQUOT, EFBIG: FileRefusal(.diskFull, "Disk full or allocation exceeded")
        case EEXIST: FileRefusal(.exists, "File already exists")
        case EMFILE, ENFILE, ENOMEM, ENOBUFS, EAGAIN, EADDRINUSE: FileRefusal(.busy, description)
        default: FileRefusal(.failed, description)
        }
    }
}
