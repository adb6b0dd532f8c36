import CStampedeSys

/// One server per address, as in.tftpd's plain bind gives: SO_REUSEPORT lets every process of a
/// user bind an address its listeners hold, and the kernel would split the clients between the
/// two servers (and their roots). Each address is first bound without it, and let go: a socket
/// of any process there fails the start with EADDRINUSE; then the caller's listeners share the
/// address among themselves. Two servers started at the same instant may both pass; one started
/// after this one is running may not.
///
/// Returns the addresses with the ports the kernel chose for port 0, for the listeners to bind.
public func claimExclusively(_ addresses: [SocketAddress], stream: Bool) throws(Errno) -> [SocketAddress] {
    var claimed: [SocketAddress] = []
    for address in addresses {
        var storage = address.storage
        var bound = SocketAddress()
        if let error = Errno(result: stampede_probe_exclusive(&storage, stream ? 1 : 0, &bound.storage)) {
            throw error
        }
        var chosen = address
        chosen.port = bound.port
        claimed.append(chosen)
    }
    return claimed
}
