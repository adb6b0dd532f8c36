import CStampedeSys
import Glibc
import StampedeIO
import StampedeProtocol
import StampedeServer

/// `-P FILE`: the serving process's ID, written before -s chroots (the file's directory is out of
/// sight after it) and removed at exit through that directory, held open. Once -u has dropped
/// root, the user may not remove a file from a root-owned directory such as /run: the file is
/// emptied then, so that no stale ID is left behind.
final class PidFile {
    let path: String
    private let directory: Int32
    private let name: String
    private let fd: Int32

    init(_ path: String) throws(Errno) {
        let slash = path.lastIndex(of: "/")
        let directoryPath = slash.map { $0 == path.startIndex ? "/" : String(path[..<$0]) } ?? "."
        name = slash.map { String(path[path.index(after: $0)...]) } ?? path
        self.path = path
        directory = open(directoryPath, stampede_o_path | O_DIRECTORY | O_CLOEXEC)
        guard directory >= 0 else { throw Errno.current }
        // O_NOFOLLOW: root never writes through a symlink someone planted there.
        fd = openat(directory, name, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0o644)
        guard fd >= 0 else {
            let error = Errno.current
            close(directory)
            throw error
        }
        let text = Array("\(getpid())\n".utf8)
        guard Glibc.write(fd, text, text.count) == text.count else {
            let error = Errno.current
            close(fd)
            close(directory)
            throw error
        }
    }

    /// Removes the file, or empties it where the user may not remove it, and says so for the log.
    func remove() -> String? {
        defer {
            close(fd)
            close(directory)
        }
        if unlinkat(directory, name, 0) == 0 { return nil }
        let error = Errno.current
        ftruncate(fd, 0)
        return "-P \(path): cannot remove it as this user (\(error)): emptied it"
    }
}
