/// A path as its directory and its last name: "/run/tftpd.pid" is ("/run", "tftpd.pid"), "/x" is
/// ("/", "x"), "x" is (".", "x"). The files the server finds again after `-s` hid their paths
/// (`-P`, `-m`, `--logfile`) are named through their directory, held open.
func splitPath(_ path: String) -> (directory: String, name: String) {
    guard let slash = path.lastIndex(of: "/") else { return (".", path) }
    return (slash == path.startIndex ? "/" : String(path[..<slash]), String(path[path.index(after: slash)...]))
}
