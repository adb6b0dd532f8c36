import Glibc

/// A file named by a path and read again later, through its directory, held open from the start:
/// after `-s` has chrooted (where the path would name another file, or none) and after the file is
/// replaced (an editor's save, a renewed certificate: a new inode under the same name) alike.
/// `-m`'s rule file and `--https`'s certificate and key are held so; none of them need be in the
/// served root. A relative symbolic link in the directory (certbot's live/ to archive/) is
/// followed from the held directory, outside any chroot; an absolute one is read from the root of
/// the time.
public final class HeldFile: Sendable {
    private let directory: Descriptor
    /// As it was named.
    public let path: String
    /// Its name in the directory.
    public let name: String

    /// Holds `path`'s directory open (the file itself need not exist yet).
    public init(_ path: String) throws(Errno) {
        self.path = path
        let (directoryPath, name) = splitPath(path)
        self.name = name
        directory = try Descriptor(opening: directoryPath, flags: O_RDONLY | O_DIRECTORY)
    }

    /// The file's bytes now, as the user of now reads them.
    public func read() throws(Errno) -> [UInt8] {
        try readWholeFile(name, relativeTo: directory.raw)
    }
}

/// A path as its directory and its last name: "/run/tftpd.pid" is ("/run", "tftpd.pid"), "/x" is
/// ("/", "x"), "x" is (".", "x"). The files the server finds again after `-s` hid their paths
/// (`-P`, `-m`, `--logfile`, `--https`'s) are named through their directory, held open.
public func splitPath(_ path: String) -> (directory: String, name: String) {
    guard let slash = path.lastIndex(of: "/") else { return (".", path) }
    return (slash == path.startIndex ? "/" : String(path[..<slash]), String(path[path.index(after: slash)...]))
}
