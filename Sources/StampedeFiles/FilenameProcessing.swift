import Glibc

/// What happens to a requested name after the remap rules and before it is opened, in
/// in.tftpd(8)'s order ("FILENAME PROCESSING"): `--normalize`, then `--validate`'s path
/// validation. (`--path-prefix` is part of the served directory: ServeCommand joins them.)
public struct FilenameProcessing: Sendable, Equatable {
    /// The longest name the file service looks up, or a remap rule may make: PATH_MAX, the longest
    /// path the kernel takes (a TFTP request's longest name is the same).
    public static let longestName = Int(PATH_MAX)

    /// `--normalize[=MODE]`.
    public enum Normalization: String, Sendable, CaseIterable {
        /// The name as it is (the default).
        case none
        /// A leading "/" when there is none.
        case root
        /// That, and duplicate slashes and "." removed, ".." taken with the component before it
        /// (`--normalize` alone).
        case path
    }

    public var normalization: Normalization
    /// `--validate`: a name must begin with "/" and have no "." or ".." component and no control
    /// character; consecutive and terminal slashes are removed.
    public var validates: Bool
    /// Without `-s` or `-j`: the directory served, as the command line named it (without
    /// `--path-prefix`), its repeated and terminal slashes removed; nil for "/". tftpd-hpa reads
    /// names as paths of the host there, so a client may name `/srv/tftp/pxelinux.0` for the
    /// directory's `pxelinux.0`: such a name is taken beneath the directory.
    public var hostDirectory: [UInt8]?

    public init(normalization: Normalization = .none, validates: Bool = false, hostDirectory: String? = nil) {
        self.normalization = normalization
        self.validates = validates
        let named = hostDirectory.map { Array(Array($0.utf8).split(separator: Self.slash).joined(separator: [Self.slash])) }
        self.hostDirectory = named.flatMap { $0.isEmpty ? nil : [Self.slash] + $0 }
    }

    /// The name to open, or ERROR 2 when validation refuses it.
    public func apply(to name: [UInt8]) throws(FileRefusal) -> [UInt8] {
        let normalized = Self.normalize(name, normalization)
        guard validates else { return beneathHostDirectory(normalized) }
        guard let valid = Self.validate(normalized) else {
            throw FileRefusal(.denied, "Access violation: not a valid path (--validate: it must begin with \"/\", with no \".\" or \"..\" and no control character)")
        }
        return beneathHostDirectory(valid)
    }

    /// `name` without the host's directory in front of it (`hostDirectory`), or as it is.
    func beneathHostDirectory(_ name: [UInt8]) -> [UInt8] {
        guard let directory = hostDirectory, name.count > directory.count, name.starts(with: directory),
              name[directory.count] == Self.slash else { return name }
        return Array(name[directory.count...])
    }

    static let slash = UInt8(ascii: "/")

    public static func normalize(_ name: [UInt8], _ mode: Normalization) -> [UInt8] {
        switch mode {
        case .none:
            return name
        case .root:
            return name.first == slash ? name : [slash] + name
        case .path:
            var kept: [ArraySlice<UInt8>] = []
            for component in name.split(separator: slash) {
                switch component {
                case [UInt8(ascii: ".")]: continue
                case [UInt8(ascii: "."), UInt8(ascii: ".")]: _ = kept.popLast()
                default: kept.append(component)
                }
            }
            // A name that names a directory ("a/", "a/.", "a/b/..") still ends in "/", as 7.3
            // leaves it: the file system says what that means.
            let last = name.split(separator: slash, omittingEmptySubsequences: false).last ?? []
            let directory = last.isEmpty || last == [UInt8(ascii: ".")] || last == [UInt8(ascii: "."), UInt8(ascii: ".")]
            let trailing = directory && !kept.isEmpty ? [slash] : []
            return [slash] + Array(kept.joined(separator: [slash])) + trailing
        }
    }

    /// The name without its repeated and terminal slashes, or nil if it is not a valid path.
    public static func validate(_ name: [UInt8]) -> [UInt8]? {
        guard name.first == slash, !name.contains(where: { $0 < 0x20 }) else { return nil }
        let components = name.split(separator: slash)
        guard !components.contains(where: { $0 == [UInt8(ascii: ".")] || $0 == [UInt8(ascii: "."), UInt8(ascii: ".")] }) else {
            return nil
        }
        return [slash] + Array(components.joined(separator: [slash]))
    }
}
