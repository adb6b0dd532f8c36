/// Finding text in text byte for byte (UTF-8). The standard library's `firstRange(of:)` and
/// `contains(_:)` for a string build a search table on every call: on the paths a request or a
/// DHCP packet takes, these are what is used instead. What they find is what those find for an
/// ASCII `target` (a UTF-8 match starts on a character's first byte).
extension StringProtocol {
    /// The first range of `target`.
    @inlinable
    public func byteRange(of target: StaticString) -> Range<Index>? {
        target.withUTF8Buffer { byteRange(of: $0) }
    }

    /// The first range of `target`.
    @inlinable
    public func byteRange(of target: String) -> Range<Index>? {
        var target = target
        return target.withUTF8 { byteRange(of: $0) }
    }

    @inlinable
    func byteRange(of wanted: UnsafeBufferPointer<UInt8>) -> Range<Index>? {
        let bytes = utf8
        guard let first = wanted.first else { return startIndex..<startIndex }
        var from = bytes.startIndex
        while let found = bytes[from...].firstIndex(of: first) {
            var at = found
            var matched = 0
            while matched < wanted.count, at != bytes.endIndex, bytes[at] == wanted[matched] {
                bytes.formIndex(after: &at)
                matched += 1
            }
            if matched == wanted.count { return found..<at }
            from = bytes.index(after: found)
        }
        return nil
    }

    /// Whether it starts with `prefix` (ASCII), letters in either case.
    @inlinable
    public func hasPrefixIgnoringCase(_ prefix: StaticString) -> Bool {
        prefix.withUTF8Buffer { wanted in
            var bytes = utf8.makeIterator()
            for want in wanted {
                guard let byte = bytes.next() else { return false }
                let letter = want | 0x20 >= 0x61 && want | 0x20 <= 0x7a
                guard byte == want || (letter && byte | 0x20 == want | 0x20) else { return false }
            }
            return true
        }
    }

    /// Whether it ends with `suffix` (ASCII), letters in either case.
    @inlinable
    public func hasSuffixIgnoringCase(_ suffix: StaticString) -> Bool {
        suffix.withUTF8Buffer { wanted in
            let bytes = utf8
            guard bytes.count >= wanted.count else { return false }
            return zip(bytes[bytes.index(bytes.endIndex, offsetBy: -wanted.count)...], wanted).allSatisfy { byte, want in
                let letter = want | 0x20 >= 0x61 && want | 0x20 <= 0x7a
                return byte == want || (letter && byte | 0x20 == want | 0x20)
            }
        }
    }

    /// Whether every byte is an ASCII letter or digit, or one of `others`.
    @inlinable
    public func isAlphanumeric(or others: StaticString) -> Bool {
        others.withUTF8Buffer { others in
            utf8.allSatisfy { byte in
                (byte >= 0x30 && byte <= 0x39) || (byte | 0x20 >= 0x61 && byte | 0x20 <= 0x7a) || others.contains(byte)
            }
        }
    }

    /// Whether `target` is in it.
    @inlinable
    public func containsBytes(_ target: StaticString) -> Bool { byteRange(of: target) != nil }
}

extension StringProtocol where UTF8View: BidirectionalCollection {
    /// What follows its last `/` (all of it without one): a path's file name.
    @inlinable
    public var lastPathComponent: SubSequence {
        guard let slash = utf8.lastIndex(of: UInt8(ascii: "/")) else { return self[...] }
        return self[utf8.index(after: slash)...]
    }
}

/// Bytes as lower-case hexadecimal digits, `separator` (one ASCII character, or none) between
/// each `group` of them: written straight into the string's memory.
@inlinable
public func hexText<C: Collection>(_ bytes: C, separator: UInt8? = nil, every group: Int = 1) -> String where C.Element == UInt8 {
    bytes.withContiguousStorageIfAvailable { hexText(buffer: $0, separator: separator, every: group) }
        ?? Array(bytes).withUnsafeBufferPointer { hexText(buffer: $0, separator: separator, every: group) }
}

/// The same, not generic (a generic function called from another module runs unspecialized);
/// with `at`, the separator goes before those bytes instead (a UUID's 4-2-2-2-6).
public func hexText(buffer bytes: UnsafeBufferPointer<UInt8>, separator: UInt8?, every group: Int = 1, at: [Int] = []) -> String {
    let count = bytes.count
    guard count > 0 else { return "" }
    func separates(_ i: Int) -> Bool { separator != nil && i > 0 && (at.isEmpty ? i % group == 0 : at.contains(i)) }
    var length = count * 2
    for i in 1..<count where separates(i) { length += 1 }
    return String(unsafeUninitializedCapacity: length) { out in
        let digits: StaticString = "0123456789abcdef"
        let hex = digits.utf8Start
        var n = 0
        for i in 0..<count {
            if let separator, separates(i) {
                out[n] = separator
                n += 1
            }
            out[n] = hex[Int(bytes[i] >> 4)]
            out[n + 1] = hex[Int(bytes[i] & 15)]
            n += 2
        }
        return n
    }
}
