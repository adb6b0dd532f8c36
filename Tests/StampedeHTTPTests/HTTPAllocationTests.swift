import CMallocCounter
import CStampedeSys
import Glibc
import Logging
import StampedeBase
import StampedeFiles
import StampedeHTTP
import StampedeIO
import StampedeTestSupport
import Synchronization
import Testing

/// The small answers a rack asks for (a 404 for a per-machine file that is not there, a 4 KiB
/// script, a 64 KiB config) cost no allocation per request once a kept-alive connection runs.
/// A real HTTP loop on loopback, turned in this thread with the client; the malloc counter counts
/// this thread only (the disk thread that loads a file the first time is not measured). The names
/// are longer than a String keeps inline (15 bytes), as a rack's are. With every answer logged
/// (as --verbosity 0 logs a 404, and 1 everything) by a handler that takes lines (a file's,
/// standard error's), nothing either; by one that takes only swift-log's events (syslog's), the
/// line's text is the one allocation.
@Suite struct HTTPSteadyStateAllocations {
    /// How the test's answers are logged.
    enum Logged: Sendable {
        case not, asLines, asEvents
    }

    @Test(arguments: [("pxelinux.cfg/01-52-54-00-12-34-56", Logged.not), ("boot/scripts/menu-4kib.ipxe", .not),
                      ("boot/configs/seed-64kib.cfg", .not), ("pxelinux.cfg/01-52-54-00-12-34-56", .asLines),
                      ("boot/scripts/menu-4kib.ipxe", .asLines), ("pxelinux.cfg/01-52-54-00-12-34-56", .asEvents)])
    func aKeptAliveConnectionAllocatesNothingPerRequest(name: String, logged: Logged) throws {
        let dir = ScratchDirectory()
        for directory in ["pxelinux.cfg", "boot", "boot/scripts", "boot/configs"] { mkdir(dir.path + "/" + directory, 0o755) }
        dir.write("boot/scripts/menu-4kib.ipxe", (0..<(4 << 10)).map { UInt8(truncatingIfNeeded: $0 &* 7) })
        dir.write("boot/configs/seed-64kib.cfg", (0..<(64 << 10)).map { UInt8(truncatingIfNeeded: $0 &* 13) })
        // Loaded as if later than the cache's racy window after they were written (its clock is
        // that far ahead): a file loaded sooner is read again once the window has passed, which a
        // slow run would count. (A sleep through the window held a test thread for 2 s a case.)
        let cache = FileCache(wallClock: { FileCache.realTime() + FileCache.racyWindow + nanosecondsPerSecond })
        let written = LineCount()
        let http = try LoopbackHTTP(serving: dir, cache: cache, logger: Logger(label: "test", factory: { _ in
            switch logged {
            case .not: SwiftLogNoOpLogHandler()
            case .asLines: DiscardingLineLogHandler(count: written)
            case .asEvents: DiscardingLogHandler()
            }
        }))
        let (loop, client) = (http.loop, http.client)
        let request = Array("GET /\(name) HTTP/1.1\r\nHost: rack\r\nUser-Agent: iPXE/1.21.1\r\nAccept: */*\r\n\r\n".utf8)
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 256 << 10, alignment: 16)
        defer { buffer.deallocate() }

        /// One request and its whole answer (`expected` bytes; nil: until the server goes quiet);
        /// the bytes read.
        func exchange(expected: Int?) -> Int {
            _ = request.withUnsafeBytes { send(client, $0.baseAddress, $0.count, 0) }
            var read = 0
            var quiet = 0
            while expected.map({ read < $0 }) ?? (quiet < 50) {
                loop.turn(now: stampede_monotonic_ns(), maxWait: 1_000_000)
                let n = recv(client, buffer.baseAddress! + read, buffer.count - read, 0)
                if n > 0 { read += n; quiet = 0 } else { quiet += 1 }
                if quiet > 5_000 { break }  // no answer: the expectations below fail
            }
            return read
        }

        // The first answers load the file, open the connection's state, the date line.
        let length = exchange(expected: nil)
        let head = String(decoding: UnsafeRawBufferPointer(rebasing: buffer[..<min(length, 512)]), as: UTF8.self)
        #expect(head.hasPrefix(name.hasPrefix("pxelinux.cfg") ? "HTTP/1.1 404" : "HTTP/1.1 200"), "\(head)")
        for _ in 0..<100 { #expect(exchange(expected: length) == length) }

        var answered = 0
        let allocations = withoutThrowHooks {
            malloc_counter_start()
            for _ in 0..<1000 where exchange(expected: length) == length { answered += 1 }
            return malloc_counter_stop()
        }
        #expect(answered == 1000)
        #expect(allocations <= (logged == .asEvents ? 1000 : 0), "\(allocations) allocations in 1,000 requests for \(name), logged: \(logged)")
        if logged == .asLines { #expect(written.value.load(ordering: .relaxed) >= 1000) }
    }
}
