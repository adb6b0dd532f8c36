import StampedeBase
import StampedeHTTPWire

/// The site's inventory's answer for one machine (pixiecore's API: a 200 to
/// `GET <api>/v1/boot/<mac>`), read as the machine record it is: `kernel` (a URL), `initrd` (a
/// list of URLs), `cmdline` (a string, in which `{{ URL "…" }}` names a URL, or pixiecore's older
/// object of `key: value`, `key: true` and `key: {"url": …}`), `message` (shown by iPXE before
/// the boot). A URL that is a path is the API server's (`/kernel` from `http://api:8080/pxe` is
/// `http://api:8080/kernel`), a relative one the API's directory's.
///
/// Everything in it is data: what would end a loader's command or start another is refused, with
/// the reason, and the machine is left alone (an `ignore` record named `machines-api`), as
/// pixiecore ignores a machine whose answer is malformed. Not served: `file://` URLs (Stampede
/// serves its root, by the names the loaders ask) and `ipxe-script` (code, not data).
public enum InventoryAnswer {
    /// The name logs and the machines' view give a record the inventory made.
    public static let recordName = "machines-api"

    /// Why an answer is not used.
    public struct Refused: Error, Equatable, CustomStringConvertible {
        public var description: String
    }

    /// `body` for `mac` from the API at `api` (its prefix, as `--machines-api` names it).
    public static func record(_ body: [UInt8], mac: [UInt8], api: String) -> Result<MachineRecord, Refused> {
        Result { () throws(Refused) in try read(body, mac: mac, api: api) }
    }

    static func read(_ body: [UInt8], mac: [UInt8], api: String) throws(Refused) -> MachineRecord {
        let top: JSONReader.Value
        do { top = try JSONReader.read(body) } catch { throw Refused(description: "not JSON: \(error)") }
        guard case .object(let fields) = top else { throw Refused(description: "not a JSON object") }
        if fields["ipxe-script"] != nil { throw Refused(description: "ipxe-script: an inventory's answer is data, never a script") }
        guard case .string(let kernel)? = fields["kernel"] else { throw Refused(description: "no kernel") }
        var initrds: [String] = []
        switch fields["initrd"] {
        case nil, .null?: break
        case .array(let items)?:
            for item in items {
                guard case .string(let initrd) = item else { throw Refused(description: "initrd: a list of URLs") }
                initrds.append(try location(initrd, "initrd", api: api))
            }
        default: throw Refused(description: "initrd: a list of URLs")
        }
        var commandLine = try commandLine(fields["cmdline"], api: api)
        if commandLine.isEmpty, case .array(let arguments)? = fields["args"] {
            // matchbox's profiles say `args`, a list, and its /pixiecore endpoint answers them so.
            commandLine = try arguments.map { (argument: JSONReader.Value) throws(Refused) -> String in
                guard case .string(let text) = argument else { throw Refused(description: "args: a list of strings") }
                return text
            }.joined(separator: " ")
        }
        if let bad = RenderedBoot.checkCommandLine(commandLine, known: []) { throw Refused(description: "cmdline \(commandLine): \(bad)") }
        var message: String?
        switch fields["message"] {
        case nil, .null?: break
        case .string(let text)?:
            if let bad = RenderedBoot.checkMessage(text) { throw Refused(description: "message: \(bad)") }
            message = text.isEmpty ? nil : text
        default: throw Refused(description: "message: a string")
        }
        var boot = RenderedBoot(kernel: try location(kernel, "kernel", api: api), initrds: initrds, commandLine: commandLine)
        boot.message = message
        return MachineRecord(name: recordName, selectors: [(.hardwareAddress(mac), 0)], action: .boot, boot: boot)
    }

    /// The command line: a string (`{{ URL "…" }}` replaced by the URL), or the older object form
    /// (its keys in order: pixiecore's order was a map's).
    static func commandLine(_ value: JSONReader.Value?, api: String) throws(Refused) -> String {
        switch value {
        case nil, .null?:
            return ""
        case .string(var text)?:
            var line = ""
            while let start = text.byteRange(of: "{{") {
                guard let end = text[start.upperBound...].byteRange(of: "}}") else { throw Refused(description: "cmdline: {{ without its }}") }
                let inside = text[start.upperBound..<end.lowerBound].trimmingSpaces
                guard inside.hasPrefix("URL "), case let quoted = inside.dropFirst(4).trimmingSpaces,
                      quoted.count >= 2, quoted.first == "\"", quoted.last == "\"" else {
                    throw Refused(description: "cmdline: {{ \(inside) }}: only {{ URL \"…\" }} is read")
                }
                line += text[..<start.lowerBound] + (try location(String(quoted.dropFirst().dropLast()), "cmdline's URL", api: api))
                text = String(text[end.upperBound...])
            }
            return line + text
        case .object(let parameters)?:
            var words: [String] = []
            for key in parameters.keys.sorted() {
                switch parameters[key]! {
                case .string(let value): words.append("\(key)=\(value)")
                case .bool(true): words.append(key)
                case .bool(false): continue
                case .object(let link):
                    guard case .string(let url)? = link["url"] else { throw Refused(description: "cmdline \(key): an object holds a url") }
                    words.append("\(key)=\(try location(url, "cmdline \(key)", api: api))")
                default: throw Refused(description: "cmdline \(key): a string, true or {\"url\": …}")
                }
            }
            return words.joined(separator: " ")
        default:
            throw Refused(description: "cmdline: a string or an object")
        }
    }

    /// A URL of the answer, resolved against the API's: http(s) as it is, `/path` on the API's
    /// server, `name` in the API's directory.
    static func location(_ text: String, _ what: String, api: String) throws(Refused) -> String {
        let url: String
        if text.hasPrefixIgnoringCase("http://") || text.hasPrefixIgnoringCase("https://") {
            url = text
        } else if text.hasPrefixIgnoringCase("file:") {
            throw Refused(description: "\(what) \(text): file:// URLs are not served (a kernel beneath the root is a path of this server's HTTP)")
        } else if text.containsBytes("://") || text.isEmpty {
            throw Refused(description: "\(what) \(text): not an http:// or https:// URL, nor a path")
        } else {
            url = HTTPLocation.resolve(text, against: api)
        }
        if let bad = RenderedBoot.checkLocation(url) { throw Refused(description: "\(what) \(text): \(bad)") }
        return url
    }
}
