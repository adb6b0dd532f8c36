import Glibc
import StampedeIO

/// `--machines DIR`: every record file in the directory, read into a `MachineBook`. A file
/// whose name starts with `.` or ends with `~` (an editor's) is passed over, as is anything but
/// a regular file. Every fault of every file is told, each with its file and line; a set with one
/// is not used.
public enum MachineDirectory {
    /// A record file larger than this is refused (a record is a few lines).
    public static let largestFile = 64 << 10

    public static func read(_ path: String, unknown: MachineBook.UnknownMachines) throws(RecordFaults) -> MachineBook {
        let names: [String]
        do { names = try entries(path) } catch {
            throw RecordFaults([RecordError(file: path, line: 0, "cannot read the directory: \(error)")])
        }
        var records: [MachineRecord] = []
        var errors: [RecordError] = []
        for name in names.sorted() where !name.hasPrefix(".") && !name.hasSuffix("~") {
            let file = path.hasSuffix("/") ? path + name : path + "/" + name
            var info = stat()
            guard stat(file, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { continue }
            guard info.st_size <= off_t(largestFile) else {
                errors.append(RecordError(file: file, line: 0, "\(info.st_size) bytes: a record file holds at most \(largestFile)"))
                continue
            }
            let text: [UInt8]
            do { text = try readWholeFile(file) } catch {
                errors.append(RecordError(file: file, line: 0, "cannot read: \(error)"))
                continue
            }
            do {
                if let record = try MachineRecord.parse(text, file: file) { records.append(record) }
            } catch {
                errors += error.errors
            }
        }
        guard errors.isEmpty else { throw RecordFaults(errors) }
        return try MachineBook(records, unknown: unknown)
    }

    /// The names in a directory.
    static func entries(_ path: String) throws(Errno) -> [String] {
        guard let directory = opendir(path) else { throw Errno.current }
        defer { closedir(directory) }
        var names: [String] = []
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }
}
