import Logging
import StampedeServing
import Synchronization

/// A logger that keeps its lines, for a test to read what a worker said.
public final class LogLines: Sendable {
    private let lines = Mutex<[String]>([])

    public init() {}

    public var all: [String] { lines.withLock { $0 } }

    /// A logger at `level` whose lines (level, message) land here; `asBytes`: its handler takes
    /// the lines said per request as their bytes (`LineLogHandling`), as a log file's does.
    public func logger(level: Logger.Level = .trace, asBytes: Bool = false) -> Logger {
        // swift-log's multiplexer takes events alone: a line said per request comes as a message.
        var logger = Logger(label: "test") { _ -> any LogHandler in
            if asBytes { Handler(lines: self) } else { MultiplexLogHandler([Handler(lines: self)]) }
        }
        logger.logLevel = level
        return logger
    }

    fileprivate func append(_ line: String) { lines.withLock { $0.append(line) } }

    private struct Handler: LineLogHandling {
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

        func log(level: Logger.Level, line: UnsafeBufferPointer<UInt8>) {
            lines.append("\(level) \(String(decoding: line, as: UTF8.self))")
        }
    }
}
