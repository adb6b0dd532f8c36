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
        let bytes = (0..<(256 << 10)).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 9) }
        let fd = open(dir.write("big.img", bytes), O_RDONLY)
        try #require(ScratchDirectory.evict(fd, size: bytes.count), "the file's pages did not leave the page cache")
        var info = stat()
        #expect(fstat(fd, &info) == 0)
        let file = StreamedFile(Descriptor(owning: fd), size: bytes.count, version: FileKey(info, netascii: false))
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 4096, alignment: 8)
        defer { buffer.deallocate() }

        // RWF_NOWAIT starts the kernel's own readahead for a block it does not hold, and reads
        // what that finished before it returns: once in a while (a CI run) the disk answered
        // within the call. Evicted again and asked again, a block on the disk is not read.
        var onDisk = try file.readCached(8192..<12288, into: buffer) == nil
        for _ in 0..<4 where !onDisk {
            try #require(ScratchDirectory.evict(fd, size: bytes.count))
            onDisk = try file.readCached(8192..<12288, into: buffer) == nil
        }
        #expect(onDisk, "a block on the disk was read by RWF_NOWAIT five times out of five")
        try #require(ScratchDirectory.evict(fd, size: bytes.count))
        let disk = DiskWork(threads: 1)
        let files = FileService(policy: AccessPolicy(root: dir.fd), remapRules: nil, cache: FileCache(), disk: disk)
        let mailbox = LoadMailbox()
        #expect(files.readAhead(file, from: 8192, waiter: LoadWaiter(mailbox: mailbox, ticket: 9)))
        disk.drain()
        #expect(mailbox.collect().map(\.outcome) == [.readAhead(through: bytes.count)])
        file.readAhead(done: bytes.count)
        #expect(try file.readCached(8192..<12288, into: buffer) == 4096)
        #expect(Array(buffer) == Array(bytes[8192..<12288]))
        // At the end: what there is.
        #expect(try file.readCached((bytes.count - 100)..<(bytes.count + 3996), into: buffer) == 100)
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
