import CStampedeSys
import Glibc
@testable import StampedeFiles
import StampedeIO
import StampedeTestSupport
import Testing

/// Issue 57, item 4: a TFTP worker reads a streamed file's blocks from the page cache alone
/// (preadv2 RWF_NOWAIT); a block still on the disk is not read on the loop, but read ahead on a
/// disk thread, and then it is there.
@Suite struct StreamedFilesReadFromThePageCacheAlone {
    @Test func aBlockOnTheDiskIsReadOnlyAfterItWasReadAhead() throws {
        let dir = ScratchDirectory.onDisk()
        let size = 8 << 20
        let bytes = [UInt8](unsafeUninitializedCapacity: size) { buffer, count in
            for i in 0..<size { buffer[i] = UInt8(truncatingIfNeeded: i &* 7 &+ i >> 9) }
            count = size
        }
        let fd = open(dir.write("big.img", bytes), O_RDONLY)
        var info = stat()
        #expect(fstat(fd, &info) == 0)
        let file = StreamedFile(Descriptor(owning: fd), size: size, version: FileKey(info, netascii: false))
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 4096, alignment: 8)
        defer { buffer.deallocate() }
        let last = (size - 4096)..<size

        // A block the kernel is reading is on the disk until its read ends. A block asked for
        // alone was read within the call (its own small readahead) five times of five in a CI
        // run whose thread lost its CPU between the submit and the look: so the whole file is
        // asked of the disk at once (WILLNEED, 8 MiB) and its last block, the last to arrive,
        // asked for at once.
        var onDisk = false
        for _ in 0..<5 where !onDisk {
            try #require(ScratchDirectory.evict(fd, size: size), "the file's pages did not leave the page cache")
            #expect(posix_fadvise(fd, 0, off_t(size), POSIX_FADV_WILLNEED) == 0)
            onDisk = try file.readCached(last, into: buffer) == nil
        }
        #expect(onDisk, "a block on the disk was read by RWF_NOWAIT five times out of five")
        try #require(ScratchDirectory.evict(fd, size: size))
        let disk = DiskWork(threads: 1)
        let files = FileService(policy: AccessPolicy(root: dir.fd), remapRules: nil, cache: FileCache(), disk: disk)
        let mailbox = LoadMailbox()
        #expect(files.readAhead(file, from: last.lowerBound, waiter: LoadWaiter(mailbox: mailbox, ticket: 9)))
        disk.drain()
        #expect(mailbox.collect().map(\.outcome) == [.readAhead(through: size)])
        file.readAhead(done: size)
        #expect(try file.readCached(last, into: buffer) == 4096)
        #expect(Array(buffer) == Array(bytes[last]))
        // At the end: what there is.
        #expect(try file.readCached((size - 100)..<(size + 3996), into: buffer) == 100)
        #expect(Array(buffer[..<100]) == Array(bytes.suffix(100)))
    }

    /// A descriptor whose bytes cannot be read (a directory's, EISDIR, as EIO would be): the page
    /// cache cannot say it holds them, and the read a read-ahead lets the sender make says why.
    @Test func aDescriptorThatCannotBeReadThrowsOnceReadAhead() throws {
        let dir = ScratchDirectory()
        let file = StreamedFile(try Descriptor(opening: dir.path, flags: O_RDONLY | O_DIRECTORY), size: 4000,
                                version: FileKey(stat(), netascii: false))
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 512, alignment: 8)
        defer { buffer.deallocate() }
        #expect(try file.readCached(0..<512, into: buffer) == nil)
        #expect(throws: Errno(EISDIR)) { try file.read(0..<512, into: buffer) }
    }
}

/// A file to stream is opened where its open waits for nothing: on a local file system, from the
/// kernel's caches on the loop (no disk thread, no wait); on FUSE and NFS, whose opens ask their
/// servers, on a disk thread (Tests/interop/test_disk.py).
@Suite struct StreamedFilesOpenedWhereTheyWaitForNothing {
    @Test func aLocalFileIsOpenedAtOnce() throws {
        let dir = ScratchDirectory()
        dir.write("big.img", Array(repeating: 3, count: 5000))
        let disk = DiskWork(threads: 1)
        let files = FileService(policy: AccessPolicy(root: dir.fd), remapRules: nil,
                                cache: FileCache(limits: .init(budget: 1 << 20, fileLimit: 1000)), disk: disk)
        let mailbox = LoadMailbox()
        #expect(FileService.localFileSystems.contains(stampede_file_system_type(dir.fd)), "the scratch directory is not on a local file system")
        switch files.read(Array("big.img".utf8), netascii: false, client: aClient, waiter: LoadWaiter(mailbox: mailbox, ticket: 1)) {
        case .ready(let lease):
            guard case .stream(let file) = lease.source else { Issue.record("not streamed"); return }
            #expect(file.size == 5000)
        case .loading: Issue.record("a local file's open went to a disk thread")
        case .refused(let refusal): Issue.record("refused: \(refusal)")
        }
        #expect(!mailbox.isAwaiting)
    }
}
