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

    /// What the TLS connections together may hold encrypted and not yet sent, an equal share each
    /// (TCP_NOTSENT_LOWAT). Left to autotuning, each send buffer grows to tcp_wmem's maximum
    /// (4 MiB) of ciphertext: 2,000 firmware connections then hold gigabytes, the host enters TCP
    /// memory pressure, receive queues are pruned, and connections stall past a firmware's
    /// patience (bench-https's rack: 950 of 2,000 machines timed out). A fixed 128 KiB cap booted
    /// all of them but cost a hundred fast connections a third more CPU per GB (a wakeup per
    /// 128 KiB); shared out, a hundred get megabytes each and two thousand 128 KiB.
    static let unsentBudget = 256 << 20

    /// A TLS connection's cap when `open` connections share the budget: at least 128 KiB; nil
    /// (none: autotuning's own 4 MiB) when the share is 4 MiB or more.
    static func unsentLimit(open: Int) -> Int32? {
        let share = unsentBudget / max(1, open)
        return share >= 4 << 20 ? nil : Int32(max(128 << 10, share))
    }

    /// Gives a TLS connection's socket the cap of now, if it changed by a quarter or more since it
    /// was set (at accept, then at the once-a-second sweep, as connections come and go).
    func capUnsent(_ connection: Connection) {
        guard connection.tls != nil else { return }
        let limit = Self.unsentLimit(open: open.load(ordering: .relaxed))
        let old = connection.unsentLimit.map(Int.init) ?? Int(Int32.max)
        let new = limit.map(Int.init) ?? Int(Int32.max)
        guard abs(new - old) * 4 >= old else { return }
        // Int32.max: no cap of our own (the kernel's default is "unlimited").
        _ = stampede_tcp_unsent_limit(connection.fd, limit ?? Int32.max)
        connection.unsentLimit = limit
    }

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
