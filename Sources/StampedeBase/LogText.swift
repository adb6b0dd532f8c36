
/// File names and client text go through this before a log: printable ASCII stays, the rest
/// becomes \xNN, and the length is capped (dnsmasq's lesson: logs are read by terminals).
public func sanitizedForLog<C: Collection>(_ bytes: C, limit: Int = 256) -> String where C.Element == UInt8 {
    bytes.withContiguousStorageIfAvailable { sanitizedForLog(buffer: $0, limit: limit) }
        ?? Array(bytes).withUnsafeBufferPointer { sanitizedForLog(buffer: $0, limit: limit) }
}

/// The same for the arrays names are kept in, without a generic call per line.
public func sanitizedForLog(_ bytes: [UInt8], limit: Int = 256) -> String {
    bytes.withUnsafeBufferPointer { sanitizedForLog(buffer: $0, limit: limit) }
}

/// The text written straight into the String's memory.
func sanitizedForLog(buffer bytes: UnsafeBufferPointer<UInt8>, limit: Int) -> String {
    String(unsafeUninitializedCapacity: sanitizedCapacity(bytes.count, limit: limit)) { writeSanitized(bytes, limit: limit, into: $0) }
}

/// At most 4 bytes for each byte shown ("\xNN") and 3 for the "…".
func sanitizedCapacity(_ count: Int, limit: Int) -> Int {
    min(count, limit) * 4 + 3
}

/// Writes the sanitized text of `bytes` into `out` (`sanitizedCapacity` bytes at least);
/// returns how many bytes it wrote.
func writeSanitized(_ bytes: UnsafeBufferPointer<UInt8>, limit: Int, into out: UnsafeMutableBufferPointer<UInt8>) -> Int {
    let hex: StaticString = "0123456789abcdef"
    var n = 0
    for i in 0..<min(bytes.count, limit) {
        let byte = bytes[i]
        if byte >= 0x20 && byte < 0x7F && byte != UInt8(ascii: "\\") && byte != UInt8(ascii: "\"") {
            out[n] = byte
            n += 1
        } else {
            out[n] = UInt8(ascii: "\\")
            out[n + 1] = UInt8(ascii: "x")
            out[n + 2] = hex.utf8Start[Int(byte >> 4)]
            out[n + 3] = hex.utf8Start[Int(byte & 15)]
            n += 4
        }
    }
    if bytes.count > limit {
        for byte in "…".utf8 {
            out[n] = byte
            n += 1
        }
    }
    return n
}

/// `value` with `places` decimals, without Foundation (log lines, reports).
public func decimalText(_ value: Double, places decimals: Int) -> String {
    String(unsafeUninitializedCapacity: decimalCapacity(places: decimals)) { writeDecimal(value, places: decimals, into: $0) }
}

/// The most places `writeDecimal` writes: 10^18 is the largest power of ten a UInt64 holds.
let maximumPlaces = 18

/// The most bytes `writeDecimal` writes: a sign, the 19 digits of the largest whole part, the
/// point and the places.
func decimalCapacity(places: Int) -> Int {
    21 + min(max(0, places), maximumPlaces)
}

/// Writes `value` rounded to `places` decimals (at most `maximumPlaces`; "0" for a value that is
/// not finite; one whose magnitude in units of the last place is past Int.max as Int.max of
/// them) into `out`, `decimalCapacity` bytes at least; returns how many bytes it wrote.
func writeDecimal(_ value: Double, places: Int, into out: UnsafeMutableBufferPointer<UInt8>) -> Int {
    guard value.isFinite else {
        out[0] = UInt8(ascii: "0")
        return 1
    }
    let places = min(max(0, places), maximumPlaces)
    var scale: UInt64 = 1
    for _ in 0..<places { scale *= 10 }
    let scaled = UInt64(min((abs(value) * Double(scale)).rounded(), Double(Int.max)))
    var n = 0
    if value < 0 && scaled != 0 {
        out[0] = UInt8(ascii: "-")
        n = 1
    }
    n += writeDigits(scaled / scale, minimumCount: 1, into: UnsafeMutableBufferPointer(rebasing: out[n...]))
    guard places > 0 else { return n }
    out[n] = UInt8(ascii: ".")
    return n + 1 + writeDigits(scaled % scale, minimumCount: places, into: UnsafeMutableBufferPointer(rebasing: out[(n + 1)...]))
}

/// The decimal digits of `value`, zeros in front up to `minimumCount`, into `out` (20 bytes, or
/// `minimumCount`, hold any): counted, then written from the last; returns how many it wrote.
public func writeDigits(_ value: UInt64, minimumCount: Int, into out: UnsafeMutableBufferPointer<UInt8>) -> Int {
    var count = 1
    var rest = value / 10
    while rest > 0 {
        count += 1
        rest /= 10
    }
    count = max(count, minimumCount)
    rest = value
    for i in stride(from: count - 1, through: 0, by: -1) {
        out[i] = UInt8(ascii: "0") + UInt8(rest % 10)
        rest /= 10
    }
    return count
}

/// `value` in decimal with its sign, into `out` (20 bytes hold any): returns how many bytes.
public func writeSignedDigits(_ value: Int64, into out: UnsafeMutableBufferPointer<UInt8>) -> Int {
    guard value < 0 else { return writeDigits(UInt64(value), minimumCount: 1, into: out) }
    out[0] = UInt8(ascii: "-")
    return 1 + writeDigits(value.magnitude, minimumCount: 1, into: UnsafeMutableBufferPointer(rebasing: out[1...]))
}

/// `text` as a JSON string (RFC 8259): quotes, backslashes and control characters escaped. The
/// JSON log lines' and the `/machines` view's.
public func jsonString(_ text: String) -> String {
    var out = "\""
    for scalar in text.unicodeScalars {
        switch scalar {
        case "\"": out += "\\\""
        case "\\": out += "\\\\"
        case "\n": out += "\\n"
        case "\r": out += "\\r"
        case "\t": out += "\\t"
        case _ where scalar.value < 0x20:
            let hex = String(scalar.value, radix: 16)
            out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
        default: out.unicodeScalars.append(scalar)
        }
    }
    return out + "\""
}
