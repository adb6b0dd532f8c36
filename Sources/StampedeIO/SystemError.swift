import Glibc

/// An errno value, as the C shims return it (negated).
public struct Errno: Error, Equatable, Sendable, CustomStringConvertible {
    public var rawValue: Int32
    public init(_ rawValue: Int32) { self.rawValue = rawValue }
    /// From a shim result: nil when it is not an error.
    public init?(result: Int32) {
        guard result < 0 else { return nil }
        rawValue = -result
    }
    public static var current: Errno { Errno(errno) }
    /// An ICMP error a connected socket reports: the peer's port or host is gone.
    public var meansPeerUnreachable: Bool {
        rawValue == ECONNREFUSED || rawValue == EHOSTUNREACH || rawValue == ENETUNREACH
    }
    public var description: String { String(cString: strerror(rawValue)) }
}

/// Calls `body` with `bytes` as a NUL-terminated C path: file names are bytes, not text. The
/// copy is on the stack for a name of up to a kilobyte or so (no allocation).
@inlinable @inline(__always)
public func withCPath<T>(_ bytes: ArraySlice<UInt8>, _ body: (UnsafePointer<CChar>) -> T) -> T {
    withUnsafeTemporaryAllocation(byteCount: bytes.count + 1, alignment: 1) { buffer in
        bytes.withUnsafeBytes { buffer.copyMemory(from: $0) }
        buffer[bytes.count] = 0
        return body(buffer.baseAddress!.assumingMemoryBound(to: CChar.self))
    }
}

@inline(__always)
public func withCPath<T>(_ bytes: [UInt8], _ body: (UnsafePointer<CChar>) -> T) -> T {
    withCPath(bytes[...], body)
}
