import Glibc
@testable import StampedeFiles
import StampedeIO
import StampedeTestSupport
import Testing

@Suite struct AccessPolicySpec {
    let dir = ScratchDirectory()

    func readError(_ name: String, permissive: Bool = false, virtualRoot: Bool = false) -> FileRefusal.Reason? {
        let policy = AccessPolicy(root: dir.fd, permissive: permissive, virtualRoot: virtualRoot)
        do {
            _ = try policy.openForReading(Array(name.utf8))
            return nil
        } catch {
            return error.reason
        }
    }

    @Test func aWorldReadableFileBeneathTheRootIsServed() {
        dir.write("boot.bin", [1, 2, 3])
        _ = mkdir(dir.path + "/sub", 0o755)
        dir.write("sub/x", [1])
        #expect(readError("boot.bin") == nil)
        #expect(readError("/boot.bin") == nil)
        #expect(readError("sub/x") == nil)
        #expect(readError("//sub/x") == nil)
    }

    @Test func missingFilesAreError1() {
        #expect(readError("nope") == .notFound)
        #expect(readError("") == .notFound)
        #expect(readError("/") == .notFound)
        #expect(readError("/etc/passwd") == .notFound)
    }

    @Test func dotDotOutOfTheRootIsAnAccessViolation() {
        #expect(readError("../etc/passwd") == .denied)
        _ = mkdir(dir.path + "/a", 0o755)
        #expect(readError("a/../../x") == .denied)
    }

    @Test func symlinksOutOfTheRootAreRefused() {
        _ = symlink("/etc/passwd", dir.path + "/passwd")
        _ = symlink("../../../../etc", dir.path + "/etc")
        _ = symlink("/dev/zero", dir.path + "/zero")
        #expect(readError("passwd") == .denied)
        #expect(readError("etc/passwd") == .denied)
        #expect(readError("zero") == .denied)
    }

    /// `-s`, `-j`: the root is the name's "/", as in tftpd-hpa's chroot.
    @Test func aVirtualRootStopsClimbsAndReadsAbsoluteSymlinksInside() {
        dir.write("boot.bin", [1])
        _ = symlink("/boot.bin", dir.path + "/absolute")
        _ = symlink("/etc/passwd", dir.path + "/passwd")
        _ = symlink("../../../../boot.bin", dir.path + "/climbing")
        for name in ["../boot.bin", "/../../boot.bin", "absolute", "climbing"] {
            #expect(readError(name, virtualRoot: true) == nil, "\(name)")
            #expect(readError(name) == .denied, "\(name)")
        }
        #expect(readError("passwd", virtualRoot: true) == .notFound)
        #expect(readError("../etc/passwd", virtualRoot: true) == .notFound)
    }

    @Test func aSymlinkInsideTheRootIsFollowed() {
        dir.write("real", [7])
        _ = symlink("real", dir.path + "/alias")
        #expect(readError("alias") == nil)
    }

    @Test func directoriesAndFifosAreNotServedAndDoNotBlock() {
        _ = mkdir(dir.path + "/d", 0o755)
        _ = mkfifo(dir.path + "/fifo", 0o644)
        #expect(readError("d") == .denied)
        #expect(readError("fifo") == .denied)
    }

    /// Issue 11: a device node or FIFO was opened before the regular-file check. Opening a FIFO
    /// for reading releases a writer blocked in its open: a FIFO asked for must stay unopened.
    @Test func aFifoAskedForIsNeverOpened() throws {
        _ = mkfifo(dir.path + "/waiting", 0o644)
        let writer = open(dir.path + "/waiting", O_WRONLY | O_NONBLOCK)
        #expect(writer == -1 && errno == ENXIO)  // no reader yet
        #expect(readError("waiting") == .denied)
        // Still no reader: the server only looked at it.
        let again = open(dir.path + "/waiting", O_WRONLY | O_NONBLOCK)
        #expect(again == -1 && errno == ENXIO)
    }

    @Test func aFileNotWorldReadableNeedsPermissive() {
        dir.write("secret", [1], mode: 0o640)
        #expect(readError("secret") == .denied)
        #expect(readError("secret", permissive: true) == nil)
    }

