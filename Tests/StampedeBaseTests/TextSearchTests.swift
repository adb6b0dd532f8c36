import Testing
@testable import StampedeBase

@Suite struct TextSearchSpec {
    /// What the byte search finds is what the standard library's search finds.
    @Test(arguments: [
        ("tftp://10.0.0.1/boot.ipxe", "://"), ("boot.ipxe", "://"), ("", "${"), ("${", "${"), ("a$b${c}", "${"),
        ("é://x", "://"), ("$$${", "${"), ("pxelinux.cfg/01-aa", "/pxelinux.cfg/01-"), ("x/pxelinux.cfg/01-aa", "/pxelinux.cfg/01-"),
        ("aaab", "aab"), ("ab", "abc"), ("😀${x}", "${"),
    ])
    func findsWhatTheStandardLibraryFinds(text: String, target: String) {
        let expected = text.firstRange(of: target)
        #expect(text.byteRange(of: target) == expected)
        #expect(text.containsBytes(StaticString("${")) == text.contains("${"))
        let sub = text.dropFirst()
        #expect(sub.byteRange(of: target) == sub.firstRange(of: target))
    }

    @Test func anEmptyTargetIsFoundAtTheStart() {
        #expect("abc".byteRange(of: "") == "abc".startIndex..<"abc".startIndex)
    }

    @Test func hexTextWritesPairsWithTheirSeparator() {
        #expect(hexText([0x52, 0x54, 0x00, 0xab, 0xcd, 0xef], separator: UInt8(ascii: ":")) == "52:54:00:ab:cd:ef")
        #expect(hexText([0x00, 0xff], separator: UInt8(ascii: "-")) == "00-ff")
        #expect(hexText([0x01, 0x02, 0x03, 0x04], separator: UInt8(ascii: " "), every: 2) == "0102 0304")
        #expect(hexText([0x0f]) == "0f")
        #expect(hexText([UInt8]()) == "")
        #expect(hexText([UInt8](repeating: 0xa5, count: 40)).count == 80)
    }
}

@Suite struct HexTextAtPlaces {
    @Test func aUUIDIsWrittenInItsFiveGroups() {
        let bytes: [UInt8] = Array(0..<16)
        let text = bytes.withUnsafeBufferPointer { hexText(buffer: $0, separator: UInt8(ascii: "-"), at: [4, 6, 8, 10]) }
        #expect(text == "00010203-0405-0607-0809-0a0b0c0d0e0f")
        let short = bytes.prefix(5).withUnsafeBufferPointer { hexText(buffer: $0, separator: UInt8(ascii: "-"), at: [4, 6, 8, 10]) }
        #expect(short == "00010203-04")
    }
}

@Suite struct ByteClasses {
    @Test func aPrefixIsFoundInEitherCaseOfItsLetters() {
        #expect("HTTP://x".hasPrefixIgnoringCase("http://"))
        #expect("hTtPs://x".hasPrefixIgnoringCase("https://"))
        #expect(!"http:/x".hasPrefixIgnoringCase("http://"))
        #expect(!"htt".hasPrefixIgnoringCase("http://"))
        // Only letters fold: ":" is not "\u{1a}" (":" | 0x20 is itself, "\u{1a}" | 0x20 is ":").
        #expect(!"http\u{1a}//".hasPrefixIgnoringCase("http://"))
        #expect(!"filé".hasPrefixIgnoringCase("file:"))
    }

    @Test func aSuffixIsFoundInEitherCaseOfItsLetters() {
        #expect("SHIMX64.EFI".hasSuffixIgnoringCase(".efi") && "grubx64.efi".hasSuffixIgnoringCase(".efi"))
        #expect(!"grubx64.efix".hasSuffixIgnoringCase(".efi") && !"efi".hasSuffixIgnoringCase(".efi"))
        #expect(!"x\u{e}efi".hasSuffixIgnoringCase(".efi"))  // "." | 0x20 is itself: only letters fold
    }

    @Test func aPathsFileNameFollowsItsLastSlash() {
        #expect("efi/boot/grubx64.efi".lastPathComponent == "grubx64.efi")
        #expect("boot.ipxe".lastPathComponent == "boot.ipxe" && "dir/".lastPathComponent == "")
        let path = "a/b/c"
        #expect(path[..<path.lastPathComponent.startIndex] == "a/b/")
        #expect(path.dropFirst(2).lastPathComponent == "c")
    }

    @Test func lettersDigitsAndTheOthersGivenPass() {
        #expect("node-07.rack_2".isAlphanumeric(or: "-._"))
        #expect(!"node 07".isAlphanumeric(or: "-._"))
        #expect(!"café".isAlphanumeric(or: "-._"))
        #expect(!"a@b".isAlphanumeric(or: "-._"))
        #expect("AZaz09[]".isAlphanumeric(or: "[]"))
        #expect(!"`{".isAlphanumeric(or: ""))
        #expect("".isAlphanumeric(or: ""))
    }
}
