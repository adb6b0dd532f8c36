import Glibc
import StampedeIO

/// `--machines DIR`, held open (`-s` may chroot away from it) and read whole into a
/// `MachineBook`, at start and at every change. A file whose name starts with `.` or ends with
/// `~` (an editor's) is passed over, as is anything but a regular file. Every fault of every file
/// is told, each with its file and line; a set with one is not used.
public final class MachineDirectory: Sendable {
    /// A record file larger than this is refused (a record is a few lines).
    public static let largestFile = 64 << 10

    public let path: String
    /// The directory, opened once: every read is relative to it.
    let fd: Int32
    /// Its key for machines' done URLs (made now if it has none).
    public let tokens: DoneTokens

    /// A machine's done boot is a hidden file (never a record): `.done-52-54-00-12-34-56`.
    static let donePrefix = ".done-"

    /// `reading`: only to read (the storm's): nothing is written, not even a key.
    public init(_ path: String, reading: Bool = false) throws(RecordFaults) {
        self.path = path
        let fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw RecordFaults([RecordError(file: path, line: 0, "cannot read the directory: \(Errno.current)")]) }
        do { tokens = try DoneTokens.load(in: fd, making: !reading) } catch {
            close(fd)
            throw RecordFaults([RecordError(file: Self.join(path, DoneTokens.keyFile), line: 0, "cannot read or make the key of done URLs: \(error)")])
        }
        self.fd = fd
    }

    static func join(_ path: String, _ name: String) -> String { path.hasSuffix("/") ? path + name : path + "/" + name }

    /// The file that says `mac`'s boot is done.
    public static func doneFile(for mac: [UInt8]) -> String { donePrefix + mac.hardwareAddressText(separator: "-") }

    deinit { close(fd) }

    /// Every record in it now, or every fault.
    public func read(unknown: MachineBook.UnknownMachines) throws(RecordFaults) -> MachineBook {
        let names: [String]
        do { names = try entries() } catch {
            throw RecordFaults([RecordError(file: path, line: 0, "cannot read the directory: \(error)")])
        }
        var records: [MachineRecord] = []
        var errors: [RecordError] = []
        let done = Set(names.compactMap { name in
            name.hasPrefix(Self.donePrefix) ? MachineRecord.hardwareAddress(name.dropFirst(Self.donePrefix.count)) : nil
        })
        for name in names.sorted() where !name.hasPrefix(".") && !name.hasSuffix("~") {
            let file = Self.join(path, name)
            var info = stat()
            guard fstatat(fd, name, &info, 0) == 0, info.st_mode & S_IFMT == S_IFREG else { continue }
            guard info.st_size <= off_t(Self.largestFile) else {
                errors.append(RecordError(file: file, line: 0, "\(info.st_size) bytes: a record file holds at most \(Self.largestFile)"))
                continue
            }
            let text: [UInt8]
            do { text = try readWholeFile(name, relativeTo: fd) } catch {
                // On a change the server is the -u user: the files must let it read.
                let who = error.rawValue == EACCES && getuid() != 0 ? " (as uid \(getuid()), the -u user)" : ""
                errors.append(RecordError(file: file, line: 0, "cannot read: \(error)\(who)"))
                continue
            }
            do {
                if let record = try MachineRecord.parse(text, file: file) { records.append(record) }
            } catch {
                errors += error.errors
            }
        }
        guard errors.isEmpty else { throw RecordFaults(errors) }
        return try MachineBook(records, unknown: unknown, done: done)
    }

    /// Writes `text` as the file `name`, in place of any there: a hidden temporary first, then
    /// renamed over it whole. Its path.
    public func replace(_ name: String, _ text: String) throws(Errno) -> String {
        let temporary = try write(text, beside: name)
        defer { unlinkat(fd, temporary, 0) }
        guard renameat(fd, temporary, fd, name) == 0 else { throw Errno.current }
        return Self.join(path, name)
    }

    /// A hidden temporary file holding `text`, written through to the disk: its name.
    private func write(_ text: String, beside name: String) throws(Errno) -> String {
        let temporary = ".\(name).\(getpid()).tmp"
        let file = openat(fd, temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard file >= 0 else { throw Errno.current }
        let written = Array(text.utf8).withUnsafeBytes { bytes in Result { () throws(Errno) in try writeFully(file, bytes) } }
        var failure: Errno?
        if case .failure(let error) = written { failure = error } else if fsync(file) != 0 { failure = Errno.current }
        close(file)
        if let failure {
            unlinkat(fd, temporary, 0)
            throw failure
        }
        return temporary
    }

    /// Writes `text` as the file `name` unless a file of that name is there (an operator's is
    /// never replaced): a hidden temporary first, then linked in whole. The path, or nil when
    /// one was there.
    public func create(_ name: String, _ text: String) throws(Errno) -> String? {
        let temporary = try write(text, beside: name)
        defer { unlinkat(fd, temporary, 0) }
        guard linkat(fd, temporary, fd, name, 0) == 0 else {
            if errno == EEXIST { return nil }
            throw Errno.current
        }
        return Self.join(path, name)
    }

    /// The names in the directory now.
    func entries() throws(Errno) -> [String] {
        let copy = dup(fd)
        guard copy >= 0 else { throw Errno.current }
        guard let directory = fdopendir(copy) else {
            let error = Errno.current
            close(copy)
            throw error
        }
        defer { closedir(directory) }
        // A duplicate shares the offset: start from the first entry whatever the last read left.
        rewinddir(directory)
        var names: [String] = []
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }
}
