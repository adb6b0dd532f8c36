import Logging
import StampedeDHCP
import StampedeIO
import StampedeProtocol

/// The proxyDHCP side of a worker (`--proxy-dhcp`): a request on a boot network's port 67 or
/// 4011 is read (`DHCPMessage`), answered as `ProxyAnswer` says, and the answer sent from the
/// server's address on that network, broadcast out of its interface, to a relay, or back to the
/// boot server request's source. What is not answered is counted, and logged when an operator
/// can act on it.
extension Worker {
    func handleBootRequest(_ datagram: Datagram, listener index: Int, now: Nanoseconds) {
        guard datagram.error == nil, !datagram.truncated, case .proxyDHCP(let number, let port) = listeners[index].purpose,
              let source = datagram.peer.ipv4 else { return }
        let network = configuration.bootNetworks[number]
        let message: DHCPMessage
        do {
            message = try DHCPMessage.parse(datagram.bytes)
        } catch {
            metrics.countBoot(ignored: .malformed)
            logger.debug("\(datagram.peer): not a DHCP message this server reads (\(error)): ignored")
            return
        }
        let machine = message.hardwareAddress()
        let what = "DHCP \(message.type.map { "\($0)".uppercased() } ?? "message") \(machine) on \(network.interface.name)"
        switch ProxyAnswer.to(message, on: port, from: (source, datagram.peer.port), server: network.address, menu: network.menu) {
        case .failure(let silence):
            metrics.countBoot(ignored: BootIgnored(silence))
            switch silence {
            case .unknownArchitecture, .noBootFile:
                // The operator can fix this one: say it.
                logger.warning("\(what): not answered: \(silence)")
            default:
                logger.debug("\(what): not answered: \(silence)")
            }
        case .success(let answer):
            let key = BootAnswerLimit.Key(hardwareAddress: message.clientHardwareAddress, request: message.type?.rawValue ?? 0,
                                          bootServerPort: port == .bootServer)
            guard bootAnswers.allow(key, now: now) else {
                metrics.countBoot(ignored: .repeated)
                logger.debug("\(what): answered less than \(BootAnswerLimit.interval / 1_000_000) ms ago: not again")
                return
            }
            let destination: SocketAddress
            switch answer.destination {
            case .broadcast: destination = SocketAddress(ipv4: .broadcast, port: 68)
            case .relay(let relay): destination = SocketAddress(ipv4: relay, port: 67)
            case .unicast(let address, let port): destination = SocketAddress(ipv4: address, port: port)
            }
            let bytes = answer.reply.encoded()
            bytes.withUnsafeBytes { backend.send(listeners[index].socket, to: destination, from: network.socketAddress, packet: $0) }
            metrics.add(.bytesSent, bytes.count)
            let offer = answer.reply.type == .offer
            metrics.countBoot(answer.selector, offer: offer)
            log(answer, for: message, what, offer: offer, to: destination)
        }
    }

    private func log(_ answer: ProxyAnswer, for message: DHCPMessage, _ what: String, offer: Bool, to destination: SocketAddress) {
        let client = BootClient(message)
        if configuration.logFormat == .json {
            logger.info("boot", metadata: [
                "event": "boot", "protocol": "dhcp", "client": "\(message.hardwareAddress())",
                "request": "\(message.type.map { "\($0)" } ?? "unknown")", "architecture": .stringConvertible(client?.architecture ?? 0),
                "uuid": "\(client?.uuid ?? "")", "selector": "\(answer.selector.rawValue)", "boot_file": "\(sanitizedForLog(Array(answer.target.description.utf8)))",
                "outcome": "\(offer ? "offered" : "acknowledged")", "to": "\(destination)",
            ])
            return
        }
        logger.info("""
            \(what): \(answer.selector.rawValue) (arch \(client?.architecture ?? 0)\(client?.uuid.map { ", uuid \($0)" } ?? "")): \
            \(offer ? "offered" : "acknowledged") "\(sanitizedForLog(Array(answer.target.description.utf8)))" to \(destination)
            """)
    }
}
