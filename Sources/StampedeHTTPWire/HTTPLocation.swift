import StampedeBase

/// A file's location as a boot script or the machine API names it: a URL, a path on a server, or
/// a name beside another location. Read once for the server (the machine API's answers, which
/// stage of its boot a machine's request is) and the storm (the files a script names).
public enum HTTPLocation {
    /// `reference` resolved against `base`, as iPXE and pixiecore resolve it: a URL (it holds
    /// `://`) as it is, `/path` on `base`'s server, anything else in `base`'s directory.
    public static func resolve(_ reference: String, against base: String) -> String {
        if reference.containsBytes("://") { return reference }
        let scheme = base.byteRange(of: "://").map { base[..<$0.upperBound] } ?? ""
        let rest = base.dropFirst(scheme.count)
        let authority = scheme.isEmpty ? "" : rest.prefix { $0 != "/" }
        if reference.hasPrefix("/") { return scheme + authority + reference }
        let path = rest.dropFirst(authority.count)
        let directory = path.lastIndex(of: "/").map { path[...$0] } ?? (scheme.isEmpty ? "" : "/")
        return scheme + authority + directory + reference
    }

    /// A location as a server's root names the file: a URL's path, or the path, without its
    /// leading `/`.
    public static func path(of location: String) -> String {
        var rest = Substring(location)
        let slash = UInt8(ascii: "/")
        if let scheme = rest.byteRange(of: "://") {
            rest = rest[scheme.upperBound...]
            rest = rest[(rest.utf8.firstIndex(of: slash) ?? rest.endIndex)...]
        }
        return String(rest[(rest.utf8.firstIndex { $0 != slash } ?? rest.endIndex)...])
    }
}
