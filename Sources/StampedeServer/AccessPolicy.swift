import CStampedeSys
import Glibc
import StampedeIO
import StampedeProtocol

/// Which files a client may read or write, as tftpd-hpa decides it (DESIGN: security model).
///
/// Names resolve beneath the root with openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS): no
/// "..", absolute path or symlink leaves it, whatever a string check would miss. A leading "/"
/// means the root, as PXE configurations write it. Only regular files are served.
public struct AccessPolicy: Sendable {
    /// A directory descriptor of the served root.
    public let root: Int32
    /// `-p`: skip the world-readable / world-writable checks; the OS still decides.
    public var permissive: Bool
    /// `-c`: a WRQ may create a new file.
    public var allowCreate: Bool
    /// `-U`: mode bits removed from created files.
    public var umask: mode_t

    public init(root: Int32, permissive: Bool = false, allowCreate: Bool = false, umask: mode_t = 0o022) {
        self.root = root
        self.permissive = permissive
        self.allowCreate = allowCreate
        self.umask = umask
    }

    /// Opens the root directory to serve.
    public static func openRoot(_ path: String) throws(Errno) -> Int32 {
        let fd = Glibc.open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw Errno.current }
        return fd
    }

    /// The name relative to the root: leading slashes dropped; empty means "no file".
    static func relativePath(_ filename: [UInt8]) -> [UInt8]? {
        let trimmed = filename.drop(while: { $0 == UInt8(ascii: "/") })
        guard !trimmed.isEmpty, !trimmed.contains(0) else { return nil }
        return Array(trimmed)
    }

    static func open(beneath root: Int32, _ path: [UInt8], flags: Int32, mode: mode_t = 0) -> Result<Int32, Errno> {
        let fd = withCPath(path) { stampede_open_beneath(root, $0, flags, UInt32(mode)) }
        if let error = Errno(result: fd) { return .failure(error) }
        return .success(fd)
    }

    /// A file opened for an RRQ, with its fstat: every file problem is found here, before any
    /// OACK (EFI clients cannot take an ERROR after an OACK).
    public func openForReading(_ filename: [UInt8]) -> Result<(fd: Int32, info: stat), TFTPError> {
        guard let path = Self.relativePath(filename) else { return .failure(TFTPError(.fileNotFound, "File not found")) }
        // Looked at first (O_PATH), opened only if a regular file: opening a device node can
        // act on the device (rewind a tape), opening a FIFO can release a waiting writer.
        let named: Int32
        switch Self.open(beneath: root, path, flags: stampede_o_path) {
        case .success(let fd): named = fd
        case .failure(let error): return .failure(error.tftpError)
        }
        defer { close(named) }
        var seen = stat()
        guard fstat(named, &seen) == 0 else { return .failure(Errno.current.tftpError) }
        guard seen.st_mode & S_IFMT == S_IFREG else { return .failure(TFTPError(.accessViolation, "Not a regular file")) }
        guard permissive || seen.st_mode & S_IROTH != 0 else {
            return .failure(TFTPError(.accessViolation, "File must have global read permissions"))  // tftpd-hpa's words
        }
        // O_NONBLOCK and O_NOCTTY should the name have been replaced in between; then the file
        // opened is not the one looked at, and is refused.
        let fd: Int32
        switch Self.open(beneath: root, path, flags: O_RDONLY | O_NONBLOCK | O_NOCTTY) {
        case .success(let opened): fd = opened
        case .failure(let error): return .failure(error.tftpError)
        }
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_dev == seen.st_dev, info.st_ino == seen.st_ino else {
            close(fd)
            return .failure(TFTPError(.accessViolation, "Not a regular file"))
        }
        return .success((fd, info))
    }

    /// Starts an upload: refused unless creation is allowed or the file exists and is
    /// world-writable (tftpd-hpa's rule); the data goes to a temporary file beside the target.
    public func openForWriting(_ filename: [UInt8]) -> Result<Upload, TFTPError> {
        guard let path = Self.relativePath(filename) else { return .failure(TFTPError(.accessViolation, "Access violation")) }
        let slash = path.lastIndex(of: UInt8(ascii: "/"))
        let directoryPath: [UInt8] = slash.map { Array(path[..<$0]) } ?? [UInt8(ascii: ".")]
        let name = slash.map { Array(path[($0 + 1)...]) } ?? path
        guard !name.isEmpty, name != [46], name != [46, 46] else {
            return .failure(TFTPError(.accessViolation, "Access violation"))
        }
        let directory: Int32
        switch Self.open(beneath: root, directoryPath.isEmpty ? [46] : directoryPath, flags: O_RDONLY | O_DIRECTORY) {
        case .success(let fd): directory = fd
        case .failure(let error): return .failure(error.tftpError)
        }
        var existing = stat()
        let exists = withCPath(name) { fstatat(directory, $0, &existing, AT_SYMLINK_NOFOLLOW) } == 0
        var mode = mode_t(0o666) & ~umask
        var owner: (uid_t, gid_t)?
        if exists {
            guard existing.st_mode & S_IFMT == S_IFREG else {
                close(directory)
                return .failure(TFTPError(.accessViolation, "Not a regular file"))
            }
            guard permissive || existing.st_mode & S_IWOTH != 0 else {
                close(directory)
                return .failure(TFTPError(.accessViolation, "File must have global write permissions"))
            }
            // The upload renames over the target, which asks the OS about the directory only:
            // ask it about the file too, as the serving user (-u), who must be able to write it.
            let writable = withCPath(name) { openat(directory, $0, O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC) }
            guard writable >= 0 else {
                let error = Errno.current
                close(directory)
                return .failure(error.rawValue == ETXTBSY ? error.tftpError : TFTPError(.accessViolation, "Access violation"))
            }
            close(writable)
            mode = existing.st_mode & 0o7777
            owner = (existing.st_uid, existing.st_gid)
        } else if errno != ENOENT {
            let error = Errno.current
            close(directory)
            return .failure(error.tftpError)
        } else if !allowCreate {
            close(directory)
            return .failure(TFTPError(.fileNotFound, "File not found"))
        }
        do {
            return .success(try Upload(directory: directory, name: name, mode: mode, owner: owner))
        } catch {
            close(directory)
            return .failure(error.tftpError)
        }
    }
}
