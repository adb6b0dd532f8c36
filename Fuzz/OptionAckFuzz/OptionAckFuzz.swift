// libFuzzer target: the OACK body a client parses (stampede get, put, storm) against arbitrary
// asked options, and the option list writer: what is written parses back to the same pairs.
//
// The input is split at its first byte 0xFF: before it, the options the client asked (as an
// option list), after it, the server's OACK body. Whatever both hold, reading the OACK never
// traps, and what it accepts lies within the RFC ranges and what was asked.

import FuzzCorpus
import Glibc
import StampedeProtocol

func optionAckFuzz(_ input: UnsafeRawBufferPointer) {
    let split = input.firstIndex(of: 0xFF)
    let asked = OptionList.parse(UnsafeRawBufferPointer(rebasing: input[..<(split ?? 0)]))
    let body = UnsafeRawBufferPointer(rebasing: input[(split.map { $0 + 1 } ?? 0)...])
    if let options = try? TransferOptions(optionAck: body, asked: asked) {
        func askedValue(_ name: String) -> Int? { asked.last { $0.name == name }.flatMap { TFTPOption.decimal($0.value) } }
        precondition(TFTPOption.blksize.range.contains(options.blockSize) || options.blockSize == 512)
        precondition(options.blockSize == 512 || options.blockSize <= max(askedValue("blksize") ?? 0, askedValue("blksize2") ?? 0))
        precondition(TFTPOption.windowsize.range.contains(options.windowSize))
        precondition(options.windowSize == 1 || options.windowSize <= askedValue("windowsize") ?? 0)
        if let timeout = options.retransmitTimeout {
            precondition(timeout == (askedValue("timeout") ?? -1) * 1_000_000_000 || timeout == (askedValue("utimeout") ?? -1) * 1000)
            precondition((10_000_000...255_000_000_000).contains(timeout))
        }
    }

    let options = OptionList.parse(body)
    let written = PacketWriter.optionAck(options)
    precondition(written.count >= 2 && written[0] == 0 && written[1] == 6)
    let reparsed = written.withUnsafeBytes { OptionList.parse(UnsafeRawBufferPointer(rebasing: $0[2...])) }
    // Names and values with a NUL inside cannot round-trip; everything else must.
    if options.allSatisfy({ !$0.name.utf8.contains(0) && !$0.value.utf8.contains(0) && !$0.name.isEmpty }) {
        precondition(reparsed.count == options.count, "\(options) became \(reparsed)")
        for (a, b) in zip(options, reparsed) { precondition(a.name == b.name && a.value == b.value) }
    }
}

@main enum Harness {
    static func main() { exit(runHarness(optionAckFuzz)) }
}
