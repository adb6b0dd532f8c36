extension RemapRules {
    /// What a rule's regular expression will cost glibc, read from its text before regcomp sees it.
    ///
    /// glibc compiles a bounded repetition by writing its operand out: `(.{1,500}){1,500}` is
    /// 250,000 positions and 1.7 GB at regcomp, from an 18-byte line. Matching costs about
    /// positions x name length. A back-reference (`\1`-`\9` in the regex) is matched by
    /// backtracking: `(x*)*\1y` takes 5 s on a 200-byte name and does not finish on 400 bytes.
    struct PatternShape: Equatable {
        /// Characters, escapes and bracket expressions once every repetition is written out as
        /// regcomp does: `a{2,5}` is 5, `(ab){3}` is 6, `a+` is 2 (`aa*`), `a{2,}` is 3.
        var positions: Int
        /// `\1`-`\9` outside a bracket expression.
        var hasBackReference: Bool

        init(_ pattern: [UInt8]) {
            // The positions of the open groups, innermost last; [0] is the whole pattern.
            var groups = [0]
            // The positions of the last atom, which a repetition that follows applies to.
            var last = 0
            var backReference = false
            func add(_ count: Int) {
                groups[groups.count - 1] = Self.capped(groups[groups.count - 1] + count)
                last = count
            }
            func repeatLast(_ copies: Int) {
                let top = groups.count - 1
                groups[top] = Self.capped(groups[top] - last + Self.capped(last * copies))
                last = Self.capped(last * copies)
            }
            var i = 0
            while i < pattern.count {
                let byte = pattern[i]
                i += 1
                switch byte {
                case UInt8(ascii: "\\"):
                    if i < pattern.count {
                        if (UInt8(ascii: "1")...UInt8(ascii: "9")).contains(pattern[i]) { backReference = true }
                        i += 1
                    }
                    add(1)
                case UInt8(ascii: "["):
                    i = Self.endOfBracket(pattern, from: i)
                    add(1)
                case UInt8(ascii: "("):
                    groups.append(0)
                    last = 0
                case UInt8(ascii: ")") where groups.count > 1:
                    add(groups.removeLast())
                case UInt8(ascii: "|"):
                    last = 0
                case UInt8(ascii: "*"), UInt8(ascii: "?"):
                    break
                case UInt8(ascii: "+"):
                    repeatLast(2)
                case UInt8(ascii: "{"):
                    if let (copies, end) = Self.interval(pattern, from: i) {
                        repeatLast(copies)
                        i = end
                    } else {
                        add(1)
                    }
                default:
                    add(1)
                }
            }
            positions = groups.reduce(0) { Self.capped($0 + $1) }
            hasBackReference = backReference
        }

        /// Far beyond any limit and far from overflow: every figure above stops here.
        static func capped(_ value: Int) -> Int { min(value, 1 << 40) }

        /// Just past the `]` that closes a bracket expression opened before `start`: a `]` first
        /// (after an optional `^`) is a member, and `[:alpha:]`, `[=a=]`, `[.-.]` are one each.
        static func endOfBracket(_ pattern: [UInt8], from start: Int) -> Int {
            var i = start
            if i < pattern.count && pattern[i] == UInt8(ascii: "^") { i += 1 }
            if i < pattern.count && pattern[i] == UInt8(ascii: "]") { i += 1 }
            while i < pattern.count && pattern[i] != UInt8(ascii: "]") {
                if pattern[i] == UInt8(ascii: "["), i + 1 < pattern.count, Array(":=.".utf8).contains(pattern[i + 1]) {
                    let close = pattern[i + 1]
                    i += 2
                    while i + 1 < pattern.count && !(pattern[i] == close && pattern[i + 1] == UInt8(ascii: "]")) { i += 1 }
                    i += 2
                } else {
                    i += 1
                }
            }
            return min(i + 1, pattern.count)
        }

        /// `{m}`, `{m,}`, `{m,n}` or `{,n}` after the `{` at `start - 1`: how many copies of its
        /// operand regcomp writes out (`{m,}` is m and a starred one), and where it ends; nil
        /// when the brace does not open an interval (glibc then takes it as a character).
        static func interval(_ pattern: [UInt8], from start: Int) -> (copies: Int, end: Int)? {
            var i = start
            func number() -> Int? {
                var value: Int?
                while i < pattern.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(pattern[i]) {
                    value = min((value ?? 0) * 10 + Int(pattern[i] - UInt8(ascii: "0")), 1 << 20)
                    i += 1
                }
                return value
            }
            let low = number()
            var high = low
            var open = false
            if i < pattern.count && pattern[i] == UInt8(ascii: ",") {
                i += 1
                high = number()
                open = high == nil
            }
            guard i < pattern.count, pattern[i] == UInt8(ascii: "}"), low != nil || high != nil else { return nil }
            return (open ? (low ?? 0) + 1 : (high ?? 0), i + 1)
        }
    }

    /// The most positions (`PatternShape`) one rule's regex may stand for: some 25 MB of
    /// regcomp's memory and 0.1 s of matching a 4,096-byte name at worst. Real rules need tens.
    public static let largestPattern = 1_000

    /// What one name's remapping may cost: the sum, over every regex run, of the rule's positions
    /// times the length of the name it ran on (about 25 ns a unit at worst; under half a second).
    /// A rule set that needs more is treated as one that loops.
    public static let matchingBudget = 1 << 24
}