    /// Issue 57, item 4: a loop looks from the kernel's caches alone. A name it has never looked
    /// up is not in them (nil: a disk thread must look); once looked up, its file (or its absence)
    /// is, and the look from memory says what the whole look says.
    @Test func aNameTheKernelHasNotSeenIsLeftToTheDiskThreads() throws {
        let policy = AccessPolicy(root: dir.fd)
        dir.write("seen.bin", [1, 2, 3])
        let fresh = "never-looked-up-\(UInt64.random(in: 0...UInt64.max))"
        #expect(try policy.lookInMemory(Array(fresh.utf8)) == nil)
        #expect(throws: FileRefusal.self) { _ = try policy.look(Array(fresh.utf8)) }
        #expect { _ = try policy.lookInMemory(Array(fresh.utf8)) } throws: { ($0 as? FileRefusal)?.reason == .notFound }
        let whole = try policy.look(Array("seen.bin".utf8))
        guard let fromMemory = try policy.lookInMemory(Array("seen.bin".utf8)) else {
            Issue.record("a file just looked up is not in the kernel's caches")
            return
        }
        #expect(FileKey(fromMemory.info, netascii: false) == FileKey(whole.info, netascii: false))
        #expect(fromMemory.info.st_size == 3)
    }

    @Test func aTooLongNameIsNotFound() {
        #expect(readError(String(repeating: "a", count: 600)) == .notFound)
    }

    @Test func writesAreRefusedUnlessCreateOrWorldWritable() {
        dir.write("locked", [1], mode: 0o644)
        dir.write("open", [1], mode: 0o666)
        func writeError(_ policy: AccessPolicy, _ name: String) -> FileRefusal.Reason? {
            do {
                _ = try policy.openForWriting(Array(name.utf8))
                return nil
            } catch {
                return error.reason
            }
        }
        let plain = AccessPolicy(root: dir.fd)
        #expect(writeError(plain, "new") == .notFound)  // no -c
        #expect(writeError(plain, "locked") == .denied)  // 0644
        #expect(writeError(plain, "open") == nil)  // world-writable
        let creating = AccessPolicy(root: dir.fd, allowCreate: true)
        #expect(writeError(creating, "new") == nil)
        #expect(writeError(creating, "../escape") == .denied)
        // --read-only (tftp-hpa 7.1's --ro): refused whatever -c, -p and the file's mode say.
        let readOnly = AccessPolicy(root: dir.fd, permissive: true, allowCreate: true, readOnly: true)
        let before = dir.entries()
        #expect(writeError(readOnly, "new") == .denied)
        #expect(writeError(readOnly, "open") == .denied)
        #expect(dir.entries() == before)  // not even a temporary file
    }
}

@Suite struct UploadSpec {
    let dir = ScratchDirectory()

    func upload(_ name: String) throws -> Upload {
        try AccessPolicy(root: dir.fd, allowCreate: true, umask: 0o022).openForWriting(Array(name.utf8))
    }

