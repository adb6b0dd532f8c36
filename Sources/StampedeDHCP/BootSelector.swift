import StampedeBase

/// Which boot file a machine gets: by the firmware it runs (RFC 4578's architecture types, as
/// IANA lists them) and by its stage in the chain (iPXE, once loaded, asks again and must get
/// its script, never iPXE: that would loop). The names are `--boot-file`'s selectors: one per
/// firmware a rack holds (`named`), and `arch:N` for any other architecture code, or for one
/// code of a named selector that covers two (`efi-x64` is 7 and 9).
public struct BootSelector: Hashable, Sendable, CustomStringConvertible {
    /// `--boot-file`'s name for it: `bios`, `efi-x64`, ..., `ipxe`, or `arch:N`.
    public let name: String
    /// The architecture codes (option 93) it answers; empty for `ipxe`, which answers iPXE on any.
    public let architectures: [UInt16]
    /// The firmware kind it answers (UEFI HTTP Boot's `HTTPClient` or PXE's `PXEClient`); nil
    /// for `ipxe`, which answers either.
    public let kind: BootClient.Kind?

    private init(_ name: String, _ kind: BootClient.Kind?, _ architectures: [UInt16]) {
        self.name = name
        self.kind = kind
        self.architectures = architectures
    }

    public var description: String { name }

    /// x86 BIOS (architecture 0): a PXE ROM.
    public static let bios = BootSelector("bios", .pxe, [0])
    /// x86 UEFI (6).
    public static let efiX86 = BootSelector("efi-x86", .pxe, [6])
    /// x64 UEFI (7, and 9, which firmware often sends for it).
    public static let efiX64 = BootSelector("efi-x64", .pxe, [7, 9])
    /// ARM32 UEFI (10).
    public static let efiArm32 = BootSelector("efi-arm32", .pxe, [10])
    /// ARM64 UEFI (11).
    public static let efiArm64 = BootSelector("efi-arm64", .pxe, [11])
    /// U-Boot on ARM32 (21) and ARM64 (22): its PXE, over TFTP.
    public static let ubootArm32 = BootSelector("uboot-arm32", .pxe, [21])
    public static let ubootArm64 = BootSelector("uboot-arm64", .pxe, [22])
    /// RISC-V 64-bit UEFI (27).
    public static let efiRiscv64 = BootSelector("efi-riscv64", .pxe, [27])
    /// LoongArch 64-bit UEFI (39).
    public static let efiLoongarch64 = BootSelector("efi-loongarch64", .pxe, [39])
    /// UEFI HTTP Boot, which takes a URL: x86 (15), x64 (16), ARM32 (18), ARM64 (19), RISC-V 64
    /// (28), LoongArch 64 (40).
    public static let httpX86 = BootSelector("http-x86", .http, [15])
    public static let httpX64 = BootSelector("http-x64", .http, [16])
    public static let httpArm32 = BootSelector("http-arm32", .http, [18])
    public static let httpArm64 = BootSelector("http-arm64", .http, [19])
    public static let httpRiscv64 = BootSelector("http-riscv64", .http, [28])
    public static let httpLoongarch64 = BootSelector("http-loongarch64", .http, [40])
    /// A Raspberry Pi's boot ROM (41, or 0 from the Pi makers' hardware addresses: `BootClient`):
    /// answered as it requires (option 43's "Raspberry Pi Boot"); it asks for its own files.
    public static let rpi = BootSelector("rpi", .pxe, [41])
    /// iPXE, whatever it runs on: its script.
    public static let ipxe = BootSelector("ipxe", nil, [])

    /// Every named selector, in the order logs and metrics list them.
    public static let named: [BootSelector] = [
        .bios, .efiX86, .efiX64, .efiArm32, .efiArm64, .efiRiscv64, .efiLoongarch64, .ubootArm32, .ubootArm64, .rpi,
        .httpX86, .httpX64, .httpArm32, .httpArm64, .httpRiscv64, .httpLoongarch64, .ipxe,
    ]

    /// The IANA codes of UEFI HTTP Boot and U-Boot's HTTP boot (RFC 4578's registry, 2026): a
    /// machine of one of them loads a URL, not a file.
    static let httpArchitectures: Set<UInt16> = [15, 16, 17, 18, 19, 20, 23, 24, 26, 28, 30, 38, 40]

    /// `arch:N`: the machines that send architecture code `code`, PXE or HTTP Boot alike (the code
    /// says which: an HTTP Boot code is given a URL, any other a file). Over a named selector.
    public static func architecture(_ code: UInt16) -> BootSelector {
        BootSelector("arch:\(code)", httpArchitectures.contains(code) ? .http : .pxe, [code])
    }

