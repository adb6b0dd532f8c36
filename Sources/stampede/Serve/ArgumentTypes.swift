import ArgumentParser
import Glibc
import StampedeDHCP
import StampedeFiles
import StampedeIO
import StampedeMachines
import StampedeServing
import StampedeTFTPServer
import StampedeTLS

// The types `serve`'s flags are parsed into, once, at the command line's edge (each flag's
// `transform` throws the usage error, exit 64, saying what was wanted): past it, no String stands
// where a size, a port range, an address or a choice exists.

/// `--metrics` and `--http`'s ADDR:PORT: a numeric IPv4 address, a bracketed IPv6 one, or none
/// (every IPv4 address).
struct TCPAddress: Equatable, CustomStringConvertible {
    let host: String
    let port: Int

    init?(_ text: String) {
        let host: Substring, port: Substring
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]"), text[text.index(after: close)...].hasPrefix(":") else { return nil }
            host = text[text.index(after: text.startIndex)..<close]
            port = text[text.index(close, offsetBy: 2)...]
            var address = in6_addr()
            guard inet_pton(AF_INET6, String(host), &address) == 1 else { return nil }
        } else {
            guard let colon = text.lastIndex(of: ":") else { return nil }
            host = text[..<colon]
            port = text[text.index(after: colon)...]
            var address = in_addr()
            guard host.isEmpty || inet_pton(AF_INET, String(host), &address) == 1 else { return nil }
        }
        guard let number = Int(port), (0...65535).contains(number), port.allSatisfy(\.isASCII) else { return nil }
        self.host = host.isEmpty ? "0.0.0.0" : String(host)
        self.port = number
    }

    /// The flag's value, or its usage error: `example` shows what one looks like.
    static func parse(_ text: String, flag: String, example: String) throws -> TCPAddress {
        guard let address = TCPAddress(text) else {
            throw ValidationError("\(flag) \(text): not ADDR:PORT with a numeric address (or :PORT), like \(example).")
        }
        return address
    }

    var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }

    var socketAddress: SocketAddress { SocketAddress(numericHost: host, port: UInt16(port))! }
}

/// `-B`: a number of bytes, or `mtu`/`mtu-SLACK` as in.tftpd 7.3 takes them (any case).
enum BlockSizeLimit: Equatable, ExpressibleByArgument {
    case bytes(Int)
    case mtu(slack: Int)

    init?(argument: String) {
        let lowered = argument.lowercased()
        if lowered == "mtu" {
            self = .mtu(slack: 0)
        } else if lowered.hasPrefix("mtu-"), let slack = Int(lowered.dropFirst(4)), slack >= 0, lowered.dropFirst(4).allSatisfy(\.isNumber) {
            self = .mtu(slack: slack)
        } else if let bytes = Int(argument) {
            self = .bytes(bytes)
        } else {
            return nil
        }
    }
}

/// `--max-upload`'s SIZE: digits and an optional k, M, G, T, P or E (either case), a power of
/// 1024 each, as in.tftpd 7.3 reads it.
struct ByteSize: Equatable {
    let bytes: Int

    init?(_ text: String) {
        let units: [Character: Int] = ["k": 10, "m": 20, "g": 30, "t": 40, "p": 50, "e": 60]
        var digits = Substring(text), shift = 0
        if let last = text.last?.lowercased().first, let bits = units[last] {
            digits = text.dropLast()
            shift = bits
        }
        guard !digits.isEmpty, digits.allSatisfy(\.isASCII), digits.allSatisfy(\.isNumber), let value = Int(digits),
              value <= Int.max >> shift else { return nil }
        bytes = value << shift
    }

    static func parse(_ text: String) throws -> ByteSize {
        guard let size = ByteSize(text) else {
            throw ValidationError("--max-upload \(text): a size in bytes, or with k, M, G, T, P or E (powers of 1024), like 64M.")
        }
        return size
    }
}

/// `-U`: an octal umask.
struct Umask: Equatable {
    let bits: mode_t

    static func parse(_ text: String) throws -> Umask {
        guard let bits = mode_t(text, radix: 8), bits <= 0o777 else {
            throw ValidationError("-U \(text): an octal umask within 0...777, like 022.")
        }
        return Umask(bits: bits)
    }
}

/// `-R`: LOW:HIGH, the ports transfers answer from.
struct PortRange: Equatable {
    let ports: ClosedRange<UInt16>

