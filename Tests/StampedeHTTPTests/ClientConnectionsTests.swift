import StampedeIO
import Testing
@testable import StampedeHTTP

/// One client's share of the connections (`--http-max-per-client`): what one host holds, what a
/// quarter of it in handshakes leaves to others, an IPv6 /64's hosts each a client under the /64's
/// cap, loopback uncounted.
@Suite struct ClientConnectionsSpec {
    func address(_ text: String, port: UInt16 = 40000) -> SocketAddress { SocketAddress(parsing: text, defaultPort: port)! }

    @Test func aClientHoldsItsShareAndNoMore() {
        let clients = ClientConnections(maxConnections: 8, loopbackUncounted: true)
        for port in UInt16(1)...8 { #expect(clients.open(address("10.0.0.5", port: port), handshake: false) == nil) }
        #expect(clients.open(address("10.0.0.5", port: 9), handshake: false) == .connections)
        // Another client is not held back.
        #expect(clients.open(address("10.0.0.6"), handshake: false) == nil)
        // One closes: one more may come.
        clients.closed(address("10.0.0.5", port: 1), inHandshake: false)
        #expect(clients.open(address("10.0.0.5", port: 10), handshake: false) == nil)
    }

    @Test func aQuarterOfItsShareMayBeInHandshakes() {
        let clients = ClientConnections(maxConnections: 8, loopbackUncounted: true)
        #expect(clients.maxHandshakes == 2)
        #expect(clients.open(address("10.0.0.5", port: 1), handshake: true) == nil)
        #expect(clients.open(address("10.0.0.5", port: 2), handshake: true) == nil)
        #expect(clients.open(address("10.0.0.5", port: 3), handshake: true) == .handshakes)
        // A handshake done frees its place among the handshakes, not among the connections.
        clients.handshakeEnded(address("10.0.0.5", port: 1))
        #expect(clients.open(address("10.0.0.5", port: 4), handshake: true) == nil)
        // A connection closed mid-handshake frees both.
        clients.closed(address("10.0.0.5", port: 2), inHandshake: true)
        #expect(clients.open(address("10.0.0.5", port: 5), handshake: true) == nil)
        #expect(ClientConnections(maxConnections: 1, loopbackUncounted: true).maxHandshakes == 1)
    }

    @Test func anIPv6RacksMachinesShareTheirPrefixsCapNotOneHostsShare() {
        // 2,000 machines of an IPv6-only rack in one /64, each with a connection: every one is let
        // in (a /64 counted as one client let 64 of them fetch at once).
        let clients = ClientConnections(maxConnections: 2, maxPerPrefix: 2001, loopbackUncounted: true)
        for n in 1...2000 { #expect(clients.open(address("[2001:db8:1:2::\(String(n, radix: 16))]"), handshake: false) == nil) }
        #expect(clients.clients == 2000 && clients.prefixes == 1)
        // Each host still holds its own share and no more.
        #expect(clients.open(address("[2001:db8:1:2::1]", port: 2), handshake: false) == nil)
        #expect(clients.open(address("[2001:db8:1:2::1]", port: 3), handshake: false) == .connections)
        // One host rotating its address through the /64 meets the /64's cap.
        #expect(clients.open(address("[2001:db8:1:2:ffff::1]"), handshake: false) == .network)
        #expect(clients.open(address("[2001:db8:1:3::10]"), handshake: false) == nil)
        clients.closed(address("[2001:db8:1:2::2]"), inHandshake: false)
        #expect(clients.open(address("[2001:db8:1:2:ffff::1]"), handshake: false) == nil)
        for n in 1...2000 { clients.closed(address("[2001:db8:1:2::\(String(n, radix: 16))]"), inHandshake: false) }
        clients.closed(address("[2001:db8:1:2::1]", port: 2), inHandshake: false)
        clients.closed(address("[2001:db8:1:2:ffff::1]"), inHandshake: false)
        clients.closed(address("[2001:db8:1:3::10]"), inHandshake: false)
        #expect(clients.clients == 0 && clients.prefixes == 0)
    }

    @Test func loopbackIsNotCountedByDefault() {
        let clients = ClientConnections(maxConnections: 2, loopbackUncounted: true)
        for port in UInt16(1)...10 { #expect(clients.open(address("127.0.0.1", port: port), handshake: true) == nil) }
        let counted = ClientConnections(maxConnections: 2, loopbackUncounted: false)
        #expect(counted.open(address("127.0.0.1", port: 1), handshake: false) == nil)
        #expect(counted.open(address("127.0.0.1", port: 2), handshake: false) == nil)
        #expect(counted.open(address("127.0.0.1", port: 3), handshake: false) == .connections)
    }

    @Test func aClientWithNoConnectionIsForgotten() {
        let clients = ClientConnections(maxConnections: 4, loopbackUncounted: true)
        for n in 1...100 { #expect(clients.open(address("10.0.1.\(n)"), handshake: true) == nil) }
        #expect(clients.clients == 100)
        for n in 1...100 { clients.closed(address("10.0.1.\(n)"), inHandshake: true) }
        #expect(clients.clients == 0)
    }
}
