import StampedeBase
import StampedeProtocol

/// What one firmware, or a chain of them, asks a TFTP server for while a machine boots: a list
/// of stages, each one request (or a search through several names), with the options, the
/// retransmit interval and the patience of the firmware that sends it. `stampede storm
/// --profile` plays it for every simulated machine.
///
/// Profiles are text, one directive per line (`#` starts a comment):
///
///     profile NAME
///     firmware NAME [retry=SECONDS] [tries=N] [backoff=N]
///     get   NAME [OPTION=VALUE...] [follow] the whole file; the boot fails without it
///     try   NAME [OPTION=VALUE...] [follow] the whole file if there is one; "not found" is fine
///     first NAME NAME... [OPTION=VALUE...] each name in turn until one is found (a config search)
///     probe NAME [OPTION=VALUE...]       a size probe: the OACK, then ERROR 8, as EDK2 does
///     head  BYTES NAME [OPTION=VALUE...] that many bytes, then ERROR 0 "closed", as GRUB does
///     http  GET NAME|URL [follow]        the whole file over HTTP (iPXE's chain, UEFI HTTP Boot)
///     dhcp  pxe|ipxe|http|rpi arch=N     the DHCP exchange that names the boot file (`storm --dhcp`)
///     reboot N [after=SECONDS]           a failed boot starts over from the first stage, N times (after 1 s)
///
/// `follow`: the file is an iPXE script, run as iPXE runs it: the kernel, initrds and chained
/// scripts it names are fetched next, a path over the protocol the script came by, an `http://`
/// URL over HTTP; a script that boots (`boot`, or its end) ends the machine's boot there, and the
/// profile's later stages are not played (iPXE runs the `autoexec.ipxe` it finds in place of its
/// own DHCP and the script that DHCP names).
///
/// A `firmware` line starts that firmware's stages: `retry` is its own retransmit interval
/// when no `timeout` option is negotiated (`250ms` or `4s`), `tries` how often it resends before
/// it gives up, `backoff` the most the interval grows by doubling (1: a fixed interval). Options
/// are blksize, timeout, tsize and windowsize, sent in the order written; `tsize` alone means
/// `tsize=0`. Names may hold the machine's identity: `${mac}` (52:54:00:00:00:01),
/// `${mac:hexhyp}` (52-54-00-00-00-01), `${ip}` (10.0.0.1), `${ip:hex}` (0A000001),
/// `${ip:hex:N}` (its first N digits), `${uuid}`, `${machine}` (the machine's number) and
/// `${serial}` (a Raspberry Pi's serial number, 8 hex digits, from the UUID); `${dir}` is the
/// directory of the name the last `first` stage found (`1a2b3c4d/` after `first
/// ${serial}/start4.elf start4.elf` found the first, empty after the second), as a Pi's boot ROM
/// keeps its serial number's prefix only when start4.elf is found under it.
///
/// An `http` stage asks `GET /NAME` of the storm's HTTP server (`--http`), or the URL written
/// (`http://10.0.0.1:8080/boot/${mac}.ipxe`: an address, not a host name), on one keep-alive
/// connection per machine, as iPXE keeps one. A status other than 200 fails the stage; so does a
/// response without Content-Length or a chunked one, which firmware cannot use for a file. It
/// waits for the server as long as its firmware's TFTP patience (`patience`).
///
/// A `dhcp` stage plays the firmware's DHCP as a proxyDHCP server sees it (only with `storm
/// --dhcp ADDR`, the storm's address on a boot network; without it the stage is left out): a
/// DISCOVER broadcast from port 68 with the machine's MAC and UUID, option 93 `arch`, option 60
/// `PXEClient:Arch:…` (`http`: `HTTPClient:Arch:…`; `ipxe`: option 77 `iPXE` and 175 too; `rpi`:
/// a Pi 4's ROM, `PXEClient:Arch:00000:UNDI:002001` from a MAC under dc:a6:32), resent
/// as the firmware line says (EDK2: after 4, 8, 16 and 32 s). A `pxe` offer that does not bypass
/// boot server discovery (option 43's bit 3) is followed by the REQUEST to its server's port 4011,
/// as EDK2 sends it; iPXE sends its REQUEST there after every proxy offer. The stage ends well
/// when the last answer names a boot file (`http`: a URL; `rpi`: when the offer's option 43 holds
/// "Raspberry Pi Boot", without which the Pi's ROM ignores it and asks again).
///
/// Firmware whose boot failed does not stay down: a UEFI boot manager tries its boot options
/// again, PXELINUX and U-Boot reset the board, GRUB's menu times out into its entry again. A
/// `reboot` line says how often the machine starts over from the first stage, and how long after
/// the failure its next first request goes out (the POST and DHCP, shortened: nothing of them
/// is played). A machine counts as failed only once its last try has failed.
public struct BootProfile: Sendable, Equatable {
    public var name: String
    public var stages: [Stage]
    /// How often a failed boot starts over, and after how long.
    public var reboots = 0
    public var rebootDelay: Nanoseconds = 0

