import Glibc
import StampedeBase

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

/// `lead`, the decimal `number` (if any), `tail`, then `text` and a newline, in one write as
/// `writeAll` does, laid out in memory lent for the line (the stack's, for a short one): a line
/// said for every request takes no memory of its own. The number goes between because a log
/// line's head names the process (`stampede[1234]: warning: `), whose id a fork changes.
public func writeLine(lead: [UInt8], number: Int32?, tail: [UInt8], text: UnsafeBufferPointer<UInt8>, to fd: Int32) {
    // A sign and Int32's 10 digits at most.
    withUnsafeTemporaryAllocation(of: UInt8.self, capacity: lead.count + 11 + tail.count + text.count + 1) { line in
        var at = lead.withUnsafeBufferPointer { line.update(fromContentsOf: $0) }
        if let number { at += writeSignedDigits(Int64(number), into: UnsafeMutableBufferPointer(rebasing: line[at...])) }
        at = tail.withUnsafeBufferPointer { line[at...].update(fromContentsOf: $0) }
        at = line[at...].update(fromContentsOf: text)
        line[at] = UInt8(ascii: "\n")
        writeAll(UnsafeRawBufferPointer(start: line.baseAddress, count: at + 1), to: fd)
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
