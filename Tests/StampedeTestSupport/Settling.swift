import StampedeBase
import StampedeIO
import StampedeProtocol
import StampedeTFTPServer

extension Worker {
    /// A turn, then as many as it takes for the requests that wait for their files to go on: the
    /// disk thread's reads are waited for between them, so that what a request gets (its first
    /// DATA, its OACK, its ERROR) comes within the call, as a test expects it.
    public func turnSettling(now: Nanoseconds, maxWait: Nanoseconds) {
        turn(now: now, maxWait: maxWait)
        while requestsWaitingForFiles > 0 {
            disk.drain()
            turn(now: now, maxWait: 0)
        }
    }
}
