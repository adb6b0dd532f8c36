/// What a socket's datagrams are for. A worker opens every socket with a tag, the backend hands it
/// back with each datagram, and `Worker.route` decides by it where the datagram goes. This is the
/// one place the bits are laid out (as the C engine's `pack`/`unpack_*` in ring_private.h):
///
///     bits 63-62   the kind: 00 a transfer's own socket, 01 a shared transfer socket, 10 a listener
///     transfer     bits 61-32 the slot's generation (30 bits), bits 31-0 the slot
///     shared       bits 31-16 the pool (one per local address), bits 15-0 the socket in the pool
///     listener     bits 31-0 the listener
///
/// A generation is kept to 30 bits where it is made (`SessionTable`), so it never reaches the
/// kind's bits, however often a slot is reused.
struct Tag: Equatable, Hashable, Sendable {
    enum Kind: Equatable {
        case transfer(slot: Int, generation: UInt32)
        case shared(pool: Int, index: Int)
        case listener(Int)
    }

    static let generationBits = 30
    static let generationMask: UInt32 = (1 << UInt32(generationBits)) - 1
    static let poolLimit = 1 << 16
    static let sharedSocketLimit = 1 << 16

    let rawValue: UInt64

    init(rawValue: UInt64) { self.rawValue = rawValue }

    static func transfer(slot: Int, generation: UInt32) -> Tag {
        precondition(slot >= 0 && slot <= Int(UInt32.max))
        return Tag(rawValue: UInt64(generation & generationMask) << 32 | UInt64(slot))
    }

    static func shared(pool: Int, index: Int) -> Tag {
        precondition((0..<poolLimit).contains(pool) && (0..<sharedSocketLimit).contains(index))
        return Tag(rawValue: 1 << 62 | UInt64(pool) << 16 | UInt64(index))
    }

    static func listener(_ index: Int) -> Tag {
        precondition(index >= 0 && index <= Int(UInt32.max))
        return Tag(rawValue: 2 << 62 | UInt64(index))
    }

    /// Nil for a kind no worker makes (bits 63-62 both set).
    var kind: Kind? {
        switch rawValue >> 62 {
        case 0: .transfer(slot: Int(rawValue & 0xFFFF_FFFF), generation: UInt32(rawValue >> 32) & Self.generationMask)
        case 1: .shared(pool: Int(rawValue >> 16 & 0xFFFF), index: Int(rawValue & 0xFFFF))
        case 2: .listener(Int(rawValue & 0xFFFF_FFFF))
        default: nil
        }
    }
}
