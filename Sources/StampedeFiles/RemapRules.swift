import Glibc
import Synchronization
import StampedeBase
import StampedeIO

/// tftpd-hpa's filename remapping (`-m FILE`, in.tftpd(8) "FILENAME REMAPPING", as 7.3 reads
/// it): each line is `FLAGS REGEX [REPLACEMENT]` or a `:label`; POSIX extended regular
/// expressions (glibc's regcomp, as tftpd-hpa uses), applied from the top to the requested name
/// before any access check.
///
/// Flags: `r` rewrite the match with the replacement; `g` repeat the rule until it no longer
/// matches; `gg` replace every match in what follows the last one, as sed's `s///g`; `i` match
/// case-insensitively; `e` end processing when the rule matches; `E` end it only if the result
/// names a file that can be served (the caller's probe), undoing the rewrite otherwise; `s` start
/// again from the first rule; `j` jump to the label the replacement names; `a` refuse the request
/// (ERROR 2, the replacement as its message); `~` act when the regex does not match; `4`/`6`
/// only for IPv4/IPv6 clients; `G`/`P` only for reads/writes. The replacement knows `\0`-`\9` (the
/// match and its groups), `\i` (the client's address), `\x` (the address in hexadecimal), `\U`
/// `\L` `\E` (upper, lower, as is), and `\c` for a literal c (`\\`, `\ `, `\#`). `#` starts a
/// comment. The combinations in.tftpd(8) forbids (`r` with `~`, `a` or `j`; `e` with `a`, `E`, `j`
/// or `s`; ...) are bad lines, and so is a jump to a label that is not there.
///
/// A request's remapping runs on its worker's thread, so what it may cost is bounded: `maxSteps`
/// regex runs (`--map-steps`), a name no longer than `FilenameProcessing.longestName`, `matchingBudget`;
/// and the regexes glibc would compile or match out of all proportion are refused with the file
/// (`PatternShape`).
///
/// Immutable after parsing and shared by every worker: glibc's regexec is thread-safe.
public final class RemapRules: @unchecked Sendable {
    public struct Flags: OptionSet, Sendable {
        public let rawValue: UInt16
        public init(rawValue: UInt16) { self.rawValue = rawValue }
        public static let rewrite = Flags(rawValue: 1 << 0)
        public static let global = Flags(rawValue: 1 << 1)
        public static let exit = Flags(rawValue: 1 << 2)
        public static let restart = Flags(rawValue: 1 << 3)
        public static let abort = Flags(rawValue: 1 << 4)
        public static let inverse = Flags(rawValue: 1 << 5)
        public static let ipv4Only = Flags(rawValue: 1 << 6)
        public static let ipv6Only = Flags(rawValue: 1 << 7)
        public static let readsOnly = Flags(rawValue: 1 << 8)
        public static let writesOnly = Flags(rawValue: 1 << 9)
        /// `gg`: sed's global replacement, each search after the last replacement.
        public static let everyMatch = Flags(rawValue: 1 << 10)
        /// `E`: end if the result can be served, else undo.
        public static let exitIfServable = Flags(rawValue: 1 << 11)
        public static let jump = Flags(rawValue: 1 << 12)

        /// The letters of in.tftpd(8), in its words for the combinations it forbids.
        static let letters: [(Flags, Character)] = [
            (.rewrite, "r"), (.abort, "a"), (.exit, "e"), (.exitIfServable, "E"), (.restart, "s"), (.jump, "j"), (.inverse, "~"),
        ]
        /// Each flag with the ones it cannot be used with (in.tftpd(8); 7.3 refuses all but `s`
        /// with `j`, which loops there).
        static let forbidden: [(Flags, Flags)] = [
            (.rewrite, [.inverse, .abort, .jump]),
            (.abort, [.exit, .exitIfServable, .jump, .restart]),
            (.exit, [.exitIfServable, .jump, .restart]),
            (.exitIfServable, [.jump, .restart]),
            (.restart, [.jump]),
        ]
    }