    /// One request of the boot, or one search.
    public struct Stage: Sendable, Equatable {
        public enum Action: Sendable, Equatable {
            case get, tryGet, first, probe
            case head(bytes: Int)
        }

        public var firmware: String
        public var action: Action
        /// The names asked, in order (one, except for `first`), before the identity is filled in.
        public var names: [String]
        public var options: [(name: String, value: String)]
        public var retransmit: Nanoseconds
        public var retries: Int
        public var maxBackoff: Int64
        /// A block out of order is answered at once with an ACK of the last block in order, and
        /// every ACK sent starts the tries over (EDK2's MTFTP4: `unexpected=ack`); otherwise the
        /// last ACK is resent once per progress step and on the timer.
        public var answersBlocksOutOfOrder = false
        /// Over HTTP (an `http GET` line) rather than TFTP.
        public var overHTTP = false
        /// `follow`: NAME is an iPXE script, whose kernel, initrds and chained scripts are fetched
        /// next (`IPXEScript`), each compared as any file is; once they are, the machine booted.
        public var follows = false
        /// A `dhcp` line: the DHCP exchange, not a file.
        public var dhcp: DHCPAsk?

        /// How the stage reads in a report: `uefi probe ipxe.efi`.
        public var label: String {
            if overHTTP { return "\(firmware) http GET \(names[0])\(follows ? " follow" : "")" }
            if let dhcp { return "\(firmware) dhcp \(dhcp.client.rawValue) arch=\(dhcp.architecture)" }
            let verb: String
            switch action {
            case .get: verb = "get"
            case .tryGet: verb = "try"
            case .first: verb = "first"
            case .probe: verb = "probe"
            case .head(let bytes): verb = "head \(bytes)"
            }
            let shown = names.count > 2 ? "\(names[0]) … \(names[names.count - 1]) (\(names.count) names)" : names.joined(separator: " ")
            return "\(firmware) \(verb) \(shown)\(follows ? " follow" : "")"
        }

        /// A "not found" ends this stage well: `try`, and `first` until its last name.
        var notFoundIsFine: Bool { action == .tryGet || action == .first }

        public static func == (a: Stage, b: Stage) -> Bool {
            a.firmware == b.firmware && a.action == b.action && a.names == b.names
                && a.options.map(\.name) == b.options.map(\.name) && a.options.map(\.value) == b.options.map(\.value)
                && a.retransmit == b.retransmit && a.retries == b.retries && a.maxBackoff == b.maxBackoff
                && a.answersBlocksOutOfOrder == b.answersBlocksOutOfOrder && a.overHTTP == b.overHTTP && a.dhcp == b.dhcp
                && a.follows == b.follows
        }

        /// How long the firmware waits for a silent server: its retransmit intervals summed, each
        /// double the last up to `maxBackoff` times the first. An HTTP stage whose server sends
        /// nothing for this long fails, timed out.
        public var patience: Nanoseconds {
            var total: Nanoseconds = 0
            var interval = retransmit
            for _ in 0...retries {
                total += interval
                interval = min(interval * 2, retransmit * maxBackoff)
            }
            return total
        }

        /// The client plan for one of the stage's names, filled in for `machine`.
        /// `directory`: what `${dir}` is (`Storm.Machine.directory`).
        func plan(name index: Int, for machine: MachineIdentity, directory: String = "", hold: Nanoseconds = 0) -> ClientPlan {
            plan(named: machine.expand(names[index], directory: directory), hold: hold)
        }

