import Glibc

/// Writes `text` to standard error (fd 2) as it is: no buffer, so nothing is lost or reordered
/// when the process exits or detaches, and no shared FILE (C's stderr is not concurrency-safe).
public func writeToStandardError(_ text: String) {
    writeAll(text, to: 2)
}

/// Writes all of `text` to `fd`, in one write(2) where the kernel takes it whole (a line appended
/// to a log file by several threads stays one line).
public func writeAll(_ text: String, to fd: Int32) {
    var text = text
    text.withUTF8 { writeAll(UnsafeRawBufferPointer($0), to: fd) }
}

/// `pieces` one after another, then `text` and a newline, in one write as `writeAll` does, laid
/// out in memory lent for the line (the stack's, for a short one): a line said for every request
/// takes no memory of its own. Inlinable, so that it is made for the caller's pieces (Strings),
/// not a generic loop per byte.
@inlinable
public func writeLine<each Piece: StringProtocol>(_ pieces: repeat each Piece, text: UnsafeBufferPointer<UInt8>, to fd: Int32) {
    var count = text.count + 1
    for piece in repeat each pieces { count += piece.utf8.count }
    withUnsafeTemporaryAllocation(of: UInt8.self, capacity: count) { line in
        var at = 0
        for piece in repeat each pieces {
            var piece = String(piece)
            at = piece.withUTF8 { line[at...].update(fromContentsOf: $0) }
        }
        at = line[at...].update(fromContentsOf: text)
        line[at] = UInt8(ascii: "\n")
        writeAll(UnsafeRawBufferPointer(line), to: fd)
    }
}

public func writeAll(_ bytes: UnsafeRawBufferPointer, to fd: Int32) {
    var done = 0
    while done < bytes.count {
        let n = write(fd, bytes.baseAddress! + done, bytes.count - done)
        if n < 0 && errno == EINTR { continue }
        guard n > 0 else { return }
        done += n
    }
}
