/// A log line said for every request (an HTTP answer's), written into bytes kept from one line
/// to the next and made a String once: interpolation grows a String piece by piece and makes a
/// String of each sanitized name first, which cost a 404 more than the line's own write.
public struct LogLine {
    public private(set) var bytes: [UInt8] = []

    public init() {}

    /// The line `write` writes (a String is made of it with `text`, for a line said seldom).
    public init(_ write: (inout LogLine) -> Void) {
        write(&self)
    }

    /// Forgets the last line, keeping its memory.
    public mutating func start() {
        bytes.removeAll(keepingCapacity: true)
    }

    public mutating func append(_ text: String) {
        var text = text
        text.withUTF8 { bytes.append(contentsOf: $0) }
    }

    public mutating func append(_ text: StaticString) {
        bytes.append(contentsOf: UnsafeBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
    }

    /// Text already in bytes (an address's, `SocketAddress.withText`).
    public mutating func append(_ text: UnsafeBufferPointer<UInt8>) {
        bytes.append(contentsOf: text)
    }

    /// Digits, written in place (`writeDigits`).
    public mutating func append(_ value: Int) {
        // A sign and the 19 digits of Int.max.
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 20) { out in
            let n = writeSignedDigits(Int64(value), into: out)
            bytes.append(contentsOf: UnsafeBufferPointer(rebasing: out[..<n]))
        }
    }

    /// `value` with `places` decimals, as `decimalText` writes it, in place.
    public mutating func append(_ value: Double, places: Int) {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: decimalCapacity(places: places)) { out in
            bytes.append(contentsOf: UnsafeBufferPointer(rebasing: out[..<writeDecimal(value, places: places, into: out)]))
        }
    }

    /// Client text as `sanitizedForLog` shows it, written in place.
    public mutating func append(sanitized text: [UInt8], limit: Int = 256) {
        text.withUnsafeBufferPointer { append(sanitized: $0, limit: limit) }
    }

    public mutating func append(sanitized text: String, limit: Int = 256) {
        var text = text
        text.withUTF8 { append(sanitized: $0, limit: limit) }
    }

    private mutating func append(sanitized text: UnsafeBufferPointer<UInt8>, limit: Int) {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: sanitizedCapacity(text.count, limit: limit)) { out in
            let written = writeSanitized(text, limit: limit, into: out)
            bytes.append(contentsOf: UnsafeBufferPointer(rebasing: out[..<written]))
        }
    }

    /// The line, as the logger takes it.
    public var text: String { String(decoding: bytes, as: UTF8.self) }
}
