import CStampedeSys

/// What the server's connections may hold unsent in their sockets (TCP_NOTSENT_LOWAT), plain and
/// TLS alike: an equal share each of one budget for all (every loop's: `open` counts them).
extension HTTPLoop {
    /// What the connections together may hold queued and not yet sent, an equal share each. Left
    /// to autotuning, each send buffer grows to tcp_wmem's maximum (4 MiB): a sendfile's queued
    /// pages count against the host's TCP memory as TLS's ciphertext does. Thousands of firmware
    /// connections then hold gigabytes, the host enters TCP memory pressure, receive queues are
    /// pruned, retransmissions back off, and connections stall past a firmware's patience
    /// (bench-https's rack: 950 of 2,000 machines timed out; bench-machines' plain rack of 20,000:
    /// a few initrds in a run stopped a few KiB short, their send queues draining by 4 segments
    /// every 2 s, until the send timeout closed them). A fixed 128 KiB cap booted all of them but
    /// cost a hundred fast TLS connections a third more CPU per GB (a wakeup per 128 KiB); shared
    /// out, a hundred get megabytes each and two thousand 128 KiB.
    ///
    /// Its price is a wakeup per 64 KiB sent at 2,000 connections; a larger budget is not cheaper
    /// where it counts. Half the host's TCP pressure mark (768 MiB here), side by side with this
    /// one in bench-http's 2,000-machine rack (3 interleaved rounds): server CPU 31 s against 53,
    /// but boots p50 150 s against 112, the host's TCP memory peaking at 1.6-1.8 GB, past its
    /// 1.57 GB mark, against 1.0-1.1 GB.
    static let unsentBudget = 256 << 20

    /// A connection's cap when `open` connections share the budget: at least 128 KiB; nil (none:
    /// autotuning's own 4 MiB) when the share is 4 MiB or more.
    static func unsentLimit(open: Int) -> Int32? {
        let share = unsentBudget / max(1, open)
        return share >= 4 << 20 ? nil : Int32(max(128 << 10, share))
    }

    /// Gives a connection's socket the cap of now, if it changed by a quarter or more since it
    /// was set (at accept, then at the once-a-second sweep, as connections come and go).
    func capUnsent(_ connection: Connection) {
        let limit = Self.unsentLimit(open: open.load(ordering: .relaxed))
        let old = connection.unsentLimit.map(Int.init) ?? Int(Int32.max)
        let new = limit.map(Int.init) ?? Int(Int32.max)
        guard abs(new - old) * 4 >= old else { return }
        // Int32.max: no cap of our own (the kernel's default is "unlimited").
        _ = stampede_tcp_unsent_limit(connection.fd, limit ?? Int32.max)
        connection.unsentLimit = limit
    }
}
