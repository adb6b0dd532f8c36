import Testing
@testable import StampedeDHCP

/// The IPv4 and UDP headers the proxy reads from its packet socket and writes to its raw one.
@Suite struct UDPEnvelopeSpec {
    let envelope = UDPEnvelope(source: IPv4(10, 78, 0, 1), sourcePort: 67, destination: .broadcast, destinationPort: 68)

    func read(_ bytes: [UInt8]) -> Result<UDPEnvelope, UDPEnvelope.Malformed> {
        bytes.withUnsafeBytes { raw in Result { () throws(UDPEnvelope.Malformed) in try UDPEnvelope.read(raw).0 } }
    }

    /// The checksums as an independent implementation (Python's struct, RFC 1071) computes them
    /// for the same packet: IP 0x707e, UDP 0xb12c.
    @Test func aPacketIsWrittenWithBothChecksums() {
        let packet = envelope.packet(carrying: Array("hello".utf8))
        #expect(packet.count == 33)
        #expect(Array(packet[0..<12]) == [0x45, 0, 0, 33, 0, 0, 0, 0, 64, 17, 0x70, 0x7e])
        #expect(Array(packet[12..<20]) == [10, 78, 0, 1, 255, 255, 255, 255])
        #expect(Array(packet[20..<28]) == [0, 67, 0, 68, 0, 13, 0xb1, 0x2c])
        #expect(Array(packet[28...]) == Array("hello".utf8))
        // Don't fragment is clear: a ROM that mishandles it still gets the answer (dnsmasq's reason).
        #expect(packet[6] & 0x40 == 0)
    }

    @Test func whatIsWrittenReadsBack() throws {
        for size in [0, 1, 300, 1472] {
            let payload = (0..<size).map { UInt8(truncatingIfNeeded: $0) }
            var packet = envelope.packet(carrying: payload)
            packet += [0, 0, 0, 0]  // a link's padding after the total length
            let (read, range) = try packet.withUnsafeBytes { raw throws(UDPEnvelope.Malformed) in try UDPEnvelope.read(raw) }
            #expect(read == envelope)
            #expect(Array(packet[range]) == payload)
            // The sums over each header, their checksum included, come to all ones.
            #expect(UDPEnvelope.onesComplementSum(packet[0..<20]) == 0xFFFF)
            let udpLength = 8 + size
            let pseudo = [10, 78, 0, 1, 255, 255, 255, 255, 0, 17, UInt8(udpLength >> 8), UInt8(udpLength & 0xff)]
            #expect(UDPEnvelope.onesComplementSum(pseudo[...], packet[20..<(28 + size)]) == 0xFFFF, "size \(size)")
        }
    }

    /// IP options (a header of 24 bytes) move the UDP header, as the relay's packets may have them.
    @Test func ipOptionsAreStepedOver() throws {
        var packet = envelope.packet(carrying: [1, 2, 3])
        packet[0] = 0x46
        packet.insert(contentsOf: [1, 1, 1, 0], at: 20)
        packet[3] += 4
        let (read, range) = try packet.withUnsafeBytes { raw throws(UDPEnvelope.Malformed) in try UDPEnvelope.read(raw) }
        #expect(read == envelope)
        #expect(Array(packet[range]) == [1, 2, 3])
    }

    @Test func whatIsNotOneWholeUDPDatagramIsRefused() {
        let good = envelope.packet(carrying: [1, 2, 3, 4])
        func with(_ change: (inout [UInt8]) -> Void) -> [UInt8] {
            var bytes = good
            change(&bytes)
            return bytes
        }
        #expect(read(Array(good[..<19])) == .failure(.tooShort(19)))
        #expect(read(with { $0[0] = 0x65 }) == .failure(.version(6)))
        #expect(read(with { $0[0] = 0x44 }) == .failure(.headerLength(16)))
        #expect(read(with { $0[0] = 0x4F }) == .failure(.tooShort(32)))
        #expect(read(with { $0[3] = 40 }) == .failure(.totalLength(40)))
        #expect(read(with { $0[3] = 27 }) == .failure(.totalLength(27)))
        #expect(read(with { $0[9] = 6 }) == .failure(.notUDP(6)))
        #expect(read(with { $0[6] = 0x20 }) == .failure(.fragment))
        #expect(read(with { $0[7] = 1 }) == .failure(.fragment))
        #expect(read(with { $0[6] = 0x40 }).map { _ in true } == .success(true))  // DF alone is whole
        #expect(read(with { $0[25] = 7 }) == .failure(.udpLength(7)))
        #expect(read(with { $0[25] = 13 }) == .failure(.udpLength(13)))
        // Every cut of a good packet is refused, never read past its end.
        for cut in 0..<good.count { #expect(throws: UDPEnvelope.Malformed.self) { try good[..<cut].withUnsafeBytes { try UDPEnvelope.read($0) } } }
    }
}
