import CStampedeTLS
import Glibc
import StampedeIO

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

    /// A context from the text of `certificate` (PEM, the leaf then its intermediates) and of
    /// `key` (PEM, unencrypted), each with the name its problems are said under; `now` in seconds
    /// since the epoch. Nothing of a context that fails a check is kept.
    public init(certificate: [UInt8], named certificateName: String, key: [UInt8], named keyName: String, profile: TLSProfile,
                kernelTLS: Bool, now: Int64) throws(Problem) {
        var which: Int32 = 0
        var error = [CChar](repeating: 0, count: 256)
        let made = certificate.withUnsafeBytes { chain in
            key.withUnsafeBytes { key in
                stampede_tls_context(chain.baseAddress, chain.count, key.baseAddress, key.count, profile.code, kernelTLS ? 1 : 0,
                                     &which, &error, error.count)
            }
        }
        guard let context = made else {
            let isKey = which == Int32(STAMPEDE_TLS_KEY.rawValue)
            throw Problem(file: isKey ? keyName : certificateName, reason: Self.explain(String(cText: error), key: isKey))
        }
        var notBefore: Int64 = 0
        var notAfter: Int64 = 0
        _ = stampede_tls_certificate_dates(context, &notBefore, &notAfter)
        guard notAfter < 0 || notAfter >= now, notBefore <= now else {
            stampede_tls_context_free(context)
            let reason = notBefore > now ? "the certificate is not valid before \(Self.date(notBefore))"
                                         : "the certificate expired on \(Self.date(notAfter))"
            throw Problem(file: certificateName, reason: reason)
        }
        self.context = context
        self.profile = profile
        self.notAfter = notAfter
        var type = [CChar](repeating: 0, count: 32)
        var bits: Int32 = 0
        _ = stampede_tls_certificate_key(context, &type, type.count, &bits)
        let keyType = String(cText: type)
        self.key = "\(keyType) \(bits)"
        var names = [CChar](repeating: 0, count: 512)
        _ = stampede_tls_certificate_names(context, &names, names.count)
        self.names = String(cText: names)
        var warnings: [String] = []
        if keyType != "RSA" {
            warnings.append("\(certificateName): an \(keyType) certificate: firmware without elliptic curves (many EDK2 builds) needs an RSA one")
        }
        if notAfter >= 0 && notAfter - now < 14 * 86_400 {
            warnings.append("\(certificateName): the certificate expires on \(Self.date(notAfter))")
        }
        self.warnings = warnings
    }

    /// A context from the files at `certificate` and `key`, read now by this process.
    public convenience init(certificate: String, key: String, profile: TLSProfile, kernelTLS: Bool, now: Int64) throws(Problem) {
        func read(_ path: String) throws(Problem) -> [UInt8] {
            do { return try readWholeFile(path) } catch { throw Problem(file: path, reason: "cannot read it: \(error)") }
        }
        try self.init(certificate: try read(certificate), named: certificate, key: try read(key), named: key, profile: profile,
                      kernelTLS: kernelTLS, now: now)
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
        case "no certificate or crl found", "no certificates or CRLs found": key ? "not a PEM private key" : "not a PEM certificate"
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
