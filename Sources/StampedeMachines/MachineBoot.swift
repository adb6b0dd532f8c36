import StampedeDHCP
import StampedeFiles
import StampedeIO

/// The files a machine's loader asks for, written from its record (`GeneratedFiles`, asked by the
/// file service before the root, over TFTP and HTTP alike):
///
/// - `boot.ipxe` and `autoexec.ipxe` (in any directory: a signed iPXE asks for it beside
///   itself): iPXE's script, for the machine DHCP bound to the asking address (or, unbound, the
///   default record's);
/// - `grub.cfg-01-<mac>` (in any directory): GRUB's configuration;
/// - `pxelinux.cfg/01-<mac>`: PXELINUX's.
///
/// A record with a `kernel` gets its boot; one that says `local` or `ignore`, and a machine no
/// record selects while unknown machines are not booted, are told to go back to the firmware
/// (iPXE `exit`, GRUB `exit`, PXELINUX `LOCALBOOT 0`). Every other file, and these for a record
/// that boots the root's files, come from the root.
public struct MachineBoot: GeneratedFiles {
    public let records: MachineRecords
    public let bindings: MachineBindings

    public init(records: MachineRecords, bindings: MachineBindings) {
        self.records = records
        self.bindings = bindings
    }

    public func contents(of name: [UInt8], for client: SocketAddress) -> [UInt8]? {
        let path = String(decoding: name, as: UTF8.self)
        let base = path.split(separator: "/", omittingEmptySubsequences: false).last.map(String.init) ?? path
        let bound = client.ipv4.flatMap(bindings.machine(at:))
        if base == "boot.ipxe" || base == "autoexec.ipxe" {
            return render(bound ?? MachineIdentity(hardwareAddress: []), unbound: bound == nil, LoaderScript.iPXE)
        }
        if base.hasPrefix("grub.cfg-01-"), let mac = MachineRecord.hardwareAddress(base.dropFirst("grub.cfg-01-".count)) {
            return render(named(mac, bound), unbound: false, LoaderScript.grub)
        }
        if path.hasPrefix("pxelinux.cfg/01-") || path.contains("/pxelinux.cfg/01-"), base.hasPrefix("01-"),
           let mac = MachineRecord.hardwareAddress(base.dropFirst(3)) {
            return render(named(mac, bound), unbound: false, LoaderScript.pxelinux)
        }
        return nil
    }

    /// The machine a name's MAC names: what DHCP said of it when the asking address is its.
    private func named(_ mac: [UInt8], _ bound: MachineIdentity?) -> MachineIdentity {
        bound?.hardwareAddress == mac ? bound! : MachineIdentity(hardwareAddress: mac)
    }

    private func render(_ machine: MachineIdentity, unbound: Bool, _ script: (RenderedBoot?, String) -> String) -> [UInt8]? {
        let book = records.current
        let record = unbound ? book.records.first { $0.selectors.contains { $0.selector == .everyMachine } } : book.record(for: machine)
        guard let record else {
            // Nobody listed it: back to the firmware, unless unknown machines boot as the network says.
            return book.unknown == .boot ? nil : Array(script(nil, "a machine no record selects").utf8)
        }
        switch record.action {
        case .boot:
            guard let boot = record.boot else { return nil }
            return Array(script(boot.rendered(for: machine, variables: record.variables), record.name).utf8)
        case .local, .ignore:
            return Array(script(nil, record.name).utf8)
        }
    }
}
