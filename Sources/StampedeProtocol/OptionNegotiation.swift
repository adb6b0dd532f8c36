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

/// RFC 2347 negotiation, by the option table (`TFTPOption`). Options are answered only when
/// asked for and acceptable: a value below the range or not a number is dropped, one above the
/// range (or the server's limit) clamped or dropped as the table says, and the transfer then
/// runs without what was dropped, as tftpd-hpa does. Unknown options are ignored.
public struct OptionNegotiation: Equatable, Sendable {
    public var options = TransferOptions()
    /// The OACK body in the order the client asked; empty means "no OACK, start at once".
    public var acknowledged: [(name: String, value: String)] = []

    public static func == (a: OptionNegotiation, b: OptionNegotiation) -> Bool {
        a.options == b.options && a.acknowledged.elementsEqual(b.acknowledged, by: { $0.name == $1.name && $0.value == $1.value })
    }

    /// - Parameters:
    ///   - fileSize: the size a read will transfer (after netascii conversion), for `tsize`.
    ///   - maxBlockSize: the effective blksize ceiling for this request (`-B`, or the MTU's).
    public init(requested: [(name: String, value: String)], isWrite: Bool, fileSize: Int?,
                maxBlockSize: Int, limits: OptionLimits) {
        var seen = Set<String>()
        for (name, value) in requested where !limits.refused.contains(name) && seen.insert(name).inserted {
            guard let option = TFTPOption(rawValue: name), var number = TFTPOption.decimal(value),
                  number >= option.range.lowerBound else { continue }
            let ceiling: Int
            switch option {
            case .blksize: ceiling = min(option.range.upperBound, maxBlockSize)
            case .windowsize: ceiling = min(option.range.upperBound, max(1, limits.maxWindowSize))
            case .timeout, .tsize: ceiling = option.range.upperBound
            }
            if number > ceiling {
                guard option.excess == .clamp else { continue }
                number = ceiling
            }
            switch option {
            case .blksize: options.blockSize = number
            case .windowsize: options.windowSize = number
            case .timeout: options.timeoutSeconds = number
            case .tsize:
                // RFC 2349: a WRQ states the size; an RRQ sends 0 and the server answers the size.
                guard let size = isWrite ? number : fileSize else { continue }
                number = size
                options.transferSize = size
            }
            acknowledged.append((name, String(number)))
        }
    }

    /// "blksize=1468 tsize=0" for the transfer log line.
    public var summary: String {
        acknowledged.map { "\($0.name)=\($0.value)" }.joined(separator: " ")
    }
}

/// The client's side of RFC 2347: an OACK may hold only options the client asked for, with the
/// values the option table lets it accept (`TFTPOption.agreement`): `stampede get`, `put` and
/// `storm` read OACKs through this, and answer a refused one with ERROR 8. Whatever the server
/// or the caller sends, nothing here traps.
public struct OptionAckError: Error, Equatable, CustomStringConvertible {
    public let description: String
}

extension TransferOptions {
    public init(optionAck body: UnsafeRawBufferPointer, asked: [(name: String, value: String)]) throws(OptionAckError) {
        self.init()
        for (name, value) in OptionList.parse(body) {
            let shown = sanitizedForLog(value.utf8, limit: 32)
            guard let number = TFTPOption.decimal(value) else {
                throw OptionAckError(description: "option \(sanitizedForLog(name.utf8, limit: 32))=\(shown) is no number")
            }
            guard let request = asked.first(where: { $0.name == name }), let option = TFTPOption(rawValue: name) else {
                throw OptionAckError(description: "the server acknowledged \(sanitizedForLog(name.utf8, limit: 32))=\(shown), which we did not ask for")
            }
            let asked = TFTPOption.decimal(request.value)
            let agreed: Bool
            switch option.agreement {
            case .atMostAsked: agreed = number <= asked ?? 0
            case .asAsked: agreed = number == asked
            case .serverStates: agreed = true
            }
            guard agreed && option.range.contains(number) else {
                throw OptionAckError(description: "the server acknowledged \(name)=\(shown), which is not what we asked (\(sanitizedForLog(request.value.utf8, limit: 32)))")
            }
            switch option {
            case .blksize: blockSize = number
            case .windowsize: windowSize = number
            case .timeout: timeoutSeconds = number
            case .tsize: transferSize = number
            }
        }
    }
}