    struct Rule {
        var line: Int
        var flags: Flags
        var regex: UnsafeMutablePointer<regex_t>
        var replacement: [UInt8]
        /// `j`: the index of the rule after the label.
        var target: Int?
        /// Its regex's `PatternShape.positions`: what a run costs per byte of name.
        var positions: Int
    }

    /// A rule file line that is not a rule; tftpd-hpa refuses to start on one, and so do we.
    public struct LineError: Error, Equatable, CustomStringConvertible {
        public var line: Int
        public var message: String
        public var description: String { "line \(line): \(message)" }
    }

    /// What the rules made of a file name.
    public enum Outcome: Equatable {
        case mapped([UInt8])
        /// An `a` rule matched: refuse with ERROR 2 and this message (nil: "Access violation").
        case refused(String?)
        /// The rules broke down on this name: refused too (ERROR 2 "Remap table failure").
        case failed(Failure)
    }

    /// How a rule set breaks down on a name; its description says so in a log line.
    public enum Failure: Equatable, CustomStringConvertible {
        /// Still rewriting after `maxSteps` regex runs or `matchingBudget`: the rules loop.
        case looped(steps: Int)
        /// A rewrite made the name longer than `FilenameProcessing.longestName` (a rule set that grows
        /// it on every pass would otherwise take memory until the step limit).
        case tooLong

        public var description: String {
            switch self {
            case .looped(let steps): "the rules did not settle (more than \(steps) regex runs, or \(matchingBudget) position-bytes of matching)"
            case .tooLong: "the rules made the name longer than \(FilenameProcessing.longestName) bytes"
            }
        }
    }

    /// tftpd-hpa's "deadman" (`--map-steps`): a rule set still rewriting after this many regex
    /// runs is looping.
    public static let defaultMaxSteps = 4096
    public static let stepRange = 1...Int(Int32.max)

    let rules: [Rule]
    public let maxSteps: Int
    /// Lines tftpd-hpa accepts but that probably do not say what was meant.
    public let warnings: [LineError]

    public var count: Int { rules.count }

