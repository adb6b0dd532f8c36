import CStampedeSys
import Glibc
import Logging

/// Where the server's log goes: standard error in the foreground (`-L`), otherwise syslog with
/// facility daemon, as in.tftpd logs (and in inetd mode, where fds 0-2 are the socket).
enum LogDestination {
    case standardError
    case syslog(identity: String)

    /// tftpd-hpa's verbosity: 0 start, stop and problems (and every refusal: bad input always
    /// gets a log line); 1 every transfer and remapping; 2 requests accepted, with their options;
    /// 3 each remap rule's step and the rest of the detail.
    static func level(verbosity: Int) -> Logger.Level {
        switch verbosity {
        case ...0: .notice
        case 1: .info
        case 2: .debug
        default: .trace
        }
    }

    func bootstrap(level: Logger.Level) {
        switch self {
        case .standardError:
            LoggingSystem.bootstrap { label in
                var handler = StreamLogHandler.standardError(label: label)
                handler.logLevel = level
                return handler
            }
        case .syslog(let identity):
            stampede_open_syslog(SyslogHandler.keep(identity))
            SyslogHandler.inUse = true
            LoggingSystem.bootstrap { _ in SyslogHandler(logLevel: level) }
        }
    }
}

/// A swift-log handler over syslog(3), which is thread-safe; metadata goes in front as
/// `key=value`, like the stream handler's.
struct SyslogHandler: LogHandler {
    /// Set once, before any thread starts.
    nonisolated(unsafe) static var inUse = false
    var logLevel: Logger.Level
    var metadata: Logger.Metadata = [:]

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        var merged = metadata
        if let extra = event.metadata { merged.merge(extra) { $1 } }
        let prefix = merged.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
        let text = prefix.isEmpty ? "\(event.message)" : "\(prefix) \(event.message)"
        stampede_syslog(Self.priority(event.level), text)
    }

    static func priority(_ level: Logger.Level) -> Int32 {
        switch level {
        case .trace, .debug: LOG_DEBUG
        case .info: LOG_INFO
        case .notice: LOG_NOTICE
        case .warning: LOG_WARNING
        case .error: LOG_ERR
        case .critical: LOG_CRIT
        }
    }

    /// openlog keeps the pointer it is given: the identity lives as long as the process.
    static func keep(_ identity: String) -> UnsafePointer<CChar> {
        UnsafePointer(strdup(identity)!)
    }
}