    /// The selector `name` names: a named one, or `arch:N` with N a code (0 ... 65535).
    public init?(name: String) {
        if let named = Self.named.first(where: { $0.name == name }) {
            self = named
            return
        }
        guard name.hasPrefix("arch:"), case let digits = name.utf8.dropFirst(5), (1...5).contains(digits.count),
              digits.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), let code = UInt16(String(name.dropFirst(5))) else { return nil }
        self = .architecture(code)
    }

    /// The named selector for a machine; nil for an architecture none names (the menu may still
    /// have an `arch:N` for it: `BootMenu.selector(for:)`).
    public init?(_ client: BootClient) {
        if client.isIPXE {
            self = .ipxe
            return
        }
        if client.isRaspberryPi {
            self = .rpi
            return
        }
        guard let named = Self.firmware(of: client) else { return nil }
        self = named
    }

    /// The named selector of a machine's firmware (its kind and architecture), whatever runs on
    /// it now: an iPXE's is the firmware's it runs on.
    static func firmware(of client: BootClient) -> BootSelector? {
        named.first { $0.kind == client.kind && $0.architectures.contains(client.architecture) }
    }

    /// Whether this names one architecture code (`arch:N`), not a kind of firmware.
    public var isArchitectureCode: Bool { name.hasPrefix("arch:") }

    /// UEFI HTTP Boot takes a URL, and only a URL.
    public var wantsURL: Bool { kind == .http }

    /// The longest name a selector has (`${arch}` in a boot file becomes it).
    static let longestName = (named.map(\.name) + ["arch:65535"]).max { $0.utf8.count < $1.utf8.count }!

    public static func == (a: BootSelector, b: BootSelector) -> Bool { a.name == b.name }
    public func hash(into hasher: inout Hasher) { hasher.combine(name) }
}

/// What a selector boots: a file served over TFTP (by name, beneath the root), or a URL.
public enum BootTarget: Equatable, Sendable, CustomStringConvertible {
    case file(String)
    case url(String)

    /// `NAME` as `--boot-file` takes it: a URL when it has a scheme (`http://`, `https://`),
    /// a file name otherwise.
    public init(_ text: String) {
        let lower = text.lowercased()
        self = lower.hasPrefix("http://") || lower.hasPrefix("https://") ? .url(text) : .file(text)
    }

    public var description: String {
        switch self {
        case .file(let name): name
        case .url(let url): url
        }
    }

    /// The most bytes it may have in a reply: a file name is read from `file` (127 bytes and a
    /// NUL), a URL from option 67 (255 bytes, its NUL among them).
    public var longest: Int {
        switch self {
        case .file: DHCPMessage.largestBootFile
        case .url: 254
        }
    }

    /// Its length once written for a machine whose values are as long as an Ethernet one's can
    /// be (`expanded`: a six-byte MAC, a UUID, the longest selector's name): what the command
    /// line checks against `longest` before the server starts.
    public var longestExpansion: Int {
        description.replacingAll("${mac:hexhyp}", with: "00-00-00-00-00-00").replacingAll("${mac}", with: "00:00:00:00:00:00")
            .replacingAll("${uuid}", with: "00000000-0000-0000-0000-000000000000")
            .replacingAll("${arch}", with: BootSelector.longestName)
            .utf8.count
    }

    /// The target for one machine: `${mac}` (`52:54:00:12:34:56`), `${mac:hexhyp}`
    /// (`52-54-00-12-34-56`), `${uuid}` (empty when the machine sent none) and `${arch}` (the
    /// selector's name) replaced, so that `-m` rules can pick a file per machine.
    public func expanded(for message: DHCPMessage, _ client: BootClient, _ selector: BootSelector) -> BootTarget {
        expanded(hardwareAddress: Array(message.clientHardwareAddress.prefix(Int(message.hardwareLength))), client, selector)
    }

    /// The same for a machine known by `hardwareAddress` (DHCPv6: its DUID's or its relay's;
    /// empty where neither says one).
    public func expanded(hardwareAddress: [UInt8], _ client: BootClient, _ selector: BootSelector) -> BootTarget {
        let text = description
        guard text.containsBytes("${") else { return self }
        let expanded = text
            .replacingAll("${mac:hexhyp}", with: hexText(hardwareAddress, separator: UInt8(ascii: "-")))
            .replacingAll("${mac}", with: hexText(hardwareAddress, separator: UInt8(ascii: ":")))
            .replacingAll("${uuid}", with: client.uuid ?? "")
            .replacingAll("${arch}", with: selector.name)
        switch self {
        case .file: return .file(expanded)
        case .url: return .url(expanded)
        }
    }
}

extension String {
    /// Every occurrence of `target` replaced (Foundation's replacingOccurrences, without Foundation).
    func replacingAll(_ target: String, with replacement: String) -> String {
        guard !target.isEmpty else { return self }
        var out = ""
        var rest = Substring(self)
        while let range = rest.byteRange(of: target) {
            out += rest[..<range.lowerBound]
            out += replacement
            rest = rest[range.upperBound...]
        }
        return out + rest
    }
}
