import CStampedeTLS
import Glibc

/// One connection's TLS, a server's (`TLSIdentity`) or a client's (`TLSClient`): the OpenSSL
/// session over its socket, owned by the connection. Nonblocking: a call the socket cannot
/// complete says `.wouldBlock`, and the loop calls it again when the socket is ready (a write
/// with at least as many bytes).
///
/// Its last I/O is `shutdown`, which the connection's one close path calls before the socket
/// closes (nginx's ngx_ssl_shutdown); the deinit frees memory and writes nothing, for by then the
/// descriptor may be closed and its number another connection's or a file's.
public final class TLSSession {
    let session: OpaquePointer
    /// The handshake finished without a fatal error.
    public private(set) var established = false
    private var failed = false
    private var shut = false

    init(_ session: OpaquePointer) { self.session = session }

    deinit { stampede_tls_free(session) }

    /// Ends the session, before its socket closes: close_notify (one try) when `orderly` and the
    /// session is sound; nothing when not orderly, so that an answer cut short (its file changed
    /// mid-answer) reads as cut short, as nginx leaves it. Once; later calls do nothing.
    public func shutdown(orderly: Bool) {
        guard !shut else { return }
        shut = true
        if orderly && established && !failed { stampede_tls_shutdown(session) }
    }

    public enum Handshake: Equatable {
        case done
        case wouldBlock
        /// The client sent a plain HTTP request to the TLS port.
        case plainHTTP
        /// The client went away.
        case closed
        /// It failed: OpenSSL's reason.
        case failed(String)
    }

    public func handshake() -> Handshake {
        switch stampede_tls_handshake(session) {
        case 1:
            established = true
            return .done
        case -EAGAIN: return .wouldBlock
        case -EBADMSG:
            failed = true
            return .plainHTTP
        case -ECONNRESET:
            failed = true
            return .closed
        default:
            failed = true
            return .failed(Self.lastError(or: "the handshake failed"))
        }
    }

    /// What a read or a write came to.
    public enum Outcome: Equatable {
        case bytes(Int)
        case wouldBlock
        /// The client closed (close_notify or EOF) or reset.
        case closed
        case failed(String)
    }

    /// Decrypted bytes into `buffer`.
    public func read(into buffer: UnsafeMutableRawBufferPointer) -> Outcome {
        outcome(stampede_tls_read(session, buffer.baseAddress, buffer.count))
    }

    /// At most a record of `bytes`; after `.wouldBlock`, the same bytes (or more) again.
    public func write(_ bytes: UnsafeRawBufferPointer) -> Outcome {
        outcome(stampede_tls_write(session, bytes.baseAddress, bytes.count))
    }

    /// Whether the kernel encrypts this session's sends (kernel TLS took over): then `sendfile`
    /// sends from a file with no copy.
    public var kernelSends: Bool { established && stampede_tls_kernel_send(session) == 1 }

    /// Through kernel TLS, from `fd` at `offset`.
    public func sendfile(from fd: Int32, offset: Int, count: Int) -> Outcome {
        let result = stampede_tls_sendfile(session, fd, off_t(offset), count)
        // Its errors are sendfile's own: errno says them, OpenSSL's queue does not.
        guard result < 0, ![-EAGAIN, -EPIPE].contains(Int32(result)) else { return outcome(result) }
        failed = true
        return .failed("sendfile: \(String(cString: strerror(Int32(-result))))")
    }

    private func outcome(_ result: Int) -> Outcome {
        if result > 0 { return .bytes(result) }
        switch Int32(-result) {
        case 0, ECONNRESET, EPIPE:
            failed = true
            return .closed
        case EAGAIN: return .wouldBlock
        default:
            failed = true
            return .failed(Self.lastError(or: "the TLS layer failed"))
        }
    }

    /// "TLSv1.2 DHE-RSA-AES128-GCM-SHA256", for the log.
    public var negotiated: String {
        var text = [CChar](repeating: 0, count: 96)
        _ = stampede_tls_describe(session, &text, text.count)
        return String(cText: text)
    }

    public var resumed: Bool { stampede_tls_resumed(session) == 1 }

    /// Whether the client's ClientHello came: a connection closed before it was no handshake.
    public var began: Bool { stampede_tls_began(session) == 1 }

    /// OpenSSL's reason for the last failure, or `fallback` when its queue holds none.
    static func lastError(or fallback: String) -> String {
        var text = [CChar](repeating: 0, count: 256)
        stampede_tls_error(&text, text.count)
        let reason = String(cText: text)
        return reason.isEmpty ? fallback : reason
    }
}
