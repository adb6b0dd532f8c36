/// A hardware address as a table's key, held inline: a DHCP message's is at most 16 bytes
/// (chaddr), which two words hold, so that a lookup hashes and compares two words and a length
/// and follows no pointer, where an array's bytes sit on the heap, each hashed in turn. A longer
/// address (none that DHCP carries) is kept whole beside them.
struct HardwareKey: Hashable, Sendable {
    private var words: (UInt64, UInt64) = (0, 0)
    private let count: Int
    private let longer: [UInt8]?

    init(_ address: [UInt8]) {
        count = address.count
        if address.count > 16 {
            longer = address
        } else {
            longer = nil
            address.withUnsafeBytes { bytes in withUnsafeMutableBytes(of: &words) { $0.copyMemory(from: bytes) } }
        }
    }

    static func == (a: HardwareKey, b: HardwareKey) -> Bool {
        a.words == b.words && a.count == b.count && a.longer == b.longer
    }

    func hash(into hasher: inout Hasher) {
        hasher.combine(words.0)
        hasher.combine(words.1)
        hasher.combine(count)
        longer?.withUnsafeBytes { hasher.combine(bytes: $0) }
    }
}
