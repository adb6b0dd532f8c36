import Glibc

/// Reads from `offset` of `fd` into `buffer` until it is full or the file ends (pread, EINTR
/// retried); returns how many bytes were read. The one reader of files at an offset: the cache's
/// images, the blocks of a streamed transfer (whole small files: `readToEnd`).
public func readFully(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, at offset: Int) throws(Errno) -> Int {
    var done = 0
    while done < buffer.count {
        let n = pread(fd, buffer.baseAddress! + done, buffer.count - done, off_t(offset + done))
        if n < 0 && errno == EINTR { continue }
        if n < 0 { throw Errno.current }
        if n == 0 { break }
        done += n
    }
    return done
}

/// Writes all of `bytes` to `fd` (EINTR retried, short writes continued). The one writer of
/// files: uploads and downloads (through `ReplacingFile`), `get FILE -` to standard output.
public func writeFully(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) throws(Errno) {
    var done = 0
    while done < bytes.count {
        let n = write(fd, bytes.baseAddress! + done, bytes.count - done)
        if n < 0 && errno == EINTR { continue }
        if n < 0 { throw Errno.current }
        done += n
    }
}

/// A whole regular file (a rule file, the file `put` sends, the one `storm --verify` compares
/// with, a /proc setting), `path` taken from `directory` when it is relative. Read to its end,
/// not to the size fstat gives: /proc says 0.
public func readWholeFile(_ path: String, relativeTo directory: Int32 = AT_FDCWD) throws(Errno) -> [UInt8] {
    let file = try Descriptor(opening: path, relativeTo: directory, flags: O_RDONLY)
    var info = stat()
    guard fstat(file.raw, &info) == 0 else { throw Errno.current }
    guard info.st_mode & S_IFMT == S_IFREG else { throw Errno(EINVAL) }
    return try readToEnd(file.raw, sizeHint: Int(info.st_size))
}

/// Everything `fd` gives until its end (read, EINTR retried): a file from its offset, or a pipe
/// (`--map-test -` reads standard input).
public func readToEnd(_ fd: Int32, sizeHint: Int = 0) throws(Errno) -> [UInt8] {
    // One byte beyond the hint, so that a file of that size ends without growing the buffer.
    var bytes = [UInt8](repeating: 0, count: max(sizeHint + 1, 4096))
    var length = 0
    while true {
        if length == bytes.count { bytes += repeatElement(0, count: bytes.count) }
        let start = length
        let n = bytes.withUnsafeMutableBytes { read(fd, $0.baseAddress! + start, $0.count - start) }
        if n < 0 && errno == EINTR { continue }
        if n < 0 { throw Errno.current }
        if n == 0 { break }
        length += n
    }
    bytes.removeSubrange(length...)
    return bytes
}
