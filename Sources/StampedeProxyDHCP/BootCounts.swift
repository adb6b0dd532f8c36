import StampedeDHCP
import StampedeServing

/// What the proxyDHCP responder counts beside a loop's figures: its answers by selector (offers,
/// then ACKs; every `arch:N` selector together, as `arch`: the log names the code) and its
/// silences by reason, in the extra slots of its `WorkerMetrics`.
extension WorkerMetrics {
    /// The selectors answers are counted by: the named ones, then `arch` for every `arch:N`.
    public static let countedSelectors = BootSelector.named.map(\.name) + ["arch"]

    private static let bootSlots = countedSelectors.count * 2 + BootIgnored.allCases.count

    /// A responder's figures (the IPv4 proxy's, `.dhcp`, or the DHCPv6 one's, `.dhcp6`): a loop's,
    /// with a slot for each answer and silence.
    public static func dhcp(_ served: ServedProtocol = .dhcp) -> WorkerMetrics { WorkerMetrics(served, extraSlots: bootSlots) }

    private static func bootSlot(_ selector: BootSelector, offer: Bool) -> Int {
        bootSlot(counted: selector.isArchitectureCode ? BootSelector.named.count : BootSelector.named.firstIndex(of: selector)!, offer: offer)
    }

    private static func bootSlot(counted index: Int, offer: Bool) -> Int { index * 2 + (offer ? 0 : 1) }

    private static func bootSlot(_ ignored: BootIgnored) -> Int { countedSelectors.count * 2 + ignored.rawValue }

    /// A proxyDHCP answer: an OFFER (`offer`) or a boot server's ACK, for a machine of `selector`.
    public func countBoot(_ selector: BootSelector, offer: Bool) { addExtra(Self.bootSlot(selector, offer: offer)) }

    /// A DHCP request left unanswered, and why.
    public func countBoot(ignored: BootIgnored) { addExtra(Self.bootSlot(ignored)) }

    /// What the scrape reads: the answers published for `countedSelectors[index]`, 0 where none
    /// are counted.
    public func bootAnswers(counted index: Int, offer: Bool) -> Int {
        extraSlots == 0 ? 0 : extra(Self.bootSlot(counted: index, offer: offer))
    }

    /// The answers published for `selector` (`arch:N`: all of them).
    public func bootAnswers(_ selector: BootSelector, offer: Bool) -> Int {
        extraSlots == 0 ? 0 : extra(Self.bootSlot(selector, offer: offer))
    }

    public func bootIgnored(_ reason: BootIgnored) -> Int {
        extraSlots == 0 ? 0 : extra(Self.bootSlot(reason))
    }
}
