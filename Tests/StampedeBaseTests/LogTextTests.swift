import Testing
@testable import StampedeBase

@Suite struct LogTextSpec {
    @Test(arguments: [
        (0.0037, 3, "0.004"), (0.0, 3, "0.000"), (1.5, 0, "2"), (2.5, 0, "3"), (12345.678, 2, "12345.68"),
        (-2.25, 1, "-2.3"), (-0.0001, 3, "0.000"), (0.1, 1, "0.1"), (7.0, 4, "7.0000"), (1.0005, 3, "1.001"),
        (.infinity, 3, "0"), (-.infinity, 1, "0"), (.nan, 2, "0"), (1e30, 2, "92233720368547758.08"),
        (-0.0, 2, "0.00"), (1.5, 40, "1.500000000000000000"), (3.0, -1, "3"),
    ] as [(Double, Int, String)])
    func decimalsAreRoundedAndZeroPadded(value: Double, places: Int, text: String) {
        #expect(decimalText(value, places: places) == text)
        var line = LogLine()
        line.append(value, places: places)
        #expect(line.text == text)
    }

    @Test(arguments: [0, 7, -7, 42, 1_000_000, Int.max, Int.min])
    func integersAreWrittenAsTheStandardLibraryWritesThem(value: Int) {
        var line = LogLine()
        line.append("n=")
        line.append(value)
        #expect(line.text == "n=\(value)")
    }

    @Test func aLineKeepsItsPiecesInOrderAndStartsOverEmpty() {
        var line = LogLine()
        line.append("GET ")
        line.append(sanitized: Array("caf\u{e9}\n".utf8))
        line.append(" é " as String)
        line.append(3)
        line.append(" time=")
        line.append(0.25, places: 3)
        #expect(line.text == "GET caf\\xc3\\xa9\\x0a é 3 time=0.250")
        line.start()
        line.append(-1)
        #expect(line.text == "-1")
    }
}