        /// The request for `name` as this stage asks it: a file a followed script names.
        func plan(named name: String, hold: Nanoseconds = 0) -> ClientPlan {
            let request = Request(isWrite: false, filename: Array(name.utf8), mode: "octet", options: options)
            var plan = ClientPlan(request: request, retransmit: retransmit, retries: retries)
            plan.maxBackoff = maxBackoff
            plan.answersBlocksOutOfOrder = answersBlocksOutOfOrder
            plan.probeOnly = action == .probe
            plan.holdFirstAck = hold
            if case .head(let bytes) = action { plan.closeAfter = bytes }
            return plan
        }
    }

    /// What a `dhcp` stage's firmware says it is.
    public struct DHCPAsk: Sendable, Equatable {
        public enum Client: String, Sendable, CaseIterable {
            /// A firmware's PXE: `PXEClient`, the boot server on 4011 if the offer says so.
            case pxe
            /// iPXE's own DHCP: `PXEClient` with user class `iPXE` and option 175.
            case ipxe
            /// UEFI HTTP Boot: `HTTPClient`, a URL in the answer.
            case http
            /// A Raspberry Pi's boot ROM: a BIOS ROM's vendor class and architecture 0 from a Pi's
            /// hardware address; it takes only an offer whose option 43 holds "Raspberry Pi Boot",
            /// and names its files itself (no boot file needed).
            case rpi
        }

        public var client: Client
        /// Option 93: 0 BIOS, 7 x64 UEFI, 11 ARM64 UEFI, 16 x64 UEFI HTTP, 19 ARM64 UEFI HTTP.
        public var architecture: UInt16
    }

    public init(name: String, stages: [Stage]) {
        self.name = name
        self.stages = stages
    }

    /// A storm without a profile: every client reads one file, with the given options.
    public static func single(file: String, options: [(name: String, value: String)], retransmit: Nanoseconds,
                              retries: Int) -> BootProfile {
        BootProfile(name: "get", stages: [Stage(firmware: "storm", action: .get, names: [file], options: options,
                                                retransmit: retransmit, retries: retries, maxBackoff: 8)])
    }

    /// A line of a profile that does not parse.
    public struct ParseError: Error, Equatable, CustomStringConvertible {
        public var line: Int
        public var message: String
        public var description: String { "line \(line): \(message)" }
    }

