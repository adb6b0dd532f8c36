/// HTTP/1's grammar at the byte level (RFC 9110 §5.6, RFC 9112 §2, §5), shared by what reads a
/// request (`HeadParser`, the server's) and what reads a response (`ReceivedResponseHead`, the
/// storm's): one reading of lines, fields and tokens in the binary. Nothing here allocates.
enum Grammar {
    /// RFC 9110's tchar, as a table: a method's and a field name's characters.
    static let token: [Bool] = (0..<256).map { c in
        switch c {
        case 48...57, 65...90, 97...122: true
        default: "!#$%&'*+-.^_`|~".utf8.contains(UInt8(c))
        }
    }

    @inline(__always)
    static func isToken(_ c: UInt8) -> Bool { token[Int(c)] }

    /// A field value's characters: visible ASCII, obs-text, space and tab; never another control
    /// character (a CR or NUL in a value is how requests are smuggled).
    @inline(__always)
    static func isValueByte(_ c: UInt8) -> Bool { c >= 32 ? c != 127 : c == 9 }

    /// The first line feed at or after `from`, if any before `bytes.count`.
    static func lineFeed(in bytes: UnsafeRawBufferPointer, from: Int) -> Int? {
        var i = from
        while i < bytes.count {
            if bytes[i] == 10 { return i }
            i += 1
        }
        return nil
    }

    /// A line's content ends before its line feed, and before a CR right before it (a bare LF
    /// ends a line too, RFC 9112 §2.2).
    @inline(__always)
    static func contentEnd(of bytes: UnsafeRawBufferPointer, lineStart: Int, lineFeed: Int) -> Int {
        lineFeed > lineStart && bytes[lineFeed - 1] == 13 ? lineFeed - 1 : lineFeed
    }

    /// A field line, "name: value": the name's range and the value's, without the whitespace
    /// around it; nil for a line that is not one (no colon, a name that is not a token, a name
    /// with space before its colon, a folded line that starts with whitespace).
    static func field(_ bytes: UnsafeRawBufferPointer, _ line: Range<Int>) -> (name: Range<Int>, value: Range<Int>)? {
        var colon = line.lowerBound
        while colon < line.upperBound && bytes[colon] != UInt8(ascii: ":") {
            guard isToken(bytes[colon]) else { return nil }
            colon += 1
        }
        guard colon < line.upperBound, colon > line.lowerBound else { return nil }
        return (line.lowerBound..<colon, trimmed(bytes, (colon + 1)..<line.upperBound))
    }

    /// `range` without the spaces and tabs at either end (optional whitespace).
    static func trimmed(_ bytes: UnsafeRawBufferPointer, _ range: Range<Int>) -> Range<Int> {
        var start = range.lowerBound, end = range.upperBound
        while start < end && (bytes[start] == 32 || bytes[start] == 9) { start += 1 }
        while end > start && (bytes[end - 1] == 32 || bytes[end - 1] == 9) { end -= 1 }
        return start..<end
    }

    /// Whether the bytes in `range` are `lowercase`, whatever their case (field names, tokens).
    static func equalsIgnoringCase(_ bytes: UnsafeRawBufferPointer, _ range: Range<Int>, _ lowercase: StaticString) -> Bool {
        guard range.count == lowercase.utf8CodeUnitCount else { return false }
        let expected = lowercase.utf8Start
        for k in 0..<range.count {
            var c = bytes[range.lowerBound + k]
            if c >= 65 && c <= 90 { c += 32 }
            if c != expected[k] { return false }
        }
        return true
    }

    /// The comma-separated elements of a list value (RFC 9110 §5.6.1), each trimmed, empty ones
    /// left out.
    static func forEachElement(_ bytes: UnsafeRawBufferPointer, _ range: Range<Int>, _ body: (Range<Int>) -> Void) {
        var start = range.lowerBound
        for i in range.lowerBound...range.upperBound where i == range.upperBound || bytes[i] == UInt8(ascii: ",") {
            let element = trimmed(bytes, start..<i)
            if !element.isEmpty { body(element) }
            start = i + 1
        }
    }

    /// A decimal count of at most 18 digits (nil for anything else: a sign, a space, too long).
    static func decimal(_ bytes: UnsafeRawBufferPointer, _ range: Range<Int>) -> Int? {
        guard !range.isEmpty, range.count <= 18 else { return nil }
        var value = 0
        for i in range {
            let c = bytes[i]
            guard c >= 48 && c <= 57 else { return nil }
            value = value * 10 + Int(c - 48)
        }
        return value
    }

    static func string(_ bytes: UnsafeRawBufferPointer, _ range: Range<Int>) -> String {
        String(decoding: UnsafeRawBufferPointer(rebasing: bytes[range]), as: UTF8.self)
    }
}
