@testable import StampedeFiles
import StampedeIO
import Testing

/// tftpd-hpa's remap rules (in.tftpd(8), "FILENAME REMAPPING"): one behaviour per test.
@Suite struct RemapRulesSpec {
    let v4 = SocketAddress(parsing: "192.0.2.169:1234", defaultPort: 0)!
    let v6 = SocketAddress(parsing: "[2001:db8::1]:1234", defaultPort: 0)!

    func rules(_ text: String) throws -> RemapRules { try RemapRules(parsing: Array(text.utf8)) }

    func map(_ text: String, _ name: String, write: Bool = false, client: SocketAddress? = nil,
             servable: Set<String>? = nil, steps: Int = RemapRules.defaultMaxSteps) throws -> String {
        let probe = servable.map { names in { (name: [UInt8]) in names.contains(String(decoding: name, as: UTF8.self)) } }
        switch try RemapRules(parsing: Array(text.utf8), maxSteps: steps)
            .apply(to: Array(name.utf8), isWrite: write, client: client ?? v4, servable: probe) {
        case .mapped(let bytes): return String(decoding: bytes, as: UTF8.self)
        case .refused(let message): return "REFUSED(\(message ?? "-"))"
        case .failed(.looped): return "LOOPED"
        case .failed(.tooLong): return "TOO LONG"
        }
    }

    func lineErrors(_ text: String) -> [Int] {
        do {
            _ = try rules(text)
            return []
        } catch let error as RemapRulesError {
            return error.lines.map(\.line)
        } catch {
            return [-1]
        }
    }

    // MARK: Rewriting

    @Test func rReplacesTheFirstMatchKeepingWhatSurroundsIt() throws {
        #expect(try map("r foo bar", "a/foo/foo.bin") == "a/bar/foo.bin")
    }

    @Test func withoutRARuleThatMatchesChangesNothing() throws {
        #expect(try map("e foo bar", "foo") == "foo")
    }

    @Test func aRuleThatDoesNotMatchChangesNothing() throws {
        #expect(try map("r ^pxelinux bar", "boot/pxelinux.0") == "boot/pxelinux.0")
    }

    @Test func gRepeatsTheRuleUntilItNoLongerMatches() throws {
        #expect(try map(#"rg \\ /"#, #"a\b\c\d"#) == "a/b/c/d")
        #expect(try map(#"r \\ /"#, #"a\b\c\d"#) == #"a/b\c\d"#)
    }

    @Test func gWithoutRIsIgnored() throws {
        #expect(try map("g x y", "xx") == "xx")
    }

    @Test func iMatchesCaseInsensitively() throws {
        #expect(try map("ri ^PXELINUX.CFG/ pxelinux.cfg/", "PxeLinux.Cfg/default") == "pxelinux.cfg/default")
        #expect(try map("r ^PXELINUX.CFG/ pxelinux.cfg/", "PxeLinux.Cfg/default") == "PxeLinux.Cfg/default")
    }

    @Test func rulesRunInOrderEachOnTheResultOfTheLast() throws {
        #expect(try map("r a b\nr b c", "a") == "c")
        #expect(try map("r b c\nr a b", "a") == "b")
    }

    @Test func eEndsProcessingWhenItMatches() throws {
        #expect(try map("re a b\nr b c", "a") == "b")
        #expect(try map("re x y\nr a c", "a") == "c")
    }

    @Test func sStartsAgainFromTheFirstRule() throws {
        // Rule 1 only matches after rule 2 has run; the restart makes it see that.
        #expect(try map("r ^b$ first\nrs ^a$ b", "a") == "first")
        #expect(try map("r ^b$ first\nr ^a$ b", "a") == "b")
    }

    @Test func aRefusesWithTheReplacementAloneAsMessage() throws {
        #expect(try map(#"a \.\."#, "../etc/passwd") == "REFUSED(-)")
        // The replacement, not the name rewritten with it (in.tftpd 7.3 answers "denied").
        #expect(try map(#"a ^secret denied"#, "secret/x") == "REFUSED(denied)")
        #expect(try map(#"a ^secret/ No\ secrets\ here"#, "secret/key") == "REFUSED(No secrets here)")
        #expect(try map(#"a ^secret/.*$ No\ secrets\ for\ \i"#, "secret/key") == "REFUSED(No secrets for 192.0.2.169)")
        #expect(try map(#"a ^(pri)vate no-\1-here"#, "private/y") == "REFUSED(no-pri-here)")
    }

    @Test func aRuleAfterAnExitIsNotReached() throws {
        #expect(try map("re ^ok ok\na .", "ok") == "ok")
    }

