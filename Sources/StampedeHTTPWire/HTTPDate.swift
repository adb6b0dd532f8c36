import Glibc

/// HTTP's one date format (IMF-fixdate, RFC 9110 §5.6.7): "Sun, 06 Nov 1994 08:49:37 GMT".
public enum HTTPDate {
    static let days: StaticString = "SunMonTueWedThuFriSat"
    static let months: StaticString = "JanFebMarAprMayJunJulAugSepOctNovDec"

    /// The date's 29 bytes, onto `bytes`: said for every answer, so worked out here rather than
    /// by gmtime_r, which takes the C library's time-zone lock each call. Years outside
    /// 0001...9999 (a file's absurd time) are held to them: the format has four digits.
    public static func append(_ seconds: Int64, to bytes: inout [UInt8]) {
        let seconds = min(max(seconds, -62_135_596_800), 253_402_300_799)
        let (days, second) = floorDivision(seconds, 86_400)
        let (year, month, day) = civil(days)
        let weekday = floorDivision(days + 4, 7).1  // 1 January 1970 was a Thursday.
        // Written in place, then appended at once: an append per byte costs a check each.
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 29) { date in
            var at = 0
            name(Self.days, weekday, into: date, at: &at)
            date[at] = UInt8(ascii: ",")
            date[at + 1] = 32
            at += 2
            digits(day, 2, into: date, at: &at)
            date[at] = 32
            at += 1
            name(months, month - 1, into: date, at: &at)
            date[at] = 32
            at += 1
            digits(year, 4, into: date, at: &at)
            date[at] = 32
            at += 1
            digits(second / 3600, 2, into: date, at: &at)
            date[at] = UInt8(ascii: ":")
            at += 1
            digits(second / 60 % 60, 2, into: date, at: &at)
            date[at] = UInt8(ascii: ":")
            at += 1
            digits(second % 60, 2, into: date, at: &at)
            date[at] = 32
            at += 1
            name("GMT", 0, into: date, at: &at)
            bytes.append(contentsOf: date)
        }
    }

    /// The `index`th three-letter name of `table`.
    private static func name(_ table: StaticString, _ index: Int64, into date: UnsafeMutableBufferPointer<UInt8>, at: inout Int) {
        for k in 0..<3 { date[at + k] = table.utf8Start[Int(index) * 3 + k] }
        at += 3
    }

    /// `n` in `count` decimal digits, 0s in front.
    private static func digits(_ n: Int64, _ count: Int, into date: UnsafeMutableBufferPointer<UInt8>, at: inout Int) {
        var rest = n
        for k in stride(from: at + count - 1, through: at, by: -1) {
            date[k] = 48 + UInt8(rest % 10)
            rest /= 10
        }
        at += count
    }

    /// `a / b` rounded down, and what is left (0 ..< b).
    static func floorDivision(_ a: Int64, _ b: Int64) -> (Int64, Int64) {
        let (quotient, remainder) = a.quotientAndRemainder(dividingBy: b)
        return remainder < 0 ? (quotient - 1, remainder + b) : (quotient, remainder)
    }

    /// The proleptic Gregorian year, month (1...12) and day (1...31) of a day counted from 1
    /// January 1970: Howard Hinnant's `civil_from_days`, in eras of 400 years that start on
    /// 1 March (so that a leap day ends its year).
    static func civil(_ days: Int64) -> (year: Int64, month: Int64, day: Int64) {
        let (era, dayOfEra) = floorDivision(days + 719_468, 146_097)
        let yearOfEra = (dayOfEra - dayOfEra / 1_460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let shiftedMonth = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * shiftedMonth + 2) / 5 + 1
        let month = shiftedMonth < 10 ? shiftedMonth + 3 : shiftedMonth - 9
        return (era * 400 + yearOfEra + (month <= 2 ? 1 : 0), month, day)
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
