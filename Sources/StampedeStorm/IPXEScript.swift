import StampedeHTTPWire

/// What a storm machine does with an iPXE script it fetched (an `http GET NAME follow` stage), as
/// iPXE runs it: the files its `kernel` (`imgexec`, `chain`'s image is a script again), `initrd`
/// (`imgfetch`, `module`) lines name, in order, their locations resolved against the script's
/// own (`follow`); `boot` ends it, `exit` says the machine is not booted from the network.
/// Options (`--name x`, `--replace`) are passed over; `echo`, `sleep`, `set`, comments and the
/// rest are nothing to fetch.
public struct IPXEScript: Equatable, Sendable {
    /// One file the script has fetched.
    public enum Fetch: Equatable, Sendable {
        case kernel(String)
        case initrd(String)
        /// Another script, run in this one's place.
        case chain(String)
    }

    public var fetches: [Fetch] = []
    /// `exit`: back to the firmware, nothing booted.
    public var exits = false

    /// Why a script cannot be followed.
    public struct Unreadable: Error, Equatable, CustomStringConvertible {
        public var description: String
    }

    /// Reads `text`, fetched from `location` (a path beneath the server, or a URL).
    public init(_ text: [UInt8], from location: String) throws(Unreadable) {
        let lines = String(decoding: text, as: UTF8.self).split(omittingEmptySubsequences: true) { $0 == "\n" || $0 == "\r\n" }
        guard lines.first?.hasPrefix("#!ipxe") == true else { throw Unreadable(description: "not an iPXE script (no #!ipxe)") }
        for line in lines.dropFirst() {
            let words = line.split(whereSeparator: { $0 == " " || $0 == "\t" }).map(String.init)
            guard let command = words.first, !command.hasPrefix("#"), !command.hasPrefix(":") else { continue }
            let image = Self.image(of: words.dropFirst())
            switch command {
            case "kernel", "imgexec":
                guard let image else { throw Unreadable(description: "\(command) without an image") }
                fetches.append(.kernel(HTTPLocation.resolve(image, against: location)))
            case "initrd", "imgfetch", "module":
                guard let image else { throw Unreadable(description: "\(command) without an image") }
                fetches.append(.initrd(HTTPLocation.resolve(image, against: location)))
            case "chain":
                guard let image else { throw Unreadable(description: "chain without an image") }
                fetches.append(.chain(HTTPLocation.resolve(image, against: location)))
                return  // the chained script runs in this one's place
            case "boot":
                return
            case "exit":
                exits = true
                return
            default:
                continue
            }
        }
    }

    /// A command's image: its first word that is not an option (`--name NAME`, `-n NAME`,
    /// `--timeout MS` and `-t MS` take the word after them).
    static func image(of words: ArraySlice<String>) -> String? {
        var rest = words
        while let word = rest.popFirst() {
            if ["--name", "-n", "--timeout", "-t"].contains(word) {
                _ = rest.popFirst()
            } else if !word.hasPrefix("-") {
                return word
            }
        }
        return nil
    }
}
