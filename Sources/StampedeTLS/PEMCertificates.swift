import CStampedeTLS

/// The X.509 certificates of PEM text (as `openssl x509` writes them, one or more), each as DER,
/// read by OpenSSL: what `stampede tls-ca` puts in a signature list.
public struct PEMCertificate: Sendable {
    public let der: [UInt8]
    public let subject: String
    /// Basic constraints say CA (or it is a self-signed v1 certificate).
    public let isAuthority: Bool
    /// Seconds since the epoch.
    public let notAfter: Int64

    public struct Problem: Error, CustomStringConvertible {
        public let description: String
    }

    /// Every certificate of `pem`; none is a problem, and so is a block that is not one.
    public static func all(in pem: [UInt8]) throws(Problem) -> [PEMCertificate] {
        var found: [PEMCertificate] = []
        var at = 0
        while at < pem.count {
            var consumed = 0
            let length = pem[at...].withUnsafeBytes { rest in stampede_tls_pem_certificate(rest.baseAddress, rest.count, &consumed, nil, 0) }
            if length == 0 { break }
            if length < 0 { throw Problem(description: "not a PEM certificate (\(TLSSession.lastError(or: "it cannot be read")))") }
            var der = [UInt8](repeating: 0, count: length)
            _ = pem[at...].withUnsafeBytes { rest in stampede_tls_pem_certificate(rest.baseAddress, rest.count, &consumed, &der, der.count) }
            var subject = [CChar](repeating: 0, count: 256)
            var authority: Int32 = 0
            var notAfter: Int64 = 0
            _ = stampede_tls_der_describe(der, der.count, &subject, subject.count, &authority, &notAfter)
            found.append(PEMCertificate(der: der, subject: String(cText: subject), isAuthority: authority == 1, notAfter: notAfter))
            at += max(1, consumed)
        }
        if found.isEmpty { throw Problem(description: "no PEM certificate in it") }
        return found
    }
}
