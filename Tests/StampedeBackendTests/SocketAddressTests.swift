import Glibc
import StampedeBase
import StampedeIO
import StampedeProtocol
import Testing

/// An address's text, as every log line and the remap rules' `\i` say it: written on the stack,
/// the same for `description`, `host` and a log line.
@Suite struct SocketAddressText {
    @Test(arguments: [
        ("127.0.0.1:69", "127.0.0.1"), ("255.255.255.255:65535", "255.255.255.255"), ("0.0.0.0:0", "0.0.0.0"),
        ("[::1]:69", "::1"), ("[2001:db8::12:34]:40000", "2001:db8::12:34"),
        // The longest text inet_ntop writes, with the longest port.
        ("[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"),
        ("[::ffff:192.0.2.1]:68", "::ffff:192.0.2.1"),
    ])
    func isWhatItWasParsedFrom(text: String, host: String) throws {
        let address = try #require(SocketAddress(parsing: text, defaultPort: 0))
        #expect(address.description == text)
        #expect(address.host == host)
        var line = LogLine()
        line.append("client ")
        line.append(address)
        #expect(line.text == "client " + text)
    }

    /// An IPv4 address's text is written without inet_ntop: it must say what inet_ntop says, for
    /// octets of one, two and three digits and zeros in every place.
    @Test func anIPv4AddressReadsAsInetNtopWritesIt() throws {
        // Every octet at 0, 9, 10, 99, 100 and 255 in every place, then a walk through the 32 bits.
        let edges: [UInt32] = [0, 9, 10, 99, 100, 255]
        var addresses: [UInt32] = []
        for a in edges { for b in edges { for c in edges { for d in edges { addresses.append(a << 24 | b << 16 | c << 8 | d) } } } }
        var walk: UInt32 = 0x0102_0304
        for _ in 0..<18_704 {
            walk = walk &* 1_664_525 &+ 1_013_904_223
            addresses.append(walk)
        }
        var mismatches: [String] = []
        for address in addresses {
            var raw = in_addr(s_addr: address.bigEndian)
            var text = [CChar](repeating: 0, count: Int(INET_ADDRSTRLEN))
            _ = inet_ntop(AF_INET, &raw, &text, socklen_t(INET_ADDRSTRLEN))
            let expected = String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            let parsed = try #require(SocketAddress(parsing: "\(expected):4011", defaultPort: 0))
            if parsed.host != expected || parsed.description != "\(expected):4011" { mismatches.append(expected) }
        }
        #expect(mismatches.isEmpty, "\(mismatches.prefix(5))")
    }
}