    /// Parses a rule file; every bad line is reported (with its number), not just the first.
    public init(parsing text: [UInt8], maxSteps: Int = defaultMaxSteps) throws(RemapRulesError) {
        var rules: [Rule] = []
        var labels: [[UInt8]: Int] = [:]
        var jumps: [(rule: Int, label: [UInt8])] = []
        var errors: [LineError] = []
        var warnings: [LineError] = []
        var lineNumber = 0
        for line in text.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false) {
            lineNumber += 1
            do {
                switch try Self.parse(line: Array(line), number: lineNumber, warnings: &warnings) {
                case .nothing: break
                case .label(let label): if labels[label] == nil { labels[label] = rules.count }
                case .rule(let rule):
                    if rule.flags.contains(.jump) { jumps.append((rules.count, rule.replacement)) }
                    rules.append(rule)
                }
            } catch {
                errors.append(error)
            }
        }
        // 7.3 looks a label up when the jump is taken, and fails the request then: here the
        // file is refused, so that the operator hears of it at start.
        for (index, label) in jumps {
            if let target = labels[label] {
                rules[index].target = target
            } else {
                errors.append(LineError(line: rules[index].line, message: "label not found: \(sanitizedForLog(label))"))
            }
        }
        if !errors.isEmpty {
            for rule in rules { regfree(rule.regex); rule.regex.deallocate() }
            throw RemapRulesError(lines: errors.sorted { $0.line < $1.line })
        }
        self.rules = rules
        self.maxSteps = maxSteps
        self.warnings = warnings
    }

    deinit {
        for rule in rules {
            regfree(rule.regex)
            rule.regex.deallocate()
        }
    }

    /// Runs the rules over `filename` for a read (`isWrite` false) or write from `client`.
    /// `servable` is `E`'s probe: whether a name can be served (nil: never, as in.tftpd 7.3's
    /// `--map-test` finds). `trace` receives tftpd-hpa's verbosity-3 lines ("rule 2: rewrite: …").
    public func apply(to filename: [UInt8], isWrite: Bool, client: SocketAddress,
                      servable: (([UInt8]) -> Bool)? = nil, trace: ((String) -> Void)? = nil) -> Outcome {
        var current = filename
        var index = 0
        // A v4 client on a dual-stack socket (::ffff:a.b.c.d) is an IPv4 client, to 4 and 6
        // rules and to \i and \x, as tftpd-hpa sees it.
        let client = client.unmapped
        let skip: Flags = [isWrite ? .readsOnly : .writesOnly, client.isIPv6 ? .ipv4Only : .ipv6Only]
        var run = Run(input: filename, trace: trace)
        trace?("remap: input: \(sanitizedForLog(current))")
        while index < rules.count {
            let rule = rules[index]
            index += 1
            if !rule.flags.isDisjoint(with: skip) { continue }
            guard let found = search(rule, current, &run) else { return .failed(.looped(steps: maxSteps)) }
            guard found != rule.flags.contains(.inverse) else { continue }
            if rule.flags.contains(.inverse) {
                for i in run.matches.indices { run.matches[i] = regmatch_t(rm_so: -1, rm_eo: -1) }
            }
            if rule.flags.contains(.abort) {
                trace?("remap: rule \(rule.line): abort: \(sanitizedForLog(current))")
                // The message is the replacement alone, its escapes expanded (7.3's MATCHONLY): "a
                // ^secret denied" answers "denied" to "secret/x", not the name rewritten.
                let message = expand(rule.replacement, in: current, matches: run.matches, client: client, matchOnly: true)
                return .refused(message.isEmpty ? nil : String(decoding: message, as: UTF8.self))
            }
            if rule.flags.contains(.jump) {
                trace?("remap: rule \(rule.line): jump to \(sanitizedForLog(rule.replacement))")
                index = rule.target!
                continue
            }
            var result = current
            if rule.flags.contains(.rewrite) {
                switch rewrite(current, by: rule, client: client, &run) {
                case .mapped(let rewritten): result = rewritten
                case let other: return other
                }
            }
            if rule.flags.contains(.exitIfServable) {
                guard servable?(result) == true else {
                    trace?("remap: rule \(rule.line): ignoring rewrite (\(sanitizedForLog(result)) cannot be served)")
                    continue
                }
                trace?("remap: rule \(rule.line): \(sanitizedForLog(result)) can be served: exit")
                return .mapped(result)
            }
            if rule.flags.contains(.rewrite) {
                current = result
                trace?("remap: rule \(rule.line): rewrite: \(sanitizedForLog(current))")
            }
            if rule.flags.contains(.exit) {
                trace?("remap: rule \(rule.line): exit")
                return .mapped(current)
            }
            if rule.flags.contains(.restart) {
                trace?("remap: rule \(rule.line): restart")
                index = 0
            }
        }
        trace?("remap: done")
        return .mapped(current)
    }

    /// One run of the rules over a name: the regex runs made and their cost, counted against the
    /// limits, and the last run's matches.
    struct Run {
        let input: [UInt8]
        let trace: ((String) -> Void)?
        var steps = 0
        var work = 0
        var matches = [regmatch_t](repeating: regmatch_t(), count: 10)
    }

    /// One regex run over `subject` from `offset`, counted against the limits: whether it
    /// matched, or nil when the run is over its limits.
    func search(_ rule: Rule, _ subject: [UInt8], from offset: Int = 0, _ run: inout Run) -> Bool? {
        run.steps += 1
        run.work += max(rule.positions, 1) * (subject.count - offset + 1)
        guard run.steps <= maxSteps, run.work <= Self.matchingBudget else {
            run.trace?("remap: breaking loop, input = \(sanitizedForLog(run.input)), last = \(sanitizedForLog(subject))")
            return nil
        }
        return Self.search(rule.regex, in: subject, from: offset, matches: &run.matches)
    }

    /// `current` rewritten by `rule`, which matched it (the run's matches): once, at every
    /// match (`g`, as sed's s///g) or again until it no longer matches (`gg`); `.mapped` with the
    /// name, or `.failed`.
    func rewrite(_ current: [UInt8], by rule: Rule, client: SocketAddress, _ run: inout Run) -> Outcome {
        var result = expand(rule.replacement, in: current, matches: run.matches, client: client)
        if rule.flags.contains(.everyMatch) {
            // sed's s///g: each search starts after the last replacement (a byte further after an
            // empty match), `^` matches only at the start, and an empty match right after a match
            // is passed over.
            var end = result.count - (current.count - Int(run.matches[0].rm_eo))
            var afterMatch = run.matches[0].rm_so != run.matches[0].rm_eo
            var from = afterMatch ? end : end + 1
            while from <= result.count, result.count <= FilenameProcessing.longestName {
                guard let again = search(rule, result, from: from, &run) else { return .failed(.looped(steps: maxSteps)) }
                guard again else { break }
                let (start, stop) = (Int(run.matches[0].rm_so), Int(run.matches[0].rm_eo))
                if start == stop && start == end && afterMatch {
                    (from, afterMatch) = (end + 1, false)
                    continue
                }
                let before = result
                result = expand(rule.replacement, in: before, matches: run.matches, client: client)
                end = result.count - (before.count - stop)
                afterMatch = start != stop
                from = afterMatch ? end : end + 1
            }
        } else if rule.flags.contains(.global) {
            while result.count <= FilenameProcessing.longestName {
                guard let again = search(rule, result, &run) else { return .failed(.looped(steps: maxSteps)) }
                guard again else { break }
                result = expand(rule.replacement, in: result, matches: run.matches, client: client)
            }
        }
        guard result.count <= FilenameProcessing.longestName else {
            run.trace?("remap: rule \(rule.line): the name grew past \(FilenameProcessing.longestName) bytes")
            return .failed(.tooLong)
        }
        return .mapped(result)
    }

    /// regexec over a NUL-terminated copy of `subject` from `offset` (not a line's start there,
    /// when it is past 0: `^` matches only at the start); true when it matched. The offsets in
    /// `matches` count from the start of `subject`.
    static func search(_ regex: UnsafeMutablePointer<regex_t>, in subject: [UInt8], from offset: Int = 0,
                       matches: inout [regmatch_t]) -> Bool {
        var terminated = subject
        terminated.append(0)
        let found = terminated.withUnsafeBufferPointer { bytes in
            bytes.baseAddress!.withMemoryRebound(to: CChar.self, capacity: bytes.count) { string in
                regexec(regex, string + offset, matches.count, &matches, offset > 0 ? REG_NOTBOL : 0) == 0
            }
        }
        if found && offset > 0 {
            for i in matches.indices where matches[i].rm_so >= 0 {
                matches[i].rm_so += regoff_t(offset)
                matches[i].rm_eo += regoff_t(offset)
            }
        }
        return found
    }

    /// The text before the match, the replacement with its escapes expanded, the text after it
    /// (an inverse rule has no match: the replacement alone); `matchOnly`, the replacement alone.
    func expand(_ replacement: [UInt8], in subject: [UInt8], matches: [regmatch_t], client: SocketAddress,
                matchOnly: Bool = false) -> [UInt8] {
        let whole = matchOnly ? regmatch_t(rm_so: -1, rm_eo: -1) : matches[0]
        var out: [UInt8] = whole.rm_so >= 0 ? Array(subject[..<Int(whole.rm_so)]) : []
        var transform: (UInt8) -> UInt8 = { $0 }
        let upper: (UInt8) -> UInt8 = { (0x61...0x7A).contains($0) ? $0 - 0x20 : $0 }
        let lower: (UInt8) -> UInt8 = { (0x41...0x5A).contains($0) ? $0 + 0x20 : $0 }
        var i = 0
        while i < replacement.count {
            let byte = replacement[i]
            guard byte == UInt8(ascii: "\\"), i + 1 < replacement.count else {
                out.append(transform(byte))
                i += 1
                continue
            }
            let escape = replacement[i + 1]
            i += 2
            switch escape {
            case UInt8(ascii: "0")...UInt8(ascii: "9"):
                let group = matches[Int(escape - UInt8(ascii: "0"))]
                if group.rm_so >= 0 {
                    out += subject[Int(group.rm_so)..<Int(group.rm_eo)].map(transform)
                }
            case UInt8(ascii: "U"): transform = upper
            case UInt8(ascii: "L"): transform = lower
            case UInt8(ascii: "E"): transform = { $0 }
            case UInt8(ascii: "i"): out += Array(client.host.utf8).map(transform)
            case UInt8(ascii: "x"): out += Array(client.hexadecimalHost.utf8).map(transform)
            default: out.append(transform(escape))
            }
        }
        if whole.rm_so >= 0 { out += subject[Int(whole.rm_eo)...] }
        return out
    }

    /// What a line of the file holds.
    enum Line {
        case nothing
        case label([UInt8])
        case rule(Rule)
    }

    /// One line: a rule, a `:label`, or nothing (blank lines and comments).
    static func parse(line: [UInt8], number: Int, warnings: inout [LineError]) throws(LineError) -> Line {
        var cursor = 0
        guard let flagText = nextField(line, &cursor) else { return .nothing }
        if flagText.first == UInt8(ascii: ":") {
            // As 7.3: what follows the label's word is ignored.
            return .label(Array(flagText.dropFirst()))
        }
        var flags: Flags = []
        var regexFlags = REG_EXTENDED
        var gs = 0
        for byte in flagText {
            switch byte {
            case UInt8(ascii: "r"): flags.insert(.rewrite)
            case UInt8(ascii: "g"): gs += 1
            case UInt8(ascii: "e"): flags.insert(.exit)
            case UInt8(ascii: "E"): flags.insert(.exitIfServable)
            case UInt8(ascii: "s"): flags.insert(.restart)
            case UInt8(ascii: "a"): flags.insert(.abort)
            case UInt8(ascii: "j"): flags.insert(.jump)
            case UInt8(ascii: "i"): regexFlags |= REG_ICASE
            case UInt8(ascii: "~"): flags.insert(.inverse)
            case UInt8(ascii: "4"): flags.insert(.ipv4Only)
            case UInt8(ascii: "6"): flags.insert(.ipv6Only)
            case UInt8(ascii: "G"): flags.insert(.readsOnly)
            case UInt8(ascii: "P"): flags.insert(.writesOnly)
            default:
                throw LineError(line: number, message: "flags \"\(sanitizedForLog(flagText))\" contain the unknown flag \"\(sanitizedForLog([byte]))\" (known: r g gg i e E s j a ~ 4 6 G P)")
            }
        }
        for (flag, others) in Flags.forbidden where flags.contains(flag) {
            if let other = Flags.letters.first(where: { others.contains($0.0) && flags.contains($0.0) }) {
                let name = Flags.letters.first { $0.0 == flag }!.1
                throw LineError(line: number, message: "rule flags \(name) and \(other.1) cannot be combined")
            }
        }
        // As tftpd-hpa: g and gg mean nothing without r.
        if flags.contains(.rewrite) && gs > 0 { flags.insert(gs == 1 ? .global : .everyMatch) }
        guard let pattern = nextField(line, &cursor) else {
            throw LineError(line: number, message: "flags \"\(sanitizedForLog(flagText))\" but no regular expression")
        }
        let replacement = nextField(line, &cursor) ?? []
        if flags.contains(.jump) && replacement.isEmpty { throw LineError(line: number, message: "no label in j rule") }
        if let extra = nextField(line, &cursor) {
            // tftpd-hpa ignores the rest of the line, so a working file may have it: said, not refused.
            warnings.append(LineError(line: number, message: "ignored \"\(sanitizedForLog(extra))\" after the replacement (a space in it must be written \"\\ \")"))
        }
        let shape = PatternShape(pattern)
        if shape.hasBackReference {
            throw LineError(line: number, message: "\"\(sanitizedForLog(pattern))\" has a back-reference (\\1-\\9): glibc matches it by backtracking, and one long requested name would stall the server for minutes (tftpd-hpa accepts it); a replacement may use \\1-\\9")
        }
        guard shape.positions <= largestPattern else {
            throw LineError(line: number, message: "\"\(sanitizedForLog(pattern))\" stands for \(shape.positions) characters once its repetitions are written out, more than \(largestPattern): regcomp would take memory out of all proportion")
        }
        let regex = UnsafeMutablePointer<regex_t>.allocate(capacity: 1)
        let status = (pattern + [0]).withUnsafeBufferPointer { bytes in
            bytes.baseAddress!.withMemoryRebound(to: CChar.self, capacity: bytes.count) { regcomp(regex, $0, regexFlags) }
        }
        guard status == 0 else {
            var message = [CChar](repeating: 0, count: 256)
            regerror(status, regex, &message, message.count)
            regex.deallocate()
            let text = String(decoding: message.prefix(while: { $0 != 0 }).map { UInt8(bitPattern: $0) }, as: UTF8.self)
            throw LineError(line: number, message: "bad regular expression \"\(sanitizedForLog(pattern))\": \(text)")
        }
        return .rule(Rule(line: number, flags: flags, regex: regex, replacement: replacement, positions: shape.positions))
    }

    /// The next field: leading blanks skipped, ends at an unescaped blank or `#` (a comment);
    /// escapes are kept for the regex and the replacement to interpret. nil at the end.
    static func nextField(_ line: [UInt8], _ cursor: inout Int) -> [UInt8]? {
        func isSpace(_ byte: UInt8) -> Bool { byte == 0x20 || (0x09...0x0D).contains(byte) }
        while cursor < line.count && isSpace(line[cursor]) { cursor += 1 }
        guard cursor < line.count, line[cursor] != UInt8(ascii: "#") else {
            cursor = line.count
            return nil
        }
        var field: [UInt8] = []
        var escaped = false
        while cursor < line.count {
            let byte = line[cursor]
            if !escaped && (isSpace(byte) || byte == UInt8(ascii: "#")) { break }
            // Two backslashes leave the state unescaped again.
            escaped = !escaped && byte == UInt8(ascii: "\\")
            field.append(byte)
            cursor += 1
        }
        return field
    }
}

