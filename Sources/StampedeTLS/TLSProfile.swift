import CStampedeTLS

/// Which TLS an `--https` server speaks (`--tls-profile`).
public enum TLSProfile: String, CaseIterable, Sendable {
    /// TLS 1.2 and 1.3; after the ECDHE suites, DHE-RSA and RSA key exchange with AES-GCM and
    /// AES-CBC-SHA256: what EDK2's TlsDxe can use in builds without elliptic curves. The default.
    case firmware
    /// TLS 1.2 with ECDHE and AEAD suites only, and TLS 1.3: for sites whose clients all have
    /// elliptic curves.
    case modern

    var code: Int32 { self == .modern ? Int32(STAMPEDE_TLS_MODERN.rawValue) : Int32(STAMPEDE_TLS_FIRMWARE.rawValue) }

    /// The TLS 1.2 suites offered, the server's order first, in OpenSSL's names.
    public var suites: [String] {
        String(cString: stampede_tls_cipher_list(code)).split(separator: ":").map(String.init)
    }

    /// What the start says of it.
    public var summary: String {
        switch self {
        case .firmware: "firmware (TLS 1.2 and 1.3; ECDHE, then DHE-RSA and RSA key exchange for firmware without elliptic curves)"
        case .modern: "modern (TLS 1.2 with ECDHE and AEAD suites, TLS 1.3)"
        }
    }
}
