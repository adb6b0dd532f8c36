/// The order in which the storm's next turn reads the HTTP connections this turn left with bytes
/// to read: first those the turn did not reach (its share was spent before them), then those that
/// read their share and have more. So every connection with bytes waiting is read within a few
/// turns, however many there are. Kept in one list in the order they were put off, the 32
/// connections at its head took every turn's share as long as their files lasted, and the rest
/// waited unread for half a minute and more (bench-dhcp's rack of 2,000: hundreds of fetches
/// failed on the storm's side, "storm behind").
struct HTTPTurnOrder {
    private var unreached: [Int] = []
    private var served: [Int] = []

    var isEmpty: Bool { unreached.isEmpty && served.isEmpty }

    /// Leaves `slot` for the next turn: at its end when it read its share this turn, else at its
    /// start. (A slot is put off once a turn: its connection says whether it is.)
    mutating func putOff(_ slot: Int, readItsShare: Bool) {
        if readItsShare { served.append(slot) } else { unreached.append(slot) }
    }

    /// The next turn's order, the lists emptied for the turn to fill again.
    mutating func next() -> [Int] {
        defer {
            unreached.removeAll(keepingCapacity: true)
            served.removeAll(keepingCapacity: true)
        }
        return unreached + served
    }
}
