import Glibc

/// Which processes hold a local UDP port, for the message of a start that found it taken
/// ("port 67 is held by dnsmasq (pid 812)"): the sockets bound to it from /proc/net/udp and
/// udp6, then the processes whose descriptors are those sockets. What this process may not
/// read (another user's descriptors, without root) is left out.
public enum PortHolders {
    public static func udp(port: UInt16) -> [String] {
        var inodes: Set<String> = []
        for table in ["/proc/net/udp", "/proc/net/udp6"] {
            guard let bytes = try? readWholeFile(table) else { continue }
            for line in String(decoding: bytes, as: UTF8.self).split(separator: "\n").dropFirst() {
                let fields = line.split(separator: " ", omittingEmptySubsequences: true)
                // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
                guard fields.count > 9, let colon = fields[1].lastIndex(of: ":"),
                      UInt16(fields[1][fields[1].index(after: colon)...], radix: 16) == port else { continue }
                inodes.insert(String(fields[9]))
            }
        }
        guard !inodes.isEmpty, let proc = opendir("/proc") else { return [] }
        defer { closedir(proc) }
        var holders: [String] = []
        while let entry = readdir(proc) {
            let pid = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            guard Int(pid) != nil, pid != "\(getpid())", let fds = opendir("/proc/\(pid)/fd") else { continue }
            defer { closedir(fds) }
            while let fd = readdir(fds) {
                let name = withUnsafeBytes(of: fd.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
                var target = [CChar](repeating: 0, count: 64)
                let length = readlink("/proc/\(pid)/fd/\(name)", &target, target.count - 1)
                guard length > 0 else { continue }
                let link = String(decoding: target.prefix(length).map { UInt8(bitPattern: $0) }, as: UTF8.self)
                guard link.hasPrefix("socket:["), inodes.contains(String(link.dropFirst(8).dropLast())) else { continue }
                let command = (try? readWholeFile("/proc/\(pid)/comm")).map { String(decoding: $0, as: UTF8.self) } ?? "?"
                holders.append("\(command.split(separator: "\n").first ?? "?") (pid \(pid))")
                break
            }
        }
        return holders
    }
}
