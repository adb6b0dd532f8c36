import Glibc

/// An errno value, as the C shims return it (negated).
public struct Errno: Error, Equatable, Sendable, CustomStringConvertible {
    public var rawValue: Int32
    public init(_ rawValue: Int32) { self.rawValue = rawValue }
    /// From a shim result: nil when it is not an error.
    public init?(result: Int32) {
        guard result < 0 else { return nil }
        rawValue = -result
    }
    public static var current: Errno { Errno(errno) }
    public var description: String { String(cString: strerror(rawValue)) }

    /// The TFTP error a client gets for a failed file operation, as tftpd-hpa maps them.
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

/// Calls `body` with `bytes` as a NUL-terminated C path: file names are bytes, not text.
@inline(__always)
func withCPath<T>(_ bytes: [UInt8], _ body: (UnsafePointer<CChar>) -> T) -> T {
    (bytes + [0]).withUnsafeBufferPointer { buffer in
        buffer.withMemoryRebound(to: CChar.self) { body($0.baseAddress!) }
    }
}
