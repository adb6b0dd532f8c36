// libFuzzer target: whatever arrives at a proxyDHCP port (67, 4011; over IPv6 547 and 4011), as
// a DHCP message, as the IP packet the packet socket hands over, and as a DHCPv6 message. Built
// by `make fuzz` with -sanitize=fuzzer,address over StampedeDHCP (no sockets).
//
// Beyond "does not crash", it checks properties: a message that parses re-encodes to one that
// parses the same; an answer is a reply to the same machine and transaction, never gives an
// address in an offer, and parses once encoded; a packet's payload lies within it, and an
// envelope written around it reads back the same. Over IPv6 the same: a message re-encodes to
// itself; an answer, unwrapped from as many Relay-replies as the message came through
// Relay-forwards, is an Advertise or a Reply with the message's transaction and client
// identifier, and no IA in it holds an address (with derived addresses: none outside the /64).

import FuzzCorpus
import Glibc
import StampedeDHCP

let menu = BootMenu.withDefaults([.efiArm64: .file("arm64/${mac:hexhyp}.efi")], httpBase: "http://10.0.0.1/")

func dhcpFuzz(_ bytes: UnsafeRawBufferPointer) {
    if let (envelope, payload) = try? UDPEnvelope.read(bytes) {
        precondition(payload.lowerBound >= 28 && payload.upperBound <= bytes.count, "a payload outside its packet")
        let again = envelope.packet(carrying: Array(bytes[payload]))
        guard let (read, range) = again.withUnsafeBytes({ try? UDPEnvelope.read($0) }) else {
            preconditionFailure("a written envelope does not read")
        }
        precondition(read == envelope && again[range].elementsEqual(bytes[payload]), "an envelope read back otherwise")
        message(UnsafeRawBufferPointer(rebasing: bytes[payload]))
    }
    message(bytes)
    message6(Array(bytes))
}

let serverID = DUID.linkLayer(ethernet: [2, 0, 0, 0, 0, 1])
let derived6 = DerivedAddresses(server: [0x20, 0x01, 0x0d, 0xb8] + [UInt8](repeating: 0, count: 11) + [1])
let menu6 = BootMenu.withDefaults([.efiX64: .file("x64/${mac:hexhyp}.efi")], httpBase: "http://[2001:db8::1]/")

func message6(_ bytes: [UInt8]) {
    guard let message = try? DHCPv6Message.parse(bytes) else { return }
    precondition(message.encoded() == bytes, "a DHCPv6 message re-encodes otherwise")
    var inner = message
    var relays = 0
    while inner.kind == .relayForward, let next = try? inner.relayed() {
        inner = next
        relays += 1
    }
    for (port, derived) in [(ProxyAnswer6.Port.dhcp, nil), (.bootServer, nil), (.dhcp, derived6)] {
        guard case .success(let answer) = ProxyAnswer6.to(bytes, on: port, serverID: serverID, server: "2001:db8::1", derived: derived,
                                                          menu: menu6) else { continue }
        precondition(answer.relayed == (relays > 0))
        guard var reply = try? DHCPv6Message.parse(answer.reply) else { preconditionFailure("a DHCPv6 answer does not parse") }
        for _ in 0..<relays {
            precondition(reply.kind == .relayReply)
            guard let next = try? reply.relayed() else { preconditionFailure("a Relay-reply without its reply") }
            reply = next
        }
        precondition(reply.kind == .advertise || reply.kind == .reply)
        precondition(reply.transactionID == inner.transactionID && reply.options[.clientID] == inner.options[.clientID])
        for ia in reply.options.values(.iaNA) {
            guard let inside = try? DHCPv6Options.parse(Array(ia.dropFirst(12))) else { preconditionFailure("an IA that does not parse") }
            let given = inside.all.filter { $0.code == 5 }
            if let derived {
                precondition(given.allSatisfy { derived.contains(Array($0.value.prefix(16))) && $0.value.count == 24 }, "an address outside the /64")
            } else {
                precondition(given.isEmpty, "a proxy gave an address")
            }
        }
    }
}

func message(_ bytes: UnsafeRawBufferPointer) {
    guard let message = try? DHCPMessage.parse(bytes) else { return }
    let again = message.encoded()
    guard let reparsed = again.withUnsafeBytes({ try? DHCPMessage.parse($0) }) else {
        preconditionFailure("a parsed message does not parse once encoded again")
    }
    precondition(reparsed.options == message.options && reparsed.transactionID == message.transactionID,
                 "re-encoding changed the message")
    for port in [ProxyAnswer.Port.dhcp, .bootServer] {
        guard case .success(let answer) = ProxyAnswer.to(message, on: port, from: (IPv4(10, 0, 0, 9), 68),
                                                         server: IPv4(10, 0, 0, 1), menu: menu) else { continue }
        let reply = answer.reply
        precondition(reply.operation == .reply && reply.transactionID == message.transactionID)
        precondition(reply.clientHardwareAddress == message.clientHardwareAddress)
        if reply.type == .offer { precondition(reply.yourAddress.isAny, "a proxy offered an address") }
        guard let parsed = reply.encoded().withUnsafeBytes({ try? DHCPMessage.parse($0) }) else {
            preconditionFailure("an answer does not parse")
        }
        precondition(parsed.options == reply.options)
    }
}

@main enum Harness {
    static func main() { exit(runHarness(dhcpFuzz)) }
}
