import Testing
@testable import StampedeServer
import StampedeIO
import StampedeProtocol

/// tftpd-hpa's remap rules (in.tftpd(8), "FILENAME REMAPPING"): one behaviour per test.
@Suite struct RemapRulesSpec {
    let v4 = SocketAddress(parsing: "192.0.2.169:1234", defaultPort: 0)!
    let v6 = SocketAddress(parsing: "[2001:db8::1]:1234", defaultPort: 0)!

    func rules(_ text: String) throws -> RemapRules { try RemapRules(parsing: Array(text.utf8)) }

    func map(_ text: String, _ name: String, write: Bool = false, client: SocketAddress? = nil) throws -> String {
        switch try rules(text).apply(to: Array(name.utf8), isWrite: write, client: client ?? v4) {
        case .mapped(let bytes): return String(decoding: bytes, as: UTF8.self)
        case .refused(let message): return "REFUSED(\(message ?? "-"))"
        case .looped: return "LOOPED"
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

    @Test func aRefusesWithTheReplacementAsMessage() throws {
        #expect(try map(#"a \.\."#, "../etc/passwd") == "REFUSED(-)")
        #expect(try map(#"a ^secret/ No\ secrets\ here"#, "secret/key") == "REFUSED(No secrets herekey)")
        #expect(try map(#"a ^secret/.*$ No\ secrets\ for\ \i"#, "secret/key") == "REFUSED(No secrets for 192.0.2.169)")
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

    @Test func tracesSayWhatEachRuleDid() throws {
        var lines: [String] = []
        _ = try rules("r a b\nre b c\nr c d").apply(to: Array("a".utf8), isWrite: false, client: v4) { lines.append($0) }
        #expect(lines == ["remap: input: a", "remap: rule 1: rewrite: b", "remap: rule 2: rewrite: c", "remap: rule 2: exit"])
    }
}
