/// `SELECTOR=NAME`: what one kind of machine boots, a file name or (UEFI HTTP Boot, iPXE) a URL,
/// as `--boot-file` and a machine record's `boot-file` take it. One grammar for both.
public struct BootFileChoice: Equatable, Sendable {
    public var selector: BootSelector
    public var target: BootTarget

    /// Why a choice is refused, in words that follow the text that was refused.
    public struct Refusal: Error, Equatable, CustomStringConvertible {
        public var description: String
    }

    public init(selector: BootSelector, target: BootTarget) {
        self.selector = selector
        self.target = target
    }

    public init(parsing text: String) throws(Refusal) {
        guard let equals = text.firstIndex(of: "="), let selector = BootSelector(name: String(text[..<equals])) else {
            let selectors = BootSelector.named.map(\.name).joined(separator: ", ")
            throw Refusal(description: "not SELECTOR=NAME with a selector of \(selectors), or arch:N (N an architecture code, 0-65535)")
        }
        let name = String(text[text.index(after: equals)...])
        guard !name.isEmpty, name.utf8.allSatisfy({ $0 >= 0x20 && $0 != 0x7f }) else {
            throw Refusal(description: "NAME is empty or holds a control character")
        }
        let target = BootTarget(name)
        guard target.longestExpansion <= target.longest else {
            let what = if case .url = target { "option 67 holds" } else { "a reply's file field holds" }
            throw Refusal(description: "\(target.longestExpansion) bytes for a machine, more than \(what) (\(target.longest))")
        }
        switch (selector.kind, target) {
        case (.http?, .file):
            throw Refusal(description: "UEFI HTTP Boot loads a URL (http://...), not a file name")
        case (.pxe?, .url):
            throw Refusal(description: "a PXE firmware loads a file over TFTP, not a URL: name the file")
        default:
            self.init(selector: selector, target: target)
        }
    }
}