    static func parse(_ text: String) throws -> PortRange {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, let low = UInt16(parts[0]), let high = UInt16(parts[1]), low > 0, low <= high else {
            throw ValidationError("-R \(text): LOW:HIGH within 1...65535, like 4000:4999.")
        }
        return PortRange(ports: low...high)
    }
}

/// `-S`: a port number, or a name services(5) gives a UDP port, as in.tftpd takes it.
struct ServicePort: Equatable {
    let port: UInt16

    /// nil for neither.
    static func port(of text: String) -> UInt16? {
        if let number = Int(text) { return (1...65535).contains(number) ? UInt16(number) : nil }
        guard !text.isEmpty, let entry = getservbyname(text, "udp") else { return nil }
        return UInt16(bigEndian: UInt16(truncatingIfNeeded: entry.pointee.s_port))
    }

    static func parse(_ text: String) throws -> ServicePort {
        guard let port = port(of: text) else {
            throw ValidationError("-S \(text): neither a port within 1...65535 nor a UDP service in /etc/services.")
        }
        return ServicePort(port: port)
    }
}

/// `--backend`.
enum BackendChoice: String, CaseIterable, ExpressibleByArgument {
    /// io_uring when this kernel allows it (the probe), glibc otherwise.
    case auto
    case uring, glibc
}

extension BusyReply: ExpressibleByArgument {}
extension LogFormat: ExpressibleByArgument {}
extension FilenameProcessing.Normalization: ExpressibleByArgument {}

/// `--syslog`, `--stderr`, `--stdout`: where the log goes, the last one given winning, as in.tftpd
/// takes them.
enum LogTarget: String, EnumerableFlag {
    case syslog, stderr, stdout

    static func name(for value: LogTarget) -> NameSpecification { .customLong(value.rawValue) }

    static func help(for value: LogTarget) -> ArgumentHelp? {
        switch value {
        case .syslog: "Log to syslog (facility daemon)."
        case .stderr: "Log to standard error (--stderr=FORMAT also sets --logformat)."
        case .stdout: "Log to standard output (--stdout=FORMAT also sets --logformat)."
        }
    }
}

/// `--proxy-dhcp ADDR`: this server's numeric IPv4 address on a boot network.
/// `--proxy-dhcp6`: this server's IPv6 address on a boot network; neither unspecified, nor
/// multicast, nor link-local (the answers' URLs name it, and a link-local one means nothing off
/// its link nor to firmware that reads a URL).
func parseBootAddress6(_ text: String) throws -> SocketAddress {
    let lower = text.lowercased()
    guard let address = SocketAddress(numericHost: text, port: 0), address.isIPv6, lower != "::", lower != "::1",
          !lower.hasPrefix("ff"), !lower.hasPrefix("fe8"), !lower.hasPrefix("fe9"), !lower.hasPrefix("fea"), !lower.hasPrefix("feb") else {
        throw ValidationError("--proxy-dhcp6 \(text): not this server's global (or unique local) IPv6 address on a boot network, like 2001:db8::1.")
    }
    return address
}

extension IPv4 {
    static func parse(_ text: String) throws -> IPv4 {
        var address = in_addr()
        guard inet_pton(AF_INET, text, &address) == 1, let parsed = IPv4(dotted: text), !parsed.isAny, parsed != .broadcast else {
            throw ValidationError("--proxy-dhcp \(text): not this server's IPv4 address on a boot network, like 10.0.0.1.")
        }
        return parsed
    }
}

extension BootFileChoice {
    /// `--boot-file SELECTOR=NAME` (the grammar is StampedeDHCP's, shared with machine records).
    static func parse(_ text: String) throws -> BootFileChoice {
        do { return try BootFileChoice(parsing: text) } catch { throw ValidationError("--boot-file \(text): \(error).") }
    }
}

extension TLSProfile: ExpressibleByArgument {}
extension MachineBook.UnknownMachines: ExpressibleByArgument {}
extension BootChain: ExpressibleByArgument {}

extension ServeOptions {
    /// `--pxe-vendor`: the start of a vendor class, printable ASCII without spaces, as option 60
    /// holds it (at most 255 bytes).
    static func pxeVendor(_ text: String) throws -> String {
        guard !text.isEmpty, text.utf8.count <= 255, text.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7f }) else {
            throw ValidationError("--pxe-vendor \(text): the start of a vendor class (option 60), printable ASCII without spaces, like U-Boot.armv8.")
        }
        return text
    }
}
