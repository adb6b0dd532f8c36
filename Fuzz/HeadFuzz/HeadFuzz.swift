// libFuzzer target: whatever a client sends an HTTP loop before its head is complete. Built by
// `make fuzz` with -sanitize=fuzzer,address over StampedeHTTPWire (no sockets).
//
// Beyond "does not crash", it checks what the loop counts on: a head read as its bytes arrive, in
// pieces of any size, is the head (or the refusal's status) read at once (but for a head that
// breaks both size limits, refused for the one its pieces reach first); a complete head is
// the same read without the bytes after it; and a parser reset after one head reads the next
// (pipelined) as a new parser does, nothing of the first left in the arrays it keeps. The input's
// first byte chooses the pieces; both the default limits and small ones (to reach every limit).

import FuzzCorpus
import Glibc
import StampedeHTTPWire

let small: RequestHead.Limits = {
    var limits = RequestHead.Limits()
    limits.lineBytes = 64
    limits.headBytes = 256
    limits.headerCount = 8
    return limits
}()

func headFuzz(_ input: UnsafeRawBufferPointer) {
    guard let first = input.first else { return }
    let bytes = UnsafeRawBufferPointer(rebasing: input.dropFirst())
    for limits in [RequestHead.Limits(), small] {
        check(bytes, limits: limits, piece: 1 + Int(first % 32))
    }
}

enum Outcome: Equatable {
    case incomplete
    case complete(RequestHead, length: Int)
    case refused(Status, toHead: Bool)

    init(_ read: () throws(RequestHead.Refusal) -> RequestHead.Parsed) {
        do {
            switch try read() {
            case .incomplete: self = .incomplete
            case .complete(let head, let length): self = .complete(head, length: length)
            }
        } catch {
            self = .refused(error.status, toHead: error.toHead)
        }
    }
}

/// A head whose request line is too long and which is too large breaks both limits: which one is
/// found first depends on where its pieces end (414 or 431), as it does in nginx. Only then.
func bothLimits(_ one: Outcome, _ other: Outcome, _ bytes: UnsafeRawBufferPointer, _ limits: RequestHead.Limits) -> Bool {
    let sizes: Set<Status> = [.uriTooLong, .headersTooLarge]
    guard case .refused(let a, _) = one, case .refused(let b, _) = other, sizes.contains(a) && sizes.contains(b) else { return false }
    // The request line: after the empty lines before it, to its line feed (or the end).
    guard let first = bytes.firstIndex(where: { $0 != 13 && $0 != 10 }) else { return false }
    let start = (bytes[..<first].lastIndex(of: 10) ?? -1) + 1
    let end = bytes[first...].firstIndex(of: 10).map { $0 > start && bytes[$0 - 1] == 13 ? $0 - 1 : $0 } ?? bytes.count
    return end - start > limits.lineBytes && bytes.count > limits.headBytes
}

/// A refusal says whether the request was a HEAD from the bytes come so far: refused in pieces
/// before "HEAD " was all there, it says not; never the other way round.
func headSeenLater(_ inPieces: Outcome, _ atOnce: Outcome) -> Bool {
    guard case .refused(let a, false) = inPieces, case .refused(let b, true) = atOnce else { return false }
    return a == b
}

func check(_ bytes: UnsafeRawBufferPointer, limits: RequestHead.Limits, piece: Int) {
    var whole = HeadParser(limits: limits)
    let atOnce = Outcome { () throws(RequestHead.Refusal) in try whole.parse(bytes) }

    var parser = HeadParser(limits: limits)
    var arrived = 0
    var inPieces = Outcome.incomplete
    while inPieces == .incomplete && arrived < bytes.count {
        arrived = min(bytes.count, arrived + piece)
        let prefix = UnsafeRawBufferPointer(rebasing: bytes[..<arrived])
        inPieces = Outcome { () throws(RequestHead.Refusal) in try parser.parse(prefix) }
    }
    precondition(inPieces == atOnce || bothLimits(inPieces, atOnce, bytes, limits) || headSeenLater(inPieces, atOnce),
                 "read in pieces of \(piece): \(inPieces), at once: \(atOnce)")

    guard case .complete(_, let length) = atOnce else { return }
    precondition(length > 0 && length <= bytes.count, "a head's length outside its bytes")
    let alone = Outcome { () throws(RequestHead.Refusal) in
        try RequestHead.parse(UnsafeRawBufferPointer(rebasing: bytes[..<length]), limits: limits)
    }
    precondition(alone == atOnce, "the bytes after a head changed it")

    let next = UnsafeRawBufferPointer(rebasing: bytes[length...])
    whole.reset()
    let reused = Outcome { () throws(RequestHead.Refusal) in try whole.parse(next) }
    let fresh = Outcome { () throws(RequestHead.Refusal) in try RequestHead.parse(next, limits: limits) }
    precondition(reused == fresh, "a reset parser read the next head otherwise: \(reused) against \(fresh)")
}

@main enum Harness {
    static func main() { exit(runHarness(headFuzz)) }
}