    @Test func tildeActsWhenTheRegexDoesNotMatch() throws {
        #expect(try map(#"a~ ^boot/ Only\ boot/"#, "etc/passwd") == "REFUSED(Only boot/)")
        #expect(try map(#"a~ ^boot/ Only\ boot/"#, "boot/x") == "boot/x")
        #expect(try map("e~ ^boot/\nr .* nope", "x") == "x")
    }

    @Test func fourAndSixLimitARuleToOneFamily() throws {
        let text = "r4 ^ v4/\nr6 ^ v6/"
        #expect(try map(text, "f", client: v4) == "v4/f")
        #expect(try map(text, "f", client: v6) == "v6/f")
    }

    @Test func gAndPLimitARuleToReadsOrWrites() throws {
        let text = "rG ^ get/\nrP ^ put/"
        #expect(try map(text, "f", write: false) == "get/f")
        #expect(try map(text, "f", write: true) == "put/f")
    }

    // MARK: Substitutions

    @Test func backslashZeroIsTheWholeMatchAndDigitsAreGroups() throws {
        #expect(try map(#"r ([a-z]+)-([0-9]+) \2-\1[\0]"#, "x/abc-42.y") == "x/42-abc[abc-42].y")
    }

    @Test func aGroupThatDidNotTakePartIsEmpty() throws {
        #expect(try map(#"r a(x)?b <\1>"#, "ab") == "<>")
    }

    @Test func backslashIIsTheClientAddress() throws {
        #expect(try map(#"r ^ \i/"#, "f", client: v4) == "192.0.2.169/f")
        #expect(try map(#"r ^ \i/"#, "f", client: v6) == "2001:db8::1/f")
    }

    @Test func backslashXIsTheClientAddressInUpperCaseHex() throws {
        #expect(try map(#"r ^ \x/"#, "f", client: v4) == "C00002A9/f")
        #expect(try map(#"r ^ \x/"#, "f", client: v6) == "20010DB8000000000000000000000001/f")
    }

    @Test func upperLowerAndEndChangeTheCaseOfWhatFollows() throws {
        #expect(try map(#"r ^(.*)$ \L\1"#, "PXELINUX.0") == "pxelinux.0")
        #expect(try map(#"r ^([a-z]+)-([a-z]+)$ \U\1\E-\2"#, "abc-def") == "ABC-def")
        #expect(try map(#"r ^ \Ux\i-"#, "f", client: v6) == "X2001:DB8::1-f")
    }

    @Test func otherEscapesAreTheCharacterItself() throws {
        #expect(try map(##"r ^ a\ b\#c\\d\q"##, "") == #"a b#c\dq"#)
    }

    @Test func aSpaceInTheRegexIsEscaped() throws {
        #expect(try map(#"r my\ file my_file"#, "my file") == "my_file")
    }

    @Test func aRuleWithoutReplacementDeletesTheMatchAsForJunkAfterANameFromSomePXEROMs() throws {
        let junkRule = try RemapRules(parsing: Array("r ".utf8) + [0xFF] + Array("+$".utf8))
        let outcome = junkRule.apply(to: Array("pxelinux.0".utf8) + [0xFF, 0xFF], isWrite: false, client: v4)
        #expect(outcome == .mapped(Array("pxelinux.0".utf8)))
    }

    // MARK: The file

    @Test func commentsAndBlankLinesAreNotRules() throws {
        let parsed = try rules("# a comment\n\n   \t\nr a b # trailing comment\n  # indented comment\n")
        #expect(parsed.count == 1)
        #expect(try map("r a b#c", "a") == "b")
    }

    @Test func aFourthFieldIsIgnoredWithAWarningAsTftpdHpaIgnoresIt() throws {
        let parsed = try rules("r a b c")
        #expect(parsed.warnings.map(\.line) == [1])
        #expect(try map("r a b c", "a") == "b")
    }

    @Test func aCarriageReturnEndsAFieldLikeAnyBlank() throws {
        #expect(try map("r a b\r\n", "a") == "b")
    }

    @Test func badRulesAreRejectedWithTheirLineNumbers() {
        #expect(lineErrors("r a b\nx a b\nr ok ok") == [2])
        #expect(lineErrors("r a b\n\nr") == [3])
        #expect(lineErrors("r (unclosed b\n# fine\nr~ a b") == [1, 3])
        #expect(lineErrors("R a b") == [1])
        #expect(lineErrors("r a[ b") == [1])
    }

    @Test func theErrorSaysWhatIsWrong() {
        do {
            _ = try rules("rq a b")
            Issue.record("parsed")
        } catch {
            #expect("\(error)".contains("line 1"))
            #expect("\(error)".contains("\"q\""))
        }
    }

    @Test func aLoopingRuleSetIsStoppedAndRefused() throws {
        #expect(try map("rg a a", "a") == "LOOPED")
        #expect(try map("rs a b\nrs b a", "a") == "LOOPED")
    }

