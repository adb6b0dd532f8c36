/// TFTP opcodes (RFC 1350, RFC 2347 for OACK).
public enum Opcode: UInt16, Sendable {
    case readRequest = 1, writeRequest = 2, data = 3, ack = 4, error = 5, optionAck = 6
}

/// TFTP error codes (RFC 1350 §5, RFC 2347 for 8).
public enum ErrorCode: UInt16, Sendable, CustomStringConvertible {
    case notDefined = 0, fileNotFound = 1, accessViolation = 2, diskFull = 3, illegalOperation = 4
    case unknownTransferID = 5, fileExists = 6, noSuchUser = 7, optionNegotiation = 8

    public var description: String {
        switch self {
        case .notDefined: return "not defined"
        case .fileNotFound: return "file not found"
        case .accessViolation: return "access violation"
        case .diskFull: return "disk full"
        case .illegalOperation: return "illegal operation"
        case .unknownTransferID: return "unknown transfer ID"
        case .fileExists: return "file exists"
        case .noSuchUser: return "no such user"
        case .optionNegotiation: return "option negotiation refused"
        }
    }
}

/// A TFTP error as it goes on the wire: a code and a short human message.
public struct TFTPError: Error, Equatable, Sendable {
    public var code: ErrorCode
    public var message: String
    /// The server, not the request, is the problem: a transfer limit is reached, or the host is
    /// out of descriptors, ports or memory. The same request may succeed when the client retries,
    /// so the server may leave it unanswered (`--when-busy`).
    public var isBusy: Bool
    public init(_ code: ErrorCode, _ message: String, busy: Bool = false) {
        self.code = code
        self.message = message
        self.isBusy = busy
    }
}

public enum TransferMode: String, Sendable {
    case octet, netascii
}

/// A datagram seen by a transfer: decoded in place, nothing copied, nothing allocated.
/// The payload of `.data` and the message of `.error` point into the receive buffer.
public enum TransferPacket {
    case data(block: UInt16, payload: UnsafeRawBufferPointer)
    case ack(block: UInt16)
    case error(code: UInt16, message: UnsafeRawBufferPointer)
    case optionAck(UnsafeRawBufferPointer)
    case request
    case malformed

    public init(_ bytes: UnsafeRawBufferPointer) {
        guard bytes.count >= 2 else { self = .malformed; return }
        let opcode = UInt16(bytes[0]) << 8 | UInt16(bytes[1])
        switch Opcode(rawValue: opcode) {
        case .data where bytes.count >= 4:
            self = .data(block: UInt16(bytes[2]) << 8 | UInt16(bytes[3]),
                         payload: UnsafeRawBufferPointer(rebasing: bytes[4...]))
        case .ack where bytes.count >= 4:
            self = .ack(block: UInt16(bytes[2]) << 8 | UInt16(bytes[3]))
        case .error where bytes.count >= 4:
            self = .error(code: UInt16(bytes[2]) << 8 | UInt16(bytes[3]),
                          message: UnsafeRawBufferPointer(rebasing: bytes[4...]))
        case .optionAck:
            self = .optionAck(UnsafeRawBufferPointer(rebasing: bytes[2...]))
        case .readRequest, .writeRequest:
            self = .request
        default:
            self = .malformed
        }
    }
}

/// RRQ or WRQ (RFC 1350 §5, RFC 2347 options): the file name is kept as bytes because a
/// name is a path, not text, and PXE ROMs put junk bytes in it.
public struct Request: Equatable, Sendable {
    public var isWrite: Bool
    public var filename: [UInt8]
    public var mode: String
    /// Options in the order given, names and values as sent (names are case-insensitive: compare
    /// them lower-cased; an OACK answers in the client's spelling, as tftpd-hpa does).
    public var options: [(name: String, value: String)]
    /// The last cookie option's value as bytes: echoed byte for byte, whatever their encoding.
    public var cookie: [UInt8]?

    public init(isWrite: Bool, filename: [UInt8], mode: String, options: [(name: String, value: String)] = []) {
        self.isWrite = isWrite
        self.filename = filename
        self.mode = mode
        self.options = options
    }

