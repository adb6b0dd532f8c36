// libFuzzer target: whatever arrives at a listener or a transfer port. Built by `make fuzz` with
// -sanitize=fuzzer,address over StampedeProtocol (no sockets, no files).
//
// Beyond "does not crash", it checks properties: a request that parses re-encodes to one that
// parses the same; negotiation never grants values outside the RFC ranges or the limits.

import FuzzCorpus
import Glibc
import StampedeBase
import StampedeProtocol

func packetFuzz(_ bytes: UnsafeRawBufferPointer) {
    let size = bytes.count
    switch TransferPacket(bytes) {
    case .data(_, let payload): precondition(payload.count == size - 4)
    case .error(_, let message): precondition(message.count == size - 4)
    default: break
    }
    guard let request = try? Request.parse(bytes) else { return }
    let again = Request(isWrite: request.isWrite, filename: request.filename, mode: request.mode, options: request.options)
        .encoded()
    guard let reparsed = again.withUnsafeBytes({ try? Request.parse($0) }) else {
        preconditionFailure("a parsed request does not parse once encoded again")
    }
    precondition(reparsed == request, "re-encoding changed the request")
    let limits = OptionLimits(maxBlockSize: 1468, maxWindowSize: 64)
    for isWrite in [false, true] {
        let negotiation = OptionNegotiation(requested: request.options, cookie: request.cookie, isWrite: isWrite, fileSize: isWrite ? nil : 1 << 20,
                                            maxBlockSize: 1468, limits: limits)
        let options = negotiation.options
        precondition(TFTPOption.blksize.range.contains(options.blockSize) || options.blockSize == 512)
        precondition(options.blockSize <= 1468 && (1...64).contains(options.windowSize))
        if let timeout = options.retransmitTimeout { precondition((10_000_000...255 * nanosecondsPerSecond).contains(timeout)) }
        if let cookie = options.cookie { precondition(cookie == request.cookie && (1...255).contains(cookie.count)) }
        precondition(negotiation.acknowledged.allSatisfy { asked in request.options.contains { $0.name == asked.name } })
    }
}

@main enum Harness {
    static func main() { exit(runHarness(packetFuzz)) }
}
