import Testing
@testable import StampedeHTTPWire

@Suite struct NumbersWritten {
    func written(_ value: UInt64, radix: UInt64, after prefix: String = "") -> String {
        var bytes = Array(prefix.utf8)
        Grammar.append(value, radix: radix, to: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }

    @Test(arguments: [0, 7, 9, 10, 99, 100, 65_536, 1_000_000_007, UInt64.max])
    func decimalAsTheStandardLibraryWritesIt(_ value: UInt64) {
        #expect(written(value, radix: 10) == String(value))
    }

    @Test(arguments: [0, 0xf, 0x10, 0x1a, 0xdead_beef, UInt64.max])
    func hexadecimalInLowercase(_ value: UInt64) {
        #expect(written(value, radix: 16) == String(value, radix: 16))
    }

    @Test func appendedAfterWhatIsThere() {
        #expect(written(404, radix: 10, after: "HTTP/1.1 ") == "HTTP/1.1 404")
        #expect(written(UInt64.max, radix: 2) == String(UInt64.max, radix: 2))
    }
}
