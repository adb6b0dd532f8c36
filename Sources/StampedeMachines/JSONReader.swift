/// Enough of JSON (RFC 8259) to read a `/machines` view and an inventory's answer: objects,
/// arrays, strings (escapes, `\u` and its surrogate pairs), numbers, true, false, null.
struct JSONReader {
    enum Value: Equatable {
        case object([String: Value]), array([Value]), string(String), number(Double), bool(Bool), null
    }

    /// Why bytes are not JSON, and where.
    struct Fault: Error, CustomStringConvertible {
        var description: String
    }

    let bytes: [UInt8]
    var at = 0

    /// The one value `bytes` hold (spaces around it, nothing else).
    static func read(_ bytes: [UInt8]) throws(Fault) -> Value {
        var reader = JSONReader(bytes: bytes)
        let value = try reader.value()
        reader.skipSpace()
        guard reader.at == bytes.count else { throw reader.fault("more after the value") }
        return value
    }

    mutating func value(depth: Int = 0) throws(Fault) -> Value {
        guard depth < 64 else { throw fault("nested too deep") }
        skipSpace()
        guard at < bytes.count else { throw fault("ends early") }
        switch bytes[at] {
        case UInt8(ascii: "{"):
            at += 1
            var fields: [String: Value] = [:]
            skipSpace()
            if peek(UInt8(ascii: "}")) { return .object(fields) }
            repeat {
                skipSpace()
                guard case .string(let key) = try value(depth: depth + 1) else { throw fault("a key that is not a string") }
                skipSpace()
                guard peek(UInt8(ascii: ":")) else { throw fault("no : after a key") }
                fields[key] = try value(depth: depth + 1)
                skipSpace()
            } while peek(UInt8(ascii: ","))
            guard peek(UInt8(ascii: "}")) else { throw fault("an object not closed") }
            return .object(fields)
        case UInt8(ascii: "["):
            at += 1
            var items: [Value] = []
            skipSpace()
            if peek(UInt8(ascii: "]")) { return .array(items) }
            repeat { items.append(try value(depth: depth + 1)); skipSpace() } while peek(UInt8(ascii: ","))
            guard peek(UInt8(ascii: "]")) else { throw fault("an array not closed") }
            return .array(items)
        case UInt8(ascii: "\""):
            return .string(try string())
        default:
            if let word = Self.words.first(where: { bytes[at...].starts(with: $0.text) }) {
                at += word.text.count
                return word.meaning
            }
            let number = bytes[at...].prefix { Self.isNumberByte($0) }
            guard !number.isEmpty, let parsed = Double(String(decoding: number, as: UTF8.self)) else { throw fault("not a value") }
            at += number.count
            return .number(parsed)
        }
    }

    /// A string's text: its bytes as they are up to the first escape (most strings have none),
    /// then each escape's character written as UTF-8 among them, decoded once at the end.
    private mutating func string() throws(Fault) -> String {
        at += 1
        let start = at
        while at < bytes.count, bytes[at] != UInt8(ascii: "\""), bytes[at] != UInt8(ascii: "\\") { at += 1 }
        guard at < bytes.count else { throw fault("a string not closed") }
        if bytes[at] == UInt8(ascii: "\"") {
            at += 1
            return String(decoding: bytes[start..<(at - 1)], as: UTF8.self)
        }
        var text = Array(bytes[start..<at])
        while at < bytes.count {
            let byte = bytes[at]
            at += 1
            switch byte {
            case UInt8(ascii: "\""):
                return String(decoding: text, as: UTF8.self)
            case UInt8(ascii: "\\"):
                guard at < bytes.count else { break }
                let escape = bytes[at]
                at += 1
                switch escape {
                case 0x22, 0x5c, 0x2f: text.append(escape)
                case UInt8(ascii: "b"): text.append(8)
                case UInt8(ascii: "f"): text.append(12)
                case UInt8(ascii: "n"): text.append(10)
                case UInt8(ascii: "r"): text.append(13)
                case UInt8(ascii: "t"): text.append(9)
                case UInt8(ascii: "u"):
                    var code = try hex4()
                    if (0xD800..<0xDC00).contains(code), bytes[at...].starts(with: "\\u".utf8) {
                        at += 2
                        let low = try hex4()
                        code = 0x10000 + (code - 0xD800) << 10 + (low - 0xDC00)
                    }
                    text.append(contentsOf: String(Unicode.Scalar(code) ?? "\u{FFFD}").utf8)
                default:
                    throw fault("an unknown escape")
                }
            default:
                text.append(byte)
            }
        }
        throw fault("a string not closed")
    }

    private mutating func hex4() throws(Fault) -> UInt32 {
        guard at + 4 <= bytes.count, let code = UInt32(String(decoding: bytes[at..<(at + 4)], as: UTF8.self), radix: 16) else {
            throw fault("a bad \\u escape")
        }
        at += 4
        return code
    }

    private static let words: [(text: [UInt8], meaning: Value)] = [(Array("true".utf8), .bool(true)), (Array("false".utf8), .bool(false)),
                                                                    (Array("null".utf8), .null)]

    private static func isNumberByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "+"), UInt8(ascii: "."), UInt8(ascii: "e"), UInt8(ascii: "E"): true
        default: false
        }
    }

    private mutating func skipSpace() {
        while at < bytes.count, bytes[at] == 0x20 || bytes[at] == 0x09 || bytes[at] == 0x0a || bytes[at] == 0x0d { at += 1 }
    }

    private mutating func peek(_ byte: UInt8) -> Bool {
        guard at < bytes.count, bytes[at] == byte else { return false }
        at += 1
        return true
    }

    private func fault(_ what: String) -> Fault { Fault(description: "\(what) at byte \(at)") }
}
