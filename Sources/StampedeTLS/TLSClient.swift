import CStampedeTLS

/// The load generator's side of TLS (`storm --tls-ca`): a context that trusts the CAs of a file
/// and nothing else, and speaks TLS 1.2 as UEFI firmware and iPXE do; each session a cold start
/// (no session kept), as each machine of a rack is.
public final class TLSClient: @unchecked Sendable {
    let context: OpaquePointer

    public init(trusting caFile: String) throws(TLSContext.Problem) {
        var error = [CChar](repeating: 0, count: 256)
        guard let context = stampede_tls_client_context(caFile, &error, error.count) else {
            let reason = String(decoding: error.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            throw TLSContext.Problem(file: caFile, reason: reason.isEmpty ? "no CA certificate in it" : reason)
        }
        self.context = context
    }

    deinit { stampede_tls_context_free(context) }

    /// A session for a connecting socket to `host`: an address, or a name the certificate must
    /// hold. Nil when OpenSSL has no memory for it.
    public func session(fd: Int32, host: String) -> TLSSession? {
        stampede_tls_client_session(context, fd, host).map(TLSSession.init)
    }
}
