import StampedeBase

/// The server's limits on what a client may negotiate (`-B`, `-W`, `--window-bytes`, `-r`).
public struct OptionLimits: Sendable, Equatable {
    /// Largest blksize granted; the default is derived per request from the interface MTU.
    public var maxBlockSize: Int?
    /// Largest windowsize granted: 256 by default, as tftp-hpa 7.3. A client that asks for a
    /// window must be able to queue it (256 blocks of 1468 bytes are more than Linux's default
    /// 208 KiB receive buffer holds): Stampede's own clients grow their queues to the window they
    /// ask (`SocketBuffers`), and its transfer sockets to the window they grant.
    public var maxWindowSize: Int
    /// blksize × windowsize never above this (0: no limit); a window of fewer than two blocks is
    /// lockstep, and windowsize is then left out of the OACK. tftp-hpa 7.3's default, 4 MiB.
    public var maxWindowBytes: Int
    /// Options named with `-r`: never acknowledged, as if unknown.
    public var refused: Set<String>

    public static let defaultWindowSize = 256
    public static let defaultWindowBytes = 4 << 20

    public init(maxBlockSize: Int? = nil, maxWindowSize: Int = defaultWindowSize, maxWindowBytes: Int = defaultWindowBytes,
                refused: Set<String> = []) {
        self.maxBlockSize = maxBlockSize
        self.maxWindowSize = maxWindowSize
        self.maxWindowBytes = maxWindowBytes
        self.refused = refused
    }
}

/// What one transfer runs with after negotiation.
public struct TransferOptions: Equatable, Sendable {
    public var blockSize = 512
    public var windowSize = 1
    /// The retransmit timeout the client asked for (RFC 2349's timeout, or utimeout).
    public var retransmitTimeout: Nanoseconds?
    /// The size the client announced on a WRQ, or that we report on an RRQ.
    public var transferSize: Int?
    /// Block numbers past 65535: 0 unless the rollover option said 1.
    public var numbering = BlockNumbering()
    /// The cookie echoed, as bytes.
    public var cookie: [UInt8]?

    public init() {}
}

/// RFC 2347 negotiation, by the option table (`TFTPOption`), as tftp-hpa 7.3 negotiates: an option
/// named twice counts with its last value, an empty name or value ends the list; an option is
/// answered only when asked for and acceptable: a value below the range or not a number is
/// dropped, one above the range (or the server's limit) clamped or dropped as the table says, and
/// the transfer then runs without what was dropped. Unknown options are ignored. A valid blksize wins over blksize2, a valid utimeout
/// over timeout; windowsize is granted after the block size, within `--window-bytes`. The OACK
/// lists the options in the table's order, each named as the client spelled it.
public struct OptionNegotiation: Equatable, Sendable {
    public var options = TransferOptions()
    /// The OACK body; empty means "no OACK, start at once".
    public var acknowledged: [(name: String, value: [UInt8])] = []

    public static func == (a: OptionNegotiation, b: OptionNegotiation) -> Bool {
        a.options == b.options && a.acknowledged.elementsEqual(b.acknowledged, by: { $0.name == $1.name && $0.value == $1.value })
    }

