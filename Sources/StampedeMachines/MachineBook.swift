import StampedeDHCP

/// The machine records in force, indexed by what they select: which record a machine is, and so
/// what it boots. A machine is its record by hardware address first, then by UUID, then by
/// architecture (a number before a firmware selector), then the default record's; a machine no
/// record selects is an unknown machine, left alone or booted as `--unknown-machines` says.
/// Made whole or not at all: two records selecting the same thing are refused, both named.
public struct MachineBook: Sendable {
    /// What a machine no record selects gets (`--unknown-machines`).
    public enum UnknownMachines: String, CaseIterable, Sendable {
        /// Silence (the default with `--machines`): nothing boots that nobody listed.
        case ignore
        /// The network's boot, as without records.
        case boot
        /// Silence, and a record that ignores it written into the directory (`DiscoveredMachine`)
        /// for the operator to change.
        case record
    }

    public let records: [MachineRecord]
    public let unknown: UnknownMachines
    /// The machines whose `once` boot is done (`.done-<mac>` files in the directory).
    public internal(set) var done: Set<[UInt8]>
    /// The records by what they select, but a hardware address: those are `byHardwareAddress`'s.
    private let index: [MachineRecord.Selector: Int]
    /// The records that select a hardware address, by it held inline (`HardwareKey`): the lookup
    /// every DHCP packet and file request of a known machine makes first.
    private let byHardwareAddress: [HardwareKey: Int]

    public init(_ records: [MachineRecord], unknown: UnknownMachines = .ignore, done: Set<[UInt8]> = []) throws(RecordFaults) {
        var index: [MachineRecord.Selector: Int] = [:]
        var errors: [RecordError] = []
        for (number, record) in records.enumerated() {
            for (selector, line) in record.selectors {
                if let earlier = index[selector] {
                    guard earlier != number else { continue }  // a record may say a thing twice
                    let other = records[earlier]
                    let otherLine = other.selectors.first { $0.selector == selector }?.line ?? 0
                    errors.append(RecordError(file: record.name, line: line,
                                              "\(selector) is selected by \(other.name)\(otherLine > 0 ? ":\(otherLine)" : "") too"))
                    continue
                }
                index[selector] = number
            }
        }
        guard errors.isEmpty else { throw RecordFaults(errors) }
        self.records = records
        self.unknown = unknown
        self.done = done
        var byHardwareAddress: [HardwareKey: Int] = [:]
        for case (.hardwareAddress(let address), let number) in index { byHardwareAddress[HardwareKey(address)] = number }
        self.byHardwareAddress = byHardwareAddress
        self.index = index.filter { if case .hardwareAddress = $0.key { false } else { true } }
    }

    /// The record that selects `machine`, if any.
    public func record(for machine: MachineIdentity) -> MachineRecord? {
        let found = byHardwareAddress[HardwareKey(machine.hardwareAddress)]
            ?? machine.uuid.flatMap { index[.uuid($0)] }
            ?? machine.architecture.flatMap { index[.architecture($0)] }
            ?? machine.firmware.flatMap { index[.firmware($0)] }
            ?? index[.everyMachine]
        return found.map { records[$0] }
    }

    /// The record that selects every machine no other selects (`default`), if any.
    public var defaultRecord: MachineRecord? { index[.everyMachine].map { records[$0] } }

    /// What `machine` gets, over the network's `menu`.
    public func choice(for machine: MachineIdentity, over menu: BootMenu) -> MachineChoice {
        choice(of: record(for: machine), for: machine, over: menu)
    }

    /// What `machine`, whose record is `record` (`record(for:)`), gets over the network's `menu`.
    public func choice(of record: MachineRecord?, for machine: MachineIdentity, over menu: BootMenu) -> MachineChoice {
        if let record {
            if isDone(record, machine) { return .leaveAlone(.done(record: record.name)) }
            return record.choice(over: menu)
        }
        switch unknown {
        case .ignore: return .leaveAlone(.unknown)
        case .boot: return .boot(menu)
        case .record: return .leaveAlone(.discovered)
        }
    }
}

extension MachineBook {
    /// Whether `machine`'s boot by `record` is done: it said so, and the record boots it once.
    public func isDone(_ record: MachineRecord, _ machine: MachineIdentity) -> Bool {
        record.once && done.contains(machine.hardwareAddress)
    }
}

/// Faults in records (a file's, or two files selecting one thing): every one, each with its file
/// and line.
public struct RecordFaults: Error, Equatable, Sendable, CustomStringConvertible {
    public var errors: [RecordError]

    public init(_ errors: [RecordError]) { self.errors = errors }

    public var description: String { errors.map(\.description).joined(separator: "\n") }
}
