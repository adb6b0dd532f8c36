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
        // A script's: what it is, and the machine it was written for.
        let script: (made: Made, for: MachineIdentity)?
        if base == "boot.ipxe" || base == "autoexec.ipxe" {
            let machine = bound ?? MachineIdentity(hardwareAddress: [])
            script = (render(machine, unbound: bound == nil, LoaderScript.iPXE, iPXE: String(base)), machine)
        } else if base.hasPrefix("grub.cfg-01-"), let mac = MachineRecord.hardwareAddress(base.dropFirst("grub.cfg-01-".count)) {
            let machine = named(mac, bound)
            script = (render(machine, unbound: false, LoaderScript.grub), machine)
        } else if base == "grub.cfg", let bound {
            script = (render(bound, unbound: false, LoaderScript.grub), bound)
        } else if base.hasPrefix("01-"), path.hasPrefix("pxelinux.cfg/01-") || path.containsBytes("/pxelinux.cfg/01-"),
                  let mac = MachineRecord.hardwareAddress(base.dropFirst(3)) {
            let machine = named(mac, bound)
            script = (render(machine, unbound: false, LoaderScript.pxelinux), machine)
        } else {
            script = nil
        }
        if let progress, let binding {
            let mac = binding.machine.hardwareAddress
            if script != nil || base.hasPrefix("grub.cfg") || path.containsBytes("pxelinux.cfg/") {
                // Its script: what it names are its kernel and initrd stages (when written for it).
                let named = script.flatMap { $0.for.hardwareAddress == mac ? $0.made.boot.map(MachineProgress.Named.init) : nil }
                progress.note(mac, .script, address: client, named: named, now: now())
            } else {
                progress.asked(mac, for: path, address: client, now: now())
            }
        }
        return script?.made.file
    }

    /// The machine `client` is, its bytes counted.
    public func took(_ bytes: Int, client: SocketAddress) -> String? {
        guard let binding = bindings.binding(at: client) else { return nil }
        progress?.took(bytes, binding.machine.hardwareAddress)
        return binding.macText
    }

    /// The machine a name's MAC names: what DHCP said of it when the asking address is its.
    private func named(_ mac: [UInt8], _ bound: MachineIdentity?) -> MachineIdentity {
        bound?.hardwareAddress == mac ? bound! : MachineIdentity(hardwareAddress: mac)
    }

    /// A script as written for a machine: the file (nil: the root's), and the boot it names, if
    /// it names one.
    private struct Made {
        var file: GeneratedFile?
        var boot: RenderedBoot?
    }

    /// `iPXE`: the name asked is iPXE's script, which a record's `script` replaces, and which
    /// waits a second and asks again while the machine API is asked.
    private func render(_ machine: MachineIdentity, unbound: Bool, _ script: (RenderedBoot?, String) -> String,
                        iPXE: String? = nil) -> Made {
        let book = records.current
        let record: MachineRecord?
        if unbound {
            record = book.defaultRecord
        } else if let (found, _) = records.record(for: machine, asking: .script, renews: false) {
            record = found
        } else if let iPXE {
            return Made(file: .made(Array(LoaderScript.iPXEWaiting(again: iPXE).utf8)))
        } else {
            record = book.record(for: machine)  // GRUB and PXELINUX cannot wait: the directory's
        }
        guard let record else {
            // Nobody listed it: back to the firmware, unless unknown machines boot as the network says.
            return Made(file: book.unknown == .boot ? nil : .made(Array(script(nil, "a machine no record selects").utf8)))
        }
        if book.isDone(record, machine) { return Made(file: .made(Array(script(nil, record.name).utf8))) }
        switch record.action {
        case .boot:
            if iPXE != nil, let own = record.script { return Made(file: .root(Array(own.utf8))) }
            guard let boot = record.boot else { return Made() }
            let rendered = boot.rendered(for: machine, variables: record.variables) { doneURL(for: machine.hardwareAddress) }
            return Made(file: .made(Array(script(rendered, record.name).utf8)), boot: rendered)
        case .local, .ignore:
            return Made(file: .made(Array(script(nil, record.name).utf8)))
        }
    }
}
