/// Monotonic time in nanoseconds. Nothing that decides reads a clock: callers pass `now`.
public typealias Nanoseconds = Int64

public let nanosecondsPerSecond: Nanoseconds = 1_000_000_000
