import ArgumentParser
import CStampedeSys
import Glibc
import Logging
import StampedeBase
import StampedeIO
import StampedeServing

/// Where the server's log goes: syslog with facility daemon, as in.tftpd logs (the default, and
/// always in inetd mode, where fds 0-2 are the socket); standard error in the foreground (`-L`,
/// `--stderr`); standard output (`--stdout`); or a file (`--logfile`).
enum LogDestination {
    case standardError
    case standardOutput
    case file(LogFile)
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

    /// The descriptor lines are written to; nil for syslog.
    var descriptor: Int32? {
        switch self {
        case .standardError: 2
        case .standardOutput: 1
        case .file(let file): file.descriptor
        case .syslog: nil
        }
    }

    func bootstrap(level: Logger.Level, format: LogFormat = .text, lines: LineFormat = .human) {
        if case .syslog(let identity) = self {
            stampede_open_syslog(SyslogHandler.keep(identity))
            SyslogHandler.inUse = true
        }
        let descriptor = descriptor
        switch (descriptor, format) {
        case (_, .json):
            LoggingSystem.bootstrap { _ in JSONLogHandler(logLevel: level, descriptor: descriptor) }
        case (let fd?, .text):
            LoggingSystem.bootstrap { _ in LineLogHandler(logLevel: level, descriptor: fd, format: lines) }
        case (nil, .text):
            LoggingSystem.bootstrap { _ in SyslogHandler(logLevel: level) }
        }
    }
}

/// `--logformat`, as in.tftpd 7.3 writes its lines outside syslog: `human` is
/// `in.tftpd[PID]: notice: text`, `tag` is `<5>text` (the priority as systemd's journal reads a
/// service's output).
enum LineFormat: String, CaseIterable, ExpressibleByArgument {
    case human, tag
}

/// `--logfile FILE`: appended to, created 0644; reopened on SIGHUP under the same name (after
/// logrotate moved it), through the directory held open, so that `-s` does not hide it. The new
/// file takes the old one's descriptor (dup2), so a line being written goes to one or the other.
final class LogFile: Sendable {
    let descriptor: Int32
    private let directory: Descriptor
    private let name: String

    init(_ path: String) throws(Errno) {
        let (directoryPath, name) = splitPath(path)
        self.name = name
        directory = try Descriptor(opening: directoryPath, flags: O_RDONLY | O_DIRECTORY)
        descriptor = try Self.open(name, in: directory.raw)
    }

    private static func open(_ name: String, in directory: Int32) throws(Errno) -> Int32 {
        let fd = openat(directory, name, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0o644)
        guard fd >= 0 else { throw Errno.current }
        return fd
    }

    /// Says what went wrong, or nil.
    func reopen() -> String? {
        do throws(Errno) {
            let fresh = try Self.open(name, in: directory.raw)
            defer { close(fresh) }
            guard dup2(fresh, descriptor) >= 0, fcntl(descriptor, F_SETFD, FD_CLOEXEC) == 0 else { throw Errno.current }
            return nil
        } catch {
            let who = error.rawValue == EACCES && getuid() != 0 ? " (as uid \(getuid()), the -u user)" : ""
            return "--logfile \(name): cannot reopen, writing on to the old file: \(error)\(who)"
        }
    }
}

/// A line per event on a descriptor, in `LineFormat`; metadata goes in front as `key=value`. It
/// takes a request's line as bytes too (`LineLogHandling`).
struct LineLogHandler: MetadataLogHandler, LineLogHandling {
    var logLevel: Logger.Level
    var metadata: Logger.Metadata = [:] {
        didSet { tails = Self.tails(format, prefix: Self.prefix(metadata.sorted { $0.key < $1.key })) }
    }
    let descriptor: Int32
    let format: LineFormat
    /// What a line begins with, up to the process's id: `stampede[` (none in the tag format).
    private let lead: [UInt8]
    /// What follows the id, by syslog priority: `]: warning: ` and the handler's own metadata (a
    /// worker's `worker=1 `), or `<4>worker=1 `. Made when the metadata is set, not per line.
    private var tails: [[UInt8]]

    init(logLevel: Logger.Level, descriptor: Int32, format: LineFormat) {
        self.logLevel = logLevel
        self.descriptor = descriptor
        self.format = format
        lead = format == .human ? Array("\(Stampede.invokedName)[".utf8) : []
        tails = Self.tails(format, prefix: "")
    }

    static func prefix(_ fields: [(key: String, value: Logger.Metadata.Value)]) -> String {
        fields.map { "\($0.key)=\($0.value) " }.joined()
    }

    /// `tail` for every priority, by its number.
    static func tails(_ format: LineFormat, prefix: String) -> [[UInt8]] {
        var tails = [[UInt8]](repeating: [], count: Int(LOG_DEBUG) + 1)
        for level in Logger.Level.allCases {
            tails[Int(SyslogHandler.priority(level))] = tail(format, level, prefix: prefix)
        }
        return tails
    }