    /// Parses a profile's text (see the type's documentation for the format).
    public init(parsing text: String) throws(ParseError) {
        var name: String?
        var stages: [Stage] = []
        var firmware: FirmwareLine?
        var reboot: (count: Int, delay: Nanoseconds)?
        for (offset, rawLine) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let number = offset + 1
            func fail(_ message: String) -> ParseError { ParseError(line: number, message: message) }
            let line = rawLine.prefix { $0 != "#" }
            let words = line.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\r" }).map(String.init)
            guard let directive = words.first else { continue }
            let rest = Array(words.dropFirst())
            switch directive {
            case "profile":
                guard rest.count == 1 else { throw fail("profile takes one name") }
                guard name == nil else { throw fail("a second profile line") }
                name = rest[0]
            case "firmware":
                firmware = try Self.firmware(rest, line: number)
            case "reboot":
                guard reboot == nil else { throw fail("a second reboot line") }
                reboot = try Self.reboot(rest, line: number)
            case "http", "dhcp", "get", "try", "first", "probe", "head":
                guard let firmware else { throw fail("\(directive) before any firmware line") }
                stages.append(try Self.stage(directive, rest, of: firmware, line: number))
            default:
                throw fail("\(directive): not a directive (profile, firmware, get, try, first, probe, head, http, dhcp, reboot)")
            }
        }
        guard let name else { throw ParseError(line: 1, message: "no profile line") }
        guard !stages.isEmpty else { throw ParseError(line: 1, message: "no stages (get, try, first, probe, head, http, dhcp)") }
        self.init(name: name, stages: stages)
        if let reboot { (reboots, rebootDelay) = reboot }
    }

    /// `firmware NAME retry= tries= backoff= unexpected=`.
    private static func firmware(_ rest: [String], line: Int) throws(ParseError) -> FirmwareLine {
        func fail(_ message: String) -> ParseError { ParseError(line: line, message: message) }
        guard let label = rest.first, !label.contains("=") else { throw fail("firmware takes a name, then retry=, tries=, backoff=, unexpected=") }
        var settings = FirmwareLine(name: label)
        for setting in rest.dropFirst() {
            let (key, value) = split(setting)
            switch key {
            case "retry":
                guard let value, let interval = duration(value) else { throw fail("retry=\(value ?? ""): write 250ms or 4s (1 ms to 255 s)") }
                settings.retransmit = interval
            case "tries":
                guard let value, let count = TFTPOption.decimal(value), (1...100).contains(count) else { throw fail("tries=\(value ?? ""): 1 to 100") }
                settings.retries = count - 1
            case "backoff":
                guard let value, let factor = TFTPOption.decimal(value), (1...1024).contains(factor) else { throw fail("backoff=\(value ?? ""): 1 to 1024") }
                settings.backoff = Int64(factor)
            case "unexpected":
                guard let value, ["ack", "wait"].contains(value) else { throw fail("unexpected=\(value ?? ""): ack or wait") }
                settings.answersBlocksOutOfOrder = value == "ack"
            default:
                throw fail("\(setting): a firmware line takes retry=, tries=, backoff= and unexpected=")
            }
        }
        return settings
    }

    /// `reboot COUNT after=SECONDS`.
    static func reboot(_ rest: [String], line: Int) throws(ParseError) -> (count: Int, delay: Nanoseconds) {
        guard let count = rest.first.flatMap(TFTPOption.decimal), (0...1000).contains(count), rest.count <= 2 else {
            throw ParseError(line: line, message: "reboot takes a count (0 to 1000), then after=SECONDS")
        }
        guard rest.count == 2 else { return (count, nanosecondsPerSecond) }
        let (key, value) = split(rest[1])
        guard key == "after", let value, let interval = duration(value) else {
            throw ParseError(line: line, message: "\(rest[1]): write after=500ms or after=5s (1 ms to 255 s)")
        }
        return (count, interval)
    }

    /// A stage's line: `http GET NAME`, `dhcp CLIENT arch=N`, or `get`, `try`, `first`, `probe`,
    /// `head BYTES` with names and TFTP options.
    private static func stage(_ directive: String, _ rest: [String], of firmware: FirmwareLine, line: Int) throws(ParseError) -> Stage {
        func fail(_ message: String) -> ParseError { ParseError(line: line, message: message) }
        switch directive {
        case "http":
            guard rest.count == 2 || (rest.count == 3 && rest[2] == "follow"), rest[0] == "GET" else {
                throw fail("http takes GET and one name or URL (no TFTP options), then follow for an iPXE script to run")
            }
            guard MachineIdentity.isValidTemplate(rest[1]) else { throw fail("\(rest[1]): \(unknownTemplate)") }
            if rest[1].hasPrefix("http://") {
                guard HTTPTarget(MachineIdentity(number: 0).expand(rest[1]), server: nil) != nil else {
                    throw fail("\(rest[1]): write http://ADDRESS[:PORT]/PATH, with an IP address (no host names)")
                }
            } else if rest[1].contains("://") {
                throw fail("\(rest[1]): only http:// URLs")
            }
            var stage = firmware.stage(.get, names: [rest[1]])
            stage.overHTTP = true
            stage.follows = rest.count == 3
            return stage
        case "dhcp":
            guard rest.count == 2, let client = DHCPAsk.Client(rawValue: rest[0]), case let (key, value) = split(rest[1]),
                  key == "arch", let value, let arch = TFTPOption.decimal(value), arch <= 0xFFFF else {
                throw fail("dhcp takes pxe, ipxe, http or rpi, then arch=N (option 93: 0 BIOS, 7 x64 UEFI, 16 x64 UEFI HTTP)")
            }
            var stage = firmware.stage(.get, names: [])
            stage.dhcp = DHCPAsk(client: client, architecture: UInt16(arch))
            return stage
        default:
            return try fileStage(directive, rest, of: firmware, line: line)
        }
    }

    /// `get`, `try`, `first`, `probe` or `head BYTES`: names, then TFTP options.
    private static func fileStage(_ directive: String, _ rest: [String], of firmware: FirmwareLine, line: Int) throws(ParseError) -> Stage {
        func fail(_ message: String) -> ParseError { ParseError(line: line, message: message) }
        var words = rest
        var action: Stage.Action
        switch directive {
        case "get": action = .get
        case "try": action = .tryGet
        case "first": action = .first
        case "probe": action = .probe
        default:
            guard let count = words.first.flatMap(TFTPOption.decimal), count > 0 else { throw fail("head takes a byte count, then a name") }
            action = .head(bytes: count)
            words.removeFirst()
        }
        var names: [String] = []
        var options: [(name: String, value: String)] = []
        let follows = words.last == "follow"
        if follows {
            guard action == .get || action == .tryGet else { throw fail("follow goes with get and try: an iPXE script to run") }
            words.removeLast()
        }
        for word in words {
            if word.contains("=") || word == "tsize" {
                let (key, value) = split(word)
                guard let option = TFTPOption(rawValue: key) else {
                    throw fail("\(key): not an option (\(TFTPOption.names))")
                }
                let text = value ?? (option == .tsize ? "0" : "")
                guard option.accepts(text) else { throw fail("\(word): \(option.takes)") }
                guard !options.contains(where: { $0.name == key }) else { throw fail("\(key) twice") }
                options.append((key, text))
            } else {
                guard options.isEmpty else { throw fail("\(word): names come before the options") }
                guard MachineIdentity.isValidTemplate(word) else { throw fail("\(word): \(unknownTemplate)") }
                names.append(word)
            }
        }
        guard !names.isEmpty else { throw fail("\(directive) needs a file name") }
        guard names.count == 1 || action == .first else { throw fail("\(directive) takes one name (first takes several)") }
        var stage = firmware.stage(action, names: names, options: options)
        stage.follows = follows
        return stage
    }

    /// A `firmware` line: what the stages after it share.
    private struct FirmwareLine {
        var name: String
        var retransmit = nanosecondsPerSecond
        var retries = 5
        var backoff: Int64 = 8
        var answersBlocksOutOfOrder = false

        func stage(_ action: Stage.Action, names: [String], options: [(name: String, value: String)] = []) -> Stage {
            var stage = Stage(firmware: name, action: action, names: names, options: options,
                              retransmit: retransmit, retries: retries, maxBackoff: backoff)
            stage.answersBlocksOutOfOrder = answersBlocksOutOfOrder
            return stage
        }
    }

    /// Whether a stage is a DHCP exchange, which needs `storm --dhcp`.
    public var usesDHCP: Bool { stages.contains { $0.dhcp != nil } }

    /// This profile without its DHCP stages: played where no boot network is given.
    public var withoutDHCP: BootProfile {
        var profile = self
        profile.stages.removeAll { $0.dhcp != nil }
        return profile
    }

    /// Whether a stage goes over HTTP, or may (a followed script's `http://` URLs, whatever the
    /// protocol it came by), so that the storm keeps a connection for each machine.
    public var usesHTTP: Bool { stages.contains { $0.overHTTP || $0.follows } }

    /// Whether a stage names its file relative to the storm's HTTP server (not a whole URL).
    public var needsHTTPServer: Bool { stages.contains { $0.overHTTP && !$0.names[0].hasPrefix("http://") } }

    /// What a name with a `${...}` `MachineIdentity` does not know is told.
    private static let unknownTemplate = "an unknown ${...} (mac, mac:hexhyp, ip, ip:hex, ip:hex:N, uuid, machine, serial, dir)"

    /// `key=value` → (key, value); a bare word → (word, nil).
    private static func split(_ word: String) -> (String, String?) {
        guard let equals = word.firstIndex(of: "=") else { return (word, nil) }
        return (String(word[..<equals]), String(word[word.index(after: equals)...]))
    }

    /// `250ms`, `4s`, `0.5s` → nanoseconds, between 1 ms and 255 s.
    static func duration(_ text: String) -> Nanoseconds? {
        let (number, scale): (Substring, Double) = text.hasSuffix("ms") ? (text.dropLast(2), 1e6) : text.hasSuffix("s") ? (text.dropLast(), 1e9) : ("", 0)
        guard let value = Double(number), value.isFinite else { return nil }
        let nanoseconds = value * scale
        guard nanoseconds >= 1e6, nanoseconds <= 255e9 else { return nil }
        return Nanoseconds(nanoseconds)
    }

    /// The profile named, from those built in: with the firmware's DHCP stages if `dhcp`.
    public static func builtIn(_ name: String, dhcp: Bool = false) -> BootProfile? {
        builtInTexts[name].map { text in
            let profile = try! BootProfile(parsing: text)
            return dhcp ? profile : profile.withoutDHCP
        }
    }
}

