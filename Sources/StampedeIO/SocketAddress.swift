import Glibc
import StampedeBase

/// An IPv4 or IPv6 address and port, held inline (no allocation) as a sockaddr_storage.
public struct SocketAddress: Equatable, Hashable, Sendable, CustomStringConvertible {
    public var storage = sockaddr_storage()

    public init() {}

    public init(storage: sockaddr_storage) { self.storage = storage }

    /// Parses "1.2.3.4", "::1", "[::1]:69", "1.2.3.4:69", ":69", "" (port defaults to `port`).
    public init?(parsing text: String, defaultPort: UInt16, defaultHost: String = "0.0.0.0") {
        guard let (host, portText) = Self.split(text) else { return nil }
        var port = defaultPort
        if let portText {
            guard let number = UInt16(portText) else { return nil }
            port = number
        }
        self.init(numericHost: host.isEmpty ? defaultHost : String(host), port: port)
    }

    /// "[HOST]:PORT", "HOST:PORT", "HOST", ":PORT" or a bare IPv6 address, into its host (empty:
    /// none given) and its port's text (nil: none given); nil when a "[" is not closed, or is
    /// followed by anything but ":PORT". The host may be a name; the port a service's name.
    public static func split(_ text: String) -> (host: Substring, port: Substring?)? {
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]") else { return nil }
            let host = text[text.index(after: text.startIndex)..<close]
            let rest = text[text.index(after: close)...]
            if rest.isEmpty { return (host, nil) }
            guard rest.hasPrefix(":"), rest.count > 1 else { return nil }
            return (host, rest.dropFirst())
        }
        guard text.filter({ $0 == ":" }).count == 1, let colon = text.firstIndex(of: ":") else { return (text[...], nil) }
        let port = text[text.index(after: colon)...]
        return (text[..<colon], port.isEmpty ? nil : port)
    }

    /// A numeric IPv4 or IPv6 address (without brackets) and `port`; nil for anything else.
    public init?(numericHost name: String, port: UInt16) {
        var v4 = in_addr()
        var v6 = in6_addr()
        if inet_pton(AF_INET, name, &v4) == 1 {
            self.init(ipv4: v4, port: port)
        } else if inet_pton(AF_INET6, name, &v6) == 1 {
            self.init(ipv6: v6, port: port)
        } else {
            return nil
        }
    }

    /// Every address `name` resolves to (getaddrinfo: /etc/hosts, DNS, as nsswitch.conf says),
    /// of `family` (AF_UNSPEC: both), in its order, each once, with `port`; or why not.
    public static func resolving(_ name: String, port: UInt16, family: Int32 = AF_UNSPEC) -> Result<[SocketAddress], ResolutionError> {
        var hints = addrinfo()
        hints.ai_family = family
        hints.ai_socktype = Int32(SOCK_DGRAM.rawValue)
        hints.ai_flags = AI_PASSIVE
        var list: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(name, nil, &hints, &list)
        guard status == 0 else { return .failure(ResolutionError(message: String(cString: gai_strerror(status)))) }
        defer { freeaddrinfo(list) }
        var found: [SocketAddress] = []
        var entry = list
        while let info = entry?.pointee {
            entry = info.ai_next
            guard let raw = info.ai_addr, [AF_INET, AF_INET6].contains(Int32(raw.pointee.sa_family)) else { continue }
            var storage = sockaddr_storage()
            withUnsafeMutableBytes(of: &storage) { $0.copyMemory(from: UnsafeRawBufferPointer(start: raw, count: Int(info.ai_addrlen))) }
            var address = SocketAddress(storage: storage)
            address.port = port
            if !found.contains(address) { found.append(address) }
        }
        return .success(found)
    }

    public struct ResolutionError: Error, CustomStringConvertible {
        public var message: String
        public var description: String { message }
    }

    public init(ipv4: in_addr, port: UInt16) {
        var sin = sockaddr_in()
        sin.sin_family = sa_family_t(AF_INET)
        sin.sin_port = port.bigEndian
        sin.sin_addr = ipv4
        withUnsafeMutableBytes(of: &storage) { $0.storeBytes(of: sin, as: sockaddr_in.self) }
    }

    public init(ipv6: in6_addr, port: UInt16, scope: UInt32 = 0) {
        var sin6 = sockaddr_in6()
        sin6.sin6_family = sa_family_t(AF_INET6)
        sin6.sin6_port = port.bigEndian
        sin6.sin6_addr = ipv6
        sin6.sin6_scope_id = scope
        withUnsafeMutableBytes(of: &storage) { $0.storeBytes(of: sin6, as: sockaddr_in6.self) }
    }

    public var family: Int32 { Int32(storage.ss_family) }
    public var isIPv6: Bool { family == AF_INET6 }

    /// An IPv6 address's 16 bytes; nil for IPv4.
    public var ipv6Bytes: [UInt8]? {
        guard isIPv6 else { return nil }
        return withUnsafeBytes(of: storage) { raw in withUnsafeBytes(of: raw.load(as: sockaddr_in6.self).sin6_addr) { Array($0) } }
    }

    /// A v4 client seen on a dual-stack IPv6 socket (::ffff:a.b.c.d).
    public var isIPv4Mapped: Bool {
        guard isIPv6 else { return false }
        return withUnsafeBytes(of: storage) { raw in
            let sin6 = raw.load(as: sockaddr_in6.self)
            return withUnsafeBytes(of: sin6.sin6_addr) { a in
                a[0..<10].allSatisfy { $0 == 0 } && a[10] == 0xFF && a[11] == 0xFF
            }
        }
    }

    /// An IPv4 client seen on a dual-stack socket as itself (::ffff:a.b.c.d → a.b.c.d); any other
    /// address as it is. What a client is called by (remap rules' `\i` and `\x`), never where a
    /// reply goes: a dual-stack socket sends to the mapped form.
    public var unmapped: SocketAddress {
        guard isIPv4Mapped else { return self }
        return withUnsafeBytes(of: storage) { raw in
            let sin6 = raw.load(as: sockaddr_in6.self)
            var v4 = in_addr()
            withUnsafeBytes(of: sin6.sin6_addr) { a in
                withUnsafeMutableBytes(of: &v4) { $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: a[12..<16])) }
            }
            return SocketAddress(ipv4: v4, port: UInt16(bigEndian: sin6.sin6_port))
        }
    }

    /// 127.0.0.0/8, ::1, or ::ffff:127.x.x.x: this machine itself.
    public var isLoopback: Bool {
        withUnsafeBytes(of: storage) { raw in
            if isIPv6 {
                let sin6 = raw.load(as: sockaddr_in6.self)
                return withUnsafeBytes(of: sin6.sin6_addr) { a in
                    (a[0..<15].allSatisfy { $0 == 0 } && a[15] == 1) || (isIPv4Mapped && a[12] == 127)
                }
            }
            return withUnsafeBytes(of: raw.load(as: sockaddr_in.self).sin_addr) { $0[0] == 127 }
        }
    }

    /// The host a client is, for counting its transfers: its address without the port (nor an
    /// IPv6 flow label), whatever port its firmware picks.
    public var clientHost: SocketAddress {
        var host = self
        host.port = 0
        if isIPv6 {
            withUnsafeMutableBytes(of: &host.storage) { raw in
                var sin6 = raw.load(as: sockaddr_in6.self)
                sin6.sin6_flowinfo = 0
                raw.storeBytes(of: sin6, as: sockaddr_in6.self)
            }
        }
        return host
    }

    /// The IPv6 /64 a client is in (a whole LAN: its hosts pick their own addresses in it, SLAAC
    /// privacy addresses change them); nil for an IPv4 client, mapped or not.
    public var clientPrefix: SocketAddress? {
        guard isIPv6 && !isIPv4Mapped else { return nil }
        var prefix = clientHost
        withUnsafeMutableBytes(of: &prefix.storage) { raw in
            var sin6 = raw.load(as: sockaddr_in6.self)
            withUnsafeMutableBytes(of: &sin6.sin6_addr) { a in
                for i in 8..<16 { a[i] = 0 }
            }
            raw.storeBytes(of: sin6, as: sockaddr_in6.self)
        }
        return prefix
    }

    /// An IPv6 address's scope (the interface a link-local or multicast address is on); 0 for IPv4.
    public var scope: UInt32 {
        get { isIPv6 ? withUnsafeBytes(of: storage) { $0.load(as: sockaddr_in6.self).sin6_scope_id } : 0 }
        set {
            guard isIPv6 else { return }
            withUnsafeMutableBytes(of: &storage) { raw in
                var sin6 = raw.load(as: sockaddr_in6.self)
                sin6.sin6_scope_id = newValue
                raw.storeBytes(of: sin6, as: sockaddr_in6.self)
            }
        }
    }

    public var port: UInt16 {
        get {
            withUnsafeBytes(of: storage) { raw in
                isIPv6 ? UInt16(bigEndian: raw.load(as: sockaddr_in6.self).sin6_port)
                    : UInt16(bigEndian: raw.load(as: sockaddr_in.self).sin_port)
            }
        }
        set {
            let v6 = isIPv6
            withUnsafeMutableBytes(of: &storage) { raw in
                if v6 {
                    var sin6 = raw.load(as: sockaddr_in6.self)
                    sin6.sin6_port = newValue.bigEndian
                    raw.storeBytes(of: sin6, as: sockaddr_in6.self)
                } else {
                    var sin = raw.load(as: sockaddr_in.self)
                    sin.sin_port = newValue.bigEndian
                    raw.storeBytes(of: sin, as: sockaddr_in.self)
                }
            }
        }
    }

    /// The address without its port (per-client accounting, logs).
    public var host: String {
        withText(port: false) { String(decoding: $0, as: UTF8.self) }
    }

    public var description: String {
        withText { String(decoding: $0, as: UTF8.self) }
    }

    /// The address as text, "1.2.3.4:69" or "[::1]:69" (with `port`), else "1.2.3.4" or "::1",
    /// written on the stack: a log line takes it with no String made (`LogLine.append(_:)`).
    public func withText<Result>(port withPort: Bool = true, _ body: (UnsafeBufferPointer<UInt8>) -> Result) -> Result {
        // "[" + the longest IPv6 text (with its NUL) + "]:" + 5 digits.
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: Int(INET6_ADDRSTRLEN) + 8) { out in
            let bracketed = withPort && isIPv6
            var at = 0
            if bracketed {
                out[0] = UInt8(ascii: "[")
                at = 1
            }
            withUnsafeBytes(of: storage) { raw in
                if isIPv6 {
                    let text = UnsafeMutableRawPointer(out.baseAddress! + at).assumingMemoryBound(to: CChar.self)
                    var a = raw.load(as: sockaddr_in6.self).sin6_addr
                    _ = inet_ntop(AF_INET6, &a, text, socklen_t(INET6_ADDRSTRLEN))
                    at += strlen(text)
                } else {
                    // Its four decimals written here: glibc's inet_ntop formats them with sprintf.
                    let octets = UInt32(bigEndian: raw.load(as: sockaddr_in.self).sin_addr.s_addr)
                    for shift in stride(from: 24, through: 0, by: -8) {
                        let octet = UInt64(truncatingIfNeeded: octets >> UInt32(shift) & 0xFF)
                        at += writeDigits(octet, minimumCount: 1, into: UnsafeMutableBufferPointer(rebasing: out[at...]))
                        if shift > 0 {
                            out[at] = UInt8(ascii: ".")
                            at += 1
                        }
                    }
                }
            }
            if withPort {
                if bracketed {
                    out[at] = UInt8(ascii: "]")
                    at += 1
                }
                out[at] = UInt8(ascii: ":")
                at += 1
                at += writeDigits(UInt64(port), minimumCount: 1, into: UnsafeMutableBufferPointer(rebasing: out[at...]))
            }
            return body(UnsafeBufferPointer(rebasing: out[..<at]))
        }
    }

    /// Only the bytes that matter for this family take part in equality and hashing.
    private var significantCount: Int { isIPv6 ? MemoryLayout<sockaddr_in6>.size : MemoryLayout<sockaddr_in>.size }

    public static func == (a: SocketAddress, b: SocketAddress) -> Bool {
        guard a.family == b.family else { return false }
        let n = a.significantCount
        return withUnsafeBytes(of: a.storage) { x in withUnsafeBytes(of: b.storage) { y in memcmp(x.baseAddress!, y.baseAddress!, n) == 0 } }
    }

    public func hash(into hasher: inout Hasher) {
        let n = significantCount
        withUnsafeBytes(of: storage) { hasher.combine(bytes: UnsafeRawBufferPointer(rebasing: $0[..<n])) }
    }
}

extension LogLine {
    /// The address and port as `description` writes them.
    public mutating func append(_ address: SocketAddress) {
        address.withText { append($0) }
    }
}