    @Test func aRuleSetThatGrowsTheNameIsStoppedBeforeItOutgrowsAPath() throws {
        // Found by the fuzzer: each pass adds 40 bytes; until the step limit the name reached
        // 160 KB and one request took 2 GB of copies and matches.
        let growing = "rs a b\nrs b " + String(repeating: "x", count: 40) + "a"
        #expect(try map(growing, "a") == "TOO LONG")
        #expect(try map("rg x xx", "x") == "TOO LONG")
        let longest = String(repeating: "y", count: FilenameProcessing.longestName - 1)
        #expect(try map("r $ z", longest) == longest + "z")
        #expect(try map("r $ zz", longest) == "TOO LONG")
    }

    @Test func aRuleSetThatSettlesOnlyAfterTooMuchMatchingIsStoppedAsLooping() throws {
        // 1,000 passes (2,000 runs, within the step limit), each running a 991-position regex
        // over a 1,000-byte name: a billion position-bytes. The light rule alone settles.
        let heavy = "r (.{1,10}){1,98}z$ q\nrs a b"
        let name = String(repeating: "a", count: 1_000)
        #expect(try map(heavy, name) == "LOOPED")
        #expect(try map("rs a b", name) == String(repeating: "b", count: 1_000))
        #expect(try map(heavy, "aaa") == "bbb")
    }

    @Test func repetitionsAreCountedAsRegcompWritesThemOut() {
        func positions(_ pattern: String) -> Int { RemapRules.PatternShape(Array(pattern.utf8)).positions }
        #expect(positions("abc") == 3)
        #expect(positions("a{2,5}") == 5)
        #expect(positions("(ab){3}") == 6)
        #expect(positions("a+b*c?") == 4)
        #expect(positions("a{2,}") == 3)
        #expect(positions("x{,4}") == 4)
        #expect(positions("a{0}b") == 1)
        #expect(positions("(.{1,500}){1,500}") == 250_000)
        #expect(positions("((.{1,10}){1,10}){1,10}") == 1_000)
        #expect(positions("[]{}a-z[:alpha:]]{4}") == 4)
        #expect(positions(#"\{3}"#) == 3)
        #expect(positions("a{x}") == 4)
        #expect(positions("^pxelinux.cfg/01-([0-9a-f]{2}-){5}[0-9a-f]{2}$") == 35)
        #expect(positions("(a|bc){9999999999999999999999}") > RemapRules.largestPattern)
    }

    @Test func aRegexThatExpandsBeyondTheLimitIsRefusedAtLoad() {
        // 18 bytes that took regcomp 1.7 GB.
        #expect(lineErrors("r (.{1,500}){1,500} x\nr ((.{1,10}){1,10}){1,10} x") == [1])
        do {
            _ = try rules("r (.{1,500}){1,500} x")
            Issue.record("parsed")
        } catch {
            #expect("\(error)".contains("250000 characters"))
        }
    }

    @Test func aBackReferenceInTheRegexIsRefusedButNotInTheReplacement() {
        // (x*)*\1y takes glibc 5 s on a 200-byte name, more than a minute on 400.
        #expect(lineErrors(#"r (x*)*\1y z"#) == [1])
        #expect(lineErrors(#"r ([ab])\2 z"#) == [1])
        #expect(lineErrors(#"r [\1] z"#) == [])
        #expect(lineErrors(#"r ^(pxelinux\.cfg)/(.*) \1/\2"#) == [])
    }

    // MARK: 5.4-7.3: labels and j, E, gg, --map-steps

    @Test func jJumpsToTheRuleAfterItsLabelWhenItMatches() throws {
        let text = "j ^boot to_boot\nr ^ other/\ne ^\n:to_boot\nr ^boot(.*) B\\1\n:end\nr $ .end"
        #expect(try map(text, "boot.x") == "B.x.end")
        #expect(try map(text, "foo") == "other/foo")
    }

    @Test func jWithTildeJumpsWhenTheRegexDoesNotMatch() throws {
        let text = "j~ ^boot skip\nr ^ pre-\n:skip\nr $ -post"
        #expect(try map(text, "boot.x") == "pre-boot.x-post")
        #expect(try map(text, "foo") == "foo-post")
    }

    @Test func aJumpBackwardsLoopsUntilItNoLongerMatches() throws {
        #expect(try map(":top\nr ^ x\nj ^xx?n top", "n") == "xxxn")
        #expect(try map(":top\nj ^ top", "n") == "LOOPED")
    }

