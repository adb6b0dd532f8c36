import Glibc
import StampedeIO
import StampedeProtocol

/// Why a storm transfer failed. Each one is counted and reported, never hidden or retried.
public enum StormFailure: Error, Equatable, Sendable, CustomStringConvertible {
    /// No answer within the retries: a lost transfer.
    case timedOut
    /// An HTTP fetch whose patience ran out while the server's bytes waited unread in the
    /// storm's own socket: the storm fell behind (its CPU), not the server.
    case stormBehind(unread: Int)
    /// The server sent ERROR with this code.
    case serverError(code: UInt16)
    /// An HTTP server answered with this status, not 200.
    case httpStatus(Int)
    /// The first byte that differs from the expected file (`--verify`).
    case corrupted(offset: Int)
    /// The transfer ended with another size than the expected file, or than the tsize announced.
    case wrongSize(expected: Int, received: Int)
    /// The server broke the protocol (an option we did not ask for, a block larger than blksize).
    case protocolError(String)
    /// The client socket could not be opened or reported an error (ECONNREFUSED).
    case socketError(Errno)
    /// The storm was stopped (SIGINT, SIGTERM) while this transfer ran.
    case interrupted

    /// The server has no such file: TFTP's ERROR 1, HTTP's 404.
    var isNotFound: Bool { self == .serverError(code: ErrorCode.fileNotFound.rawValue) || self == .httpStatus(404) }

    /// The failure's kind, for counting.
    public var kind: String {
        switch self {
        case .timedOut: return "timed out"
        case .stormBehind: return "storm behind"
        case .serverError(let code): return "server error \(code)"
        case .httpStatus(let status): return "HTTP status \(status)"
        case .corrupted: return "corrupted"
        case .wrongSize: return "wrong size"
        case .protocolError: return "protocol error"
        case .socketError(let errno): return "socket error \(errno)"
        case .interrupted: return "interrupted"
        }
    }

    public var description: String {
        switch self {
        case .corrupted(let offset): return "corrupted: byte \(offset) differs from the expected file"
        case .wrongSize(let expected, let received): return "wrong size: \(received) bytes, expected \(expected)"
        case .protocolError(let what): return "protocol error: \(what)"
        case .stormBehind(let unread): return "storm behind: timed out with \(unread) bytes of the server's unread in its socket"
        default: return kind
        }
    }
}

extension StormFailure {
    /// What the client machine found, in the storm's terms.
    init(_ failure: ClientFailure) {
        switch failure {
        case .timedOut: self = .timedOut
        case .serverError(let code, _): self = .serverError(code: code)
        case .wrongSize(let expected, let received): self = .wrongSize(expected: expected, received: received)
        case .protocolError(let what): self = .protocolError(what)
        }
    }
}
