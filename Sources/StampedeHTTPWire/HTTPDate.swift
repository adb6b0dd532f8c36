import Glibc

/// HTTP's one date format (IMF-fixdate, RFC 9110 §5.6.7): "Sun, 06 Nov 1994 08:49:37 GMT".
public enum HTTPDate {
    static let days: StaticString = "SunMonTueWedThuFriSat"
    static let months: StaticString = "JanFebMarAprMayJunJulAugSepOctNovDec"

    /// The date's 29 bytes, onto `bytes`.
    public static func append(_ seconds: Int64, to bytes: inout [UInt8]) {
        var time = time_t(seconds)
        var parts = tm()
        gmtime_r(&time, &parts)
        func name(_ table: StaticString, _ index: Int32) {
            for k in 0..<3 { bytes.append(table.utf8Start[Int(index) * 3 + k]) }
        }
        func two(_ n: Int32) {
            bytes.append(48 + UInt8(n / 10))
            bytes.append(48 + UInt8(n % 10))
        }
        name(days, parts.tm_wday)
        bytes.append(UInt8(ascii: ","))
        bytes.append(32)
        two(parts.tm_mday)
        bytes.append(32)
        name(months, parts.tm_mon)
        bytes.append(32)
        Grammar.append(UInt64(max(0, parts.tm_year + 1900)), radix: 10, to: &bytes)
        bytes.append(32)
        two(parts.tm_hour)
        bytes.append(UInt8(ascii: ":"))
        two(parts.tm_min)
        bytes.append(UInt8(ascii: ":"))
        two(parts.tm_sec)
        bytes.append(32)
        name("GMT", 0)
    }

    public static func format(_ seconds: Int64) -> String {
        var bytes: [UInt8] = []
        append(seconds, to: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Seconds since the epoch, or nil for anything but an IMF-fixdate (the obsolete formats are
    /// ignored as an invalid date is: the condition does not apply).
    public static func parse(_ text: String) -> Int64? {
        let fields = text.split(separator: " ")
        guard fields.count == 6, fields[0].count == 4, fields[0].hasSuffix(","), fields[5] == "GMT",
              let day = Int32(fields[1]), fields[1].count == 2, let month = monthIndex(fields[2]),
              let year = Int32(fields[3]), fields[3].count == 4 else { return nil }
        let clock = fields[4].split(separator: ":")
        guard fields[4].count == 8, clock.count == 3, let hour = Int32(clock[0]), let minute = Int32(clock[1]),
              let second = Int32(clock[2]), (1...31).contains(day), hour < 24, minute < 60, second < 61 else { return nil }
        var parts = tm()
        parts.tm_year = year - 1900
        parts.tm_mon = Int32(month)
        parts.tm_mday = day
        parts.tm_hour = hour
        parts.tm_min = minute
        parts.tm_sec = second
        return Int64(timegm(&parts))
    }

    static func monthIndex(_ name: Substring) -> Int? {
        let utf8 = Array(name.utf8)
        guard utf8.count == 3 else { return nil }
        for month in 0..<12 where (0..<3).allSatisfy({ utf8[$0] == months.utf8Start[month * 3 + $0] }) { return month }
        return nil
    }
}
