import Logging
import StampedeServing
import Synchronization

/// Lines taken.
public final class LineCount: Sendable {
    public let value = Atomic<Int>(0)

    public init() {}
}

/// Takes every line at --verbosity 1's level as its bytes, counts them, and writes none.
public struct DiscardingLineLogHandler: LineLogHandling {
    public var logLevel: Logger.Level = .info
    public var metadata: Logger.Metadata = [:]
    let count: LineCount

    public init(count: LineCount) {
        self.count = count
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {}

    public func log(level: Logger.Level, line: UnsafeBufferPointer<UInt8>) {
        count.value.add(1, ordering: .relaxed)
    }
}

/// Takes every line at --verbosity 1's level, and writes none.
public struct DiscardingLogHandler: LogHandler {
    public var logLevel: Logger.Level = .info
    public var metadata: Logger.Metadata = [:]

    public init() {}

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {}
}
