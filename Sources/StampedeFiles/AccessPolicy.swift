import CStampedeSys
import Glibc
import StampedeIO
import Synchronization

/// Which files a client may read or write, as tftpd-hpa decides it (docs/ARCHITECTURE.md,
/// "Security").
///
/// Names resolve beneath the root with openat2, whatever a string check would miss: with
/// RESOLVE_BENEATH, a "..", absolute symlink or symlink that would leave it is refused; under `-s`
/// or `-j` (`virtualRoot`), with RESOLVE_IN_ROOT, the root is the name's "/", as a chroot makes it
/// for tftpd-hpa: ".." stops there and an absolute symlink is read inside it. A leading "/" means
/// the root, as PXE configurations write it. Only regular files are served.
public struct AccessPolicy: Sendable {
    /// A directory descriptor of the served root, open for the life of the process.
    public let root: Int32
    /// `-p`: skip the world-readable / world-writable checks; the OS still decides.
    public var permissive: Bool
    /// `-c`: a WRQ may create a new file.
    public var allowCreate: Bool
    /// `--read-only`: every WRQ is refused, whatever the file's permissions.
    public var readOnly: Bool
    /// `-U`: mode bits removed from created files.
    public var umask: mode_t
    /// `-s`, `-j`: the root is every name's "/" (RESOLVE_IN_ROOT), not a boundary (RESOLVE_BENEATH).
    public var virtualRoot: Bool
    /// `--normalize`, `--validate`: what a name goes through before it is opened.
    public var names = FilenameProcessing()
    /// `--max-upload`: the largest upload, in bytes (nil: no limit; 0 is `readOnly`).
    public var maxUpload: Int?

    public init(root: Int32, permissive: Bool = false, allowCreate: Bool = false, readOnly: Bool = false,
                umask: mode_t = 0o022, virtualRoot: Bool = false) {
        self.root = root
        self.virtualRoot = virtualRoot
        self.permissive = permissive
        self.allowCreate = allowCreate
        self.readOnly = readOnly
        self.umask = umask
    }

    /// Opens the root directory to serve; the process keeps it until it exits.
    public static func openRoot(_ path: String) throws(Errno) -> Int32 {
        try Descriptor(opening: path, flags: O_RDONLY | O_DIRECTORY).release()
    }

    /// The name relative to the root, after `names`' steps: leading slashes dropped; empty means
    /// "no file".
    func relativePath(_ filename: [UInt8]) throws(FileRefusal) -> ArraySlice<UInt8>? {
        let name = try names.apply(to: filename)
        var start = 0
        while start < name.count && name[start] == UInt8(ascii: "/") { start += 1 }
        guard start < name.count else { return nil }
        var i = start
        while i < name.count && name[i] != 0 { i += 1 }
        return i == name.count ? name[start...] : nil
    }

    /// Opens `path` beneath the root; a failure is the refusal tftpd-hpa answers it with.
    func open(_ path: ArraySlice<UInt8>, flags: Int32) throws(FileRefusal) -> Descriptor {
        let fd = withCPath(path) { stampede_open_beneath(root, $0, flags, 0, virtualRoot ? 1 : 0) }
        if let error = Errno(result: fd) { throw error.fileRefusal }
        return Descriptor(owning: fd)
    }

    /// A file open for an RRQ, and what fstat said of it.
    public struct OpenFile: ~Copyable {
        public var descriptor: Descriptor
        public var info: stat
    }

    /// A file opened for an RRQ: every file problem is found here, before any OACK (EFI clients
    /// cannot take an ERROR after an OACK).
    public func openForReading(_ filename: [UInt8]) throws(FileRefusal) -> OpenFile {
        try open(look(filename))
    }

    /// A name looked at (O_PATH) and found a regular file this policy serves; the look holds
    /// the file, so no other can take its inode number before `open` compares them.
    public struct Sighting: ~Copyable {
        let named: Descriptor
        let path: ArraySlice<UInt8>
        public let info: stat
    }