    public static func == (a: Request, b: Request) -> Bool {
        a.isWrite == b.isWrite && a.filename == b.filename && a.mode == b.mode
            && a.options.elementsEqual(b.options, by: { $0.name == $1.name && $0.value == $1.value })
    }

    /// No request carries more options than this; the rest are ignored (a 1,000-option request
    /// costs no more than a short one).
    public static let optionLimit = 32

    /// Longer file names are refused before remapping or any file lookup: PATH_MAX, the longest
    /// path the kernel takes.
    public static let longestFilename = 4096

    /// Longer requests are refused (ERROR 4): the longest name, a mode and every option fit with
    /// room to spare. Every backend's listener takes this much whole, so a request is judged by
    /// its length alone, the same on each.
    public static let largestDatagram = 8192

    public enum ParseError: Error, Equatable {
        case notARequest, missingTerminator, emptyMode
    }

    /// An RRQ or WRQ by its opcode (single-port mode tells requests from a session's packets).
    public static func isRequest(_ bytes: UnsafeRawBufferPointer) -> Bool {
        bytes.count >= 2 && bytes[0] == 0 && (bytes[1] == 1 || bytes[1] == 2)
    }

    /// Each field is read where it lies: the name is the one copy made of the bytes, the options
    /// one list sized to the fields there are (copies of every field, and a list of them grown
    /// field by field, made a dozen allocations of an RRQ with two options).
    public static func parse(_ bytes: UnsafeRawBufferPointer) throws(ParseError) -> Request {
        guard bytes.count >= 2, bytes[0] == 0, bytes[1] == 1 || bytes[1] == 2 else { throw .notARequest }
        let fieldLimit = 2 + 2 * optionLimit
        var terminated = 0
        for index in 2..<bytes.count where bytes[index] == 0 { terminated += 1 }
        terminated = min(terminated, fieldLimit)
        var filename: [UInt8]?
        var mode: String?
        var options: [(name: String, value: String)] = []
        options.reserveCapacity(max(0, terminated - 2) / 2)
        var cookie: [UInt8]?
        var optionName: String?
        var fields = 0
        var start = 2
        // Trailing bytes after the last NUL of an option list are a client bug we tolerate (some
        // ROMs pad), as tftpd-hpa does; so is a name without its value.
        for index in 2..<bytes.count where bytes[index] == 0 && fields < fieldLimit {
            let field = UnsafeRawBufferPointer(rebasing: bytes[start..<index])
            start = index + 1
            fields += 1
            if filename == nil {
                filename = Array(field)
            } else if mode == nil {
                guard !field.isEmpty else { throw .emptyMode }
                mode = lowercased(field)
            } else if let name = optionName {
                options.append((name, String(decoding: field, as: UTF8.self)))
                if isCookie(name) { cookie = Array(field) }
                optionName = nil
            } else {
                optionName = String(decoding: field, as: UTF8.self)
            }
        }
        // Filename and mode must both be NUL-terminated.
        guard let filename, let mode else { throw .missingTerminator }
        var request = Request(isWrite: bytes[1] == 2, filename: filename, mode: mode, options: options)
        request.cookie = cookie
        return request
    }

