import CMallocCounter
import Glibc
import Logging
import StampedeBase
import StampedeIO
import StampedeProtocol
import StampedeServing
import Testing
@testable import stampede

/// The lines a log file or standard error gets: tftpd-hpa's shape, the handler's metadata in
/// front, one write each, and no memory of their own (at --verbosity 0 every 404 writes one).
@Suite struct LineLogHandlerSpec {
    /// The lines `body` logs through a handler writing to a pipe.
    func lines(format: LineFormat, metadata: Logger.Metadata = [:], _ body: (Logger) -> Void) throws -> String {
        var ends: [Int32] = [0, 0]
        try #require(pipe(&ends) == 0)
        defer { close(ends[0]) }
        var handler = LineLogHandler(logLevel: .info, descriptor: ends[1], format: format)
        handler.metadata = metadata
        let logger = Logger(label: "test", factory: { _ in handler })
        body(logger)
        close(ends[1])
        var text: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while case let n = read(ends[0], &chunk, chunk.count), n > 0 { text += chunk[..<n] }
        return String(decoding: text, as: UTF8.self)
    }

    @Test func aLineIsTheNamePidLevelMetadataAndMessage() throws {
        let human = try lines(format: .human, metadata: ["worker": "1"]) { $0.warning("GET 127.0.0.1:4000 \"absent.cfg\" http 404") }
        #expect(human == "\(Stampede.invokedName)[\(getpid())]: warning: worker=1 GET 127.0.0.1:4000 \"absent.cfg\" http 404\n")
        let tagged = try lines(format: .tag) { $0.info("served") }
        #expect(tagged == "<6>served\n")
    }

    /// Each level has the name syslog gives it (human) or its priority (tag), and an event's own
    /// metadata goes in front of its message with the handler's.
    @Test func everyLevelAndAnEventsOwnMetadata() throws {
        let levels: [(Logger.Level, String, String)] = [
            (.info, "info", "<6>"), (.notice, "notice", "<5>"), (.warning, "warning", "<4>"),
            (.error, "error", "<3>"), (.critical, "crit", "<2>"),
        ]
        for (level, name, priority) in levels {
            let human = try lines(format: .human, metadata: ["worker": "1"]) { $0.log(level: level, "said") }
            #expect(human == "\(Stampede.invokedName)[\(getpid())]: \(name): worker=1 said\n")
            let tagged = try lines(format: .tag, metadata: ["worker": "1"]) { $0.log(level: level, "said") }
            #expect(tagged == "\(priority)worker=1 said\n")
        }
        let withOwn = try lines(format: .human, metadata: ["worker": "1"]) { $0.notice("said", metadata: ["file": "a"]) }
        #expect(withOwn == "\(Stampede.invokedName)[\(getpid())]: notice: file=a worker=1 said\n", "\(withOwn)")
        let after = try lines(format: .human, metadata: ["worker": "1"]) { $0.notice("said", metadata: ["file": "a"]); $0.notice("again") }
        #expect(after.hasSuffix("]: notice: worker=1 again\n"), "\(after)")
    }

    /// The number between a line's lead and its tail, as decimal whatever its sign or size.
    @Test(arguments: [(Int32(0), "0"), (7, "7"), (10, "10"), (4_194_304, "4194304"), (-12, "-12"), (.min, "-2147483648"), (.max, "2147483647")])
    func theNumberInALine(number: Int32, text: String) throws {
        var ends: [Int32] = [0, 0]
        try #require(pipe(&ends) == 0)
        defer { close(ends[0]) }
        Array("x".utf8).withUnsafeBufferPointer { writeLine(lead: Array("a[".utf8), number: number, tail: Array("]: ".utf8), text: $0, to: ends[1]) }
        writeLine(lead: [], number: nil, tail: Array("<5>".utf8), text: UnsafeBufferPointer(start: nil, count: 0), to: ends[1])
        close(ends[1])
        var chunk = [UInt8](repeating: 0, count: 256)
        let n = read(ends[0], &chunk, chunk.count)
        #expect(String(decoding: chunk[..<max(0, n)], as: UTF8.self) == "a[\(text)]: x\n<5>\n")
    }

    @Test func writingALineAllocatesNothing() throws {
        let message = Logger.Message(stringLiteral: String(repeating: "a rack machine's 404 for its own config file, ", count: 4))
        var allocations: UInt64 = 0
        let written = try lines(format: .human, metadata: ["worker": "1"]) { logger in
            logger.warning(message)  // the first line's once-only work (the program's name)
            malloc_counter_start()
            for _ in 0..<100 { logger.warning(message) }
            allocations = malloc_counter_stop()
        }
        #expect(written.split(separator: "\n").count == 101)
        #expect(allocations == 0, "\(allocations) allocations for 100 lines")
    }

    /// A request's line (a `LogLine`, through `LineLogger`) is written as the same text said as
    /// a message is, in both formats, with the handler's metadata; and takes no memory.
    @Test(arguments: [LineFormat.human, .tag])
    func aRequestsLineIsWrittenAsItsMessageWouldBe(format: LineFormat) throws {
        var line = LogLine()
        line.append("GET ")
        line.append(sanitized: Array("pxelinux.cfg/01-52-54-00-12-34-56\n".utf8))
        line.append(" http 404 time=")
        line.append(0.0004, places: 3)
        line.append("s: File not found")
        let text = line.text
        var allocations: UInt64 = 0
        let asLines = try lines(format: format, metadata: ["http": "0"]) { logger in
            let lines = LineLogger(logger)
            lines.log(line, level: .warning)
            malloc_counter_start()
            for _ in 0..<100 { lines.log(line, level: .warning) }
            allocations = malloc_counter_stop()
            lines.log(line, level: .debug)  // below the handler's level: not written
        }
        let asMessages = try lines(format: format, metadata: ["http": "0"]) { logger in
            for _ in 0..<101 { logger.warning("\(text)") }
        }
        #expect(asLines == asMessages)
        #expect(asLines.hasSuffix("http=0 GET pxelinux.cfg/01-52-54-00-12-34-56\\x0a http 404 time=0.000s: File not found\n"), "\(asLines)")
        #expect(allocations == 0, "\(allocations) allocations for 100 lines")
    }
}
