/// The options Stampede knows, one row each, as tftp-hpa's option table has them: the values
/// allowed, what a server does with a request's value above them, and what a client accepts
/// when the server acknowledges the option (which says who states the value). The server's
/// negotiation (`OptionNegotiation`), the client's check of an OACK (`TransferOptions(optionAck:)`)
/// and the command line's flags all read this table.
public enum TFTPOption: String, CaseIterable, Sendable {
    /// RFC 2348: bytes of a DATA payload.
    case blksize
    /// RFC 2349: the retransmit timeout, in seconds.
    case timeout
    /// RFC 2349: the transfer's size in bytes (0 in an RRQ: "tell me").
    case tsize
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

    /// The values granted and accepted. A value below the range, or not a number, is always
    /// dropped (the transfer runs without the option, as tftpd-hpa does).
    public var range: ClosedRange<Int> {
        switch self {
        case .blksize: 8...65464
        case .timeout: 1...255
        case .tsize: 0...Int.max
        // RFC 7440 allows 65,535; block numbers wrap at 65,536, so from 32,768 on a reordered old
        // ACK would look new and corrupt the file.
        case .windowsize: 1...32767
        }
    }

    public var excess: Excess {
        switch self {
        case .blksize, .windowsize: .clamp
        case .timeout, .tsize: .drop
        }
    }

    public var agreement: Agreement {
        switch self {
        case .blksize, .windowsize: .atMostAsked
        case .timeout: .asAsked
        case .tsize: .serverStates
        }
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
}

extension TFTPOption {
    /// A request's options as Stampede's clients send them (get, put, storm): blksize, timeout,
    /// tsize, windowsize, each left out when nil. `transferSize` is 0 in an RRQ ("tell me"), the
    /// file's size in a WRQ.
    public static func requestList(blockSize: Int?, timeoutSeconds: Int?, transferSize: Int?,
                                   windowSize: Int?) -> [(name: String, value: String)] {
        let values: [(TFTPOption, Int?)] = [(.blksize, blockSize), (.timeout, timeoutSeconds), (.tsize, transferSize),
                                            (.windowsize, windowSize)]
        return values.compactMap { option, value in value.map { (option.rawValue, String($0)) } }
    }
}