/// Who a simulated machine is: the names a firmware derives from it (PXELINUX's config search,
/// iPXE's `${net0/mac}`) are filled in from these. Machine n (from 0) has MAC 52:54:00 followed by
/// n + 1 in three bytes, IPv4 10.0.0.0 + n + 1, and a UUID made from n: the same machine has the
/// same identity in every run, and no two of the first 16 million share one.
public struct MachineIdentity: Sendable, Equatable {
    public let number: Int
    public let mac: [UInt8]
    public let ipv4: UInt32
    public let uuid: [UInt8]

    public init(number: Int) { self.init(number: number, mac: nil, uuid: nil) }

    /// Machine `number`, with its own MAC and UUID when given (a record's, `storm --machines`).
    public init(number: Int, mac ownMAC: [UInt8]?, uuid ownUUID: [UInt8]?) {
        self.number = number
        let n = UInt32(truncatingIfNeeded: number + 1) & 0xFF_FFFF
        mac = ownMAC ?? [0x52, 0x54, 0x00, UInt8(n >> 16), UInt8((n >> 8) & 0xFF), UInt8(n & 0xFF)]
        ipv4 = 0x0A00_0000 | n
        // Version 4, variant 1, the rest from a mix of the number (splitmix64).
        var bytes: [UInt8] = []
        var state = UInt64(number) &* 0x9E37_79B9_7F4A_7C15
        for _ in 0..<2 {
            state = state &+ 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            z ^= z >> 31
            bytes += (0..<8).map { UInt8(truncatingIfNeeded: z >> (8 * UInt64($0))) }
        }
        bytes[6] = bytes[6] & 0x0F | 0x40
        bytes[8] = bytes[8] & 0x3F | 0x80
        uuid = ownUUID ?? bytes
    }

