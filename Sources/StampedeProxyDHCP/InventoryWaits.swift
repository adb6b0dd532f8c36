import StampedeBase
import StampedeMachines

/// Requests whose machine the site's inventory is being asked about (`--machines-api`), by
/// machine: its last request of each, kept while its firmware waits for an answer (`patience`),
/// handed back when the inventory answered it (the answer is in memory then). The IPv4 proxy and
/// the DHCPv6 responder each keep theirs, told by a watch of their own.
struct InventoryWaits<Request> {
    /// How long a request waits: its firmware has asked again by then (EDK2 after 4 s, over
    /// DHCP and DHCPv6 alike).
    static var patience: Nanoseconds { 4 * nanosecondsPerSecond }
    private var waiting: [[UInt8]: (request: Request, since: Nanoseconds)] = [:]
    /// Told of each machine the inventory answered.
    let watch: InventoryWatch

    init(_ watch: InventoryWatch) { self.watch = watch }

    var count: Int { waiting.count }

    /// Keeps `request` as `mac`'s (in place of one it kept); false when `MachineInventory.waitingLimit`
    /// machines wait already.
    mutating func keep(_ request: Request, of mac: [UInt8], now: Nanoseconds) -> Bool {
        guard waiting.count < MachineInventory.waitingLimit || waiting[mac] != nil else { return false }
        waiting[mac] = (request, now)
        return true
    }

    /// The kept requests of the machines answered since the last time (the watch's), those that
    /// waited longer than `patience` left out.
    mutating func answered(now: Nanoseconds) -> [Request] {
        watch.take().compactMap { mac in
            guard let kept = waiting.removeValue(forKey: mac), now - kept.since <= Self.patience else { return nil }
            return kept.request
        }
    }

    /// Forgets the requests that waited longer than `patience` (a sweep, once a second).
    mutating func sweep(now: Nanoseconds) {
        if !waiting.isEmpty { waiting = waiting.filter { now - $0.value.since <= Self.patience } }
    }
}
