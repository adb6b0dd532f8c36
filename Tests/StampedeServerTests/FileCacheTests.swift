import Glibc
import StampedeTestSupport
import Testing
@testable import StampedeServer
import StampedeIO
import StampedeProtocol

@Suite struct FileCacheSpec {
    let dir = ScratchDirectory()

    func acquire(_ cache: FileCache, _ name: String, netascii: Bool = false) throws -> FileCache.Source {
        let file = try AccessPolicy(root: dir.fd).openForReading(Array(name.utf8))
        return try cache.acquire(fd: file.descriptor.raw, info: file.info, netascii: netascii)
    }

    func image(_ source: FileCache.Source) -> FileImage? {
        if case .image(let image) = source { return image }
        return nil
    }

    @Test func transfersOfTheSameVersionShareOneImage() throws {
        dir.write("a", Array(repeating: 7, count: 5000))
        let cache = FileCache()
        let first = try #require(image(try acquire(cache, "a")))
        let second = try #require(image(try acquire(cache, "a")))
        #expect(first === second)
        #expect(Array(first.bytes) == Array(repeating: 7, count: 5000))
        #expect(cache.imageCount == 1)
    }

    @Test func aFileReplacedMidTransferLeavesTheRunningTransferItsVersion() throws {
        dir.write("a", [UInt8]("version one"))
        let cache = FileCache()
        let old = try #require(image(try acquire(cache, "a")))
        // Replace by rename, as a provisioning system deploys a new kernel.
        dir.write("a.new", [UInt8]("version two, longer"))
        rename(dir.path + "/a.new", dir.path + "/a")
        let new = try #require(image(try acquire(cache, "a")))
        #expect(Array(old.bytes) == [UInt8]("version one"))
        #expect(Array(new.bytes) == [UInt8]("version two, longer"))
        #expect(old !== new)
    }

    @Test func netasciiIsConvertedOncePerImage() throws {
        dir.write("t", [UInt8]("a\nb"))
        let cache = FileCache()
        let converted = try #require(image(try acquire(cache, "t", netascii: true)))
        #expect(Array(converted.bytes) == [0x61, 0x0D, 0x0A, 0x62])
        let raw = try #require(image(try acquire(cache, "t")))
        #expect(Array(raw.bytes) == [UInt8]("a\nb"))
    }

    @Test func unreferencedImagesAreEvictedLeastRecentlyUsedBeyondTheBudget() throws {
        for name in ["a", "b", "c"] { dir.write(name, Array(repeating: 1, count: 1000)) }
        let cache = FileCache(limits: .init(budget: 2500, fileLimit: 2000))
        let a = try #require(image(try acquire(cache, "a")))
        let b = try #require(image(try acquire(cache, "b")))
        cache.release(a)
        cache.release(b)
        _ = try acquire(cache, "c")
        #expect(cache.imageCount == 2)
        #expect(cache.residentBytes == 2000)
    }

    @Test func filesOverTheLimitOrTheBudgetAreStreamed() throws {
        dir.write("big", Array(repeating: 1, count: 3000))
        dir.write("small", Array(repeating: 1, count: 900))
        let cache = FileCache(limits: .init(budget: 1000, fileLimit: 2000))
        guard case .stream = try acquire(cache, "big") else { Issue.record("big file cached"); return }
        let held = try #require(image(try acquire(cache, "small")))
        dir.write("small2", Array(repeating: 1, count: 900))
        guard case .stream = try acquire(cache, "small2") else { Issue.record("budget exceeded"); return }
        _ = held
    }

    /// Opens `name` as a request does, then appends `bytes` to it: it grows between the request's
    /// look at it and the cache's read. Returns the cache's verdict.
    func acquireAfterGrowing(_ cache: FileCache, _ name: String, by bytes: Int) throws -> FileCache.Source {
        let file = try AccessPolicy(root: dir.fd).openForReading(Array(name.utf8))
        let append = open(dir.path + "/" + name, O_WRONLY | O_APPEND)
        _ = [UInt8](repeating: 2, count: bytes).withUnsafeBytes { Glibc.write(append, $0.baseAddress, $0.count) }
        close(append)
        return try cache.acquire(fd: file.descriptor.raw, info: file.info, netascii: false)
    }

    /// Issue 11: the size checked against the limits was the one seen before the read; a file
    /// that grew meanwhile was loaded whole, past --cache-file-limit and the budget.
    @Test func aFileThatGrewBeforeItWasReadIsJudgedAtItsNewSize() throws {
        dir.write("growing", Array(repeating: 1, count: 900))
        let cache = FileCache(limits: .init(budget: 10_000, fileLimit: 1000))
        guard case .stream(let size) = try acquireAfterGrowing(cache, "growing", by: 5000) else {
            Issue.record("a 5,900-byte file was cached under a 1,000-byte limit")
            return
        }
        #expect(size == 5900)
        #expect(cache.residentBytes == 0 && cache.imageCount == 0)
    }

    @Test func aGrownFileWithinTheLimitsIsLoadedAsItIsNow() throws {
        dir.write("grows", Array(repeating: 1, count: 100))
        let cache = FileCache(limits: .init(budget: 10_000, fileLimit: 1000))
        let grown = try #require(image(try acquireAfterGrowing(cache, "grows", by: 200)))
        #expect(grown.count == 300 && cache.residentBytes == 300)
    }

    @Test func anEmptyFileHasAnEmptyImage() throws {
        dir.write("empty", [])
        let cache = FileCache()
        let empty = try #require(image(try acquire(cache, "empty")))
        #expect(empty.count == 0)
    }
}