    private static func hex(_ bytes: [UInt8], uppercase: Bool = false) -> [String] {
        bytes.map { byte in
            let text = String(byte, radix: 16, uppercase: uppercase)
            return text.count == 1 ? "0" + text : text
        }
    }

    public var macText: String { Self.hex(mac).joined(separator: ":") }
    public var ipText: String { (0..<4).map { String((ipv4 >> (24 - 8 * UInt32($0))) & 0xFF) }.joined(separator: ".") }
    public var ipHex: String { Self.hex((0..<4).map { UInt8((ipv4 >> (24 - 8 * UInt32($0))) & 0xFF) }, uppercase: true).joined() }
    public var uuidText: String {
        let digits = Self.hex(uuid)
        return [0..<4, 4..<6, 6..<8, 8..<10, 10..<16].map { digits[$0].joined() }.joined(separator: "-")
    }

    /// The value of `${key}`, or nil for an unknown key.
    func value(of key: Substring, directory: String = "") -> String? {
        switch key {
        case "serial": return Self.hex(Array(uuid[12..<16])).joined()
        case "dir": return directory
        case "mac": return macText
        case "mac:hexhyp": return Self.hex(mac).joined(separator: "-")
        case "ip": return ipText
        case "ip:hex": return ipHex
        case "uuid": return uuidText
        case "machine": return String(number)
        default:
            guard key.hasPrefix("ip:hex:"), let digits = Int(key.dropFirst(7)), (1...8).contains(digits) else { return nil }
            return String(ipHex.prefix(digits))
        }
    }

    /// A name with every `${...}` filled in (`${dir}` with `directory`).
    public func expand(_ template: String, directory: String = "") -> String {
        var out = ""
        var rest = Substring(template)
        while let open = rest.firstRange(of: "${"), let close = rest[open.upperBound...].firstIndex(of: "}") {
            out += rest[..<open.lowerBound]
            let key = rest[open.upperBound..<close]
            out += value(of: key, directory: directory) ?? "${\(key)}"
            rest = rest[rest.index(after: close)...]
        }
        return out + rest
    }

    /// Whether every `${...}` in a name is one `expand` knows.
    static func isValidTemplate(_ template: String) -> Bool {
        let probe = MachineIdentity(number: 0)
        var rest = Substring(template)
        while let open = rest.firstRange(of: "${") {
            guard let close = rest[open.upperBound...].firstIndex(of: "}"), probe.value(of: rest[open.upperBound..<close]) != nil else {
                return false
            }
            rest = rest[rest.index(after: close)...]
        }
        return true
    }
}
