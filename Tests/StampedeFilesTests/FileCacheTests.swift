import Glibc
import Logging
@testable import StampedeFiles
import StampedeIO
import StampedeTestSupport
import Synchronization
import Testing

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

    /// Issue 24: sendfile from a memfd looks up and locks each 4 KiB page; in huge pages an
    /// image's whole 2 MiB pieces go a huge page at a time. A tail of half a huge page or more
    /// is padded to a whole one, and the cache counts the padding; a shorter tail stays in
    /// small pages and costs nothing more.
    @Test func aSharedImageHasHugePagesForItsWhole2MiB() throws {
        let huge = 2 << 20
        let short = (0..<(2 * huge + huge / 2 - 4096)).map { UInt8(truncatingIfNeeded: $0 / 4096 &+ $0) }
        let padded = (0..<(huge + huge / 2)).map { UInt8(truncatingIfNeeded: $0 / 4096 &+ $0 &+ 7) }
        dir.write("kernel", short)
        dir.write("ipxe.efi", padded)
        let cache = FileCache(limits: .init(sharedFrom: FileImage.sharedFrom))
        let kernel = try #require(image(try acquire(cache, "kernel")))
        #expect(kernel.descriptor != nil)
        #expect(Array(kernel.bytes) == short && kernel.residentCount == short.count)
        let loader = try #require(image(try acquire(cache, "ipxe.efi")))
        #expect(Array(loader.bytes) == padded && loader.count == padded.count)
        #expect(loader.residentCount == 2 * huge && cache.residentBytes == short.count + 2 * huge)
        let policy = String(decoding: try readWholeFile("/sys/kernel/mm/transparent_hugepage/shmem_enabled"), as: UTF8.self)
        for image in [kernel, loader] {
            let base = UInt(bitPattern: image.bytes.baseAddress)
            #expect(base % UInt(huge) == 0)
            if !policy.contains("[deny]") {  // "deny" refuses huge pages to every shmem file
                let found = try hugeKiB(mappedAt: base)
                #expect(found == 2 * huge >> 10, "\(image.count) bytes: \(String(describing: found)) KiB")
            }
        }
        // The memfd is as long as the padded image: a response's length is the file's, never it.
        var info = stat()
        #expect(fstat(try #require(loader.descriptor), &info) == 0 && Int(info.st_size) == 2 * huge)
    }

    /// The shmem huge pages that map the mapping starting at `base` (/proc/self/smaps).
    func hugeKiB(mappedAt base: UInt) throws -> Int? {
        let smaps = String(decoding: try readWholeFile("/proc/self/smaps"), as: UTF8.self).split(separator: "\n")
        let start = String(base, radix: 16) + "-"
        guard let header = smaps.firstIndex(where: { $0.hasPrefix(start) }) else { return nil }
        for line in smaps[(header + 1)...] {
            if line.hasPrefix("ShmemPmdMapped:") { return Int(line.split(separator: " ")[1]) }
        }
        return nil
    }

    @Test func anEmptyFileHasAnEmptyImage() throws {
        dir.write("empty", [])
        let cache = FileCache()
        let empty = try #require(image(try acquire(cache, "empty")))
        #expect(empty.count == 0)
    }
}

/// Issue 21, defect 14: the cache keyed versions by size and modification time alone, and loaded
/// a file twice (or streamed it for want of budget) when two workers wanted it at once.
@Suite struct FileCacheVersions {
    let dir = ScratchDirectory()

    func info(_ name: String) throws -> stat {
        try AccessPolicy(root: dir.fd).openForReading(Array(name.utf8)).info
    }

    func bytes(_ cache: FileCache, _ name: String) throws -> (image: FileImage, bytes: [UInt8]) {
        let file = try AccessPolicy(root: dir.fd).openForReading(Array(name.utf8))
        guard case .image(let image) = try cache.acquire(fd: file.descriptor.raw, info: file.info, netascii: false) else {
            throw Errno(EINVAL)
        }
        return (image, Array(image.bytes))
    }

    /// A clock well past any racy window.
    static let later: @Sendable () -> Int64 = { FileCache.realTime() + 60 * 1_000_000_000 }

