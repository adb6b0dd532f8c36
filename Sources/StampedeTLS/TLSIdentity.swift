import Glibc
import Synchronization

/// What an `--https` server presents: its certificate and key files, its profile, and the
/// context loaded from them. SIGHUP loads the files again (`reload`); a handshake that begins
/// after it uses the new context, one under way (and every connection already open) keeps the
/// one it began with. A reload that fails keeps the old context and says why.
public final class TLSIdentity: Sendable {
    public let certificate: String
    public let key: String
    public let profile: TLSProfile
    public let kernelTLS: Bool
    private let current: Mutex<TLSContext>

    public init(certificate: String, key: String, profile: TLSProfile, kernelTLS: Bool) throws(TLSContext.Problem) {
        self.certificate = certificate
        self.key = key
        self.profile = profile
        self.kernelTLS = kernelTLS
        current = Mutex(try TLSContext(certificate: certificate, key: key, profile: profile, kernelTLS: kernelTLS,
                                        now: Int64(time(nil))))
    }

    public var context: TLSContext { current.withLock { $0 } }

    /// Loads the files again: the new context, or why not (the old one stays).
    public func reload() -> Result<TLSContext, TLSContext.Problem> {
        do {
            let loaded = try TLSContext(certificate: certificate, key: key, profile: profile, kernelTLS: kernelTLS, now: Int64(time(nil)))
            current.withLock { $0 = loaded }
            return .success(loaded)
        } catch {
            return .failure(error)
        }
    }

    /// A session for an accepted socket with the context of now.
    public func session(fd: Int32) -> TLSSession? { context.session(fd: fd) }

    /// Asked as the serving user (after -u and -s): the files a SIGHUP could not read again, and
    /// why, said at start so that a reload's failure is no surprise.
    public var unreadableForReload: [String] {
        [certificate, key].compactMap { file in
            let fd = open(file, O_RDONLY | O_CLOEXEC)
            if fd >= 0 {
                close(fd)
                return nil
            }
            return "\(file): \(String(cString: strerror(errno)))"
        }
    }

    /// A warning when the key file may be read by users other than its owner and group: the key
    /// is the server's identity.
    public var keyExposure: String? {
        var info = stat()
        guard stat(key, &info) == 0, info.st_mode & S_IROTH != 0 else { return nil }
        return "\(key): the private key is readable by every user (chmod 0600, or 0640 with the server's group)"
    }
}
