import StampedeIO
import StampedeProtocol

// What a TFTP client (`stampede get`/`put`, the storm's machines) needs of the I/O layer, which
// knows nothing of TFTP: its transfers are addressed by socket addresses, and its socket's
// receive queue holds the largest window it asks for.

extension SocketAddress: PeerAddress {}

extension SocketBuffers {
    /// The receive queue a client needs for `request`'s largest window.
    public static func receiving(_ request: Request) -> SocketBuffers {
        let window = request.largestWindow
        return SocketBuffers(receive: holding(window.datagrams, datagramsOf: window.size))
    }
}
