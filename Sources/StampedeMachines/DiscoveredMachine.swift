import Glibc
import StampedeDHCP

/// A machine no record selected, as `--unknown-machines record` writes it into the directory
/// (enlistment, as MAAS does): a record that ignores it, with what its DHCP request said, for
/// the operator to change to `boot` or `local`.
public struct DiscoveredMachine: Equatable, Sendable {
    public var identity: MachineIdentity
    /// What its request said, for the operator (`DISCOVER on eth1, vendor class PXEClient:...`):
    /// written in a comment, sanitized by the caller.
    public var said: String
    /// When, in seconds since the epoch.
    public var seen: Int

    public init(identity: MachineIdentity, said: String, seen: Int) {
        self.identity = identity
        self.said = said
        self.seen = seen
    }

    /// `discovered-52-54-00-12-34-56`.
    public var fileName: String { "discovered-" + identity.hardwareAddress.hardwareAddressText(separator: "-") }

    /// The record, in the grammar `MachineRecord.parse` reads.
    public var text: String {
        var time = time_t(seen)
        var parts = tm()
        gmtime_r(&time, &parts)
        var buffer = [CChar](repeating: 0, count: 32)
        let length = strftime(&buffer, buffer.count, "%Y-%m-%dT%H:%M:%SZ", &parts)
        let when = String(decoding: buffer.prefix(length).map { UInt8(bitPattern: $0) }, as: UTF8.self)
        let firmware = identity.firmware.map { " (\($0.name))" } ?? ""
        var lines = [
            "# Discovered \(when): no record selected this machine when it asked to boot.",
            "# Its request: \(said.filter { $0 != "\n" && $0 != "\r" }), architecture \(identity.architecture.map(String.init) ?? "unknown")\(firmware).",
            "# It is left alone: say action = boot (or local) to let it boot.",
            "mac = \(identity.hardwareAddress.hardwareAddressText(separator: ":"))",
        ]
        if let uuid = identity.uuid { lines.append("uuid = \(uuid)") }
        lines.append("action = ignore")
        return lines.joined(separator: "\n") + "\n"
    }
}
