
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
    guard value.isFinite else { return "0" }
    var scale = 1.0
    for _ in 0..<decimals { scale *= 10 }
    let scaled = Int((abs(value) * scale).rounded())
    let whole = String(scaled / Int(scale))
    let sign = value < 0 && scaled != 0 ? "-" : ""
    guard decimals > 0 else { return sign + whole }
    let fraction = String(scaled % Int(scale))
    return sign + whole + "." + String(repeating: "0", count: decimals - fraction.count) + fraction
}
