import StampedeGlibc
import StampedeIO
import StampedeProtocol
import StampedeURing
import Testing

/// Every backend, for tests that hold for all of them.
public enum BackendKind: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case glibc, uring
    public var testDescription: String { rawValue }

    /// `segmentation`: windows as segmented sends (UDP GSO) where the kernel takes them.
    public func make(segmentation: Bool = true) throws -> any DatagramBackend {
        switch self {
        case .glibc: return try GlibcBackend(segmentation: segmentation)
        case .uring:
            var configuration = URingBackend.Configuration()
            configuration.segmentation = segmentation
            return try URingBackend(configuration: configuration)
        }
    }
}
