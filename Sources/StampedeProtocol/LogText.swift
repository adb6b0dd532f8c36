
/// File names and client text go through this before a log: printable ASCII stays, the rest
/// becomes \xNN, and the length is capped (dnsmasq's lesson: logs are read by terminals).
public func sanitizedForLog<C: Collection>(_ bytes: C, limit: Int = 256) -> String where C.Element == UInt8 {
    var out = ""
    for byte in bytes.prefix(limit) {
        if byte >= 0x20 && byte < 0x7F && byte != UInt8(ascii: "\\") && byte != UInt8(ascii: "\"") {
            out.unicodeScalars.append(Unicode.Scalar(byte))
        } else {
            out += "\\x" + (byte < 16 ? "0" : "") + String(byte, radix: 16)
        }
    }
    if bytes.count > limit { out += "…" }
    return out
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
