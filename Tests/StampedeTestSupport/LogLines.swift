import Logging
import Synchronization

/// A logger that keeps its lines, for a test to read what a worker said.
public final class LogLines: Sendable {
    private let lines = Mutex<[String]>([])

    public init() {}

    public var all: [String] { lines.withLock { $0 } }

    /// A logger at `level` whose lines (level, message) land here.
    public func logger(level: Logger.Level = .trace) -> Logger {
        var logger = Logger(label: "test") { _ in Handler(lines: self) }
        logger.logLevel = level
        return logger
    }

    fileprivate func append(_ line: String) { lines.withLock { $0.append(line) } }

    private struct Handler: LogHandler {
        let lines: LogLines
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            lines.append("\(event.level) \(event.message)")
        }
    }
}
