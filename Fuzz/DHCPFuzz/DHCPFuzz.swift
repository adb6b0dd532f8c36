// libFuzzer target: whatever arrives at a proxyDHCP port (67, 4011), as a message and as the IP
// packet the packet socket hands over. Built by `make fuzz` with -sanitize=fuzzer,address over
// StampedeDHCP (no sockets).
//
// Beyond "does not crash", it checks properties: a message that parses re-encodes to one that
// parses the same; an answer is a reply to the same machine and transaction, never gives an
// address in an offer, and parses once encoded; a packet's payload lies within it, and an
// envelope written around it reads back the same.

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
