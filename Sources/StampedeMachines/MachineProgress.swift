import StampedeBase
import StampedeDHCP
import StampedeHTTPWire
import StampedeIO

/// The rack's progress, machine by machine: how far each machine's boot got (DHCP answered or
/// left alone and why, its boot file, its script, its kernel, its initrd, done), with its record,
/// its address and when it was last heard of. The proxy and the file service tell it; the
/// metrics listener shows it (`/machines`, and the machines per stage).
public final class MachineProgress: Sendable {
    /// A boot's stages, in the order a boot goes through them.
    public enum Stage: Int, CaseIterable, Comparable, Sendable {
        /// Its DHCP left alone (`Entry.why` says why).
        case leftAlone
        /// Its DHCP answered: a boot file offered.
        case dhcp
        /// It asked for the boot file it was offered.
        case bootFile
        /// It asked for the loader its boot file loads beside itself: shim's GRUB
        /// (`grubx64.efi`), which asks for its configuration next, unless it cannot find its
        /// server (`MachineProgress.stalledLoaders`).
        case loader
        /// Its loader asked for its script (`boot.ipxe`, `autoexec.ipxe`, GRUB's, PXELINUX's).
        case script
        /// It asked for its record's kernel.
        case kernel
        /// It asked for its record's initrd (the first).
        case initrd
        /// It said its boot is done.
        case done

        public var label: String {
            switch self {
            case .leftAlone: "left_alone"
            case .dhcp: "dhcp"
            case .bootFile: "boot_file"
            case .loader: "loader"
            case .script: "script"
            case .kernel: "kernel"
            case .initrd: "initrd"
            case .done: "done"
            }
        }

        public static func < (a: Stage, b: Stage) -> Bool { a.rawValue < b.rawValue }
    }

    public struct Entry: Equatable, Sendable {
        public var mac: [UInt8]
        public var record: String?
        public var stage: Stage
        /// Why it was left alone.
        public var why: String?
        /// The boot file it was offered.
        public var offered: String?
        /// The address its last request came from (IPv4 or IPv6, without a port).
        public var address: SocketAddress?
        /// Seconds since the epoch.
        public var lastSeen: Int
        /// What it took of the files it downloaded, since it was first heard of.
        public var bytes = 0
        /// What the last script it was given names.
        public var named: Named?
        /// The path of the boot file it was offered (`offered` as a request names it).
        var offeredPath: String?
    }

    /// What a script given to a machine names, as its requests name them (paths beneath the
    /// root): its kernel and its first initrd. Its requests for them are its kernel and initrd
    /// stages.
    public struct Named: Equatable, Sendable {
        public var kernel: String
        public var initrd: String?

        public init(kernel: String, initrd: String?) {
            self.kernel = kernel
            self.initrd = initrd
        }

        /// What `boot` names.
        public init(_ boot: RenderedBoot) {
            self.init(kernel: HTTPLocation.path(of: boot.kernel), initrd: boot.initrds.first.map(HTTPLocation.path(of:)))
        }
    }

    /// Machines followed at most: past it, the half heard of longest ago is forgotten.
    public static let capacity = 65_536
    private let table = SleepingLock(Table())
    /// The machines by MAC, and those at the loader stage that `stalledLoaders` has not given
    /// out yet (so that its sweep looks at them, not at the whole rack).
    private struct Table {
        var entries: [HardwareKey: Entry] = [:]
        var unsaidLoaders: Set<HardwareKey> = []
    }
    /// Told of every change of a machine's stage (the JSON events), on the thread that made it;
    /// nil: nobody is (and the entry is not copied out for it).
    private let changed: (@Sendable (Entry) -> Void)?

    public init(changed: (@Sendable (Entry) -> Void)? = nil) { self.changed = changed }

    /// What happened to `mac` now; true when its stage changed. A stage is the furthest its boot
    /// got: a later event of an earlier stage is the same boot going on (iPXE's own DHCP after
    /// its file), except DHCP after its kernel, its initrd or its end (a new boot), and being left
    /// alone, which is said whenever it happens. `named`: what the script it was given names.
    @discardableResult
    public func note(_ mac: [UInt8], _ stage: Stage, record: String? = nil, why: String? = nil, offered: String? = nil,
                     address: SocketAddress? = nil, named: Named? = nil, now: Int) -> Bool {
        let key = HardwareKey(mac)
        let address = address?.unmapped.clientHost
        let said = Said(record: record, why: why, offered: offered, offeredPath: offered.map(HTTPLocation.path(of:)), named: named)
        let told = changed != nil
        // Changed in place, looked up once: every request of every machine passes here.
        let (moved, entry): (Bool, Entry?) = table.withLock { table in
            if let index = table.entries.index(forKey: key) {
                let moved = Self.update(&table.entries.values[index], new: false, key, stage, said, address, now, &table.unsaidLoaders)
                return (moved, moved && told ? table.entries.values[index] : nil)
            }
            if table.entries.count >= Self.capacity {
                let cut = table.entries.values.map(\.lastSeen).sorted()[Self.capacity / 2]
                table.entries = table.entries.filter { $0.value.lastSeen > cut }
                table.unsaidLoaders = table.unsaidLoaders.filter { table.entries[$0] != nil }
            }
            var entry = Entry(mac: mac, stage: stage, lastSeen: now)
            _ = Self.update(&entry, new: true, key, stage, said, address, now, &table.unsaidLoaders)
            table.entries[key] = entry
            return (true, entry)
        }
        if let entry { changed?(entry) }
        return moved
    }

