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

/// A socket address as a table's key (`AddressKey`): the same key exactly when the same client,
/// whatever the bytes around it.
@Suite struct AddressKeys {
    func key(_ text: String) throws -> AddressKey { AddressKey(try #require(SocketAddress(parsing: text, defaultPort: 0))) }

    @Test func equalAddressesAreOneKeyAndEveryPartTellsTwoApart() throws {
        let texts = ["10.0.0.1:69", "10.0.0.1:70", "10.0.0.2:69", "0.0.0.0:0", "255.255.255.255:65535",
                     "[::ffff:10.0.0.1]:69", "[::1]:69", "[::1]:70", "[2001:db8::1]:69", "[2001:db8::1:0]:69",
                     "[fe80::1%1]:69", "[fe80::1%2]:69", "[fe80::1]:69", "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535"]
        var keys: [AddressKey] = []
        for text in texts {
            guard let address = SocketAddress(parsing: text, defaultPort: 0) else { continue }  // a scope this host has no interface for
            keys.append(AddressKey(address))
            #expect(AddressKey(address) == (try key(address.description)), "\(text)")
        }
        #expect(keys.count >= texts.count - 2)
        // The IPv4 address and the same mapped into IPv6 too: their families differ.
        #expect(Set(keys).count == keys.count, "\(keys)")
        #expect(Dictionary(keys.map { ($0, 1) }, uniquingKeysWith: +).count == keys.count)
    }

    @Test func anIPv6FlowLabelIsNotPartOfTheKey() throws {
        var address = try #require(SocketAddress(parsing: "[2001:db8::7]:4011", defaultPort: 0))
        let before = AddressKey(address)
        withUnsafeMutableBytes(of: &address.storage) { raw in
            var sin6 = raw.load(as: sockaddr_in6.self)
            sin6.sin6_flowinfo = 0x1234_5678
            raw.storeBytes(of: sin6, as: sockaddr_in6.self)
        }
        #expect(AddressKey(address) == before)
        address.port = 4012
        #expect(AddressKey(address) != before)
    }
}
