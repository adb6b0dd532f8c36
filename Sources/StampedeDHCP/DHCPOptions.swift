/// The option codes this server reads or writes (RFC 2132; PXE's from RFC 4578 and the PXE 2.1
/// spec; iPXE's 175).
public enum DHCPOptionCode: UInt8, Sendable {
    case pad = 0
    case hostName = 12
    /// Vendor-specific information: PXE's sub-options (discovery control, boot item).
    case vendorSpecific = 43
    case requestedAddress = 50
    /// Option overload: options continue in `file` (1), `sname` (2) or both (3).
    case overload = 52
    case messageType = 53
    case serverIdentifier = 54
    case parameterRequestList = 55
    case maximumMessageSize = 57
    /// Vendor class identifier: `PXEClient:Arch:00007:UNDI:003016`, `HTTPClient:…`.
    case vendorClass = 60
    case clientIdentifier = 61
    case tftpServerName = 66
    case bootFileName = 67
    /// User class (RFC 3004); iPXE sends `iPXE`.
    case userClass = 77
    /// Relay agent information (RFC 3046): a relay's own, echoed in the reply.
    case relayAgentInformation = 82
    /// Client system architecture (RFC 4578 §2.1): two bytes per architecture the client runs.
    case clientArchitecture = 93
    /// Client network interface identifier (RFC 4578 §2.2): type 1, then UNDI's major and minor.
    case networkInterface = 94
    /// Client machine identifier (RFC 4578 §2.3): type 0, then a 16-byte UUID.
    case machineIdentifier = 97
    /// iPXE's encapsulated options: present only in a request from iPXE.
    case iPXEEncapsulated = 175
    case end = 255
}

/// A message's options: each code's value, in the order codes first appeared. A code seen again
/// has its value appended (RFC 3396: one long option split in pieces).
public struct DHCPOptions: Equatable, Sendable {
    private(set) var codes: [UInt8] = []
    private var values: [UInt8: [UInt8]] = [:]

    public init() {}

    public subscript(_ code: DHCPOptionCode) -> [UInt8]? {
        get { values[code.rawValue] }
        set { self[raw: code.rawValue] = newValue }
    }

    public subscript(raw code: UInt8) -> [UInt8]? {
        get { values[code] }
        set {
            if values[code] == nil, newValue != nil { codes.append(code) }
            if newValue == nil { codes.removeAll { $0 == code } }
            values[code] = newValue
        }
    }

    /// The codes present, in order.
    public var present: [UInt8] { codes }

    /// Reads options from a field (the options field, or `file`/`sname` under option 52) up to END
    /// or the field's end.
    mutating func read(_ field: UnsafeRawBufferPointer) throws(DHCPMessage.Malformed) {
        var i = 0
        while i < field.count {
            let code = field[i]
            if code == DHCPOptionCode.pad.rawValue { i += 1; continue }
            if code == DHCPOptionCode.end.rawValue { return }
            guard i + 1 < field.count else { throw .truncatedOption(code: code) }
            let length = Int(field[i + 1])
            guard i + 2 + length <= field.count else { throw .truncatedOption(code: code) }
            let value = Array(field[(i + 2)..<(i + 2 + length)])
            if let old = values[code] { values[code] = old + value } else { self[raw: code] = value }
            i += 2 + length
        }
    }

    /// Writes every option, a long one in pieces of 255 bytes (RFC 3396). No END.
    func write(into out: inout [UInt8]) {
        for code in codes {
            guard let value = values[code] else { continue }
            if value.isEmpty {
                out += [code, 0]
                continue
            }
            var start = 0
            while start < value.count {
                let piece = value[start..<min(start + 255, value.count)]
                out += [code, UInt8(piece.count)]
                out += piece
                start += piece.count
            }
        }
    }
}

/// PXE's sub-options inside option 43 (PXE 2.1 spec, table 2-1), as a tiny TLV list.
public enum PXEOption: UInt8, Sendable {
    /// Bit 3 (8): boot the file this offer names, without boot server discovery.
    case discoveryControl = 6
    /// A boot menu: items of a boot server type (two bytes), a description's length and the
    /// description.
    case bootMenu = 9
    /// The menu's prompt: a timeout (seconds; 0: none, 255: wait) and the prompt's text.
    case menuPrompt = 10
    /// The boot server type and layer a discovery REQUEST asks for, echoed in its ACK.
    case bootItem = 71
    case end = 255

    /// Discovery control's bit 3: use the boot file of this offer.
    public static let useThisBootFile: UInt8 = 8
    /// What a Raspberry Pi's boot ROM must find in option 43 before it takes an offer as a boot
    /// server's (it then reads its TFTP server from option 54): dnsmasq's answer to
    /// `pxe-service=0,"Raspberry Pi Boot"`, sub-option for sub-option (discovery control 3,
    /// prompt "PXE" with no timeout, a menu of one local-boot item "Raspberry Pi Boot").
    public static let raspberryPiBoot: [UInt8] = write([
        (.discoveryControl, [3]), (.menuPrompt, [0] + Array("PXE".utf8)), (.bootMenu, [0, 0, 17] + Array("Raspberry Pi Boot".utf8)),
    ])

    /// Boot server type 0, the PXE bootstrap server: what an offer without a menu implies, and
    /// the type firmware asks port 4011 for after one (EDK2's EFI_PXE_BASE_CODE_BOOT_TYPE_BOOTSTRAP).
    public static let bootstrapServer: UInt16 = 0

    /// The sub-options of an option 43 value, by code (the first of each); nil when they do not
    /// parse as PXE's TLVs (another vendor's option 43).
    public static func read(_ value: [UInt8]) -> [UInt8: [UInt8]]? {
        var found: [UInt8: [UInt8]] = [:]
        var i = 0
        while i < value.count {
            let code = value[i]
            if code == 0 { i += 1; continue }
            if code == 255 { return found }
            guard i + 1 < value.count else { return nil }
            let length = Int(value[i + 1])
            guard i + 2 + length <= value.count else { return nil }
            if found[code] == nil { found[code] = Array(value[(i + 2)..<(i + 2 + length)]) }
            i += 2 + length
        }
        return found
    }

    /// Option 43's value for these sub-options, END last.
    public static func write(_ options: [(PXEOption, [UInt8])]) -> [UInt8] {
        var out: [UInt8] = []
        for (code, value) in options {
            out += [code.rawValue, UInt8(value.count)]
            out += value
        }
        out.append(PXEOption.end.rawValue)
        return out
    }
}