    /// A bound machine asked for `path`, not a script: the stage that is, from what it was
    /// offered and what its last script named (its boot file, the GRUB its shim loads beside
    /// itself, its kernel, its first initrd), or none for any other file; true when its stage
    /// changed. One look at the table, whatever the file: every file of every machine passes here.
    @discardableResult
    public func asked(_ mac: [UInt8], for path: String, address: SocketAddress?, now: Int) -> Bool {
        let key = HardwareKey(mac)
        let address = address?.unmapped.clientHost
        let told = changed != nil
        let (moved, entry): (Bool, Entry?) = table.withLock { table in
            guard let index = table.entries.index(forKey: key), let stage = Self.stage(asking: path, of: &table.entries.values[index]) else {
                return (false, nil)
            }
            let moved = Self.update(&table.entries.values[index], new: false, key, stage, Said(), address, now, &table.unsaidLoaders)
            return (moved, moved && told ? table.entries.values[index] : nil)
        }
        if let entry { changed?(entry) }
        return moved
    }

    /// The stage a request for `path` (not a script) says `entry`'s boot is at (`inout`: looked
    /// at in place, not copied).
    static func stage(asking path: String, of entry: inout Entry) -> Stage? {
        if let offered = entry.offeredPath {
            if offered == path { return .bootFile }
            if isShimsGRUB(path, offered: offered) { return .loader }
        }
        guard let named = entry.named else { return nil }
        return named.kernel == path ? .kernel : named.initrd == path ? .initrd : nil
    }

    /// Whether `path` is the GRUB that a shim offered as `offered` loads beside itself
    /// (`grubx64.efi`, `grubaa64.efi` in shim's directory).
    static func isShimsGRUB(_ path: String, offered: String) -> Bool {
        let shim = offered.lastPathComponent
        let grub = path.lastPathComponent
        return shim.hasPrefixIgnoringCase("shim") && shim.hasSuffixIgnoringCase(".efi") && grub.hasPrefixIgnoringCase("grub")
            && grub.hasSuffixIgnoringCase(".efi") && path[..<grub.startIndex] == offered[..<shim.startIndex]
    }

    /// What an event says of a machine beside its stage (`note`).
    private struct Said {
        var record: String?
        var why: String?
        var offered: String?
        var offeredPath: String?
        var named: Named?
    }

    /// `entry` (`new`: just made) told what happened now (`note`); true when its stage changed.
    private static func update(_ entry: inout Entry, new: Bool, _ key: HardwareKey, _ stage: Stage, _ said: Said, _ address: SocketAddress?,
                               _ now: Int, _ unsaidLoaders: inout Set<HardwareKey>) -> Bool {
        let before = new ? nil : entry.stage
        let newBoot = stage == .dhcp && (before.map { $0 >= .kernel || $0 == .leftAlone } ?? true)
        if stage == .leftAlone || newBoot || before.map({ stage > $0 }) ?? true {
            entry.stage = stage
            entry.why = stage == .leftAlone ? said.why : nil
            // Only a machine at the loader stage is in the set (it leaves it here or by
            // `stalledLoaders`): one that was not need not be looked for.
            if stage == .loader { unsaidLoaders.insert(key) } else if before == .loader { unsaidLoaders.remove(key) }
        }
        if let record = said.record { entry.record = record }
        if let offered = said.offered { (entry.offered, entry.offeredPath) = (offered, said.offeredPath) }
        if let named = said.named { entry.named = named }
        if let address { entry.address = address }
        entry.lastSeen = now
        return before != entry.stage
    }

    /// `mac` took `bytes` of a file (a machine not followed yet is not counted).
    public func took(_ bytes: Int, _ mac: [UInt8]) {
        let key = HardwareKey(mac)
        table.withLock { table in
            if let index = table.entries.index(forKey: key) { table.entries.values[index].bytes += bytes }
        }
    }

    public func entry(_ mac: [UInt8]) -> Entry? { table.withLock { $0.entries[HardwareKey(mac)] } }

    /// The machines at the loader stage that have not been heard of for `seconds` (none of their
    /// requests moved them on), each given out once per time it reaches the stage: a loader that
    /// stopped.
    public func stalledLoaders(quietFor seconds: Int, now: Int) -> [Entry] {
        table.withLock { table in
            var stalled: [Entry] = []
            for key in table.unsaidLoaders {
                guard let entry = table.entries[key], now - entry.lastSeen >= seconds else { continue }
                table.unsaidLoaders.remove(key)
                stalled.append(entry)
            }
            return stalled
        }
    }

    /// Every machine followed, by MAC.
    public var entries: [Entry] { table.withLock { Array($0.entries.values) }.sorted { $0.mac.lexicographicallyPrecedes($1.mac) } }

    /// Machines now at each stage.
    public var counts: [Stage: Int] {
        table.withLock { table in
            var counts = Dictionary(uniqueKeysWithValues: Stage.allCases.map { ($0, 0) })
            for entry in table.entries.values { counts[entry.stage, default: 0] += 1 }
            return counts
        }
    }

    /// `/machines`: `{"machines":[{"mac":...,"record":...,"stage":...,"why":...,"address":...,"last_seen":...,"bytes":...},...]}`.
    public func json() -> [UInt8] {
        var out = "{\"machines\":["
        for (i, entry) in entries.enumerated() {
            if i > 0 { out += "," }
            out += "{\"mac\":\(jsonString(entry.mac.hardwareAddressText(separator: ":"))),\"record\":\(entry.record.map(jsonString) ?? "null")"
            out += ",\"stage\":\(jsonString(entry.stage.label)),\"why\":\(entry.why.map(jsonString) ?? "null")"
            out += ",\"address\":\(entry.address.map { jsonString($0.host) } ?? "null"),\"last_seen\":\(entry.lastSeen),\"bytes\":\(entry.bytes)}"
        }
        return Array((out + "]}\n").utf8)
    }

}
