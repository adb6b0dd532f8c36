import StampedeBase

/// Which boot file a machine gets: by the firmware it runs (RFC 4578's architecture types, as
/// IANA lists them) and by its stage in the chain (iPXE, once loaded, asks again and must get
/// its script, never iPXE: that would loop). The names are `--boot-file`'s selectors.
public enum BootSelector: String, CaseIterable, Sendable {
    /// x86 BIOS (architecture 0): a PXE ROM.
    case bios
    /// x86 UEFI (6).
    case efiX86 = "efi-x86"
    /// x64 UEFI (7, and 9, which firmware often sends for it).
    case efiX64 = "efi-x64"
    /// ARM64 UEFI (11).
    case efiArm64 = "efi-arm64"
    /// x64 UEFI HTTP Boot (16): a URL.
    case httpX64 = "http-x64"
    /// ARM64 UEFI HTTP Boot (19): a URL.
    case httpArm64 = "http-arm64"
    /// iPXE, whatever it runs on: its script.
    case ipxe

    /// The selector for a machine; nil for an architecture no selector names (the proxy says so
    /// in its log and stays silent: the site's own DHCP server may know it).
    public init?(_ client: BootClient) {
        if client.isIPXE {
            self = .ipxe
            return
        }
        switch (client.kind, client.architecture) {
        case (.pxe, 0): self = .bios
        case (.pxe, 6): self = .efiX86
        case (.pxe, 7), (.pxe, 9): self = .efiX64
        case (.pxe, 11): self = .efiArm64
        case (.http, 16): self = .httpX64
        case (.http, 19): self = .httpArm64
        default: return nil
        }
    }

    /// UEFI HTTP Boot takes a URL, and only a URL.
    public var wantsURL: Bool { self == .httpX64 || self == .httpArm64 }
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
            .replacingAll("${arch}", with: BootSelector.allCases.map(\.rawValue).max { $0.utf8.count < $1.utf8.count }!)
            .utf8.count
    }

    /// The target for one machine: `${mac}` (`52:54:00:12:34:56`), `${mac:hexhyp}`
    /// (`52-54-00-12-34-56`), `${uuid}` (empty when the machine sent none) and `${arch}` (the
    /// selector's name) replaced, so that `-m` rules can pick a file per machine.
    public func expanded(for message: DHCPMessage, _ client: BootClient, _ selector: BootSelector) -> BootTarget {
        let text = description
        guard text.containsBytes("${") else { return self }
        let expanded = text
            .replacingAll("${mac:hexhyp}", with: message.hardwareAddress(separator: "-"))
            .replacingAll("${mac}", with: message.hardwareAddress(separator: ":"))
            .replacingAll("${uuid}", with: client.uuid ?? "")
            .replacingAll("${arch}", with: selector.rawValue)
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
