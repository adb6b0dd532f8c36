import Atomics
import CStampedeSys
import Glibc
import StampedeBase
import StampedeHTTPWire
import StampedeTLS

/// `--https`: what the loop does differently for a connection that speaks TLS. The connection's
/// life is the same (`ConnectionState`, with the handshake first); its bytes go through its
/// `TLSSession` (`Transport.tls`): read decrypted, and written by the one body writer
/// (`HTTPLoop+Write.swift`) from the file image's memory (SSL_write encrypts from it, no other
/// copy), or, where the kernel has TLS, from the image's memfd by SSL_sendfile.
extension HTTPLoop {
    /// The most one TLS write takes: a record's plaintext.
    static let tlsRecord = 16384

    /// Goes on with a TLS connection's handshake; what comes next: requests (done), the refusal
    /// of plain HTTP, a wait for the socket, or the close of a failed one.
    func handshake(_ connection: Connection, now: Nanoseconds) -> ConnectionState.Action {
        guard let tls = connection.tls else { return connection.state.handle(.handshakeFailed, now: now) }
        let outcome = tls.handshake()
        if outcome != .wouldBlock && connection.inHandshake {
            // Done, or over: its place among its client's handshakes goes back.
            connection.inHandshake = false
            clients?.handshakeEnded(connection.peer)
        }
        switch outcome {
        case .done:
            metrics.add(tls.resumed ? .tlsResumed : .tlsHandshakes)
            logger.debug("\(connection.peer): TLS \(tls.negotiated)\(tls.resumed ? ", resumed" : "")")
            return connection.state.handle(.handshakeDone, now: now)
        case .wouldBlock:
            return .none
        case .plainHTTP:
            // As nginx: the client (and whoever reads its error) learns what the port speaks. In
            // plain text, the session dropped; the answer is the connection's last.
            metrics.add(.tlsPlainHTTP)
            connection.tls = nil
            let next = connection.state.handle(.headRefused, now: now)
            responder.refuse(.badRequest, "plain HTTP sent to the HTTPS port", withBody: true, on: connection, started: now)
            return next
        case .closed:
            // A connection closed before its ClientHello (a port check, a load balancer's probe)
            // was no handshake: neither a failure nor a line. One closed after it is what firmware
            // that does not trust the certificate (its CA, or its names) does once it has seen it.
            if tls.began {
                metrics.add(.tlsHandshakeFailures)
                logRefusal("""
                    \(connection.peer): TLS handshake failed: the client closed the connection before it finished \
                    (a client that does not trust the certificate or its names does so)
                    """, now: now)
            }
        case .failed(let why):
            metrics.add(.tlsHandshakeFailures)
            logRefusal("\(connection.peer): TLS handshake failed: \(why)", now: now)
        }
        return connection.state.handle(.handshakeFailed, now: now)
    }
}
