/// A DHCPv6 message (RFC 8415 §8 and §9), read and written here and nowhere else: a client's or a
/// server's (a type, a 24-bit transaction ID, options) or a relay agent's (Relay-forward or
/// Relay-reply: a hop count, the link and peer addresses, options, the relayed message inside
/// option 9). Pure: bytes in, a message or the reason it is not one out; a message in, bytes out.
/// A relayed message is read from its option 9 when asked (`relayed`), one level at a time.
public struct DHCPv6Message: Equatable, Sendable {
    /// The message types this server reads or writes (RFC 8415 §7.3); other types are not read.
    public enum Kind: UInt8, Sendable {
        case solicit = 1, advertise = 2, request = 3, confirm = 4, renew = 5, rebind = 6, reply = 7, release = 8, decline = 9,
             reconfigure = 10, informationRequest = 11, relayForward = 12, relayReply = 13

        public var isRelay: Bool { self == .relayForward || self == .relayReply }
    }

    /// A relay agent's header (RFC 8415 §9): hop count, the address of the client's link (or
    /// unspecified), and the address of the client or relay it heard the message from.
    public struct Relay: Equatable, Sendable {
        public var hopCount: UInt8
        /// 16 bytes each.
        public var linkAddress: [UInt8]
        public var peerAddress: [UInt8]

        public init(hopCount: UInt8, linkAddress: [UInt8], peerAddress: [UInt8]) {
            self.hopCount = hopCount
            self.linkAddress = linkAddress
            self.peerAddress = peerAddress
        }
    }

    public var kind: Kind
    /// A client's or a server's message: the 24-bit transaction ID (0 in a relay's).
    public var transactionID: UInt32
    /// A relay's message: its header (nil in a client's or a server's).
    public var relay: Relay?
    public var options: DHCPv6Options

    public init(kind: Kind, transactionID: UInt32, options: DHCPv6Options = DHCPv6Options()) {
        self.kind = kind
        self.transactionID = transactionID & 0xFF_FFFF
        relay = nil
        self.options = options
    }

    public init(relay kind: Kind, _ relay: Relay, options: DHCPv6Options) {
        self.kind = kind
        transactionID = 0
        self.relay = relay
        self.options = options
    }

    /// Why bytes are not a message this server reads.
    public enum Malformed: Error, Equatable, Sendable {
        /// Shorter than its header (4 bytes; a relay's 34).
        case tooShort(Int)
        /// A type this server does not read (RFC 8415's leasequery, DHCPv4-over-v6, ...).
        case kind(UInt8)
        /// An option whose length runs past the end of the message.
        case truncatedOption(code: UInt16)
        /// A relay's message without option 9, the message it relays.
        case noRelayedMessage
    }

    /// The header before the options: a client's or a server's 4 bytes, a relay's 34.
    public static let headerLength = 4
    public static let relayHeaderLength = 34

    /// Reads one message (a relay's relayed message stays in its option 9: `relayed`).
    public static func parse(_ bytes: UnsafeRawBufferPointer) throws(Malformed) -> DHCPv6Message {
        guard bytes.count >= headerLength else { throw .tooShort(bytes.count) }
        guard let kind = Kind(rawValue: bytes[0]) else { throw .kind(bytes[0]) }
        if kind.isRelay {
            guard bytes.count >= relayHeaderLength else { throw .tooShort(bytes.count) }
            let relay = Relay(hopCount: bytes[1], linkAddress: Array(bytes[2..<18]), peerAddress: Array(bytes[18..<34]))
            return DHCPv6Message(relay: kind, relay, options: try DHCPv6Options.parse(bytes, from: relayHeaderLength))
        }
        let transactionID = UInt32(bytes[1]) << 16 | UInt32(bytes[2]) << 8 | UInt32(bytes[3])
        return DHCPv6Message(kind: kind, transactionID: transactionID, options: try DHCPv6Options.parse(bytes, from: headerLength))
    }

    public static func parse(_ bytes: [UInt8]) throws(Malformed) -> DHCPv6Message {
        try bytes.withUnsafeBytes { raw in Result { () throws(Malformed) in try parse(raw) } }.get()
    }

    /// A relay's relayed message (option 9), read.
    public func relayed() throws(Malformed) -> DHCPv6Message {
        guard kind.isRelay, let inner = options[.relayMessage] else { throw .noRelayedMessage }
        return try Self.parse(inner)
    }

    public func encoded() -> [UInt8] {
        var out: [UInt8] = [kind.rawValue]
        if let relay {
            out.append(relay.hopCount)
            out += Self.sixteen(relay.linkAddress)
            out += Self.sixteen(relay.peerAddress)
        } else {
            out += [UInt8(truncatingIfNeeded: transactionID >> 16), UInt8(truncatingIfNeeded: transactionID >> 8),
                    UInt8(truncatingIfNeeded: transactionID)]
        }
        options.write(into: &out)
        return out
    }

    /// An address field as 16 bytes, whatever it held.
    private static func sixteen(_ address: [UInt8]) -> [UInt8] {
        Array((address + [UInt8](repeating: 0, count: 16)).prefix(16))
    }
}
