/// What an HTTP loop's epoll hands back with an event: a listener, or a connection under the
/// generation its slot had when it was accepted (a slot's late events never reach the connection
/// accepted into it next). The one place the bits are laid out, as `Tag` is the TFTP side's:
///
///     bits 63-62   the kind: 01 a listener, 10 a connection, 11 the loop's mailbox
///     listener     bits 31-0 the listener's index
///     connection   bits 61-32 the slot's generation (30 bits), bits 31-0 the slot
///     mailbox      nothing else (the disk thread's word that a file is read: `LoadMailbox`)
///
/// A generation is kept to 30 bits where it is made (`HTTPLoop.accept`), so however many
/// connections a slot has held, it never reaches the kind's bits.
struct HTTPTag: Equatable, Sendable {
    enum Kind: Equatable {
        case listener(Int)
        case connection(slot: Int, generation: UInt32)
        case mailbox
    }

    static let generationBits = 30
    static let generationMask: UInt32 = (1 << UInt32(generationBits)) - 1

    let rawValue: UInt64

    init(rawValue: UInt64) { self.rawValue = rawValue }

    static func listener(_ index: Int) -> HTTPTag {
        precondition(index >= 0 && index <= Int(UInt32.max))
        return HTTPTag(rawValue: 1 << 62 | UInt64(index))
    }

    static func connection(slot: Int, generation: UInt32) -> HTTPTag {
        precondition(slot >= 0 && slot <= Int(UInt32.max))
        return HTTPTag(rawValue: 2 << 62 | UInt64(generation & generationMask) << 32 | UInt64(slot))
    }

    static let mailbox = HTTPTag(rawValue: 3 << 62)

    /// The generation after `generation`, within its bits.
    static func next(after generation: UInt32) -> UInt32 { (generation &+ 1) & generationMask }

    /// Nil for a kind no loop makes.
    var kind: Kind? {
        switch rawValue >> 62 {
        case 1: .listener(Int(rawValue & 0xFFFF_FFFF))
        case 2: .connection(slot: Int(rawValue & 0xFFFF_FFFF), generation: UInt32(rawValue >> 32) & Self.generationMask)
        case 3: rawValue == Self.mailbox.rawValue ? .mailbox : nil
        default: nil
        }
    }
}