    @Test func aSameSizeRewriteThatPutsTheModificationTimeBackIsANewVersion() throws {
        let cache = FileCache(wallClock: Self.later)
        dir.write("kernel", [UInt8]("version one"))
        let old = try info("kernel")
        let first = try bytes(cache, "kernel")
        cache.release(first.image)
        // `cp -p` over it in place: same size, the same modification time put back.
        dir.write("kernel", [UInt8]("version two"))
        var times = [old.st_atim, old.st_mtim]
        #expect(utimensat(dir.fd, "kernel", &times, 0) == 0)
        let now = try info("kernel")
        #expect(now.st_mtim.tv_sec == old.st_mtim.tv_sec && now.st_mtim.tv_nsec == old.st_mtim.tv_nsec && now.st_size == old.st_size)
        #expect(try bytes(cache, "kernel").bytes == [UInt8]("version two"))
    }

    @Test func aFileChangedJustBeforeItWasReadIsSharedForItsWindowThenReadAgainOnce() throws {
        dir.write("boot.ipxe", [UInt8]("#!ipxe"))
        let changed = FileKey(try info("boot.ipxe"), netascii: false).lastChange
        let clock = Mutex(changed + 1_000_000)  // read a millisecond after it was written
        let cache = FileCache(wallClock: { clock.withLock { $0 } })
        let racy = try bytes(cache, "boot.ipxe").image
        clock.withLock { $0 = changed + FileCache.racyWindow / 2 }
        #expect(try bytes(cache, "boot.ipxe").image === racy)  // within its window: shared
        clock.withLock { $0 = changed + FileCache.racyWindow + 1 }
        let settled = try bytes(cache, "boot.ipxe").image  // after it: read again, once
        #expect(settled !== racy)
        #expect(try bytes(cache, "boot.ipxe").image === settled)
        #expect(cache.statistics.misses == 2 && cache.statistics.hits == 2 && cache.statistics.racy == 1)
        // The racy image is freed when its last transfer lets go of it.
        #expect(cache.residentBytes == 2 * 6)
        cache.release(racy)
        cache.release(racy)
        #expect(cache.residentBytes == 6)
    }

    /// A version that turned out to have changed while it was read still lets those waiting for
    /// it go on (its gate was left closed, and the next worker to want it waited for ever).
    @Test func aVersionThatChangedUnderItsReadLeavesNobodyWaiting() throws {
        let cache = FileCache(wallClock: Self.later)
        dir.write("menu.ipxe", [UInt8]("#!ipxe short"))
        let stale = try info("menu.ipxe")
        dir.write("menu.ipxe", [UInt8]("#!ipxe a longer menu"))
        let root = dir.fd
        let done = Mutex(0)
        for _ in 0..<2 {
            // Each asks for the version it saw at open, which is gone: read again as the new one.
            SystemThread(named: "test") {
                let file = try! AccessPolicy(root: root).openForReading(Array("menu.ipxe".utf8))
                if case .image(let image) = try! cache.acquire(fd: file.descriptor.raw, info: stale, netascii: false),
                   Array(image.bytes) == [UInt8]("#!ipxe a longer menu") {
                    done.withLock { $0 += 1 }
                }
            }.join()
        }
        #expect(done.withLock { $0 } == 2)
    }

    @Test func twoWorkersWantingOneFileReadItOnceAndShareIt() throws {
        let size = 128 << 20
        dir.write("initrd.img", [UInt8](repeating: 3, count: size))
        // Room for one copy: a second reader used to find no budget and stream it.
        let cache = FileCache(limits: .init(budget: size + size / 2, fileLimit: size), wallClock: Self.later)
        let results = Mutex<[FileImage?]>([])
        let root = dir.fd
        let threads = (0..<2).map { index in
            SystemThread(named: "test") {
                if index == 1 { usleep(5_000) }
                let file = try! AccessPolicy(root: root).openForReading(Array("initrd.img".utf8))
                var image: FileImage?
                if case .image(let loaded) = try! cache.acquire(fd: file.descriptor.raw, info: file.info, netascii: false) {
                    image = loaded
                }
                results.withLock { $0.append(image) }
            }
        }
        for thread in threads { thread.join() }
        let images = results.withLock { $0 }.compactMap { $0 }
        #expect(images.count == 2 && images[0] === images[1])
        #expect(cache.statistics.misses == 1 && cache.statistics.streamed == 0)
    }
}

/// Issue 24: a request for a version already loaded opens nothing but its name (O_PATH): three
/// system calls fewer for each HTTP request and RRQ the cache answers.
@Suite struct CachedVersionsGoUnopened {
    let dir = ScratchDirectory()

