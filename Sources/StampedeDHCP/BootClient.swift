import StampedeBase

/// What a DHCP request says about the machine that sent it, for choosing what it boots: the
/// firmware's kind (PXE or UEFI HTTP Boot, from option 60), its architecture (option 93, or the
/// `Arch:` field of option 60 when 93 is missing), whether it is iPXE already (user class `iPXE`,
/// or option 175), and its identity (MAC, UUID). Nil for a request from anything but a
/// network-boot client: a proxy answers those with silence.
public struct BootClient: Equatable, Sendable {
    public enum Kind: String, Sendable {
        /// `PXEClient`: a PXE ROM, UEFI's PXE, or iPXE.
        case pxe = "PXEClient"
        /// `HTTPClient`: UEFI HTTP Boot, which wants a URL.
        case http = "HTTPClient"
    }

    public var kind: Kind
    /// RFC 4578's architecture type (0 when the client names none: the PXE default, x86 BIOS).
    public var architecture: UInt16
    /// The request came from iPXE (a chainloaded stage): it wants its script, not iPXE again.
    public var isIPXE: Bool
    /// Option 97's value, echoed in the reply (17 bytes, type 0 first), when the client sent one.
    public var machineIdentifier: [UInt8]?
    /// What an iPXE build says in option 175 it can fetch over (its feature sub-options 0x13
    /// HTTP and 0x14 HTTPS); nil where it sent no option 175 (or one that does not parse).
    public var iPXEProtocols: IPXEProtocols?

    /// The fetch protocols an iPXE build names among its features.
    public struct IPXEProtocols: OptionSet, Sendable, Equatable {
        public let rawValue: UInt8
        public init(rawValue: UInt8) { self.rawValue = rawValue }
        public static let http = IPXEProtocols(rawValue: 1)
        public static let https = IPXEProtocols(rawValue: 2)

        /// iPXE's `DHCP_EB_FEATURE_HTTP` and `_HTTPS` (include/ipxe/features.h), each a sub-option
        /// of option 175 (encapsulated as option 43's are) whose one byte is the feature's version.
        static func read(_ value: [UInt8]) -> IPXEProtocols? {
            guard let features = PXEOption.read(value) else { return nil }
            func has(_ code: UInt8) -> Bool { features[code].map { !$0.isEmpty && $0[0] != 0 } ?? false }
            var found: IPXEProtocols = []
            if has(0x13) { found.insert(.http) }
            if has(0x14) { found.insert(.https) }
            return found
        }
    }

    /// A Raspberry Pi's boot ROM: architecture 41 (rpiboot), or 0 (what the Pi 4 and 5 send,
    /// as a BIOS PXE ROM does) from a hardware address of the Pi's makers.
    public var isRaspberryPi = false

    /// The Raspberry Pi makers' hardware address prefixes (IEEE OUIs of Raspberry Pi Foundation
    /// and Raspberry Pi Trading: the Pi 1 to 3, the 4, 400 and CM4, the 5).
    public static let raspberryPiPrefixes: [[UInt8]] = [[0xb8, 0x27, 0xeb], [0xdc, 0xa6, 0x32], [0xe4, 0x5f, 0x01], [0xd8, 0x3a, 0xdd],
                                                         [0x2c, 0xcf, 0x67]]

    public init(kind: Kind, architecture: UInt16, isIPXE: Bool = false, machineIdentifier: [UInt8]? = nil) {
        self.kind = kind
        self.architecture = architecture
        self.isIPXE = isIPXE
        self.machineIdentifier = machineIdentifier
    }

    /// The user class iPXE names itself by.
    private static let iPXEUserClass = Array("iPXE".utf8)

    /// Whether `message` is iPXE's: its encapsulated options (175), or `iPXE` in its user class.
    /// Asked of every boot client's request: nothing allocated.
    private static func isIPXE(_ message: DHCPMessage) -> Bool {
        message.options[.iPXEEncapsulated] != nil || message.options[.userClass].map { contains($0, iPXEUserClass) } == true
    }

    /// `pxeVendors`: vendor classes taken as `PXEClient` besides it (U-Boot's `U-Boot.armv8`, as
    /// dnsmasq's --dhcp-pxe-vendor), each matched at the start of option 60.
    public init?(_ message: DHCPMessage, pxeVendors: [[UInt8]] = []) {
        guard let vendor = message.options[.vendorClass] else { return nil }
        if vendor.starts(with: Array(Kind.pxe.rawValue.utf8)) || pxeVendors.contains(where: { vendor.starts(with: $0) }) {
            kind = .pxe
        } else if vendor.starts(with: Array(Kind.http.rawValue.utf8)) {
            kind = .http
        } else {
            return nil
        }
        if let value = message.options[.clientArchitecture], value.count >= 2 {
            architecture = UInt16(value[0]) << 8 | UInt16(value[1])
        } else {
            architecture = Self.architecture(inVendorClass: vendor) ?? 0
        }
        isIPXE = Self.isIPXE(message)
        iPXEProtocols = message.options[.iPXEEncapsulated].flatMap(IPXEProtocols.read)
        if let identifier = message.options[.machineIdentifier], identifier.count == 17, identifier[0] == 0 {
            machineIdentifier = identifier
        }
        let address = message.clientHardwareAddress
        isRaspberryPi = !isIPXE && kind == .pxe && (architecture == 41
            || architecture == 0 && message.hardwareLength == 6 && Self.raspberryPiPrefixes.contains { address.starts(with: $0) })
    }

    /// A UEFI firmware (or one after it: U-Boot, ...): an architecture code of 6 and up, as
    /// dnsmasq tells them (architecture 0 is BIOS, 1 to 5 the PC-98, Itanium, Alpha and Arc era).
    public var isUEFI: Bool { architecture >= 6 }

    /// The architecture in `PXEClient:Arch:00011:UNDI:003000` (five decimal digits), if present.
    static func architecture(inVendorClass vendor: [UInt8]) -> UInt16? {
        let marker = Array(":Arch:".utf8)
        guard let start = Self.index(of: marker, in: vendor) else { return nil }
        let digits = vendor[(start + marker.count)...].prefix { $0 >= 0x30 && $0 <= 0x39 }
        guard !digits.isEmpty, digits.count <= 5 else { return nil }
        let value = digits.reduce(0) { $0 * 10 + Int($1 - 0x30) }
        return value <= Int(UInt16.max) ? UInt16(value) : nil
    }

    private static func index(of needle: [UInt8], in haystack: [UInt8]) -> Int? {
        guard haystack.count >= needle.count else { return nil }
        for start in 0...(haystack.count - needle.count) where haystack[start..<(start + needle.count)].elementsEqual(needle) {
            return start
        }
        return nil
    }

    private static func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool { index(of: needle, in: haystack) != nil }

    /// Where a UUID's groups start (4-2-2-2-6 bytes).
    private static let uuidGroups = [4, 6, 8, 10]

    /// The UUID of option 97 as text (`8-4-4-4-12` lower-case hex), for names and logs.
    public var uuid: String? {
        guard let identifier = machineIdentifier else { return nil }
        return identifier.withUnsafeBufferPointer { all in
            hexText(buffer: UnsafeBufferPointer(rebasing: all.dropFirst()), separator: UInt8(ascii: "-"), at: Self.uuidGroups)
        }
    }
}
