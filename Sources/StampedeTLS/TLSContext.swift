import CStampedeTLS
import Glibc

/// A server's certificate chain and key, loaded into an OpenSSL context with a profile: what
/// every handshake of an `--https` server presents until the next reload (`TLSIdentity`). Made
/// only from files that pass every check: readable, PEM, the key the certificate's, valid now.
public final class TLSContext: @unchecked Sendable {
    /// Why a context could not be made: the file and the reason, for the operator.
    public struct Problem: Error, Equatable, CustomStringConvertible {
        public var file: String
        public var reason: String
        public var description: String { "\(file): \(reason)" }
    }

    let context: OpaquePointer
    public let profile: TLSProfile
    /// The leaf's subject alternative names (its subject when it has none), for the start's line.
    public let names: String
    /// The leaf's key, "RSA 2048".
    public let key: String
    /// When the leaf expires, seconds since the epoch.
    public let notAfter: Int64
    /// Said at start: what firmware may not accept.
    public let warnings: [String]

    /// Loads `certificate` (PEM, the leaf then its intermediates) and `key` (PEM, unencrypted);
    /// `now` in seconds since the epoch.
    public init(certificate: String, key keyFile: String, profile: TLSProfile, kernelTLS: Bool, now: Int64) throws(Problem) {
        for file in [certificate, keyFile] {
            let fd = open(file, O_RDONLY | O_CLOEXEC)
            if fd < 0 { throw Problem(file: file, reason: "cannot read it: \(String(cString: strerror(errno)))") }
            close(fd)
        }
        var which: Int32 = 0
        var error = [CChar](repeating: 0, count: 256)
        guard let context = stampede_tls_context(certificate, keyFile, profile.code, kernelTLS ? 1 : 0, &which, &error, error.count) else {
            let file = which == Int32(STAMPEDE_TLS_KEY.rawValue) ? keyFile : certificate
            throw Problem(file: file, reason: Self.explain(String(cText: error), key: file == keyFile))
        }
        self.context = context
        self.profile = profile
        var notBefore: Int64 = 0
        var notAfter: Int64 = 0
        _ = stampede_tls_certificate_dates(context, &notBefore, &notAfter)
        self.notAfter = notAfter
        var type = [CChar](repeating: 0, count: 32)
        var bits: Int32 = 0
        _ = stampede_tls_certificate_key(context, &type, type.count, &bits)
        let keyType = String(cText: type)
        key = "\(keyType) \(bits)"
        var names = [CChar](repeating: 0, count: 512)
        _ = stampede_tls_certificate_names(context, &names, names.count)
        self.names = String(cText: names)
        if notAfter >= 0 && notAfter < now {
            throw Problem(file: certificate, reason: "the certificate expired on \(Self.date(notAfter))")
        }
        if notBefore > now {
            throw Problem(file: certificate, reason: "the certificate is not valid before \(Self.date(notBefore))")
        }
        var warnings: [String] = []
        if keyType != "RSA" {
            warnings.append("\(certificate): an \(keyType) certificate: firmware without elliptic curves (many EDK2 builds) needs an RSA one")
        }
        if notAfter >= 0 && notAfter - now < 14 * 86_400 {
            warnings.append("\(certificate): the certificate expires on \(Self.date(notAfter))")
        }
        self.warnings = warnings
    }

    deinit { stampede_tls_context_free(context) }

    /// OpenSSL's reasons, said for an operator.
    static func explain(_ reason: String, key: Bool) -> String {
        switch reason {
        case "no start line": key ? "not a PEM private key" : "not a PEM certificate"
        case "unsupported" where key: "not a PEM private key"
        case "bad decrypt", "interrupted or cancelled", "problems getting password":
            "an encrypted key: the server starts unattended, give it the key unencrypted (readable by its user alone)"
        case "key values mismatch": "the key is not the certificate's (it does not match its public key)"
        case "": "cannot be loaded"
        default: reason
        }
    }

    /// "2027-01-31 12:00:00 UTC".
    public static func date(_ seconds: Int64) -> String {
        var time = time_t(seconds)
        var parts = tm()
        gmtime_r(&time, &parts)
        var text = [CChar](repeating: 0, count: 32)
        strftime(&text, text.count, "%Y-%m-%d %H:%M:%S UTC", &parts)
        return String(cText: text)
    }

    /// A session for an accepted socket; nil when OpenSSL has no memory for it.
    func session(fd: Int32) -> TLSSession? {
        stampede_tls_session(context, fd).map(TLSSession.init)
    }
}
