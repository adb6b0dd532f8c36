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
}
