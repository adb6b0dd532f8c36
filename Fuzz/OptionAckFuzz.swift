// libFuzzer target: the OACK body a client parses (stampede get, put, storm), and the
// option list writer: what is written parses back to the same pairs.

@_cdecl("LLVMFuzzerTestOneInput")
public func optionAckFuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let options = PacketWriter.parseOptions(UnsafeRawBufferPointer(start: data, count: size))
    let written = PacketWriter.optionAck(options)
    precondition(written.count >= 2 && written[0] == 0 && written[1] == 6)
    let reparsed = written.withUnsafeBytes { PacketWriter.parseOptions(UnsafeRawBufferPointer(rebasing: $0[2...])) }
    // Names and values with a NUL inside cannot round-trip; everything else must.
    if options.allSatisfy({ !$0.name.utf8.contains(0) && !$0.value.utf8.contains(0) && !$0.name.isEmpty }) {
        precondition(reparsed.count == options.count, "\(options) became \(reparsed)")
        for (a, b) in zip(options, reparsed) { precondition(a.name == b.name && a.value == b.value) }
    }
    return 0
}