    /// A read through the file service, as a request makes it: one that misses waits while the
    /// disk thread reads the file, then asks again. The lease is the test's as it would be a
    /// transfer's: its image goes back to the cache when the test lets go of it.
    func serve(_ cache: FileCache, _ name: String) throws(FileRefusal) -> FileLease {
        let disk = DiskWork()
        let files = FileService(policy: AccessPolicy(root: dir.fd), remapRules: nil, cache: cache, disk: disk)
        let mailbox = LoadMailbox()
        var outcome: LoadOutcome?
        while true {
            switch files.read(Array(name.utf8), netascii: false, client: aClient, waiter: LoadWaiter(mailbox: mailbox, ticket: 1), after: outcome) {
            case .ready(let lease):
                return lease
            case .loading:
                disk.drain()
                outcome = mailbox.collect().first?.outcome
            case .refused(let refusal):
                throw refusal
            }
        }
    }

    @Test func aLoadedVersionIsSharedAndCountedAsAHit() throws {
        dir.write("ipxe.efi", Array(repeating: 9, count: 4000))
        let cache = FileCache(wallClock: FileCacheVersions.later)
        var first: FileLease? = try serve(cache, "ipxe.efi")
        let held = first?.image
        let image = try #require(held)
        do {
            let second = try serve(cache, "ipxe.efi")
            #expect(second.image === image && Array(image.bytes) == Array(repeating: 9, count: 4000))
            #expect(cache.statistics.misses == 1 && cache.statistics.hits == 1)
        }
        // The second lease is gone; the first keeps the image resident until it goes too.
        first = nil
        #expect(cache.statistics.hits == 1 && cache.residentBytes == 4000)
        let third = try serve(cache, "ipxe.efi")
        #expect(third.image === image && cache.statistics.hits == 2)
    }

    /// The key is from the look's fstat, so a file made unservable (its mode, a FIFO in its place)
    /// is another version, refused by the policy, and never its cached image.
    @Test func aFileMadeUnservableIsRefusedThoughItsOldVersionIsCached() throws {
        dir.write("ipxe.efi", Array(repeating: 9, count: 4000))
        let cache = FileCache(wallClock: FileCacheVersions.later)
        _ = try serve(cache, "ipxe.efi")
        #expect(chmod(dir.path + "/ipxe.efi", 0o600) == 0)
        #expect { _ = try serve(cache, "ipxe.efi") } throws: { ($0 as? FileRefusal)?.reason == .denied }
        #expect(unlink(dir.path + "/ipxe.efi") == 0 && mkfifo(dir.path + "/ipxe.efi", 0o644) == 0)
        #expect(throws: FileRefusal.self) { _ = try serve(cache, "ipxe.efi") }
        #expect(cache.statistics.hits == 0)
    }

    @Test func aRewrittenFileIsANewVersionRead() throws {
        dir.write("boot.ipxe", [UInt8]("#!ipxe one"))
        let cache = FileCache(wallClock: FileCacheVersions.later)
        let old = try serve(cache, "boot.ipxe")
        dir.write("boot.ipxe", [UInt8]("#!ipxe two"))
        let new = try serve(cache, "boot.ipxe")
        let (oldHeld, newHeld) = (old.image, new.image)
        let (oldImage, newImage) = (try #require(oldHeld), try #require(newHeld))
        #expect(newImage !== oldImage && Array(newImage.bytes) == [UInt8]("#!ipxe two") && Array(oldImage.bytes) == [UInt8]("#!ipxe one"))
        #expect(cache.statistics.misses == 2 && cache.statistics.hits == 0)
    }

    @Test func aRacyVersionWhoseWindowIsOverIsNotTakenFromTheCache() throws {
        dir.write("boot.ipxe", [UInt8]("#!ipxe"))
        let changed = FileKey(try AccessPolicy(root: dir.fd).look(Array("boot.ipxe".utf8)).info, netascii: false).lastChange
        let clock = Mutex(changed + 1_000_000)
        let cache = FileCache(wallClock: { clock.withLock { $0 } })
        let racy = try serve(cache, "boot.ipxe")
        let held = racy.image
        let image = try #require(held)
        #expect(try serve(cache, "boot.ipxe").image === image)
        clock.withLock { $0 = changed + FileCache.racyWindow + 1 }
        #expect(try serve(cache, "boot.ipxe").image !== image)
    }
}