    static func tail(_ format: LineFormat, _ level: Logger.Level, prefix: String) -> [UInt8] {
        switch format {
        case .human: Array("]: \(name(level)): \(prefix)".utf8)
        case .tag: Array("<\(SyslogHandler.priority(level))>\(prefix)".utf8)
        }
    }

    func log(event: LogEvent) {
        let tail = event.metadata?.isEmpty ?? true
            ? tails[Int(SyslogHandler.priority(event.level))]
            : Self.tail(format, event.level, prefix: Self.prefix(fields(of: event)))
        var message = event.message.description
        message.withUTF8 { write(tail, $0) }
    }

    /// A request's line (`LineLogger`): as `log(event:)` writes a message, with no event.
    func log(level: Logger.Level, line: UnsafeBufferPointer<UInt8>) {
        write(tails[Int(SyslogHandler.priority(level))], line)
    }

    private func write(_ tail: [UInt8], _ text: UnsafeBufferPointer<UInt8>) {
        writeLine(lead: lead, number: format == .human ? stampede_process_id() : nil, tail: tail, text: text, to: descriptor)
    }

    /// syslog's names for the priorities, as in.tftpd writes them.
    static func name(_ level: Logger.Level) -> String {
        switch level {
        case .trace, .debug: "debug"
        case .info: "info"
        case .notice: "notice"
        case .warning: "warning"
        case .error: "error"
        case .critical: "crit"
        }
    }
}

/// What the handlers here share: their own metadata, under which an event's goes.
protocol MetadataLogHandler: LogHandler {
    var metadata: Logger.Metadata { get set }
}

extension MetadataLogHandler {
    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    /// The handler's metadata with the event's on top, sorted by key.
    func fields(of event: LogEvent) -> [(key: String, value: Logger.Metadata.Value)] {
        var merged = metadata
        if let extra = event.metadata { merged.merge(extra) { $1 } }
        return merged.sorted { $0.key < $1.key }
    }
}

/// A swift-log handler over syslog(3), which is thread-safe; metadata goes in front as
/// `key=value`, like the stream handler's.
struct SyslogHandler: MetadataLogHandler {
    /// Set once, before any thread starts.
    nonisolated(unsafe) static var inUse = false
    var logLevel: Logger.Level
    var metadata: Logger.Metadata = [:]

    func log(event: LogEvent) {
        let prefix = fields(of: event).map { "\($0.key)=\($0.value)" }.joined(separator: " ")
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

/// `--log-format json`: every line one JSON object: `time`, `level`, the metadata as fields
/// (numbers as numbers), `message`. A finished transfer's line carries `event: "transfer"` and its
/// client, file, options, bytes, duration and outcome (`Worker.log`).
struct JSONLogHandler: MetadataLogHandler {
    var logLevel: Logger.Level
    var metadata: Logger.Metadata = [:]
    /// Where the lines go; nil for syslog (which stamps its own time and level).
    let descriptor: Int32?

    func log(event: LogEvent) {
        var text = "{"
        if descriptor != nil { text += "\"time\":\(Self.quoted(Self.timestamp())),\"level\":\(Self.quoted(event.level.rawValue))," }
        for (key, value) in fields(of: event) {
            text += "\(Self.quoted(key)):\(Self.json(value)),"
        }
        text += "\"message\":\(Self.quoted("\(event.message)"))}"
        if let descriptor {
            writeAll(text + "\n", to: descriptor)
        } else {
            stampede_syslog(SyslogHandler.priority(event.level), text)
        }
    }

    static func json(_ value: Logger.Metadata.Value) -> String {
        switch value {
        case .stringConvertible(let number as Int): return "\(number)"
        case .stringConvertible(let number as Double): return number.isFinite ? "\(number)" : "null"
        case .stringConvertible(let flag as Bool): return flag ? "true" : "false"
        case .array(let values): return "[" + values.map(json).joined(separator: ",") + "]"
        case .dictionary(let fields):
            return "{" + fields.sorted { $0.key < $1.key }.map { "\(quoted($0.key)):\(json($0.value))" }.joined(separator: ",") + "}"
        default: return quoted("\(value)")
        }
    }

    /// A JSON string (`jsonString`).
    static func quoted(_ text: String) -> String { jsonString(text) }

    /// UTC, ISO 8601, milliseconds.
    static func timestamp() -> String {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        var parts = tm()
        var seconds = now.tv_sec
        gmtime_r(&seconds, &parts)
        var buffer = [CChar](repeating: 0, count: 32)
        let count = strftime(&buffer, buffer.count, "%Y-%m-%dT%H:%M:%S", &parts)
        let millis = now.tv_nsec / 1_000_000
        let base = String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return base + "." + String(repeating: "0", count: millis < 10 ? 2 : millis < 100 ? 1 : 0) + "\(millis)Z"
    }
}
