import Glibc
import Logging
import StampedeBase
import StampedeDHCP
import StampedeHTTPWire
import StampedeMachines
import Testing
@testable import StampedeProxyDHCP

/// A request waits for the site's inventory while its firmware would: handed back once when the
/// inventory answered its machine, not after its patience, one per machine, and bounded.
@Suite struct InventoryWaitsSpec {
    let second = nanosecondsPerSecond

    func inventory() -> MachineInventory {
        let inventory = MachineInventory(url: "http://192.0.2.9/api", lifetime: 60, fetch: { _, _, _ throws(HTTPClient.Failure) in
            HTTPClient.Answer(status: 404, body: [])
        })
        inventory.start(logger: Logger(label: "test"))
        return inventory
    }

    /// Asks the inventory about `mac` and waits until `waits`' watch says it answered.
    func answer(_ inventory: MachineInventory, _ mac: [UInt8], _ waits: InventoryWaits<String>) {
        #expect(inventory.said(of: MachineIdentity(hardwareAddress: mac), stage: .dhcp) == nil, "asked")
        var watched = pollfd(fd: waits.watch.wake, events: Int16(POLLIN), revents: 0)
        #expect(poll(&watched, 1, 5000) == 1, "answered")
    }

    @Test func aRequestIsHandedBackOnceWhenItsMachineIsAnswered() {
        let inventory = inventory()
        defer { inventory.stop() }
        var waits = InventoryWaits<String>(inventory.watch())
        let a: [UInt8] = [0x52, 0x54, 0, 0, 0, 1]
        let b: [UInt8] = [0x52, 0x54, 0, 0, 0, 2]
        let kept = [waits.keep("a's Solicit", of: a, now: 10 * second), waits.keep("a's second Solicit", of: a, now: 11 * second),
                    waits.keep("b's DISCOVER", of: b, now: 10 * second)]
        #expect(kept == [true, true, true] && waits.count == 2, "a machine's last request replaces the one before")
        answer(inventory, a, waits)
        let first = waits.answered(now: 12 * second)
        let again = waits.answered(now: 12 * second)
        #expect(first == ["a's second Solicit"])
        #expect(again.isEmpty && waits.count == 1, "once; b still waits")
        // b's answer comes after its firmware gave up on that request: not handed back.
        answer(inventory, b, waits)
        let late = waits.answered(now: 15 * second)
        #expect(late.isEmpty && waits.count == 0)
    }

    @Test func requestsPastTheirPatienceAreSweptAndTheWaitingAreBounded() {
        let inventory = inventory()
        defer { inventory.stop() }
        var waits = InventoryWaits<Int>(inventory.watch())
        var kept = 0
        for n in 0..<MachineInventory.waitingLimit
        where waits.keep(n, of: [UInt8(n >> 16), UInt8(truncatingIfNeeded: n >> 8), UInt8(truncatingIfNeeded: n)], now: 0) {
            kept += 1
        }
        #expect(kept == MachineInventory.waitingLimit)
        let overflow = waits.keep(-1, of: [0xff, 0xff, 0xff, 0xff], now: 0)
        let newer = waits.keep(7, of: [0, 0, 7], now: 3 * second)
        #expect(!overflow, "full")
        #expect(newer, "a waiting machine's newer request still replaces its last")
        waits.sweep(now: 4 * second)
        #expect(waits.count == MachineInventory.waitingLimit)
        waits.sweep(now: 4 * second + 1)
        #expect(waits.count == 1, "only the one kept at 3 s is within its patience")
        let room = waits.keep(-1, of: [0xff, 0xff, 0xff, 0xff], now: 5 * second)
        #expect(room)
    }
}