    @Test func nothingAppearsUnderTheNameUntilCommit() throws {
        let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 1024, alignment: 8)
        defer { scratch.deallocate() }
        let u = try upload("new.bin")
        [UInt8]("hello").withUnsafeBytes { _ = u.append($0, scratch: scratch) }
        #expect(dir.read("new.bin") == nil)
        u.append(nil, scratch: scratch)
        try u.commitFile()
        #expect(dir.read("new.bin") == [UInt8]("hello"))
        #expect(dir.entries() == ["new.bin"])
    }

    @Test func aStartRemovesWhatKilledUploadsLeftButNotALiveUpload() throws {
        // Left by a killed server, at the top and deeper down: no process holds them.
        dir.write(Upload.temporaryPrefix + "dead1", [1, 2, 3])
        mkdirat(dir.fd, "boot", 0o755)
        mkdirat(dir.fd, "boot/efi", 0o755)
        dir.write("boot/efi/" + Upload.temporaryPrefix + "dead2", [4])
        dir.write("boot/efi/grubx64.efi", [5])
        dir.write(".stampede-uploadish", [6])
        let live = try upload("boot/live.bin")
        // One made after this server started (its upload has not locked it yet): not stale.
        let startedAt = FileCache.realTime()
        usleep(10_000)
        dir.write("boot/" + Upload.temporaryPrefix + "new", [7])
        #expect(Upload.removeStale(beneath: dir.fd, changedBefore: startedAt) == 2)
        unlinkat(dir.fd, "boot/" + Upload.temporaryPrefix + "new", 0)
        #expect(dir.entries() == [".stampede-uploadish", "boot"])
        // The live upload's temporary survived and still commits.
        let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 64, alignment: 8)
        defer { scratch.deallocate() }
        [UInt8]("ok").withUnsafeBytes { _ = live.append($0, scratch: scratch) }
        live.append(nil, scratch: scratch)
        try live.commitFile()
        #expect(dir.read("boot/live.bin") == [UInt8]("ok"))
        #expect(dir.read("boot/efi/grubx64.efi") == [5])
        #expect(Upload.removeStale(beneath: dir.fd, changedBefore: FileCache.realTime()) == 0)
    }

    @Test func anAbortedUploadLeavesTheOldFileAndNoTemporary() throws {
        dir.write("f", [UInt8]("old"), mode: 0o666)
        let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 1024, alignment: 8)
        defer { scratch.deallocate() }
        let u = try upload("f")
        [UInt8]("new data").withUnsafeBytes { _ = u.append($0, scratch: scratch) }
        #expect(u.beginWrite())
        try u.writeStaged()
        u.wrote()
        u.abort()
        #expect(dir.read("f") == [UInt8]("old"))
        #expect(dir.entries() == ["f"])
    }

    @Test func aReplacedFileKeepsItsMode() throws {
        dir.write("f", [UInt8]("old"), mode: 0o666)
        let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 1024, alignment: 8)
        defer { scratch.deallocate() }
        let u = try upload("f")
        u.append(nil, scratch: scratch)
        try u.commitFile()
        var info = stat()
        stat(dir.path + "/f", &info)
        #expect(info.st_mode & 0o777 == 0o666)
        #expect(dir.read("f") == [])
    }

    /// A CR at the end of a block that is written before the next block comes: decoded with it.
    @Test func netasciiUploadsAreDecodedAcrossBlocksAndWrites() throws {
        let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 1024, alignment: 8)
        defer { scratch.deallocate() }
        let u = try upload("t.txt")
        u.useNetascii()
        [UInt8]([0x61, 0x0D]).withUnsafeBytes { _ = u.append($0, scratch: scratch) }
        #expect(u.beginWrite())
        try u.writeStaged()
        u.wrote()
        [UInt8]([0x0A, 0x62, 0x0D]).withUnsafeBytes { _ = u.append($0, scratch: scratch) }
        u.append(nil, scratch: scratch)
        try u.commitFile()
        #expect(dir.read("t.txt") == [0x61, 0x0A, 0x62, 0x0D])
        #expect(u.bytesTaken == 4)
    }

    /// The worker gathers, the disk thread writes: a window is handed over at the mark (or at
    /// once for an announced size, to reserve it), never while a write is in flight, and the
    /// commit writes the rest after it.
    @Test func blocksAreHandedOverAWindowAtATimeAndOneWriteAtATime() throws {
        let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 2048, alignment: 8)
        defer { scratch.deallocate() }
        let u = try upload("w.bin")
        u.stage(windowBytes: 1024)  // at least 64 KiB
        let block = [UInt8](repeating: 7, count: 1024)
        var due = false
        for _ in 0..<63 { due = block.withUnsafeBytes { u.append($0, scratch: scratch) } }
        #expect(!due, "63 KiB: under the mark")
        due = block.withUnsafeBytes { u.append($0, scratch: scratch) }
        #expect(due && u.beginWrite())
        #expect(!u.beginWrite(), "a second write was handed over while one was in flight")
        block.withUnsafeBytes { _ = u.append($0, scratch: scratch) }  // gathered meanwhile
        #expect(dir.entries().count == 1 && dir.read(dir.entries()[0]) == [], "written before the disk thread's turn")
        try u.writeStaged()
        u.wrote()
        #expect(dir.read(dir.entries()[0])?.count == 64 * 1024)
        try u.commitFile()
        #expect(dir.read("w.bin") == [UInt8](repeating: 7, count: 65 * 1024))

        let announced = try upload("a.bin")
        try announced.announce(4096)
        #expect(!announced.writeIsDue)
        block.withUnsafeBytes { _ = announced.append($0, scratch: scratch) }
        #expect(announced.writeIsDue, "the first block of an announced size is not handed over to reserve it")
        #expect(announced.beginWrite())
        try announced.writeStaged()
        announced.wrote()
        #expect(!announced.writeIsDue)
        announced.abort()
    }
}

