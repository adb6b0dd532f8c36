/// How absolute block numbers (from 1, 64-bit) are written on the wire: they wrap past 65535 to
/// the rollover value, 0 (dnsmasq, atftpd and tftpd-hpa without the option) or 1 (the rollover
/// option; some clients expect it). After a wrap to 1 the numbers run 1...65535: 0 never comes
/// again.
public struct BlockNumbering: Equatable, Sendable {
    /// 0 or 1 (`TFTPOption.rollover.range`).
    public let rollover: Int

    public init(rollover: Int = 0) {
        precondition(TFTPOption.rollover.range.contains(rollover))
        self.rollover = rollover
    }

    @inline(__always)
    public func wire(_ block: Int) -> UInt16 {
        if rollover == 0 || block <= 65535 { return UInt16(truncatingIfNeeded: block) }
        return UInt16((block - 65536) % 65535 + 1)
    }

    /// The absolute block in `low...high` whose wire number is `wire`, if one is: the window
    /// of blocks an ACK may name (at most 32,768 wide, so never ambiguous).
    @inline(__always)
    public func block(_ wire: UInt16, in low: Int, through high: Int) -> Int? {
        var block = low + Int(wire &- self.wire(low))
        // Across a wrap to 1, one number (0) is skipped: the block is one before the distance.
        if self.wire(block) != wire { block -= 1 }
        guard block >= low, block <= high, self.wire(block) == wire else { return nil }
        return block
    }
}
