/// A DUID (RFC 8415 §11): how a client or a server names itself. What it says of the machine: an
/// Ethernet address (DUID-LLT, DUID-LL) or a UUID (DUID-UUID, RFC 6355: what EDK2 sends where
/// the machine has one).
public struct DUID: Equatable, Sendable {
    public let bytes: [UInt8]

    public init(_ bytes: [UInt8]) { self.bytes = bytes }

    /// DUID-LL of an Ethernet address: how this server names itself (stable as long as the
    /// interface's address is; no time to keep, unlike DUID-LLT's).
    public static func linkLayer(ethernet address: [UInt8]) -> DUID {
        DUID([0, 3, 0, 1] + address)
    }

    /// The Ethernet address a DUID-LLT (type 1) or DUID-LL (type 3) holds.
    public var ethernetAddress: [UInt8]? {
        guard bytes.count >= 4, bytes[0] == 0, bytes[2] == 0, bytes[3] == 1 else { return nil }
        switch bytes[1] {
        case 1 where bytes.count == 14: return Array(bytes[8...])
        case 3 where bytes.count == 10: return Array(bytes[4...])
        default: return nil
        }
    }

    /// The UUID a DUID-UUID (type 4) holds, 16 bytes; nil for the nil UUID (all zeros: what iPXE
    /// sends where the machine has none), which names no machine.
    public var uuid: [UInt8]? {
        guard bytes.count == 18, bytes[0] == 0, bytes[1] == 4, !bytes[2...].allSatisfy({ $0 == 0 }) else { return nil }
        return Array(bytes[2...])
    }
}
