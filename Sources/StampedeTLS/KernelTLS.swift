import CStampedeTLS
import Glibc

/// Whether this kernel can take TLS over after the handshake (Linux's kTLS: the "tls" upper
/// layer protocol, TCP_ULP): then OpenSSL hands it the keys, and `SSL_sendfile` sends a body
/// straight from a file image's memfd, encrypted by the kernel. Without it (no tls module, as on
/// many kernels), bodies go through `SSL_write` from the image's memory, with no other copy.
public struct KernelTLS: Sendable, Equatable {
    public let available: Bool
    /// Why not, when not.
    public let reason: String

    public static func probe() -> KernelTLS {
        var reason: Int32 = 0
        if stampede_tls_kernel_module(&reason) == 1 { return KernelTLS(available: true, reason: "the kernel has TLS (TCP_ULP tls)") }
        let why = reason == ENOENT ? "this kernel has no tls module" : "TCP_ULP tls: \(String(cString: strerror(reason)))"
        return KernelTLS(available: false, reason: why)
    }

    /// What the start says without `--tls-kernel` (the kernel is not asked: as root, asking it
    /// would load its module).
    public static let off = "bodies by SSL_write from the file images' memory (kernel TLS off: --tls-kernel asks for it)"

    /// What the start says of the path bodies take, with `--tls-kernel`.
    public var bodyPath: String {
        available ? "kernel TLS: bodies by SSL_sendfile from the file images, where the cipher allows (\(reason))"
                  : "bodies by SSL_write from the file images' memory (\(reason))"
    }
}
