import Glibc

/// HTTP's one date format (IMF-fixdate, RFC 9110 §5.6.7): "Sun, 06 Nov 1994 08:49:37 GMT".
public enum HTTPDate {
    static let days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
    static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    public static func format(_ seconds: Int64) -> String {
        var time = time_t(seconds)
        var parts = tm()
        gmtime_r(&time, &parts)
        func two(_ n: Int32) -> String { n < 10 ? "0\(n)" : "\(n)" }
        return "\(days[Int(parts.tm_wday)]), \(two(parts.tm_mday)) \(months[Int(parts.tm_mon)]) \(parts.tm_year + 1900) "
            + "\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec)) GMT"
    }

    /// Seconds since the epoch, or nil for anything but an IMF-fixdate (the obsolete formats are
    /// ignored as an invalid date is: the condition does not apply).
    public static func parse(_ text: String) -> Int64? {
        let fields = text.split(separator: " ")
        guard fields.count == 6, fields[0].count == 4, fields[0].hasSuffix(","), fields[5] == "GMT",
              let day = Int32(fields[1]), fields[1].count == 2, let month = months.firstIndex(of: String(fields[2])),
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
}
