import StampedeBase
import StampedeIO
@testable import StampedeTFTPServer
import Testing

@Suite struct EndedRequestsSpec {
    let one = SocketAddress(parsing: "10.0.0.1:40000", defaultPort: 0)!
    let other = SocketAddress(parsing: "10.0.0.2:40000", defaultPort: 0)!
    let request: [UInt8] = [0, 1, 0x66, 0, 0x6f, 0x63, 0x74, 0x65, 0x74, 0]

    @Test func aCopyTakenBeforeTheEndIsLateAndNoOtherIs() {
        var ended = EndedRequests()
        ended.note(one, request: request, at: 1_000)
        #expect(ended.isLateCopy(request, from: one, received: 999))
        #expect(!ended.isLateCopy(request, from: one, received: 1_000), "taken when it ended: asked again")
        #expect(!ended.isLateCopy(request, from: one, received: 2_000))
        #expect(!ended.isLateCopy(request + [0x78], from: one, received: 999), "another request")
        #expect(!ended.isLateCopy(request, from: other, received: 999), "another client")
    }

    @Test func aPeersLastTransferIsTheOneAskedAbout() {
        var ended = EndedRequests()
        ended.note(one, request: request, at: 1_000)
        ended.note(one, request: [0, 1, 0x67, 0], at: 2_000)
        #expect(!ended.isLateCopy(request, from: one, received: 1_500))
        #expect(ended.isLateCopy([0, 1, 0x67, 0], from: one, received: 1_500))
        // Forgetting the first note keeps the second.
        ended.forget(before: 1_500)
        #expect(ended.count == 1 && ended.isLateCopy([0, 1, 0x67, 0], from: one, received: 1_500))
    }

    /// Requests read 13 s after the kernel took them (a Glibc worker overrun by a rack): an ended
    /// transfer's request is kept twice that, so that its copies behind it in the queue are known;
    /// once requests are read at once again (two windows later), 10 s.
    @Test func whatIsKeptFollowsHowLateRequestsAreRead() {
        let second = nanosecondsPerSecond
        var ended = EndedRequests()
        #expect(ended.kept == EndedRequests.memory)
        ended.heard(received: 100 * second, now: 113 * second)
        #expect(ended.kept == 26 * second)
        ended.note(one, request: request, at: 114 * second)
        ended.note(other, request: request, at: 134 * second)
        #expect(ended.isLateCopy(request, from: one, received: 113 * second), "20 s after it ended, a copy 13 s in the queue")
        ended.note(other, request: request, at: 141 * second)
        #expect(!ended.isLateCopy(request, from: one, received: 113 * second), "past 26 s: forgotten")
        ended.heard(received: 124 * second, now: 124 * second)
        #expect(ended.kept == 26 * second, "the last window's wait still counts")
        ended.heard(received: 134 * second, now: 134 * second)
        #expect(ended.kept == EndedRequests.memory)
        ended.heard(received: 0, now: 1_000 * second)
        #expect(ended.kept == EndedRequests.longestMemory, "bounded")
    }

    @Test func whatEndedLongAgoIsForgottenAndTheTableIsBounded() {
        var ended = EndedRequests()
        ended.note(one, request: request, at: 1_000)
        ended.note(other, request: request, at: 1_000 + EndedRequests.memory + 1)
        #expect(ended.count == 1 && !ended.isLateCopy(request, from: one, received: 999))
        var many = EndedRequests()
        for n in 0..<(EndedRequests.capacity + 100) {
            let peer = SocketAddress(parsing: "10.1.\(n >> 8 & 0xff).\(n & 0xff):\(1024 + n >> 16)", defaultPort: 0)!
            many.note(peer, request: request, at: 5_000 + Nanoseconds(n))
        }
        #expect(many.count == EndedRequests.capacity)
    }
}
