import Glibc
import StampedeFiles
import StampedeIO
import StampedeProtocol

/// A remap rule file (`-m`), held (`HeldFile`), so that SIGHUP finds the file again after `-s`
/// has chrooted, and sees an editor's save (a new inode under the same name).
final class RuleFile: Sendable {
    private let file: HeldFile
    /// `--map-steps`.
    let maxSteps: Int

    init(_ path: String, maxSteps: Int = RemapRules.defaultMaxSteps) throws(Errno) {
        file = try HeldFile(path)
        self.maxSteps = maxSteps
    }

    /// The rules, or an `UnreadableRuleFile`, or a `RemapRulesError` naming the bad lines.
    @Sendable func load() throws -> RemapRules {
        let text: [UInt8]
        do { text = try file.read() } catch { throw UnreadableRuleFile(error: error) }
        return try RemapRules(parsing: text, maxSteps: maxSteps)
    }
}

struct UnreadableRuleFile: Error, CustomStringConvertible {
    var error: Errno
    var description: String {
        // On SIGHUP the server is the -u user: the file and its directory must let it read.
        let who = error.rawValue == EACCES && getuid() != 0 ? " (as uid \(getuid()), the -u user)" : ""
        return "cannot read: \(error)\(who)"
    }
}
