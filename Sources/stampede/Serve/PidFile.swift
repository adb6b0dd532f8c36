import CStampedeSys
import Glibc
import StampedeIO

/// `-P FILE`: the serving process's ID, written before -s chroots (the file's directory is out of
/// sight after it) and removed at exit through that directory, held open. Once -u has dropped
/// root, the user may not remove a file from a root-owned directory such as /run: the file is
/// emptied then, so that no stale ID is left behind.
final class PidFile {
    let path: String
    private let directory: Descriptor
    private let name: String
    private let file: Descriptor

    init(_ path: String) throws(Errno) {
        let (directoryPath, name) = splitPath(path)
        self.name = name
        self.path = path
        directory = try Descriptor(opening: directoryPath, flags: stampede_o_path | O_DIRECTORY)
        // O_NOFOLLOW: root never writes through a symlink someone planted there.
        file = try Descriptor(opening: name, relativeTo: directory.raw, flags: O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW,
                              mode: 0o644)
        let text = Array("\(getpid())\n".utf8)
        guard Glibc.write(file.raw, text, text.count) == text.count else { throw Errno.current }
    }

    /// Removes the file, or empties it where the user may not remove it, and says so for the log.
    func remove() -> String? {
        if unlinkat(directory.raw, name, 0) == 0 { return nil }
        let error = Errno.current
        ftruncate(file.raw, 0)
        return "-P \(path): cannot remove it as this user (\(error)): emptied it"
    }
}
