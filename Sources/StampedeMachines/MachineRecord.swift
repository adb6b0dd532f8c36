import StampedeDHCP

/// One machine record (a file in `--machines DIR`): which machines it selects, and what they do
/// when they ask to boot. Read by `MachineRecord.parse`; chosen among by `MachineBook`.
public struct MachineRecord: Equatable, Sendable {
    /// What a selected machine's DHCP request gets.
    public enum Action: String, CaseIterable, Sendable {
        /// An offer of its boot: the record's boot files over the network's.
        case boot
        /// Silence: it boots from its own disk (its firmware moves on to its next boot device).
        case local
        /// Silence: this server does not boot it.
        case ignore
    }

    /// What selects a machine, most particular first: a hardware address, a UUID (option 97), an
    /// architecture (a number, or a firmware selector's name), or every machine (the default).
    public enum Selector: Hashable, Sendable, CustomStringConvertible {
        case hardwareAddress([UInt8])
        case uuid(String)
        case architecture(UInt16)
        case firmware(BootSelector)
        case everyMachine

        public var description: String {
            switch self {
            case .hardwareAddress(let address): "mac \(address.hardwareAddressText(separator: ":"))"
            case .uuid(let uuid): "uuid \(uuid)"
            case .architecture(let number): "arch \(number)"
            case .firmware(let selector): "arch \(selector.name)"
            case .everyMachine: "default"
            }
        }

        /// A hardware address hashed whole (an array's own hash takes each byte in turn): every
        /// DHCP packet and file request of a known machine looks its record up.
        public func hash(into hasher: inout Hasher) {
            switch self {
            case .hardwareAddress(let address):
                hasher.combine(0 as UInt8)
                address.withUnsafeBytes { hasher.combine(bytes: $0) }
            case .uuid(let uuid):
                hasher.combine(1 as UInt8)
                hasher.combine(uuid)
            case .architecture(let number):
                hasher.combine(2 as UInt8)
                hasher.combine(number)
            case .firmware(let selector):
                hasher.combine(3 as UInt8)
                hasher.combine(selector)
            case .everyMachine:
                hasher.combine(4 as UInt8)
            }
        }
    }

    /// Its fields, held once and copied on a write: a record is copied at each lookup (the proxy's
    /// per DHCP request, a file request's, the API's answers kept), which then retains one
    /// reference, not each of its strings and tables. Unchecked: a `Fields` is written only
    /// while one record alone holds it.
    private final class Fields: @unchecked Sendable {
        var name: String
        var selectors: [(selector: Selector, line: Int)]
        var action: Action
        var bootFiles: [BootSelector: BootTarget]
        var boot: RenderedBoot?
        var script: String?
        var variables: [String: String]
        var once = false

        init(name: String, selectors: [(selector: Selector, line: Int)], action: Action, bootFiles: [BootSelector: BootTarget],
             boot: RenderedBoot?, variables: [String: String]) {
            (self.name, self.selectors, self.action, self.bootFiles, self.boot, self.variables) = (name, selectors, action, bootFiles, boot, variables)
        }

        func copy() -> Fields {
            let copy = Fields(name: name, selectors: selectors, action: action, bootFiles: bootFiles, boot: boot, variables: variables)
            (copy.script, copy.once) = (script, once)
            return copy
        }
    }

    private var fields: Fields

    /// The fields, this record's alone (copied first if another record shares them).
    private var own: Fields {
        mutating get {
            if !isKnownUniquelyReferenced(&fields) { fields = fields.copy() }
            return fields
        }
    }

    /// Its file's name: how logs and errors name it.
    public var name: String {
        get { fields.name }
        set { own.name = newValue }
    }
    /// What it selects, each with the line that says so.
    public var selectors: [(selector: Selector, line: Int)] {
        get { fields.selectors }
        set { own.selectors = newValue }
    }
    public var action: Action {
        get { fields.action }
        set { own.action = newValue }
    }
    /// `boot-file SELECTOR=NAME`s, over the network's menu (`--boot-file`, the defaults).
    public var bootFiles: [BootSelector: BootTarget] {
        get { fields.bootFiles }
        set { own.bootFiles = newValue }
    }
    /// `kernel`, `initrd`, `cmdline`: the boot Stampede writes for the loader that asks (nil: the
    /// root's files, as without records).
    public var boot: RenderedBoot? {
        get { fields.boot }
        set { own.boot = newValue }
    }
    /// `script = PATH`: the operator's own iPXE script for its machines, a file beneath the root
    /// served in place of `boot.ipxe` and `autoexec.ipxe`.
    public var script: String? {
        get { fields.script }
        set { own.script = newValue }
    }
    /// `var NAME = VALUE`: what its command line may name.
    public var variables: [String: String] {
        get { fields.variables }
        set { own.variables = newValue }
    }
    /// `once = yes`: a machine it selects boots until it says its boot is done (its done URL, or
    /// `stampede machines done MAC`), and from its disk after, as if its record said `local`.
    public var once: Bool {
        get { fields.once }
        set { own.once = newValue }
    }

    public init(name: String, selectors: [(selector: Selector, line: Int)], action: Action = .boot, bootFiles: [BootSelector: BootTarget] = [:],
                boot: RenderedBoot? = nil, variables: [String: String] = [:]) {
        fields = Fields(name: name, selectors: selectors, action: action, bootFiles: bootFiles, boot: boot, variables: variables)
    }

    public static func == (a: MachineRecord, b: MachineRecord) -> Bool {
        a.fields === b.fields || a.name == b.name && a.action == b.action && a.bootFiles == b.bootFiles && a.boot == b.boot && a.variables == b.variables && a.once == b.once && a.script == b.script
            && a.selectors.map(\.selector) == b.selectors.map(\.selector) && a.selectors.map(\.line) == b.selectors.map(\.line)
    }

    /// What a machine it selects gets, over the network's `menu`.
    public func choice(over menu: BootMenu) -> MachineChoice {
        switch action {
        case .boot: .boot(BootMenu(menu.targets.merging(bootFiles) { _, ours in ours }))
        case .local: .leaveAlone(.local(record: name))
        case .ignore: .leaveAlone(.ignored(record: name))
        }
    }
}
