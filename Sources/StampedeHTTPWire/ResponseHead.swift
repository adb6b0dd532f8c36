/// A response's head, written as bytes as it is said: the status line, then each header, then
/// the empty line (`end`). It writes into the memory it is given, so an answer's head can reuse
/// the last one's (a kept-alive connection's answers take no new memory).
public struct ResponseHead {
    public let status: Status
    private var bytes: [UInt8]

    /// `memory`: the array whose memory the head is written into (taken, left empty; its bytes
    /// are dropped).
    public init(_ status: Status, memory: inout [UInt8]) {
        self.status = status
        bytes = []
        swap(&bytes, &memory)
        bytes.removeAll(keepingCapacity: true)
        append("HTTP/1.1 ")
        appendStatus()
        append("\r\n")
    }

    /// A head in memory of its own (answers off the hot path).
    public init(_ status: Status) {
        var memory: [UInt8] = []
        self.init(status, memory: &memory)
    }

    public mutating func add(_ name: StaticString, _ value: StaticString) {
        start(name)
        append(value)
        append("\r\n")
    }

    public mutating func add(_ name: StaticString, text value: String) {
        start(name)
        bytes.append(contentsOf: value.utf8)
        append("\r\n")
    }

    public mutating func add(_ name: StaticString, decimal value: Int) {
        start(name)
        Grammar.append(UInt64(value), radix: 10, to: &bytes)
        append("\r\n")
    }

    /// A date header (IMF-fixdate).
    public mutating func add(_ name: StaticString, date seconds: Int64) {
        start(name)
        HTTPDate.append(seconds, to: &bytes)
        append("\r\n")
    }

    public mutating func add(_ name: StaticString, _ tag: EntityTag) {
        start(name)
        tag.append(to: &bytes)
        append("\r\n")
    }

    /// The whole head, its empty line written (the head is empty after it).
    public mutating func end() -> [UInt8] {
        append("\r\n")
        return taken()
    }

    /// The whole head, and after it a short text that says its status ("404 Not Found\n"), with
    /// its Content-Type and Content-Length (`withBody` false: the headers only, for a HEAD).
    public mutating func endWithStatusText(withBody: Bool) -> [UInt8] {
        add("Content-Type", "text/plain; charset=utf-8")
        add("Content-Length", decimal: 4 + status.reason.utf8CodeUnitCount + 1)
        append("\r\n")
        guard withBody else { return taken() }
        appendStatus()
        bytes.append(10)
        return taken()
    }

    /// "404 Not Found": the status line's end, and the text of a plain answer.
    private mutating func appendStatus() {
        Grammar.append(UInt64(status.rawValue), radix: 10, to: &bytes)
        bytes.append(32)
        append(status.reason)
    }

    /// The bytes, moved out: no copy of them is left to share their memory (a `consuming` end
    /// would leave the caller's, in a debug build, and the next write would copy).
    private mutating func taken() -> [UInt8] {
        var out: [UInt8] = []
        swap(&out, &bytes)
        return out
    }

    private mutating func start(_ name: StaticString) {
        append(name)
        append(": ")
    }

    private mutating func append(_ text: StaticString) {
        bytes.append(contentsOf: UnsafeBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
    }

    /// The media type by the name's extension: `application/efi` for a UEFI image (EDK2's HTTP
    /// boot takes it by that), text for scripts and configurations, bytes for the rest.
    public static func contentType(of path: [UInt8]) -> StaticString {
        // The extension: after the last "." of the last component, if that has one.
        var dot: Int?
        for i in path.indices {
            if path[i] == UInt8(ascii: ".") { dot = i } else if path[i] == UInt8(ascii: "/") { dot = nil }
        }
        guard let dot else { return "application/octet-stream" }
        func named(_ lowercase: StaticString) -> Bool {
            path.withUnsafeBytes { Grammar.equalsIgnoringCase($0, (dot + 1)..<path.count, lowercase) }
        }
        if named("efi") { return "application/efi" }
        if named("ipxe") || named("cfg") || named("conf") || named("txt") || named("cmdline") || named("sh") {
            return "text/plain; charset=utf-8"
        }
        if named("iso") { return "application/vnd.efi.iso" }
        if named("img") { return "application/vnd.efi.img" }
        return "application/octet-stream"
    }
}
