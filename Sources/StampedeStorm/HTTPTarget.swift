import StampedeBase
import StampedeIO

/// Where an `http` stage's request goes, for one machine: the server, over TLS or not, the
/// request's path and Host, and the name its bytes are compared under (`--verify-root`): the path
/// without its leading `/`.
struct HTTPTarget: Equatable {
    var server: SocketAddress
    /// HTTPS: the server's certificate must name `server`'s address.
    var secure: Bool
    var authority: String
    var path: String
    var name: String

    /// `expanded` is the stage's name with the machine's identity filled in: a path beneath
    /// `server` (the storm's `--http`, or `--https` when `secureServer`), or a whole
    /// `http://ADDRESS[:PORT]/PATH` or `https://ADDRESS[:PORT]/PATH`. Nil when it is neither (a URL
    /// naming a host, a relative name without a server).
    init?(_ expanded: String, server: SocketAddress?, secureServer: Bool = false) {
        var name = Substring(expanded)
        let scheme = Self.scheme(of: expanded)
        if let scheme {
            secure = scheme == "https://"
            let rest = expanded.dropFirst(scheme.count)
            let authority = rest.prefix { $0 != "/" }
            guard !authority.isEmpty, let address = SocketAddress(parsing: String(authority), defaultPort: secure ? 443 : 80) else {
                return nil
            }
            self.server = address
            self.authority = String(authority)
            name = rest.dropFirst(authority.count)
        } else {
            guard let server else { return nil }
            self.server = server
            secure = secureServer
            authority = server.description
        }
        while name.hasPrefix("/") { name = name.dropFirst() }
        self.name = String(name)
        path = "/" + Self.percentEncoded(self.name)
    }

    /// `http://` or `https://` when `location` begins with it (either case).
    private static func scheme(of location: String) -> String? {
        location.hasPrefixIgnoringCase("http://") ? "http://" : location.hasPrefixIgnoringCase("https://") ? "https://" : nil
    }

    /// Whether `location` is an `http://` or `https://` URL (a followed script's file fetched over
    /// HTTP, whatever protocol the script came by).
    static func isURL(_ location: String) -> Bool { scheme(of: location) != nil }

    private static let hexDigits = Array("0123456789ABCDEF".utf8)

    /// A path's bytes as a request line carries them: what is not a URI path character is `%XX`.
    static func percentEncoded(_ path: String) -> String {
        var out = ""
        for byte in path.utf8 {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                out.unicodeScalars.append(Unicode.Scalar(byte))
            case _ where "-._~/!$&'()*+,;=:@".utf8.contains(byte):
                out.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                out += "%" + String(decoding: [hexDigits[Int(byte >> 4)], hexDigits[Int(byte & 15)]], as: UTF8.self)
            }
        }
        return out
    }

    /// The request iPXE sends for a file: a GET on a connection it keeps.
    var request: [UInt8] {
        Array("GET \(path) HTTP/1.1\r\nHost: \(authority)\r\nUser-Agent: stampede-storm\r\nConnection: keep-alive\r\n\r\n".utf8)
    }
}
