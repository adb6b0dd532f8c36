import Glibc
import StampedeBase
import StampedeDHCP
import StampedeFiles
import StampedeHTTPWire
import StampedeIO

/// The files a machine's loader asks for, written from its record (`GeneratedFiles`, asked by the
/// file service before the root, over TFTP and HTTP alike):
///
/// - `boot.ipxe` and `autoexec.ipxe` (in any directory: a signed iPXE asks for it beside
///   itself): iPXE's script, for the machine DHCP bound to the asking address (or, unbound, the
///   default record's);
/// - `grub.cfg-01-<mac>` (in any directory): GRUB's configuration; and `grub.cfg` for a machine
///   DHCP bound to the asking address (a signed GRUB network image, as Secure Boot's chain runs,
///   asks its prefix's `grub.cfg` alone); unbound, the root's;
/// - `pxelinux.cfg/01-<mac>`: PXELINUX's.
///
/// A record with a `kernel` gets its boot, one with a `script` that file of the root as iPXE's
/// script; one that says `local` or `ignore`, and a machine no
/// record selects while unknown machines are not booted, are told to go back to the firmware
/// (iPXE `exit`, GRUB `exit`, PXELINUX `LOCALBOOT 0`). Every other file, and these for a record
/// that boots the root's files, come from the root.
///
/// A `once` machine reports its boot done by a POST to its done URL (`${done-url}`:
/// `<http base>.stampede/done/<mac>/<token>`); from then on it gets what a `local` record gives.
public struct MachineBoot: GeneratedFiles {
    public let records: MachineRecords
    public let bindings: MachineBindings
    /// `http://ADDR:PORT/`: where this server's HTTP listener is reached (nil: no HTTP, no done
    /// URL).
    public let httpBase: String?
    /// Its done URLs' path, beneath the base.
    static let donePath = ".stampede/done/"
    /// How far each machine's boot got: told of each file a bound machine asks for.
    public let progress: MachineProgress?
    /// The clock, in seconds since the epoch (tests set it).
    let now: @Sendable () -> Int

    public init(records: MachineRecords, bindings: MachineBindings, httpBase: String? = nil, progress: MachineProgress? = nil,
                now: @escaping @Sendable () -> Int = { Int(time(nil)) }) {
        self.records = records
        self.bindings = bindings
        self.httpBase = httpBase
        self.progress = progress
        self.now = now
    }

    /// `machine`'s done URL; empty without HTTP, and for a machine known by no MAC.
    public func doneURL(for mac: [UInt8]) -> String {
        guard let httpBase, !mac.isEmpty else { return "" }
        return httpBase + Self.donePath + mac.hardwareAddressText(separator: "-") + "/" + records.directory.tokens.token(for: mac)
    }

    public func report(to name: [UInt8], from client: SocketAddress) -> Result<String, FileRefusal>? {
        let path = String(decoding: name, as: UTF8.self)
        guard path.hasPrefix(Self.donePath) else { return nil }
        let parts = path.dropFirst(Self.donePath.count).split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2, let mac = MachineRecord.hardwareAddress(parts[0]) else {
            return .failure(FileRefusal(.notFound, "not a done URL"))
        }
        let bound = bindings.machine(at: client)
        switch records.done(named(mac, bound), token: String(parts[1]), now: now()) {
        case .accepted(let record):
            progress?.note(mac, .done, record: record, address: client, now: now())
            return .success("machine \(mac.hardwareAddressText(separator: ":")) done (\(record)): its next boot is from its disk")
        case .wrongToken: return .failure(FileRefusal(.denied, "not this machine's done URL"))
        case .notOnce: return .failure(FileRefusal(.notFound, "no record boots \(mac.hardwareAddressText(separator: ":")) once"))
        }
    }

    public func file(_ name: [UInt8], for client: SocketAddress) -> GeneratedFile? {
        let path = String(decoding: name, as: UTF8.self)
        let base = path.lastPathComponent
        let binding = bindings.binding(at: client)
        let bound = binding?.machine
        if let progress, let binding { follow(binding, asking: path, base: base, at: client, progress) }
        if base == "boot.ipxe" || base == "autoexec.ipxe" {
            return render(bound ?? MachineIdentity(hardwareAddress: []), unbound: bound == nil, LoaderScript.iPXE, iPXE: String(base))
        }
        if base.hasPrefix("grub.cfg-01-"), let mac = MachineRecord.hardwareAddress(base.dropFirst("grub.cfg-01-".count)) {
            return render(named(mac, bound), unbound: false, LoaderScript.grub)
        }
        if base == "grub.cfg", let bound {
            return render(bound, unbound: false, LoaderScript.grub)
        }
        if base.hasPrefix("01-"), path.hasPrefix("pxelinux.cfg/01-") || path.containsBytes("/pxelinux.cfg/01-"),
           let mac = MachineRecord.hardwareAddress(base.dropFirst(3)) {
            return render(named(mac, bound), unbound: false, LoaderScript.pxelinux)
        }
        return nil
    }

