/// A response's head, as bytes: the status line and the headers, every one of them said.
public struct ResponseHead {
    public var status: Status
    public var fields: [(String, String)] = []

    public init(_ status: Status) { self.status = status }

    public mutating func add(_ name: String, _ value: String) { fields.append((name, value)) }

    public var bytes: [UInt8] {
        var text = "HTTP/1.1 \(status.rawValue) \(status.reason)\r\n"
        for (name, value) in fields { text += "\(name): \(value)\r\n" }
        text += "\r\n"
        return Array(text.utf8)
    }

    /// The media type by the name's extension: `application/efi` for a UEFI image (EDK2's HTTP
    /// boot takes it by that), text for scripts and configurations, bytes for the rest.
    public static func contentType(of path: [UInt8]) -> String {
        let name = String(decoding: path.split(separator: UInt8(ascii: "/")).last ?? [], as: UTF8.self).lowercased()
        guard let dot = name.lastIndex(of: ".") else { return "application/octet-stream" }
        switch name[name.index(after: dot)...] {
        case "efi": return "application/efi"
        case "ipxe", "cfg", "conf", "txt", "cmdline", "sh": return "text/plain; charset=utf-8"
        case "iso": return "application/vnd.efi.iso"
        case "img": return "application/vnd.efi.img"
        default: return "application/octet-stream"
        }
    }
}
