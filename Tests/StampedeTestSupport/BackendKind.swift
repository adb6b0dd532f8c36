import StampedeGlibc
import StampedeIO
import StampedeProtocol
import StampedeServer
import StampedeURing
import Testing

/// Every backend, for tests that hold for all of them.
public enum BackendKind: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case glibc, uring
    public var testDescription: String { rawValue }

    public func make() throws -> any DatagramBackend {
        switch self {
        case .glibc: return try GlibcBackend()
        case .uring: return try URingBackend()
        }
    }
}
