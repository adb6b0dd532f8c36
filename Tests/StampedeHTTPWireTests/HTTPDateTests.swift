import Glibc
import Testing
@testable import StampedeHTTPWire

/// `HTTPDate.append` works the date out itself; the C library's gmtime_r is what it must agree with.
@Suite struct HTTPDateArithmetic {
    /// The date as gmtime_r says it, in IMF-fixdate.
    func byTheCLibrary(_ seconds: Int64) -> String {
        var time = time_t(seconds)
        var parts = tm()
        #expect(gmtime_r(&time, &parts) != nil)
        let days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        func padded(_ n: Int32, _ width: Int) -> String {
            let text = String(n)
            return String(repeating: "0", count: max(0, width - text.count)) + text
        }
        return "\(days[Int(parts.tm_wday)]), \(padded(parts.tm_mday, 2)) \(months[Int(parts.tm_mon)]) "
            + "\(padded(parts.tm_year + 1900, 4)) \(padded(parts.tm_hour, 2)):\(padded(parts.tm_min, 2)):\(padded(parts.tm_sec, 2)) GMT"
    }

    @Test func everyFewWeeksFromYearOneToNineThousandNineHundredAndNinetyNineAgreesWithGmtime() {
        var seconds: Int64 = -62_135_596_800  // 0001-01-01 00:00:00
        var mismatches = 0
        while seconds <= 253_402_300_799 {   // 9999-12-31 23:59:59
            if HTTPDate.format(seconds) != byTheCLibrary(seconds) { mismatches += 1 }
            seconds += 37 * 86_400 + 12_345  // a step that walks through weekdays, days and seconds
        }
        #expect(mismatches == 0)
    }

    @Test(arguments: [
        Int64(0), -1, 86_399, 86_400, -86_400, -86_401,
        951_782_399, 951_782_400, 951_868_800,  // 29 February 2000 (a leap year of a century) and its neighbours
        4_107_542_399, 4_107_542_400,           // 28 February and 1 March 2100 (no leap day)
        1_700_000_000, 2_147_483_647, 2_147_483_648,
        -62_135_596_800, 253_402_300_799,
    ])
    func edgesAgreeWithGmtime(_ seconds: Int64) {
        #expect(HTTPDate.format(seconds) == byTheCLibrary(seconds))
    }

    @Test func aTimeOutsideTheFourDigitYearsIsHeldToThem() {
        #expect(HTTPDate.format(.max) == "Fri, 31 Dec 9999 23:59:59 GMT")
        #expect(HTTPDate.format(.min) == "Mon, 01 Jan 0001 00:00:00 GMT")
        #expect(HTTPDate.format(-62_135_596_801) == "Mon, 01 Jan 0001 00:00:00 GMT")
    }
}