/// The rules in force, replaced whole when SIGHUP reloads the file (as in.tftpd re-reads it);
/// each request takes them once, under a lock, never per packet.
public final class RemapRuleSet: Sendable {
    private let rules: Mutex<RemapRules>
    /// Reads the file again: the new rules, or throws why not (the old ones stay).
    let reload: (@Sendable () throws -> RemapRules)?

    public init(_ rules: RemapRules, reload: (@Sendable () throws -> RemapRules)? = nil) {
        self.rules = Mutex(rules)
        self.reload = reload
    }

    public var current: RemapRules { rules.withLock { $0 } }

    /// Loads the file again (rules given without a file stay as they are); the next request
    /// uses what it returns.
    @discardableResult
    public func reloadNow() throws -> RemapRules {
        guard let reload else { return current }
        let fresh = try reload()
        rules.withLock { $0 = fresh }
        return fresh
    }
}

/// A rule file with bad lines: each with its number.
public struct RemapRulesError: Error, CustomStringConvertible {
    public var lines: [RemapRules.LineError]
    public var description: String { lines.map(\.description).joined(separator: "\n") }
}

extension SocketAddress {
    /// The address in tftpd-hpa's `\x` form: 8 (IPv4) or 32 (IPv6) upper-case hex digits.
    var hexadecimalHost: String {
        withUnsafeBytes(of: storage) { raw in
            let bytes: [UInt8] = isIPv6
                ? withUnsafeBytes(of: raw.load(as: sockaddr_in6.self).sin6_addr) { Array($0) }
                : withUnsafeBytes(of: raw.load(as: sockaddr_in.self).sin_addr) { Array($0) }
            return bytes.map { ($0 < 16 ? "0" : "") + String($0, radix: 16, uppercase: true) }.joined()
        }
    }
}