    @Test func labelsMayBeIndentedRepeatedOrFollowedByWordsAsIn73() throws {
        #expect(try map("j ^ lab\nr ^ skipped\n  :lab extra words\nr $ y", "n") == "ny")
        #expect(try map("j ^ a\n:a\nr ^ 1\n:a\nr ^ 2", "n") == "21n")  // the first :a
        #expect(try map("r ^ x\nj ^x end\n:end", "n") == "xn")  // a label on the last line ends
    }

    @Test func aJumpWithoutALabelOrToOneNotThereIsABadLine() {
        #expect(lineErrors("r a b\nj ^\nr c d") == [2])
        #expect(lineErrors("r a b\nj ^ nowhere\n:somewhere") == [2])
        do {
            _ = try rules("j ^ nowhere")
            Issue.record("parsed")
        } catch {
            #expect("\(error)" == "line 1: label not found: nowhere")
        }
    }

    @Test func capitalEEndsOnlyWhenTheResultCanBeServedAndUndoesItOtherwise() throws {
        let text = "rE ^(.*)\\.txt$ \\1.cfg\nr ^ fallback-"
        #expect(try map(text, "hello.txt", servable: ["hello.cfg"]) == "hello.cfg")
        #expect(try map(text, "other.txt", servable: ["hello.cfg"]) == "fallback-other.txt")
        // Without r, the name as it is; without a probe (--map-test with no directory), never.
        #expect(try map("E ^pxe\nr ^ no/", "pxe", servable: ["pxe"]) == "pxe")
        #expect(try map("E ^pxe\nr ^ no/", "pxe") == "no/pxe")
        // A per-host file with a default, as docs/http-boot.md writes it.
        let perHost = "rE ^boot\\.ipxe$ boot/\\i.ipxe\nr ^boot\\.ipxe$ boot/default.ipxe"
        #expect(try map(perHost, "boot.ipxe", servable: ["boot/192.0.2.169.ipxe"]) == "boot/192.0.2.169.ipxe")
        #expect(try map(perHost, "boot.ipxe", servable: []) == "boot/default.ipxe")
    }

    @Test func ggReplacesEveryMatchInWhatFollowsAsSedDoes() throws {
        #expect(try map("rgg a X\nrg b Y", "aaa") == "XXX")
        #expect(try map("rgg a X\nrg b Y", "abba") == "XYYX")
        #expect(try map("rgg a aa", "aba") == "aabaa")  // the replacement is not searched again
        #expect(try map("rg a aa", "a") == "TOO LONG")  // as g would
        #expect(try map("rgg ^a X", "aab") == "Xab")  // ^ only at the start
        // Empty matches as GNU sed: `echo XabE | sed 's/x*/-/g'` and `echo abbcb | sed -E 's/b*/-/g'`.
        #expect(try map("rgg x* -", "XabE") == "-X-a-b-E-")
        #expect(try map("rgg b* -", "abbcb") == "-a-c-")
        #expect(try map("rgg $ E", "ab") == "abE")
        #expect(try map("rgg (.)(.) \\2\\1", "abcde") == "badce")  // groups are the current match's
    }

    @Test func gAndGgMeanNothingWithoutR() throws {
        #expect(try map("gg a X", "aaa") == "aaa")
        #expect(try map("ggg a X\nr ^ y", "aaa") == "yaaa")
    }

    @Test func theCombinationsIn73RefusesAreBadLinesInItsWords() {
        let refused = ["ra": "r and a", "r~": "r and ~", "rj": "r and j", "ea": "a and e", "eE": "e and E", "ej": "e and j",
                       "es": "e and s", "Ea": "a and E", "Ej": "E and j", "Es": "E and s", "sa": "a and s", "aj": "a and j",
                       "sj": "s and j"]
        for (flags, words) in refused {
            do {
                _ = try rules("r ^x y\n\(flags) ^foo bar")
                Issue.record("\(flags) parsed")
            } catch {
                #expect("\(error)" == "line 2: rule flags \(words) cannot be combined", "\(flags)")
            }
        }
        for flags in ["rgE", "rggi", "j~4G", "aiP", "E~", "rE6"] {
            #expect(lineErrors("\(flags) ^foo bar\n:bar") == [], "\(flags)")
        }
    }

    @Test func mapStepsBoundsTheRegexRuns() throws {
        let text = "r ^ x\nj ^xx?n top\n:top\nr ^ y"
        #expect(try map(text, "n", steps: 3) == "yxn")
        #expect(try map(text, "n", steps: 2) == "LOOPED")
    }

    @Test func tracesSayWhatEachRuleDid() throws {
        var lines: [String] = []
        _ = try rules("r a b\nre b c\nr c d").apply(to: Array("a".utf8), isWrite: false, client: v4, trace: { lines.append($0) })
        #expect(lines == ["remap: input: a", "remap: rule 1: rewrite: b", "remap: rule 2: rewrite: c", "remap: rule 2: exit"])
    }
}
