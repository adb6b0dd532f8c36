import StampedeBase
import StampedeProtocol
import Testing
@testable import StampedeProxyDHCP

/// One answer per machine and kind of request in each half second: a flood costs one answer, a
/// firmware asking again after a lost answer is answered.
@Suite struct BootAnswerLimitSpec {
    /// `allow` mutates, which `#expect` cannot capture.
    func allowed(_ limit: inout BootAnswerLimit, _ key: BootAnswerLimit.Key, now: Nanoseconds) -> Bool {
        limit.allow(key, now: now)
    }

    let discover = BootAnswerLimit.Key(machine: [0x52, 0x54, 0, 1, 2, 3], request: 1, bootServerPort: false)

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
        other.machine[5] = 4
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
            let key = BootAnswerLimit.Key(machine: [UInt8(n >> 16 & 0xff), UInt8(n >> 8 & 0xff), UInt8(n & 0xff)],
                                          request: 1, bootServerPort: false)
            #expect(allowed(&limit, key, now: Int64(n)))
        }
        #expect(limit.remembered <= BootAnswerLimit.capacity)
    }
}

/// What the operator is told of a machine the proxy cannot answer: once a minute per machine and
/// reason, with the count of what went unsaid (one ARM64 machine's 2,000 DISCOVERs were 2,002
/// lines before).
@Suite struct MachineNoticesSpec {
    func told(_ notices: inout MachineNotices, _ machine: [UInt8], _ reason: String, now: Nanoseconds) -> Int? {
        notices.tell(machine, reason, now: now)
    }

    @Test func aMachineAskingAgainAndAgainIsSaidOnceAMinuteWithTheCountOfTheRest() {
        var notices = MachineNotices()
        let arm = [UInt8](arrayLiteral: 0x52, 0x54, 0, 0, 0, 11)
        #expect(told(&notices, arm, "architecture 11", now: 0) == 0)
        var said = 0
        for t in 1..<2000 where told(&notices, arm, "architecture 11", now: Nanoseconds(t) * 10_000_000) != nil { said += 1 }
        #expect(said == 0)
        #expect(told(&notices, arm, "architecture 11", now: MachineNotices.interval) == 1999)
        #expect(told(&notices, arm, "architecture 11", now: MachineNotices.interval + 1) == nil)
    }

    @Test func anotherMachineOrAnotherReasonIsSaidAtOnce() {
        var notices = MachineNotices()
        #expect(told(&notices, [1], "a", now: 0) == 0)
        #expect(told(&notices, [2], "a", now: 1) == 0)
        #expect(told(&notices, [1], "b", now: 2) == 0)
        #expect(told(&notices, [1], "a", now: 3) == nil)
    }

    @Test func itRemembersABoundedNumberOfMachines() {
        var notices = MachineNotices()
        for n in 0..<(MachineNotices.capacity * 2) {
            #expect(told(&notices, [UInt8(n >> 16 & 0xff), UInt8(n >> 8 & 0xff), UInt8(n & 0xff)], "r", now: Nanoseconds(n)) == 0)
        }
        #expect(notices.remembered <= MachineNotices.capacity)
    }
}
