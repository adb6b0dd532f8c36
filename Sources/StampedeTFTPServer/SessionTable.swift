import StampedeIO

/// A worker's transfers, as state alone (no socket, no clock): the slots, each reused under a new
/// generation so that a slot's late datagrams never reach its next transfer; the free list; and
/// the index of transfers by client address and port, which routes the datagrams of shared
/// sockets and tells a repeated request from a new one (docs/ARCHITECTURE.md, "Routing").
///
/// The slots are memory of the table's own, reached through addressors: the hot path changes a
/// transfer's state in place, with no copy and no coroutine frame (a `_modify` accessor of a
/// debug build allocates one per access). One worker's thread uses it.
final class SessionTable {
    private var slots: UnsafeMutablePointer<Transfer>
    private(set) var capacity = 0
    private var generations: [UInt32] = []
    private var free: [Int32] = []
    /// The latest transfer from each client address and port (three words a key: looked up for
    /// every datagram a shared socket reads and every request).
    private var byPeer: [AddressKey: Int32] = [:]
    /// Transfers running.
    private(set) var count = 0
    /// Transfers running on a shared socket (a shared transfer socket, or the listener).
    private(set) var sharedCount = 0

    init(capacity: Int) {
        slots = .allocate(capacity: 0)
        grow(to: max(1, capacity))
    }

    deinit {
        slots.deinitialize(count: capacity)
        slots.deallocate()
    }

    /// Transfers with a socket of their own.
    var ownCount: Int { count - sharedCount }

    subscript(slot: Int) -> Transfer {
        unsafeAddress {
            precondition(slot >= 0 && slot < capacity)
            return UnsafePointer(slots + slot)
        }
        unsafeMutableAddress {
            precondition(slot >= 0 && slot < capacity)
            return slots + slot
        }
    }

    /// The slots of running transfers.
    var running: [Int] { (0..<capacity).filter { (slots + $0).pointee.phase != .free } }

    /// A free slot for a transfer about to start (the table grows when none is left); `start`
    /// fills it, `abandon` gives it back.
    func reserve() -> Int {
        if free.isEmpty { grow(to: 2 * capacity) }
        return Int(free.removeLast())
    }

    /// The tag of `slot`'s own socket, for this generation of the slot.
    func tag(of slot: Int) -> Tag { .transfer(slot: slot, generation: generations[slot]) }

    func abandon(_ slot: Int) {
        precondition((slots + slot).pointee.phase == .free)
        free.append(Int32(slot))
    }

    /// Puts a starting transfer in its reserved slot and indexes it under its client's address
    /// and port: a later transfer from the same port takes the index over.
    func start(_ transfer: consuming Transfer, in slot: Int) {
        precondition((slots + slot).pointee.phase == .free && transfer.phase != .free && transfer.socket != nil)
        byPeer[AddressKey(transfer.peer)] = Int32(slot)
        count += 1
        if transfer.socket!.isShared { sharedCount += 1 }
        (slots + slot).pointee = transfer
    }

    /// Takes the transfer out of `slot`, frees the slot under a new generation and returns what
    /// the transfer held, for its owner to let go of.
    func end(_ slot: Int) -> Transfer {
        let transfer = (slots + slot).move()
        (slots + slot).initialize(to: Transfer())
        precondition(transfer.phase != .free)
        let peer = AddressKey(transfer.peer)
        if byPeer[peer] == Int32(slot) { byPeer[peer] = nil }
        count -= 1
        if transfer.socket!.isShared { sharedCount -= 1 }
        generations[slot] = (generations[slot] &+ 1) & Tag.generationMask
        free.append(Int32(slot))
        return transfer
    }

    /// The running transfer a transfer tag names, or nil for an ended one's late datagrams.
    func slot(for tag: Tag) -> Int? {
        guard case .transfer(let slot, let generation)? = tag.kind, slot < capacity, (slots + slot).pointee.phase != .free,
              generations[slot] == generation else { return nil }
        return slot
    }

    /// The latest running transfer from this client address and port.
    func slot(of peer: SocketAddress) -> Int? {
        guard let slot = byPeer[AddressKey(peer)] else { return nil }
        return Int(slot)
    }

    private func grow(to newCapacity: Int) {
        let old = capacity
        guard newCapacity > old else { return }
        let larger = UnsafeMutablePointer<Transfer>.allocate(capacity: newCapacity)
        larger.moveInitialize(from: slots, count: old)
        for slot in old..<newCapacity { (larger + slot).initialize(to: Transfer()) }
        slots.deallocate()
        slots = larger
        capacity = newCapacity
        generations += repeatElement(0, count: newCapacity - old)
        free.reserveCapacity(newCapacity)
        // Handed out lowest first.
        for slot in (old..<newCapacity).reversed() { free.append(Int32(slot)) }
    }

    #if DEBUG
    /// Tests: as if the slot had been reused this many times.
    func setGeneration(_ generation: UInt32, of slot: Int) {
        generations[slot] = generation & Tag.generationMask
    }
    #endif
}
