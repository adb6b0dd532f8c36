import Glibc
import StampedeIO
import Synchronization

/// What an `--https` server presents: its certificate and key files, its profile, and the
/// context loaded from them. SIGHUP loads the files again (`reload`); a handshake that begins
/// after it uses the new context, one under way (and every connection already open) keeps the
/// one it began with. A reload that fails keeps the old context and says why.
///
/// The files are held (`HeldFile`: their directories opened at start, as the starting user), so
/// that a reload under `-s` reads them where the package and the renewal put them, outside the
/// chroot, never in the served root; under `-u` it reads them as the serving user, whose groups
/// (`ssl-cert`) are kept for that.
public final class TLSIdentity: Sendable {
    public let certificate: HeldFile
    public let key: HeldFile
    public let profile: TLSProfile
    public let kernelTLS: Bool
    private let current: Mutex<TLSContext>
    /// Reloads that loaded the files, and that failed (the old context kept): for the metrics.
    private let reloads = Atomic<Int>(0)
    private let failedReloads = Atomic<Int>(0)

    public init(certificate: String, key: String, profile: TLSProfile, kernelTLS: Bool) throws(TLSContext.Problem) {
        func held(_ path: String) throws(TLSContext.Problem) -> HeldFile {
            do { return try HeldFile(path) } catch { throw TLSContext.Problem(file: path, reason: "cannot open its directory: \(error)") }
        }
        self.certificate = try held(certificate)
        self.key = try held(key)
        self.profile = profile
        self.kernelTLS = kernelTLS
        current = Mutex(try Self.load(self.certificate, self.key, profile, kernelTLS))
    }

    private static func load(_ certificate: HeldFile, _ key: HeldFile, _ profile: TLSProfile, _ kernelTLS: Bool) throws(TLSContext.Problem) -> TLSContext {
        func read(_ file: HeldFile) throws(TLSContext.Problem) -> [UInt8] {
            do { return try file.read() } catch {
                let who = error.rawValue == EACCES ? " as uid \(getuid()) (groups \(Self.groups()))" : ""
                throw TLSContext.Problem(file: file.path, reason: "cannot read it\(who): \(error)")
            }
        }
        return try TLSContext(certificate: try read(certificate), named: certificate.path, key: try read(key), named: key.path,
                              profile: profile, kernelTLS: kernelTLS, now: Int64(time(nil)))
    }

    public var context: TLSContext { current.withLock { $0 } }

    /// Loads the files again: the new context, or why not (the old one stays).
    public func reload() -> Result<TLSContext, TLSContext.Problem> {
        do {
            let loaded = try Self.load(certificate, key, profile, kernelTLS)
            current.withLock { $0 = loaded }
            reloads.add(1, ordering: .relaxed)
            return .success(loaded)
        } catch {
            failedReloads.add(1, ordering: .relaxed)
            return .failure(error)
        }
    }

    /// Reloads that loaded the files, and that failed, since the start.
    public var reloadCounts: (loaded: Int, failed: Int) {
        (reloads.load(ordering: .relaxed), failedReloads.load(ordering: .relaxed))
    }

    /// A session for an accepted socket with the context of now.
    public func session(fd: Int32) -> TLSSession? { context.session(fd: fd) }

    /// Asked as the serving user (after -u and -s): the files a SIGHUP could not read again, and
    /// why, said at start so that a reload's failure is no surprise.
    public var unreadableForReload: [String] {
        [certificate, key].compactMap { file in
            do {
                _ = try file.read()
                return nil
            } catch {
                return "\(file.path): \(error)"
            }
        }
    }

    /// A warning when the key file may be read by users other than its owner and group: the key
    /// is the server's identity.
    public var keyExposure: String? {
        var info = stat()
        guard stat(key.path, &info) == 0, info.st_mode & S_IROTH != 0 else { return nil }
        return "\(key.path): the private key is readable by every user (chmod 0600, or 0640 with the server's group)"
    }

    /// This process's group IDs, primary first, for a message.
    static func groups() -> String {
        var ids = [gid_t](repeating: 0, count: 64)
        let count = getgroups(Int32(ids.count), &ids)
        return ([getgid()] + ids.prefix(Int(max(0, count)))).map { "\($0)" }.joined(separator: ",")
    }
}
