import Glibc
import StampedeBase
import StampedeIO
import StampedeProtocol
import StampedeTFTPServer

extension Worker {
    /// A turn, then as many as it takes for the requests that wait for their files (and the
    /// streamed transfers for their read-aheads) to go on: the disk thread's reads are waited for
    /// between them, so that what a request gets (its first DATA, its OACK, its ERROR) comes
    /// within the call, as a test expects it.
    public func turnSettling(now: Nanoseconds, maxWait: Nanoseconds) {
        turn(now: now, maxWait: maxWait)
        while waitingForTheDisk > 0 {
            disk.drain()
            turn(now: now, maxWait: 0)
        }
    }
}

/// Keeps the calling thread (a disk thread, in a test) for `microseconds`, however many signals
/// come meanwhile (a usleep ends early at one, and the suite's other tests send some).
public func hold(microseconds: UInt32) {
    func now() -> Int64 {
        var clock = timespec()
        clock_gettime(CLOCK_MONOTONIC, &clock)
        return Int64(clock.tv_sec) * 1_000_000_000 + Int64(clock.tv_nsec)
    }
    let until = now() + Int64(microseconds) * 1000
    while case let left = until - now(), left > 0 { usleep(UInt32(left / 1000) + 1) }
}
