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
            for (word, meaning) in [("true", Value.bool(true)), ("false", .bool(false)), ("null", .null)]
            where bytes[at...].starts(with: word.utf8) {
                at += word.utf8.count
                return meaning
            }
            let number = bytes[at...].prefix { "-+.eE0123456789".utf8.contains($0) }
            guard !number.isEmpty, let parsed = Double(String(decoding: number, as: UTF8.self)) else { throw fault("not a value") }
            at += number.count
            return .number(parsed)
        }
    }

    private mutating func string() throws(Fault) -> String {
        at += 1
        var scalars = String.UnicodeScalarView()
        var pending: [UInt8] = []
        func flush() {
            scalars.append(contentsOf: String(decoding: pending, as: UTF8.self).unicodeScalars)
            pending = []
        }
        while at < bytes.count {
            let byte = bytes[at]
            at += 1
            switch byte {
            case UInt8(ascii: "\""):
                flush()
                return String(scalars)
            case UInt8(ascii: "\\"):
                flush()
                guard at < bytes.count else { break }
                let escape = bytes[at]
                at += 1
                let simple: [UInt8: UInt8] = [0x22: 0x22, 0x5c: 0x5c, 0x2f: 0x2f, 0x62: 8, 0x66: 12, 0x6e: 10, 0x72: 13, 0x74: 9]
                if let plain = simple[escape] {
                    scalars.append(Unicode.Scalar(plain))
                } else if escape == UInt8(ascii: "u") {
                    var code = try hex4()
                    if (0xD800..<0xDC00).contains(code), bytes[at...].starts(with: "\\u".utf8) {
                        at += 2
                        let low = try hex4()
                        code = 0x10000 + (code - 0xD800) << 10 + (low - 0xDC00)
                    }
                    scalars.append(Unicode.Scalar(code) ?? "\u{FFFD}")
                } else {
                    throw fault("an unknown escape")
                }
            default:
                pending.append(byte)
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

    private mutating func skipSpace() {
        while at < bytes.count, [0x20, 0x09, 0x0a, 0x0d].contains(bytes[at]) { at += 1 }
    }

    private mutating func peek(_ byte: UInt8) -> Bool {
        guard at < bytes.count, bytes[at] == byte else { return false }
        at += 1
        return true
    }

    private func fault(_ what: String) -> Fault { Fault(description: "\(what) at byte \(at)") }
}
