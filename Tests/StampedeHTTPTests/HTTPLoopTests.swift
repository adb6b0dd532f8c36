import CStampedeSys
import Glibc
import StampedeBase
import StampedeFiles
@testable import StampedeHTTP
import StampedeTestSupport
import Testing

/// A real HTTP loop over loopback, turned in the test's thread beside its client: what the loop
/// does with a connection, from the socket's side.
@Suite struct HTTPLoopOverASocket {
    let dir = ScratchDirectory()

    func text(_ bytes: [UInt8]) -> String { String(decoding: bytes, as: UTF8.self) }

    /// Status lines in what came.
    func answers(_ bytes: [UInt8]) -> Int {
        var count = 0, from = 0
        while let found = LoopbackHTTP.offset(of: "HTTP/1.1 ", in: Array(bytes[from...])) {
            count += 1
            from += found + 9
        }
        return count
    }

    /// The first GET of a file misses the cache: the disk thread reads it while the loop waits in
    /// epoll, for as long as the turn allows (here 10 s). Its post wakes the loop (the mailbox's
    /// eventfd), and the answer goes out at once, not at the turn's end nor at the next sweep. (A
    /// body the socket takes whole: a larger one would wait for this thread's client to read.)
    @Test func aFileReadOnTheDiskThreadWakesTheLoop() throws {
        let body = (0..<20_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        dir.write("vmlinuz", body)
        let http = try LoopbackHTTP(serving: dir)
        let started = stampede_monotonic_ns()
        let (bytes, _) = http.exchange("GET /vmlinuz HTTP/1.1\r\nHost: a\r\n\r\n", maxWait: 10 * nanosecondsPerSecond) {
            $0.count >= body.count
        }
        let elapsed = stampede_monotonic_ns() - started
        #expect(text(Array(bytes.prefix(15))) == "HTTP/1.1 200 OK", "\(bytes.count) bytes: \(text(Array(bytes.prefix(300))))")
        #expect(Array(bytes.suffix(body.count)) == body)
        #expect(elapsed < 900_000_000, "the answer came after \(elapsed / 1_000_000) ms: the loop slept through the read")
    }

    /// Requests sent together (pipelined) are answered in order, each whole, on one connection;
    /// a head that cannot be read is answered 400 and ends the connection.
    @Test func pipelinedRequestsAreAnsweredInOrderAndABadHeadEndsTheConnection() throws {
        dir.write("a.cfg", Array("first\n".utf8))
        dir.write("b.cfg", Array("second\n".utf8))
        let http = try LoopbackHTTP(serving: dir)
        let two = http.exchange("GET /a.cfg HTTP/1.1\r\nHost: a\r\n\r\nGET /b.cfg HTTP/1.1\r\nHost: a\r\n\r\n") {
            self.text($0).hasSuffix("second\n")
        }
        #expect(answers(two.bytes) == 2 && !two.ended)
        let first = try #require(LoopbackHTTP.offset(of: "first\n", in: two.bytes)), second = try #require(LoopbackHTTP.offset(of: "second\n", in: two.bytes))
        #expect(first < second)

        let refused = http.exchange("GET /a.cfg HTTP/1.1\r\nHost: a\r\nBad Header\r\n\r\n") { _ in false }
        #expect(text(refused.bytes).hasPrefix("HTTP/1.1 400 "), "\(text(refused.bytes))")
        #expect(refused.ended)
    }
}

/// Issue 57, item 4: a file too large to cache is sent as a disk thread reads it ahead, never read
/// from the disk on the loop.
@Suite struct StreamedAnswers {
    /// A 9 MiB file over the cache's file limit: its body comes whole and in order, through two
    /// read-aheads (8 MiB each), the second asked while the first is still being sent.
    @Test func aStreamedFileIsSentAsItIsReadAheadWholeAndInOrder() throws {
        let dir = ScratchDirectory()
        let body = (0..<(9 << 20)).map { UInt8(truncatingIfNeeded: ($0 >> 3) &* 131 &+ $0) }
        dir.write("live.iso", body)
        let http = try LoopbackHTTP(serving: dir, cache: FileCache(limits: FileCache.Limits(fileLimit: 1 << 20)))
        let whole: ([UInt8]) -> Bool = { received in received.count >= body.count + 80 }
        let (bytes, _) = http.exchange("GET /live.iso HTTP/1.1\r\nHost: a\r\n\r\n", maxWait: 2_000_000, until: whole)
        let headEnd = try #require(LoopbackHTTP.offset(of: "\r\n\r\n", in: Array(bytes.prefix(400)))) + 4
        #expect(String(decoding: bytes.prefix(15), as: UTF8.self) == "HTTP/1.1 200 OK")
        #expect(bytes.count - headEnd == body.count)
        #expect(bytes[headEnd...].elementsEqual(body), "the body differs")
    }
}

/// Issue 57, item 8: what an idle connection costs. A connection waiting for its next request
/// holds its socket's facts and its state, no more: the request's memory (the bytes read, the
/// head's parser, the answer, the file) is an `Exchange` the loop lends while a request is in
/// progress and takes back when it is answered, for the next connection's request.
@Suite struct AnIdleConnectionsCost {
    @_silgen_name("malloc_usable_size") static func allocatedSize(_ pointer: UnsafeMutableRawPointer) -> Int

    @Test func aConnectionAnsweredGivesItsRequestsMemoryBackAndHoldsUnderHalfAKibibyte() throws {
        let dir = ScratchDirectory()
        dir.write("boot.ipxe", Array("#!ipxe\nchain http://x/y\n".utf8))
        let http = try LoopbackHTTP(serving: dir)
        let (bytes, _) = http.exchange("GET /boot.ipxe HTTP/1.1\r\nHost: a\r\n\r\n") { LoopbackHTTP.offset(of: "chain", in: $0) != nil }
        #expect(String(decoding: bytes.prefix(15), as: UTF8.self) == "HTTP/1.1 200 OK")
        let connection = try #require(http.loop.connections.compactMap { $0 }.first)
        #expect(!connection.holdsExchange && http.loop.exchanges.count == 1)
        // What 8,000 idle connections cost each, besides the kernel's socket (nginx: 0.5 KiB).
        #expect(Self.allocatedSize(Unmanaged.passUnretained(connection).toOpaque()) <= 512)
        // A request half sent holds an exchange until its answer is written.
        _ = Array("GET /boot.ipxe HTTP/1.1\r\n".utf8).withUnsafeBytes { send(http.client, $0.baseAddress, $0.count, 0) }
        for _ in 0..<5 { http.loop.turn(now: stampede_monotonic_ns(), maxWait: 1_000_000) }
        #expect(connection.holdsExchange && http.loop.exchanges.count == 0)
        let (rest, _) = http.exchange("Host: a\r\n\r\n") { LoopbackHTTP.offset(of: "chain", in: $0) != nil }
        #expect(String(decoding: rest.prefix(15), as: UTF8.self) == "HTTP/1.1 200 OK")
        #expect(!connection.holdsExchange && http.loop.exchanges.count == 1)
    }
}
