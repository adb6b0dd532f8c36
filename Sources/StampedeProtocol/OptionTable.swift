/// The options Stampede knows, one row each, as tftp-hpa 7.3's option table has them: the values
/// allowed, what a server does with a request's value above them, and what a client accepts
/// when the server acknowledges the option (which says who states the value). The server's
/// negotiation (`OptionNegotiation`), the client's check of an OACK (`TransferOptions(optionAck:)`)
/// and the command line's flags all read this table. Its order is the order of an OACK.
public enum TFTPOption: String, CaseIterable, Sendable {
    /// RFC 2348: bytes of a DATA payload.
    case blksize
    /// tftp-hpa: a blksize granted as the largest power of two not above the request (at most
    /// 32768). A valid blksize in the same request wins.
    case blksize2
    /// tftp-hpa 7.2: up to 255 bytes the server echoes, so that the client can match the reply to
    /// its request, and the server a resent request to its transfer. Not a number: its range is
    /// its length.
    case cookie
    /// tftp-hpa: the block number after 65535, 0 or 1 (7.2 refuses the rest).
    case rollover
    /// RFC 2349: the retransmit timeout, in seconds.
    case timeout
    /// RFC 2349: the transfer's size in bytes (0 in an RRQ: "tell me").
    case tsize
    /// tftp-hpa: the retransmit timeout in microseconds. A valid one wins over timeout.
    case utimeout
    /// RFC 7440: blocks sent before an ACK.
    case windowsize

    /// What a server does with a request's value above the range, or above its own limit.
    public enum Excess: Sendable {
        /// Grants its maximum instead (RFC 2348, RFC 7440).
        case clamp
        /// Leaves the option out, and the transfer runs without it (RFC 2349).
        case drop
    }

    /// What a client accepts in the OACK, given what it asked.
    public enum Agreement: Sendable {
        /// The client proposes, the server may lower (never raise) it.
        case atMostAsked
        /// The client states it, the server takes it as it is or not at all.
        case asAsked
        /// The server states it (the size it will send), whatever the client sent.
        case serverStates
    }

    /// The values granted and accepted (for `cookie`, its length in bytes). A value below the
    /// range, or not a number, is always dropped (the transfer runs without the option, as
    /// tftpd-hpa does).
    public var range: ClosedRange<Int> {
        switch self {
        case .blksize: 8...65464
        case .blksize2: 8...65464
        case .cookie: 1...255
        case .rollover: 0...1
        case .timeout: 1...255
        case .tsize: 0...Int.max
        // 10 ms to 255 s, as tftp-hpa's -T.
        case .utimeout: 10_000...255_000_000
        // RFC 7440 allows 65,535; block numbers wrap at 65,536, so from 32,768 on a reordered old
        // ACK would look new and corrupt the file.
        case .windowsize: 1...32767
        }
    }

    public var excess: Excess {
        switch self {
        case .blksize, .blksize2, .windowsize: .clamp
        case .cookie, .rollover, .timeout, .tsize, .utimeout: .drop
        }
    }

    public var agreement: Agreement {
        switch self {
        case .blksize, .blksize2, .windowsize: .atMostAsked
        case .cookie, .rollover, .timeout, .utimeout: .asAsked
        case .tsize: .serverStates
        }
    }

    /// Whether the value is a decimal number (all but the cookie).
    public var isNumeric: Bool { self != .cookie }

    /// Its row in the table, from 0 (`PerOption`'s slot).
    var row: Int {
        switch self {
        case .blksize: 0
        case .blksize2: 1
        case .cookie: 2
        case .rollover: 3
        case .timeout: 4
        case .tsize: 5
        case .utimeout: 6
        case .windowsize: 7
        }
    }

    /// The largest power of two not above `size`: what blksize2 grants.
    public static func powerOfTwo(atMost size: Int) -> Int {
        precondition(size > 0)
        return 1 << (Int.bitWidth - 1 - size.leadingZeroBitCount)
    }

    /// A non-negative decimal without sign or spaces, as options are written; saturates instead
    /// of overflowing.
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

    /// Every option's name, for a usage error.
    public static let names = allCases.map(\.rawValue).joined(separator: ", ")

    /// What the option takes, for a usage error.
    public var takes: String {
        "\(rawValue) takes \(range.lowerBound) to \(range.upperBound)\(isNumeric ? "" : " bytes")"
    }

    /// `NAME=VALUE` as a client's `--option` gives it: an option of the table with a value it
    /// takes, or why not.
    public static func requested(_ word: String) -> Result<(name: String, value: String), OptionWordError> {
        let parts = word.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2, let option = TFTPOption(rawValue: parts[0].lowercased()) else {
            return .failure(OptionWordError(description: "\(word): NAME=VALUE, NAME one of \(names)"))
        }
        let value = String(parts[1])
        guard option.accepts(value) else { return .failure(OptionWordError(description: "\(word): \(option.takes)")) }
        return .success((option.rawValue, value))
    }

    /// Whether `value` is one this option takes, as a client may ask it (`get --option`, storm's
    /// profiles): a number in the range, or a cookie of 1 to 255 bytes.
    public func accepts(_ value: String) -> Bool {
        guard isNumeric else { return range.contains(value.utf8.count) }
        return TFTPOption.decimal(value).map(range.contains) ?? false
    }

    /// Whether an OACK's `value` for this option agrees with the `asked` one (`agreement`), and
    /// lies in the range.
    public func agrees(_ value: String, asked: String) -> Bool {
        guard isNumeric else { return value == asked && accepts(value) }
        guard let number = TFTPOption.decimal(value), range.contains(number) else { return false }
        switch agreement {
        case .atMostAsked: return number <= TFTPOption.decimal(asked) ?? 0
        case .asAsked: return number == TFTPOption.decimal(asked)
        case .serverStates: return true
        }
    }
}

/// A value for each option of the table, held inline: what a request's negotiation reads and
/// writes per option, without hashing or the heap.
struct PerOption<Value> {
    private var values = InlineArray<8, Value?>(repeating: nil)

    subscript(option: TFTPOption) -> Value? {
        get { values[option.row] }
        set { values[option.row] = newValue }
    }
}

public struct OptionWordError: Error, CustomStringConvertible {
    public let description: String
}

extension TFTPOption {
    /// A request's options as Stampede's clients send them (get, put, storm): blksize, timeout,
    /// tsize, windowsize, each left out when nil, then `more` as given. `transferSize` is 0 in an
    /// RRQ ("tell me"), the file's size in a WRQ.
    public static func requestList(blockSize: Int?, timeoutSeconds: Int?, transferSize: Int?, windowSize: Int?,
                                   more: [(name: String, value: String)] = []) -> [(name: String, value: String)] {
        let values: [(TFTPOption, Int?)] = [(.blksize, blockSize), (.timeout, timeoutSeconds), (.tsize, transferSize),
                                            (.windowsize, windowSize)]
        return values.compactMap { option, value in value.map { (option.rawValue, String($0)) } } + more
    }
}
