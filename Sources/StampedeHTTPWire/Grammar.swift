/// HTTP/1's grammar at the byte level (RFC 9110 §5.6, RFC 9112 §2, §5), shared by what reads a
/// request (`HeadParser`, the server's) and what reads a response (`ReceivedResponseHead`, the
/// storm's): one reading of lines, fields and tokens in the binary, and the numbers a head writes.
/// Nothing here allocates but `string`, and `append` when its array must grow.
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

    @inline(__always)
    static func isDigit(_ c: UInt8) -> Bool { c >= 48 && c <= 57 }

    /// Where `byte` first is in `range`.
    static func firstIndex(of byte: UInt8, in bytes: UnsafeRawBufferPointer, _ range: Range<Int>) -> Int? {
        var i = range.lowerBound
        while i < range.upperBound {
            if bytes[i] == byte { return i }
            i += 1
        }
        return nil
    }

    /// Where `byte` last is in `range`.
    static func lastIndex(of byte: UInt8, in bytes: UnsafeRawBufferPointer, _ range: Range<Int>) -> Int? {
        var i = range.upperBound
        while i > range.lowerBound {
            i -= 1
            if bytes[i] == byte { return i }
        }
        return nil
    }

    /// Every byte of `range` is a tchar (a method, a field name).
    static func allTokens(_ bytes: UnsafeRawBufferPointer, _ range: Range<Int>) -> Bool {
        var i = range.lowerBound
        while i < range.upperBound && isToken(bytes[i]) { i += 1 }
        return i == range.upperBound
    }

    /// Every byte of `range` is visible ASCII (a request target).
    static func allVisible(_ bytes: UnsafeRawBufferPointer, _ range: Range<Int>) -> Bool {
        var i = range.lowerBound
        while i < range.upperBound && bytes[i] > 32 && bytes[i] < 127 { i += 1 }
        return i == range.upperBound
    }

    /// Every byte of `range` may be in a field value.
    static func allValueBytes(_ bytes: UnsafeRawBufferPointer, _ range: Range<Int>) -> Bool {
        var i = range.lowerBound
        while i < range.upperBound && isValueByte(bytes[i]) { i += 1 }
        return i == range.upperBound
    }

    /// Whether the bytes in `range` are `expected`, case and all (a method, a version's name).
    static func equals(_ bytes: UnsafeRawBufferPointer, _ range: Range<Int>, _ expected: StaticString) -> Bool {
        guard range.count == expected.utf8CodeUnitCount else { return false }
        let start = expected.utf8Start
        for k in 0..<range.count where bytes[range.lowerBound + k] != start[k] { return false }
        return true
    }

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

    /// `value`'s digits in `radix` (10 or 16, lowercase), onto `bytes`.
    static func append(_ value: UInt64, radix: UInt64, to bytes: inout [UInt8]) {
        // The digits from the last, into room on the stack (64: base 2 at most), each division
        // done once; then appended in order.
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 64) { digits in
            var value = value
            var first = digits.count
            repeat {
                first -= 1
                let digit = UInt8(value % radix)
                digits[first] = digit < 10 ? 48 + digit : 87 + digit
                value /= radix
            } while value > 0
            bytes.append(contentsOf: UnsafeBufferPointer(rebasing: digits[first...]))
        }
    }
}
