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
    text.withUTF8 { bytes in
        var done = 0
        while done < bytes.count {
            let n = write(fd, bytes.baseAddress! + done, bytes.count - done)
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { return }
            done += n
        }
    }
}
