import StampedeDHCP

/// What a worker's listener is for, which routes what arrives on it (`Worker.route`): TFTP
/// requests, or a proxyDHCP port of one of the server's boot networks.
enum ListenerPurpose: Equatable {
    case tftp
    /// `network`: the index in `ServerConfiguration.bootNetworks`.
    case proxyDHCP(network: Int, port: ProxyAnswer.Port)
}