    /// The machine `client` is, its bytes counted.
    public func took(_ bytes: Int, client: SocketAddress) -> String? {
        guard let binding = bindings.binding(at: client) else { return nil }
        progress?.took(bytes, binding.machine.hardwareAddress)
        return binding.macText
    }

    /// The stage a machine's request for `path` says its boot is at: its offered boot file, the
    /// GRUB its shim loads, its script, its record's kernel or first initrd.
    private func follow(_ binding: MachineBindings.Binding, asking path: String, base: Substring, at address: SocketAddress,
                        _ progress: MachineProgress) {
        let machine = binding.machine
        let stage: MachineProgress.Stage
        let isScript = base == "boot.ipxe" || base == "autoexec.ipxe" || base.hasPrefix("grub.cfg") || path.containsBytes("pxelinux.cfg/")
        let offered = isScript ? nil : progress.offered(machine.hardwareAddress).map(HTTPLocation.path(of:))
        if isScript {
            stage = .script
        } else if let offered, offered == path {
            stage = .bootFile
        } else if let offered, Self.isShimsGRUB(path, offered: offered) {
            stage = .loader
        } else if let boot = records.record(for: machine, asking: nil)?.record?.boot {
            if HTTPLocation.path(of: boot.kernel) == path {
                stage = .kernel
            } else if let first = boot.initrds.first, HTTPLocation.path(of: first) == path {
                stage = .initrd
            } else {
                return
            }
        } else {
            return
        }
        progress.note(machine.hardwareAddress, stage, address: address, now: now())
    }

    /// Whether `path` is the GRUB that a shim offered as `offered` loads beside itself
    /// (`grubx64.efi`, `grubaa64.efi` in shim's directory).
    static func isShimsGRUB(_ path: String, offered: String) -> Bool {
        let shim = offered.lastPathComponent
        let grub = path.lastPathComponent
        return shim.hasPrefixIgnoringCase("shim") && shim.hasSuffixIgnoringCase(".efi") && grub.hasPrefixIgnoringCase("grub")
            && grub.hasSuffixIgnoringCase(".efi") && path[..<grub.startIndex] == offered[..<shim.startIndex]
    }

    /// The machine a name's MAC names: what DHCP said of it when the asking address is its.
    private func named(_ mac: [UInt8], _ bound: MachineIdentity?) -> MachineIdentity {
        bound?.hardwareAddress == mac ? bound! : MachineIdentity(hardwareAddress: mac)
    }

    /// `iPXE`: the name asked is iPXE's script, which a record's `script` replaces, and which
    /// waits a second and asks again while the machine API is asked.
    private func render(_ machine: MachineIdentity, unbound: Bool, _ script: (RenderedBoot?, String) -> String,
                        iPXE: String? = nil) -> GeneratedFile? {
        let book = records.current
        let record: MachineRecord?
        if unbound {
            record = book.defaultRecord
        } else if let (found, _) = records.record(for: machine, asking: .script) {
            record = found
        } else if let iPXE {
            return .made(Array(LoaderScript.iPXEWaiting(again: iPXE).utf8))
        } else {
            record = book.record(for: machine)  // GRUB and PXELINUX cannot wait: the directory's
        }
        guard let record else {
            // Nobody listed it: back to the firmware, unless unknown machines boot as the network says.
            return book.unknown == .boot ? nil : .made(Array(script(nil, "a machine no record selects").utf8))
        }
        if book.isDone(record, machine) { return .made(Array(script(nil, record.name).utf8)) }
        switch record.action {
        case .boot:
            if iPXE != nil, let own = record.script { return .root(Array(own.utf8)) }
            guard let boot = record.boot else { return nil }
            let rendered = boot.rendered(for: machine, variables: record.variables) { doneURL(for: machine.hardwareAddress) }
            return .made(Array(script(rendered, record.name).utf8))
        case .local, .ignore:
            return .made(Array(script(nil, record.name).utf8))
        }
    }
}
