import Glibc
import StampedeIO
import StampedeServing
import StampedeTLS

/// What a connection's bytes go through: its socket, or its TLS session over the socket. The one
/// body writer (`HTTPLoop.write`) asks it for what differs: how a head joins the start of its
/// body, how large a write from memory is, whether a body goes by sendfile, and what a write did.
enum Transport {
    case plain(fd: Int32)
    case tls(TLSSession)

    /// What one write did.
    enum Sent: Equatable {
        case bytes(Int)
        /// Some bytes, fewer than asked, and the socket is full: a short write on a socket (send,
        /// sendmsg, sendfile) is one whose send found no room (the kernel marked the socket as
        /// waiting for room, so the next readiness comes): asking again would only hear EAGAIN.
        case filled(Int)
        /// The socket is full: its next readiness goes on.
        case wouldBlock
        /// A signal came first (plain): edge-triggered, no readiness would come again.
        case interrupted
        /// The client closed, or reset, the connection: why, as the log says it.
        case closed(String)
        case failed(String)
    }

    /// Whether a body the cache holds as a memfd, or a file read as it goes, goes by sendfile
    /// (plain sockets; TLS where the kernel encrypts, SSL_sendfile). Otherwise from memory.
    var sendsFiles: Bool {
        switch self {
        case .plain: true
        case .tls(let session): session.kernelSends
        }
    }

    /// The most one write from memory takes: a turn's budget on a socket, a record over TLS.
    func memoryChunk(budget: Int) -> Int {
        switch self {
        case .plain: budget
        case .tls: HTTPLoop.tlsRecord
        }
    }

    /// How much of a body held in memory goes with the rest of the head (`headLeft` bytes) in
    /// one write: on a socket, as much as the budget (one sendmsg); over TLS, all of it when both
    /// fit one record, else none.
    func joined(headLeft: Int, bodyLeft: Int, budget: Int) -> Int {
        switch self {
        case .plain: min(bodyLeft, budget)
        case .tls: headLeft + bodyLeft <= HTTPLoop.tlsRecord ? bodyLeft : 0
        }
    }

    /// The counter of body bytes by the way they went (HTTPS only): encrypted by the kernel
    /// (`viaSendfile`) or by OpenSSL.
    func bodyPath(viaSendfile: Bool) -> WorkerMetrics.Count? {
        switch self {
        case .plain: nil
        case .tls: viaSendfile ? .tlsKernelBytes : .tlsWrittenBytes
        }
    }

    /// The rest of a head alone; `more`: body bytes follow (a socket holds the head back for
    /// them, MSG_MORE: sendfile flags all but its last piece "more" as well, and the last piece
    /// pushes the whole answer out in full segments, with no TCP_CORK set and cleared per answer).
    func write(head: UnsafeRawBufferPointer, more: Bool) -> Sent {
        switch self {
        case .plain(let fd): Self.sent(send(fd, head.baseAddress, head.count, Int32(MSG_NOSIGNAL) | (more ? Int32(MSG_MORE) : 0)), of: head.count)
        case .tls: write(head)
        }
    }

    /// The rest of a head and the start of its body in one write: one sendmsg on a socket; over
    /// TLS the two copied side by side into `scratch`, one record.
    func write(head: UnsafeRawBufferPointer, body: UnsafeRawBufferPointer, scratch: UnsafeMutableRawBufferPointer) -> Sent {
        switch self {
        case .plain(let fd):
            var vectors = (iovec(iov_base: UnsafeMutableRawPointer(mutating: head.baseAddress), iov_len: head.count),
                           iovec(iov_base: UnsafeMutableRawPointer(mutating: body.baseAddress), iov_len: body.count))
            return Self.sent(withUnsafeMutableBytes(of: &vectors) { raw in
                var message = msghdr()
                message.msg_iov = raw.baseAddress!.assumingMemoryBound(to: iovec.self)
                message.msg_iovlen = 2
                return sendmsg(fd, &message, Int32(MSG_NOSIGNAL))
            }, of: head.count + body.count)
        case .tls(let session):
            let record = UnsafeMutableRawBufferPointer(rebasing: scratch[..<(head.count + body.count)])
            record.copyMemory(from: head)
            UnsafeMutableRawBufferPointer(rebasing: record[head.count...]).copyMemory(from: body)
            return Self.sent(session.write(UnsafeRawBufferPointer(record)))
        }
    }

    /// Bytes from memory.
    func write(_ bytes: UnsafeRawBufferPointer) -> Sent {
        switch self {
        case .plain(let fd): Self.sent(send(fd, bytes.baseAddress, bytes.count, Int32(MSG_NOSIGNAL)), of: bytes.count)
        case .tls(let session): Self.sent(session.write(bytes))
        }
    }

    /// `count` bytes of `file` from `offset`, by sendfile (only where `sendsFiles`). `.bytes(0)`:
    /// the file ends before them.
    func sendfile(from file: Int32, offset: Int, count: Int) -> Sent {
        switch self {
        case .plain(let fd):
            var at = off_t(offset)
            return Self.sent(Glibc.sendfile(fd, file, &at, count), of: count)
        case .tls(let session):
            return Self.sent(session.sendfile(from: file, offset: offset, count: count))
        }
    }

    /// What a write of `count` bytes on a socket did (`filled`: fewer than asked).
    private static func sent(_ result: Int, of count: Int) -> Sent {
        result > 0 && result < count ? .filled(result) : sent(result)
    }

    private static func sent(_ result: Int) -> Sent {
        if result >= 0 { return .bytes(result) }
        let error = errno
        switch error {
        case EAGAIN: return .wouldBlock
        case EINTR: return .interrupted
        case EPIPE, ECONNRESET: return .closed("\(Errno(error))")
        default: return .failed("\(Errno(error))")
        }
    }

    private static func sent(_ outcome: TLSSession.Outcome) -> Sent {
        switch outcome {
        case .bytes(let count): .bytes(count)
        case .wouldBlock: .wouldBlock
        case .closed: .closed("the client closed the connection")
        case .failed(let why): .failed("TLS: \(why)")
        }
    }
}

extension Connection {
    var transport: Transport { tls.map(Transport.tls) ?? .plain(fd: fd) }
}
