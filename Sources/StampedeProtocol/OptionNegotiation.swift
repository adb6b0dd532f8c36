/// The server's limits on what a client may negotiate (`-B`, `-W`, `-r`).
public struct OptionLimits: Sendable, Equatable {
    /// Largest blksize granted; the default is derived per request from the interface MTU.
    public var maxBlockSize: Int?
    public var maxWindowSize: Int
    /// Options named with `-r`: never acknowledged, as if unknown.
    public var refused: Set<String>

    public init(maxBlockSize: Int? = nil, maxWindowSize: Int = 64, refused: Set<String> = []) {
        self.maxBlockSize = maxBlockSize
        self.maxWindowSize = maxWindowSize
        self.refused = refused
    }
}

/// What one transfer runs with after negotiation.
public struct TransferOptions: Equatable, Sendable {
    public var blockSize = 512
    public var windowSize = 1
    /// Retransmit timeout the client asked for (RFC 2349), in seconds.
    public var timeoutSeconds: Int?
    /// The size the client announced on a WRQ, or that we report on an RRQ.
    public var transferSize: Int?

    public init() {}
}

/// RFC 2347 negotiation. Options are answered only when asked for and acceptable: values out of
/// range are clamped where the RFC allows (blksize, windowsize above the maximum) and dropped
/// where it does not (below the minimum, not a number), and the transfer then runs without them,
/// as tftpd-hpa does. Unknown options are ignored.
public struct OptionNegotiation: Equatable, Sendable {
    public var options = TransferOptions()
    /// The OACK body in the order the client asked; empty means "no OACK, start at once".
    public var acknowledged: [(name: String, value: String)] = []

    public static func == (a: OptionNegotiation, b: OptionNegotiation) -> Bool {
        a.options == b.options && a.acknowledged.elementsEqual(b.acknowledged, by: { $0.name == $1.name && $0.value == $1.value })
    }

    public static let blockSizeRange = 8...65464
    public static let timeoutRange = 1...255
    /// RFC 7440's range, what a client may ask.
    public static let windowSizeRange = 1...65535
    /// What Stampede grants or takes: a window of 32,768 blocks or more makes block numbers
    /// ambiguous (they wrap at 65,536, so a reordered old ACK would look new).
    public static let grantedWindowSizeRange = 1...32767

    /// - Parameters:
    ///   - fileSize: the size a read will transfer (after netascii conversion), for `tsize`.
    ///   - maxBlockSize: the effective blksize ceiling for this request (`-B`, or the MTU's).
    public init(requested: [(name: String, value: String)], isWrite: Bool, fileSize: Int?,
                maxBlockSize: Int, limits: OptionLimits) {
        var seen = Set<String>()
        for (name, value) in requested where !limits.refused.contains(name) && seen.insert(name).inserted {
            let number = Self.decimal(value)
            switch name {
            case "blksize":
                guard let n = number, n >= Self.blockSizeRange.lowerBound else { continue }
                options.blockSize = min(n, Self.blockSizeRange.upperBound, maxBlockSize)
                acknowledged.append((name, String(options.blockSize)))
            case "timeout":
                guard let n = number, Self.timeoutRange.contains(n) else { continue }
                options.timeoutSeconds = n
                acknowledged.append((name, String(n)))
            case "tsize":
                if isWrite {
                    guard let n = number else { continue }
                    options.transferSize = n
                    acknowledged.append((name, String(n)))
                } else {
                    // RFC 2349: the client sends 0 and the server answers the size.
                    guard let size = fileSize else { continue }
                    options.transferSize = size
                    acknowledged.append((name, String(size)))
                }
            case "windowsize":
                guard let n = number, n >= Self.windowSizeRange.lowerBound else { continue }
                options.windowSize = min(n, Self.grantedWindowSizeRange.upperBound, max(1, limits.maxWindowSize))
                acknowledged.append((name, String(options.windowSize)))
            default:
                continue
            }
        }
    }

    /// A non-negative decimal without sign or spaces; saturates instead of overflowing.
    public static func decimal(_ text: String) -> Int? {
        guard !text.isEmpty, text.utf8.count <= 20 else { return nil }
        var value = 0
        for byte in text.utf8 {
            guard byte >= 48, byte <= 57 else { return nil }
            let (product, overflow) = value.multipliedReportingOverflow(by: 10)
            value = overflow ? Int.max : min(Int.max - 9, product) + Int(byte - 48)
        }
        return value
    }

    /// "blksize=1468 tsize=0" for the transfer log line.
    public var summary: String {
        acknowledged.map { "\($0.name)=\($0.value)" }.joined(separator: " ")
    }
}

/// The client's side of RFC 2347: an OACK may hold only options the client asked for, with
/// values it can live with: blksize within the RFC's range and no larger than asked, windowsize
/// likewise (and below the 32,768 that keeps block numbers unambiguous), timeout as asked, any
/// tsize. `stampede get`, `put` and `storm` read OACKs through this, and answer a refused one
/// with ERROR 8. Whatever the server or the caller sends, nothing here traps.
public struct OptionAckError: Error, Equatable, CustomStringConvertible {
    public let description: String
}

extension TransferOptions {
    public init(optionAck body: UnsafeRawBufferPointer, asked: [(name: String, value: String)]) throws(OptionAckError) {
        self.init()
        for (name, value) in PacketWriter.parseOptions(body) {
            let shown = sanitizedForLog(value.utf8, limit: 32)
            guard let number = OptionNegotiation.decimal(value) else {
                throw OptionAckError(description: "option \(sanitizedForLog(name.utf8, limit: 32))=\(shown) is no number")
            }
            guard let request = asked.first(where: { $0.name == name }) else {
                throw OptionAckError(description: "the server acknowledged \(sanitizedForLog(name.utf8, limit: 32))=\(shown), which we did not ask for")
            }
            let limit = OptionNegotiation.decimal(request.value)
            switch name {
            case "blksize" where OptionNegotiation.blockSizeRange.contains(number) && number <= limit ?? 0:
                blockSize = number
            case "windowsize" where OptionNegotiation.grantedWindowSizeRange.contains(number) && number <= limit ?? 0:
                windowSize = number
            case "timeout" where OptionNegotiation.timeoutRange.contains(number) && number == limit:
                timeoutSeconds = number
            case "tsize":
                transferSize = number
            default:
                throw OptionAckError(description: "the server acknowledged \(name)=\(shown), which is not what we asked (\(sanitizedForLog(request.value.utf8, limit: 32)))")
            }
        }
    }
}