/// `--normalize` and `--validate` (in.tftpd(8), "FILENAME PROCESSING"); the expected names are
/// what in.tftpd 7.3's `--map-test` printed for them.
@Suite struct FilenameProcessingSpec {
    func normalized(_ name: String, _ mode: FilenameProcessing.Normalization) -> String {
        String(decoding: FilenameProcessing.normalize(Array(name.utf8), mode), as: UTF8.self)
    }

    @Test func pathModeDropsDotsAndRepeatedSlashesAndClimbsNoHigherThanTheRoot() {
        let cases = ["a/b/": "/a/b/", "/": "/", "": "/", "a//b": "/a/b", "./a": "/a", "../a": "/a", "a/../../b": "/b",
                     "/..": "/", ".": "/", "a/.": "/a/", "a/..": "/", "a/b/..": "/a/", "//": "/", "a/b//": "/a/b/",
                     ".hidden/..x/...": "/.hidden/..x/..."]
        for (name, expected) in cases { #expect(normalized(name, .path) == expected, "\(name)") }
    }

    @Test func rootModeOnlyPrefixesASlashAndNoneLeavesTheName() {
        #expect(normalized("a//b", .root) == "/a//b")
        #expect(normalized("/../a", .root) == "/../a")
        #expect(normalized("", .root) == "/")
        #expect(normalized("a/../b", .none) == "a/../b")
    }

    @Test func validationWantsAnAbsoluteNameWithoutDotsOrControlCharacters() {
        func valid(_ name: String) -> String? {
            FilenameProcessing.validate(Array(name.utf8)).map { String(decoding: $0, as: UTF8.self) }
        }
        #expect(valid("/a//b/") == "/a/b")
        #expect(valid("/") == "/")
        #expect(valid("a") == nil)
        #expect(valid("/a/./b") == nil)
        #expect(valid("/a/../b") == nil)
        #expect(valid("/a\u{1}b") == nil)
        #expect(valid("/.hidden/..x") == "/.hidden/..x")
    }

    @Test func theAccessPolicyOpensTheNameTheStepsMake() throws {
        let dir = ScratchDirectory()
        dir.write("boot.bin", [1])
        var policy = AccessPolicy(root: dir.fd)
        policy.names = FilenameProcessing(normalization: .none, validates: true)
        #expect(throws: FileRefusal.self) { _ = try policy.openForReading(Array("boot.bin".utf8)) }
        _ = try policy.openForReading(Array("/boot.bin".utf8))
        policy.names.normalization = .path
        _ = try policy.openForReading(Array("x/../boot.bin".utf8))
        #expect(policy.canServe(Array("./boot.bin".utf8), isWrite: false))
        #expect(!policy.canServe(Array("boot.bin".utf8), isWrite: true))  // not world-writable, no -c
    }

    /// Without -s or -j, tftpd-hpa reads a name as the host's path: `/srv/root/boot.bin` is the
    /// served directory's `boot.bin` (7.3 with `--path-prefix / ... /srv/root` serves it).
    @Test func aNameThatSpellsTheHostsPathIsTakenBeneathTheDirectory() throws {
        let dir = ScratchDirectory()
        dir.write("boot.bin", [1])
        var policy = AccessPolicy(root: dir.fd)
        policy.names = FilenameProcessing(normalization: .path, validates: true, hostDirectory: "//srv/root/")
        #expect(policy.names.hostDirectory == Array("/srv/root".utf8))
        _ = try policy.openForReading(Array("/srv/root/boot.bin".utf8))
        _ = try policy.openForReading(Array("/boot.bin".utf8))
        #expect(throws: FileRefusal.self) { _ = try policy.openForReading(Array("/srv/rootboot.bin".utf8)) }
        #expect(policy.names.beneathHostDirectory(Array("/srv/root".utf8)) == Array("/srv/root".utf8))
        #expect(policy.names.beneathHostDirectory(Array("/srv/root/../x".utf8)) == Array("/../x".utf8))
        #expect(FilenameProcessing(hostDirectory: "/").hostDirectory == nil)
    }
}
