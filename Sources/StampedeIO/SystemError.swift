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

/// Calls `body` with `bytes` as a NUL-terminated C path: file names are bytes, not text.
@inline(__always)
public func withCPath<T>(_ bytes: [UInt8], _ body: (UnsafePointer<CChar>) -> T) -> T {
    (bytes + [0]).withUnsafeBufferPointer { buffer in
        buffer.withMemoryRebound(to: CChar.self) { body($0.baseAddress!) }
    }
}
