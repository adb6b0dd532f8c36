/// What the proxy knows of a machine from its request: what machine records select it by.
public struct MachineIdentity: Equatable, Sendable {
    /// The hardware address (chaddr, `hlen` bytes): six for Ethernet.
    public var hardwareAddress: [UInt8]
    /// Option 97's UUID as text (`8-4-4-4-12`, lower case), when the machine sent one.
    public var uuid: String?
    /// What its firmware is, whatever stage asks: the selector of its architecture and kind with
    /// the iPXE stage set aside (an iPXE on x64 UEFI is `efi-x64` here); nil for an architecture
    /// no selector names.
    public var firmware: BootSelector?
    /// RFC 4578's architecture type it sent (nil: a machine known by its address alone, as a
    /// file's name or a report names it).
    public var architecture: UInt16?

    public init(hardwareAddress: [UInt8], uuid: String? = nil, firmware: BootSelector? = nil, architecture: UInt16? = nil) {
        self.hardwareAddress = hardwareAddress
        self.uuid = uuid
        self.firmware = firmware
        self.architecture = architecture
    }

    public init(_ message: DHCPMessage, _ client: BootClient) {
        var firmware = client
        firmware.isIPXE = false
        self.init(hardwareAddress: Array(message.clientHardwareAddress.prefix(Int(message.hardwareLength))), uuid: client.uuid,
                  firmware: BootSelector(firmware), architecture: client.architecture)
    }
}

/// What the site decided for one machine that asks to boot: its record's choice, or the policy
/// for machines no record selects. The proxy asks only once a request is one it would answer.
public enum MachineChoice: Equatable, Sendable {
    /// Boot it by this menu (the network's, or its record's boot files over it).
    case boot(BootMenu)
    /// Say nothing: its firmware moves on to its next boot device.
    case leaveAlone(LeftAlone)
}

/// Why a machine is left alone.
public enum LeftAlone: Equatable, Sendable, CustomStringConvertible {
    /// Its record says `ignore` (or an Ironic hosts file says `,ignore`).
    case ignored(record: String)
    /// Its record says `local`: it boots from its own disk.
    case local(record: String)
    /// Its record says `once`, and its boot is done: it boots from its own disk.
    case done(record: String)
    /// No record selects it, and machines no record selects are left alone.
    case unknown
    /// No record selects it: left alone, and a record that ignores it written for the operator.
    case discovered
    /// The site's inventory (`--machines-api`) is being asked: answered when it answers.
    case asking

    public var description: String {
        switch self {
        case .ignored(let record): "its machine record \(record) says ignore"
        case .local(let record): "its machine record \(record) says local (it boots from its disk)"
        case .done(let record): "its machine record \(record) says once, and its boot is done (it boots from its disk)"
        case .unknown: "no machine record selects it (--unknown-machines ignore)"
        case .discovered: "no machine record selects it (--unknown-machines record: one that ignores it is written)"
        case .asking: "the machine API is being asked what it boots (answered when it answers)"
        }
    }
}
