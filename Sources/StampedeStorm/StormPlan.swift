import StampedeIO
import StampedeProtocol


/// What a storm plays: many TFTP clients reading one file from one server, as a rack of
/// machines booting at once does.
public struct StormPlan: Sendable {
    /// The server's request port.
    public var server: SocketAddress
    /// The file every client asks for.
    public var file: String
    /// Transfers running at once.
    public var clients = 100
    /// Transfers to run in all; nil: one per client, or as many as `duration` allows.
    public var total: Int?
    /// Keep starting transfers until this much time has passed (then let the running ones end).
    public var duration: Nanoseconds?
    /// Options asked for in each RRQ; nil leaves an option out.
    public var blockSize: Int?
    public var windowSize: Int?
    public var timeoutSeconds: Int?
    public var askSize = true
    /// Our retransmit interval when no `timeout` is negotiated, and how often we retry.
    public var retransmit: Nanoseconds = nanosecondsPerSecond
    public var retries = 5
    /// Each client waits this long before its first ACK: with a long enough hold every transfer
    /// is open at once (the `scale` scenario), as with a rack of slow firmware.
    public var hold: Nanoseconds = 0
    /// The bytes the file must have (`--verify`); every received byte is compared.
    public var expected: [UInt8]?

    public init(server: SocketAddress, file: String) {
        self.server = server
        self.file = file
    }

    /// The transfers this plan starts, or nil when only `duration` bounds it.
    public var plannedTotal: Int? {
        if let total { return total }
        return duration == nil ? clients : nil
    }

    /// The options in the order they are sent.
    public var requestOptions: [(name: String, value: String)] {
        TFTPOption.requestList(blockSize: blockSize, timeoutSeconds: timeoutSeconds, transferSize: askSize ? 0 : nil,
                               windowSize: windowSize)
    }

    /// The RRQ every client sends.
    public var request: Request {
        Request(isWrite: false, filename: Array(file.utf8), mode: "octet", options: requestOptions)
    }

    /// What each client's transfer is.
    public var clientPlan: ClientPlan {
        var plan = ClientPlan(request: request, retransmit: retransmit, retries: retries)
        plan.holdFirstAck = hold
        return plan
    }

    /// This plan for one of `parts` threads: clients and transfers shared out, the rest to the first.
    public func share(_ part: Int, of parts: Int) -> StormPlan {
        func portion(_ n: Int) -> Int { n / parts + (part < n % parts ? 1 : 0) }
        var plan = self
        plan.clients = portion(clients)
        plan.total = plannedTotal.map(portion)
        return plan
    }
}