    /// The first half of `openForReading`: the name resolved beneath the root and the file
    /// judged, without opening it. A request whose version is cached needs no more
    /// (`FileService.read`).
    public func look(_ filename: [UInt8]) throws(FileRefusal) -> Sighting {
        try look(filename, fromMemory: false)!
    }

    /// `look` from what the kernel holds in memory alone (its caches of names and attributes), as
    /// an event loop may: nil when they cannot answer without the file system (a name not looked up
    /// lately, a network or FUSE file system's entry to revalidate), and the look must be made where
    /// a wait does no harm (`FileService`: the disk thread). On a network or FUSE file system the
    /// attributes are those the kernel holds, as fresh as its attribute cache. On a kernel before
    /// 5.12 (no RESOLVE_CACHED) the look is made as `look` makes it.
    public func lookInMemory(_ filename: [UInt8]) throws(FileRefusal) -> Sighting? {
        try look(filename, fromMemory: true)
    }

    /// Kernels that refused RESOLVE_CACHED (before 5.12): looks are made whole there.
    private static let resolvesCached = Atomic<Bool>(true)

    private func look(_ filename: [UInt8], fromMemory: Bool) throws(FileRefusal) -> Sighting? {
        guard let path = try relativePath(filename) else { throw FileRefusal(.notFound, "File not found") }
        // Looked at first (O_PATH), opened only if a regular file: opening a device node can act
        // on the device (rewind a tape), opening a FIFO can release a waiting writer.
        let named: Descriptor
        var seen = stat()
        if fromMemory && Self.resolvesCached.load(ordering: .relaxed) {
            let fd = withCPath(path) { stampede_open_beneath_cached(root, $0, stampede_o_path, virtualRoot ? 1 : 0) }
            switch Errno(result: fd)?.rawValue {
            case nil: named = Descriptor(owning: fd)
            case EAGAIN: return nil
            case EINVAL:
                Self.resolvesCached.store(false, ordering: .relaxed)
                named = try open(path, flags: stampede_o_path)
            case let error?: throw Errno(error).fileRefusal
            }
            if let error = Errno(result: stampede_stat_cached(named.raw, &seen)) { throw error.fileRefusal }
        } else {
            named = try open(path, flags: stampede_o_path)
            guard fstat(named.raw, &seen) == 0 else { throw Errno.current.fileRefusal }
        }
        guard seen.st_mode & S_IFMT == S_IFREG else { throw FileRefusal(.denied, "Not a regular file") }
        guard permissive || seen.st_mode & S_IROTH != 0 else {
            throw FileRefusal(.denied, "File must have global read permissions")  // tftpd-hpa's words
        }
        return Sighting(named: named, path: path, info: seen)
    }

    /// The second half: the file looked at, opened.
    public func open(_ sighting: borrowing Sighting) throws(FileRefusal) -> OpenFile {
        // O_NONBLOCK and O_NOCTTY should the name have been replaced in between; then the file
        // opened is not the one looked at, and is refused.
        try opened(try open(sighting.path, flags: O_RDONLY | O_NONBLOCK | O_NOCTTY), as: sighting)
    }

    /// `file`, opened by the name `sighting` looked at, if it is the file looked at (a name
    /// replaced in between opens another, which is refused).
    private func opened(_ file: consuming Descriptor, as sighting: borrowing Sighting) throws(FileRefusal) -> OpenFile {
        var info = stat()
        guard fstat(file.raw, &info) == 0, info.st_dev == sighting.info.st_dev, info.st_ino == sighting.info.st_ino else {
            throw FileRefusal(.denied, "Not a regular file")
        }
        return OpenFile(descriptor: file, info: info)
    }

    /// The file looked at, opened from the kernel's caches alone (openat2's RESOLVE_CACHED), for
    /// a loop on a file system whose opens ask nothing of a server (`FileService.opensLocally`):
    /// nil when the caches cannot resolve it now, or on a kernel without RESOLVE_CACHED.
    func openInMemory(_ sighting: borrowing Sighting) throws(FileRefusal) -> OpenFile? {
        guard Self.resolvesCached.load(ordering: .relaxed) else { return nil }
        let fd = withCPath(sighting.path) { stampede_open_beneath_cached(root, $0, O_RDONLY | O_NONBLOCK | O_NOCTTY, virtualRoot ? 1 : 0) }
        if let error = Errno(result: fd) {
            if error.rawValue == EAGAIN || error.rawValue == EINVAL { return nil }
            throw error.fileRefusal
        }
        return try opened(Descriptor(owning: fd), as: sighting)
    }