    /// A field as text, lowercased: an ASCII one (every mode a client means) in place, with no
    /// String made first to be lowercased after.
    static func lowercased(_ field: UnsafeRawBufferPointer) -> String {
        var ascii = field.count <= 32
        if ascii { for index in 0..<field.count where field[index] >= 0x80 { ascii = false } }
        guard ascii else { return String(decoding: field, as: UTF8.self).lowercased() }
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: field.count) { lower in
            for index in 0..<field.count {
                let byte = field[index]
                lower[index] = byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") ? byte + 32 : byte
            }
            return String(decoding: lower, as: UTF8.self)
        }
    }

    /// The option's name is "cookie", in any case.
    static func isCookie(_ name: String) -> Bool {
        let cookie: StaticString = "cookie"
        guard name.utf8.count == cookie.utf8CodeUnitCount else { return false }
        var index = 0
        for byte in name.utf8 {
            guard byte | 0x20 == cookie.utf8Start[index] else { return false }
            index += 1
        }
        return true
    }

    /// The most DATA a server may send at once in answer to this request: the windowsize it asks
    /// (1 without) of datagrams carrying the largest block it asks (blksize or blksize2; 512
    /// without) — what a client's receive queue must hold not to lose a window's tail.
    public var largestWindow: (datagrams: Int, size: Int) {
        var window = 1
        var block = 512
        for option in options {
            guard let value = TFTPOption.decimal(option.value) else { continue }
            switch option.name.lowercased() {
            case TFTPOption.windowsize.rawValue: window = max(window, min(value, 65535))
            case TFTPOption.blksize.rawValue, TFTPOption.blksize2.rawValue: block = max(block, min(value, 65464))
            default: break
            }
        }
        return (window, block + 4)
    }

    public func encoded() -> [UInt8] {
        var out: [UInt8] = [0, isWrite ? 2 : 1]
        out += filename + [0] + Array(mode.utf8) + [0]
        for option in options { out += Array(option.name.utf8) + [0] + Array(option.value.utf8) + [0] }
        return out
    }
}

/// Writers of outgoing packets into caller-owned memory. Each returns the byte count written.
public enum PacketWriter {
    @inline(__always)
    static func put16(_ value: UInt16, _ buffer: UnsafeMutableRawBufferPointer, at offset: Int) {
        buffer[offset] = UInt8(value >> 8)
        buffer[offset + 1] = UInt8(value & 0xFF)
    }

    /// The 4-byte DATA header; the payload travels separately as a slice of the file image.
    public static func dataHeader(block: UInt16, into buffer: UnsafeMutableRawBufferPointer) -> Int {
        put16(Opcode.data.rawValue, buffer, at: 0)
        put16(block, buffer, at: 2)
        return 4
    }

    public static func ack(block: UInt16, into buffer: UnsafeMutableRawBufferPointer) -> Int {
        put16(Opcode.ack.rawValue, buffer, at: 0)
        put16(block, buffer, at: 2)
        return 4
    }

    /// ERROR with its message cut to fit a 512-byte packet.
    public static func error(_ code: UInt16, message: String, into buffer: UnsafeMutableRawBufferPointer) -> Int {
        put16(Opcode.error.rawValue, buffer, at: 0)
        put16(code, buffer, at: 2)
        var offset = 4
        for byte in message.utf8 where offset < min(buffer.count, 512) - 1 {
            buffer[offset] = byte
            offset += 1
        }
        buffer[offset] = 0
        return offset + 1
    }

    public static func error(_ error: TFTPError) -> [UInt8] {
        [UInt8](unsafeUninitializedCapacity: 516) { buffer, count in
            count = Self.error(error.code.rawValue, message: error.message, into: UnsafeMutableRawBufferPointer(buffer))
        }
    }

    public static func optionAck(_ options: [(name: String, value: [UInt8])]) -> [UInt8] {
        var out: [UInt8] = [0, UInt8(Opcode.optionAck.rawValue)]
        for option in options { out += Array(option.name.utf8) + [0] + option.value + [0] }
        return out
    }

    public static func optionAck(_ options: [(name: String, value: String)]) -> [UInt8] {
        optionAck(options.map { ($0.name, Array($0.value.utf8)) })
    }
}

/// An option list as an OACK carries it: name, NUL, value, NUL, ... (RFC 2347).
public enum OptionList {
    /// Parses an OACK body into (name, value) pairs, names lower-cased (the client side).
    public static func parse(_ body: UnsafeRawBufferPointer) -> [(name: String, value: String)] {
        let fields = body.split(separator: 0, omittingEmptySubsequences: false)
        var out: [(name: String, value: String)] = []
        var i = 0
        while i + 1 < fields.count {
            out.append((String(decoding: fields[i], as: UTF8.self).lowercased(), String(decoding: fields[i + 1], as: UTF8.self)))
            i += 2
        }
        return out
    }
}
