import ArgumentParser
import Glibc
import StampedeIO

/// The addresses `-a` names. No address, or IPv6's wildcard `[::]`, is every address of both
/// families (unless -4 or -6), as in.tftpd serves IPv4 clients on `[::]`: its listeners are
/// 0.0.0.0 and [::] (IPv6 only), so that an IPv4 client is seen as one. A host name is every
/// address it resolves to (of the family -4 or -6 leaves), a port may be a services(5) name,
/// as in in.tftpd 7.3; a name that resolves to nothing stops the server (exit 65, as 7.3).
func listenAddresses(_ options: ServeOptions) throws -> [SocketAddress] {
    let (ipv4, ipv6) = (options.ipv4, options.ipv6)
    let specs = options.address.isEmpty ? [""] : options.address
    let defaultPort = options.service?.port ?? 69
    let family = ipv4 ? AF_INET : ipv6 ? AF_INET6 : AF_UNSPEC
    var result: [SocketAddress] = []
    for spec in specs {
        guard let (host, portText) = SocketAddress.split(spec) else { throw ValidationError("-a \(spec): not an address[:port].") }
        let port: UInt16
        if let portText {
            // 0 takes a free port, said at start.
            guard let number = UInt16(portText) ?? ServicePort.port(of: String(portText)) else {
                throw ValidationError("-a \(spec): \(portText) is neither a port within 1...65535 nor a UDP service in /etc/services.")
            }
            port = number
        } else {
            port = defaultPort
        }
        var found: [SocketAddress]
        if host.isEmpty {
            found = [SocketAddress(parsing: ipv6 ? "::" : "0.0.0.0", defaultPort: port)!]
            if family == AF_UNSPEC { found.append(SocketAddress(parsing: "::", defaultPort: port)!) }
        } else if let numeric = SocketAddress(numericHost: String(host), port: port) {
            found = [numeric]
        } else {
            switch SocketAddress.resolving(String(host), port: port, family: family) {
            case .success(let addresses) where !addresses.isEmpty: found = addresses
            case .success: throw serveFailure("-a \(spec): \(host) has no address\(ipv4 ? " for IPv4" : ipv6 ? " for IPv6" : "")", status: 65)
            case .failure(let error): throw serveFailure("-a \(spec): cannot resolve \(host): \(error)", status: 65)
            }
        }
        for parsed in found {
            var family = [parsed]
            if parsed.isIPv6 && parsed.host == "::" && !ipv6 {
                family.insert(SocketAddress(parsing: "0.0.0.0", defaultPort: parsed.port)!, at: 0)
            }
            for address in family where !((ipv4 && address.isIPv6) || (ipv6 && !address.isIPv6)) && !result.contains(address) {
                result.append(address)
            }
        }
    }
    return result
}