    /// Whether a read of `filename` would be allowed, from the kernel's caches alone (the `E`
    /// probe on an event loop): true when the look from memory finds a file this policy serves,
    /// false when it finds none (a name cached as missing, a directory, no read permission), nil
    /// when the caches cannot say.
    public func canServeInMemory(_ filename: [UInt8]) -> Bool? {
        do throws(FileRefusal) { return try lookInMemory(filename) == nil ? nil : true } catch { return false }
    }

    /// Whether a read or write of `filename` would be allowed now: the remap rules' `E` probe.
    public func canServe(_ filename: [UInt8], isWrite: Bool) -> Bool {
        do {
            if isWrite { _ = try writeTarget(filename) } else { _ = try openForReading(filename) }
            return true
        } catch {
            return false
        }
    }

    /// Starts an upload: the data goes to a temporary file beside the target (`writeTarget`).
    public func openForWriting(_ filename: [UInt8]) throws(FileRefusal) -> Upload {
        let target = try writeTarget(filename)
        do {
            return try Upload(directory: target.directory, name: target.name, mode: target.mode, owner: target.owner)
        } catch {
            throw error.fileRefusal
        }
    }

    /// Where an upload goes, and the mode and owner its file will have.
    struct WriteTarget: ~Copyable {
        var directory: Descriptor
        var name: [UInt8]
        var mode: mode_t
        var owner: (uid_t, gid_t)?
    }

    /// An upload's target: refused unless creation is allowed or the file exists and is
    /// world-writable (tftpd-hpa's rule).
    func writeTarget(_ filename: [UInt8]) throws(FileRefusal) -> WriteTarget {
        guard !readOnly else { throw FileRefusal(.denied, "Uploads are disabled (read-only server)") }
        guard let path = try relativePath(filename) else { throw FileRefusal(.denied, "Access violation") }
        let slash = path.lastIndex(of: UInt8(ascii: "/"))
        let directoryPath: [UInt8] = slash.map { Array(path[..<$0]) } ?? [UInt8(ascii: ".")]
        let name = Array(slash.map { path[($0 + 1)...] } ?? path)
        guard !name.isEmpty, name != [46], name != [46, 46] else { throw FileRefusal(.denied, "Access violation") }
        let directory = try open(directoryPath.isEmpty ? [46] : directoryPath[...], flags: O_RDONLY | O_DIRECTORY)
        var existing = stat()
        let exists = withCPath(name) { fstatat(directory.raw, $0, &existing, AT_SYMLINK_NOFOLLOW) } == 0
        var mode = mode_t(0o666) & ~umask
        var owner: (uid_t, gid_t)?
        if exists {
            guard existing.st_mode & S_IFMT == S_IFREG else { throw FileRefusal(.denied, "Not a regular file") }
            guard permissive || existing.st_mode & S_IWOTH != 0 else {
                throw FileRefusal(.denied, "File must have global write permissions")
            }
            // The upload renames over the target, which asks the OS about the directory only:
            // ask it about the file too, as the serving user (-u), who must be able to write it.
            let writable = withCPath(name) { openat(directory.raw, $0, O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC) }
            guard writable >= 0 else {
                let error = Errno.current
                throw error.rawValue == ETXTBSY ? error.fileRefusal : FileRefusal(.denied, "Access violation")
            }
            Glibc.close(writable)
            mode = existing.st_mode & 0o7777
            owner = (existing.st_uid, existing.st_gid)
        } else if errno != ENOENT {
            throw Errno.current.fileRefusal
        } else if !allowCreate {
            throw FileRefusal(.notFound, "File not found")
        }
        return WriteTarget(directory: directory, name: name, mode: mode, owner: owner)
    }
}