    /// - Parameters:
    ///   - cookie: the cookie's bytes as they arrived (`Request.cookie`); without them, the
    ///     requested value's UTF-8.
    ///   - fileSize: the size a read will transfer (after netascii conversion), for `tsize`.
    ///   - maxBlockSize: the effective blksize ceiling for this request (`-B`, or the MTU's).
    public init(requested: [(name: String, value: String)], cookie: [UInt8]? = nil, isWrite: Bool, fileSize: Int?,
                maxBlockSize: Int, limits: OptionLimits) {
        var asked = PerOption<String>()
        var spelling = PerOption<String>()
        // An empty name or value is two NULs in a row, which ends the list for tftp-hpa 7.3: what
        // follows is not read.
        for (name, value) in requested.prefix(while: { !$0.name.isEmpty && !$0.value.isEmpty }) {
            let lowered = name.lowercased()
            guard !limits.refused.contains(lowered), let option = TFTPOption(rawValue: lowered) else { continue }
            asked[option] = value
            spelling[option] = name
        }
        var granted = PerOption<[UInt8]>()
        func grant(_ option: TFTPOption, _ number: Int) { granted[option] = Array(String(number).utf8) }
        /// The requested number if within the range's floor, clamped or nil above its ceiling.
        func number(_ option: TFTPOption, ceiling: Int? = nil) -> Int? {
            guard let text = asked[option], let value = TFTPOption.decimal(text), value >= option.range.lowerBound else { return nil }
            let ceiling = min(option.range.upperBound, ceiling ?? Int.max)
            guard value > ceiling else { return value }
            return option.excess == .clamp ? ceiling : nil
        }
        if let size = number(.blksize, ceiling: maxBlockSize) {
            options.blockSize = size
            grant(.blksize, size)
        } else if let size = number(.blksize2, ceiling: maxBlockSize) {
            // Below 65,464 (the range's top), so at most 32,768.
            options.blockSize = TFTPOption.powerOfTwo(atMost: size)
            grant(.blksize2, options.blockSize)
        }
        if let microseconds = number(.utimeout) {
            options.retransmitTimeout = Nanoseconds(microseconds) * 1000
            grant(.utimeout, microseconds)
        } else if let seconds = number(.timeout) {
            options.retransmitTimeout = Nanoseconds(seconds) * nanosecondsPerSecond
            grant(.timeout, seconds)
        }
        if let rollover = number(.rollover) {
            options.numbering = BlockNumbering(rollover: rollover)
            grant(.rollover, rollover)
        }
        if let text = asked[.cookie] {
            let bytes = cookie ?? Array(text.utf8)
            if TFTPOption.cookie.range.contains(bytes.count) {
                options.cookie = bytes
                granted[.cookie] = bytes
            }
        }
        // RFC 2349: a WRQ states the size; an RRQ asks with 0 and the server answers the size.
        if let size = number(.tsize), let stated = isWrite ? size : (size == 0 ? fileSize : nil) {
            options.transferSize = stated
            grant(.tsize, stated)
        }
        if var window = number(.windowsize, ceiling: max(1, limits.maxWindowSize)) {
            if limits.maxWindowBytes > 0 { window = min(window, limits.maxWindowBytes / options.blockSize) }
            if window >= 2 {
                options.windowSize = window
                grant(.windowsize, window)
            }
        }
        acknowledged = TFTPOption.allCases.compactMap { option in granted[option].map { (spelling[option]!, $0) } }
    }

    /// "blksize=1468 tsize=0" for the transfer log line.
    public var summary: String {
        acknowledged.map { "\($0.name)=\(sanitizedForLog($0.value, limit: 64))" }.joined(separator: " ")
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
            let option = TFTPOption(rawValue: name)
            guard option?.isNumeric == false || TFTPOption.decimal(value) != nil else {
                throw OptionAckError(description: "option \(sanitizedForLog(name.utf8, limit: 32))=\(shown) is no number")
            }
            guard let request = asked.last(where: { $0.name == name }), let option else {
                throw OptionAckError(description: "the server acknowledged \(sanitizedForLog(name.utf8, limit: 32))=\(shown), which we did not ask for")
            }
            guard option.agrees(value, asked: request.value) else {
                throw OptionAckError(description: "the server acknowledged \(name)=\(shown), which is not what we asked (\(sanitizedForLog(request.value.utf8, limit: 32)))")
            }
            let number = TFTPOption.decimal(value) ?? 0
            if option == .blksize2 && number & (number - 1) != 0 {
                throw OptionAckError(description: "the server acknowledged blksize2=\(shown), which is no power of two")
            }
            switch option {
            case .blksize, .blksize2: blockSize = number
            case .windowsize: windowSize = number
            case .timeout: retransmitTimeout = Nanoseconds(number) * nanosecondsPerSecond
            case .utimeout: retransmitTimeout = Nanoseconds(number) * 1000
            case .tsize: transferSize = number
            case .rollover: numbering = BlockNumbering(rollover: number)
            case .cookie: cookie = Array(value.utf8)
            }
        }
    }
}
