import Glibc
import StampedeBase
import StampedeIO

/// Files made for the client that asks rather than read beneath the root: a machine's boot script
/// or its loader's configuration, rendered from its record (`--machines`). The file service asks
/// before every read, TFTP's and HTTP's alike; nil is the file beneath the root. Asked on the
/// event loop: an answer is made from memory, never from the disk.
public protocol GeneratedFiles: Sendable {
    /// What `name` (as asked, remapped) is for the client at `client`: bytes made for it, another
    /// file of the root (an operator's script for that machine), or nil: the root's `name`. Asked
    /// at each ask of a request (a request that waits for the disk asks again).
    func file(_ name: [UInt8], for client: SocketAddress) -> GeneratedFile?

    /// A client's report to `name` (an HTTP POST with no body: a machine saying its boot is
    /// done): accepted (what to log), refused, or nil when `name` is none of its.
    func report(to name: [UInt8], from client: SocketAddress) -> Result<String, FileRefusal>?

    /// A download to `client` ended, `bytes` of it taken: the machine `client` is (its MAC, for
    /// the log line), if it is one.
    func took(_ bytes: Int, client: SocketAddress) -> String?
}

/// What a name is for one client.
public enum GeneratedFile: Equatable, Sendable {
    /// These bytes.
    case made([UInt8])
    /// This file beneath the root.
    case root([UInt8])
}

extension GeneratedFiles {
    public func report(to name: [UInt8], from client: SocketAddress) -> Result<String, FileRefusal>? { nil }
    public func took(_ bytes: Int, client: SocketAddress) -> String? { nil }
}

extension FileImage {
    /// An image of bytes made in memory (a generated file: a script, a few hundred bytes, made
    /// per request, on the heap): its version is its content's hash and length, and now.
    static func holding(_ bytes: [UInt8], netascii: Bool) -> FileImage {
        let content = netascii ? Netascii.encode(bytes) : bytes
        let memory = allocateOnHeap(content.count)
        if !content.isEmpty { content.withUnsafeBytes { memory.buffer.copyMemory(from: $0) } }
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        let time = Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec)
        // FNV-1a: a different script is a different version (its ETag), whatever its length.
        let hash = content.reduce(UInt64(0xcbf2_9ce4_8422_2325)) { ($0 ^ UInt64($1)) &* 0x100_0000_01b3 }
        var info = stat()
        info.st_size = off_t(content.count)
        var key = FileKey(info, netascii: netascii)
        key.inode = hash
        key.modified = time
        key.changed = time
        return FileImage(memory, key: key)
    }
}
