import StampedeProtocol
import Testing
@testable import StampedeServer

/// One answer per machine and kind of request in each half second: a flood costs one answer, a
/// firmware asking again after a lost answer is answered.
@Suite struct BootAnswerLimitSpec {
    /// `allow` mutates, which `#expect` cannot capture.
    func allowed(_ limit: inout BootAnswerLimit, _ key: BootAnswerLimit.Key, now: Nanoseconds) -> Bool {
        limit.allow(key, now: now)
    }

    let discover = BootAnswerLimit.Key(hardwareAddress: [0x52, 0x54, 0, 1, 2, 3], request: 1, bootServerPort: false)

    @Test func aFloodFromOneMachineIsAnsweredOnceAnInterval() {
        var limit = BootAnswerLimit()
        #expect(allowed(&limit, discover, now: 0))
        for t in stride(from: Nanoseconds(1_000_000), to: 500_000_000, by: 1_000_000) { #expect(!allowed(&limit, discover, now: t)) }
        #expect(allowed(&limit, discover, now: 500_000_000))
    }

    @Test func anotherMachineOrAnotherKindOfRequestIsItsOwn() {
        var limit = BootAnswerLimit()
        #expect(allowed(&limit, discover, now: 0))
        var other = discover
        other.hardwareAddress[5] = 4
        #expect(allowed(&limit, other, now: 1))
        var bootServer = discover
        bootServer.request = 3
        bootServer.bootServerPort = true
        #expect(allowed(&limit, bootServer, now: 2))
    }

    /// A flood of distinct machines does not grow it past its capacity.
    @Test func itRemembersABoundedNumberOfMachines() {
        var limit = BootAnswerLimit()
        for n in 0..<(BootAnswerLimit.capacity + 10) {
            let key = BootAnswerLimit.Key(hardwareAddress: [UInt8(n >> 16 & 0xff), UInt8(n >> 8 & 0xff), UInt8(n & 0xff)],
                                          request: 1, bootServerPort: false)
            #expect(allowed(&limit, key, now: Int64(n)))
        }
        #expect(limit.remembered <= BootAnswerLimit.capacity)
    }
}
