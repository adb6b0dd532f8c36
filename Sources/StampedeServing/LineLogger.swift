import Logging
import StampedeBase

/// A log handler that takes a finished line as its bytes, with no swift-log event and no String:
/// the handler that writes lines to a descriptor (a file, standard error). `log(level:line:)`
/// writes what `log(event:)` writes for a message of the same text.
public protocol LineLogHandling: LogHandler {
    func log(level: Logger.Level, line: UnsafeBufferPointer<UInt8>)
}

/// A logger for the lines said per request (every 404 at --verbosity 0): a `LogLine` goes
/// straight to the logger's handler when that takes lines, else as the logger's message (syslog,
/// a handler of the tests), where its text is one String.
public struct LineLogger {
    public let logger: Logger
    /// The logger's handler, if it takes lines: found once (a cast per line would cost what the
    /// event did).
    private let lines: (any LineLogHandling)?

    public init(_ logger: Logger) {
        self.logger = logger
        lines = logger.handler as? any LineLogHandling
    }

    /// Whether a line at `level` is written (make it only then).
    public func logs(_ level: Logger.Level) -> Bool {
        logger.logLevel <= level
    }

    public func log(_ line: LogLine, level: Logger.Level) {
        guard logs(level) else { return }
        if let lines {
            line.bytes.withUnsafeBufferPointer { lines.log(level: level, line: $0) }
        } else {
            logger.log(level: level, Logger.Message(stringLiteral: line.text))
        }
    }
}

/// `--log-format`: tftpd-hpa's kind of line, or one JSON object per finished transfer or refusal
/// for log pipelines (the log handler writes every line as an object then).
public enum LogFormat: String, Sendable, CaseIterable {
    case text, json
}
