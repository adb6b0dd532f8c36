import ArgumentParser

/// The values a numeric flag takes, and the usage error (exit status 64) for one outside them.
/// Every numeric flag of every subcommand is checked through here before anything runs, so that
/// no value the command line takes can trap, divide by zero, or wrap a shift or a product later
/// (`Tests/interop/test_cli.py` walks them all).
enum FlagRange {
    /// Seconds in a year: the longest wait any flag means.
    static let year = 365 * 86_400
    /// A count of transfers, sockets or machines: far beyond any host, far below a wrap.
    static let count = 1...16_777_216
    /// Retransmissions: more than any firmware makes, and a patience that sums without wrapping.
    static let retries = 0...100
    /// MiB of memory: 16 TiB, whose bytes a 64-bit count still holds.
    static let mebibytes = 0...16_777_216

    static func check(_ value: Int?, _ range: ClosedRange<Int>, _ flag: String, _ unit: String = "") throws {
        guard let value, !range.contains(value) else { return }
        throw ValidationError("\(flag) \(value): must be within \(range.lowerBound)...\(range.upperBound)\(unit.isEmpty ? "" : " " + unit).")
    }

    static func check(_ value: Double?, _ range: ClosedRange<Double>, _ flag: String, _ unit: String = "") throws {
        guard let value, !(value.isFinite && range.contains(value)) else { return }
        throw ValidationError("\(flag) \(value): must be within \(format(range.lowerBound))...\(format(range.upperBound))\(unit.isEmpty ? "" : " " + unit).")
    }

    private static func format(_ value: Double) -> String {
        value == value.rounded() ? String(Int(value)) : String(value)
    }
}
