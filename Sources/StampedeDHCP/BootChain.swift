/// The chain of loaders a network's machines are offered by default, before the operator's
/// `--boot-file` choices (`--boot-chain`).
public enum BootChain: String, CaseIterable, Sendable {
    /// iPXE: undionly.kpxe for a BIOS, iPXE built for each UEFI architecture (named as
    /// boot.ipxe.org names its builds), by PXE and by HTTP Boot.
    case ipxe
    /// Secure Boot's: shim, signed by Microsoft, for the UEFI architectures that have one (x64
    /// and ARM64, by PXE and by HTTP Boot); shim loads the GRUB (or iPXE) beside itself. The rest
    /// as `ipxe`: a BIOS has no Secure Boot.
    case secureBoot = "secure-boot"

    /// A UEFI architecture's loader: its PXE and HTTP Boot selectors, and the file.
    public struct Loader: Sendable {
        public let pxe: BootSelector
        public let http: BootSelector?
        public let file: String
    }

    /// iPXE for each UEFI architecture, as boot.ipxe.org names its builds.
    static let iPXEBuilds = [
        Loader(pxe: .efiX86, http: .httpX86, file: "ipxe-i386.efi"), Loader(pxe: .efiX64, http: .httpX64, file: "ipxe.efi"),
        Loader(pxe: .efiArm32, http: .httpArm32, file: "ipxe-arm32.efi"), Loader(pxe: .efiArm64, http: .httpArm64, file: "ipxe-arm64.efi"),
        Loader(pxe: .efiRiscv64, http: .httpRiscv64, file: "ipxe-riscv64.efi"),
        Loader(pxe: .efiLoongarch64, http: .httpLoongarch64, file: "ipxe-loong64.efi"),
    ]

    /// Shim, as Debian's shim-signed names it for each architecture it is built for.
    static let shims = [
        Loader(pxe: .efiX64, http: .httpX64, file: "shimx64.efi"), Loader(pxe: .efiArm64, http: .httpArm64, file: "shimaa64.efi"),
    ]

    /// The UEFI loaders of this chain, later ones over earlier ones.
    public var loaders: [Loader] {
        switch self {
        case .ipxe: Self.iPXEBuilds
        case .secureBoot: Self.iPXEBuilds + Self.shims
        }
    }
}
