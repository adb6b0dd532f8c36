import Glibc
import StampedeBase
import StampedeIO

/// The secret in a machine's done URL (`${done-url}`): SipHash-2-4 of its MAC under the
/// directory's key, twice (two keys: 128 bits), in hex. The key is `.stampede-key` in the
/// directory, 32 random bytes made the first time (readable by its owner alone): the same URL for
/// a machine after a restart, and from every server that shares the directory.
public struct DoneTokens: Sendable {
    static let keyFile = ".stampede-key"
    let keys: (UInt64, UInt64, UInt64, UInt64)

    init(keys: (UInt64, UInt64, UInt64, UInt64)) { self.keys = keys }

    /// The directory's key, made now if it has none.
    /// `making`: a directory without a key gets one; else the key is made for this process alone.
    static func load(in directory: Int32, making: Bool = true) throws(Errno) -> DoneTokens {
        var bytes = [UInt8](repeating: 0, count: 32)
        let fd = openat(directory, keyFile, O_RDONLY | O_CLOEXEC)
        if fd >= 0 {
            defer { close(fd) }
            let read = bytes.withUnsafeMutableBytes { buffer in Result { () throws(Errno) in try readFully(fd, into: buffer, at: 0) } }
            guard try read.get() == 32 else { throw Errno(EINVAL) }
        } else {
            guard errno == ENOENT else { throw Errno.current }
            // The standard library's generator: getrandom(2) on Linux.
            var random = SystemRandomNumberGenerator()
            bytes = (0..<4).flatMap { _ in withUnsafeBytes(of: random.next() as UInt64) { Array($0) } }
            guard making else { return DoneTokens(bytes) }
            let made = openat(directory, keyFile, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
            guard made >= 0 else { throw Errno.current }
            defer { close(made) }
            let written = bytes.withUnsafeBytes { buffer in Result { () throws(Errno) in try writeFully(made, buffer) } }
            try written.get()
            guard fsync(made) == 0 else { throw Errno.current }
        }
        return DoneTokens(bytes)
    }

    /// The tokens of a 32-byte key.
    init(_ bytes: [UInt8]) {
        let words = (0..<4).map { i in bytes[(i * 8)..<(i * 8 + 8)].reversed().reduce(UInt64(0)) { $0 << 8 | UInt64($1) } }
        self.init(keys: (words[0], words[1], words[2], words[3]))
    }

    /// The token for `mac`: 32 hex digits.
    public func token(for mac: [UInt8]) -> String {
        let halves = (Self.sipHash(mac, keys.0, keys.1).bigEndian, Self.sipHash(mac, keys.2, keys.3).bigEndian)
        return withUnsafeBytes(of: halves) { hexText($0) }
    }

    /// Whether `token` is `mac`'s, compared in time that does not depend on where they differ.
    public func accepts(_ token: String, for mac: [UInt8]) -> Bool {
        let expected = Array(self.token(for: mac).utf8)
        let given = Array(token.utf8)
        guard given.count == expected.count else { return false }
        return zip(given, expected).reduce(UInt8(0)) { $0 | ($1.0 ^ $1.1) } == 0
    }

    /// SipHash-2-4 (Aumasson and Bernstein) of `message` under the key (k0, k1).
    static func sipHash(_ message: [UInt8], _ k0: UInt64, _ k1: UInt64) -> UInt64 {
        var v0 = k0 ^ 0x736f_6d65_7073_6575, v1 = k1 ^ 0x646f_7261_6e64_6f6d
        var v2 = k0 ^ 0x6c79_6765_6e65_7261, v3 = k1 ^ 0x7465_6462_7974_6573
        func round() {
            v0 = v0 &+ v1; v1 = (v1 << 13 | v1 >> 51) ^ v0; v0 = v0 << 32 | v0 >> 32
            v2 = v2 &+ v3; v3 = (v3 << 16 | v3 >> 48) ^ v2
            v0 = v0 &+ v3; v3 = (v3 << 21 | v3 >> 43) ^ v0
            v2 = v2 &+ v1; v1 = (v1 << 17 | v1 >> 47) ^ v2; v2 = v2 << 32 | v2 >> 32
        }
        func absorb(_ word: UInt64) {
            v3 ^= word
            round()
            round()
            v0 ^= word
        }
        let whole = message.count / 8 * 8
        for start in stride(from: 0, to: whole, by: 8) {
            absorb(message[start..<(start + 8)].reversed().reduce(UInt64(0)) { $0 << 8 | UInt64($1) })
        }
        var last = UInt64(message.count & 0xff) << 56
        for (i, byte) in message[whole...].enumerated() { last |= UInt64(byte) << (8 * UInt64(i)) }
        absorb(last)
        v2 ^= 0xff
        for _ in 0..<4 { round() }
        return v0 ^ v1 ^ v2 ^ v3
    }
}
