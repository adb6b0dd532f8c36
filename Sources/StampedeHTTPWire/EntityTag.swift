/// A strong validator of one version of a file (RFC 9110 §8.8.3): the numbers the file cache
/// tells versions apart by (`FileKey`: inode, size, modification and change times), said in hex
/// between quotes, "\"1a2b-1000-17f...-17f...\"".
public struct EntityTag: Equatable, Sendable {
    public var inode: UInt64
    public var size: UInt64
    public var modified: UInt64
    public var changed: UInt64

    public init(inode: UInt64, size: UInt64, modified: UInt64, changed: UInt64) {
        self.inode = inode
        self.size = size
        self.modified = modified
        self.changed = changed
    }

    /// As a header says it, onto `bytes`.
    public func append(to bytes: inout [UInt8]) {
        bytes.append(UInt8(ascii: "\""))
        Grammar.append(inode, radix: 16, to: &bytes)
        bytes.append(UInt8(ascii: "-"))
        Grammar.append(size, radix: 16, to: &bytes)
        bytes.append(UInt8(ascii: "-"))
        Grammar.append(modified, radix: 16, to: &bytes)
        bytes.append(UInt8(ascii: "-"))
        Grammar.append(changed, radix: 16, to: &bytes)
        bytes.append(UInt8(ascii: "\""))
    }

    /// As a header says it: what a condition compares (If-None-Match, If-Range).
    public var text: String {
        var bytes: [UInt8] = []
        append(to: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }
}
