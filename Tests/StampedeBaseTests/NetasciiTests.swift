import Testing
@testable import StampedeBase

@Suite struct NetasciiSpec {
    @Test func newlinesBecomeCRLFAndBareCRBecomesCRNUL() {
        #expect(Netascii.encode(Array("a\nb\rc".utf8)) == [0x61, 0x0D, 0x0A, 0x62, 0x0D, 0x00, 0x63])
    }

    @Test func decodingUndoesEncoding() {
        let text = Array("line1\nline2\r\nbare\rend\n".utf8)
        #expect(NetasciiDecoder.decode([Netascii.encode(text)]) == text)
    }

    @Test func aCRAtTheEndOfABlockWaitsForTheNextBlock() {
        #expect(NetasciiDecoder.decode([[0x61, 0x0D], [0x0A, 0x62]]) == [0x61, 0x0A, 0x62])
        #expect(NetasciiDecoder.decode([[0x61, 0x0D], [0x00, 0x62]]) == [0x61, 0x0D, 0x62])
    }

    @Test func aCRAtTheVeryEndIsKept() {
        #expect(NetasciiDecoder.decode([[0x61, 0x0D]]) == [0x61, 0x0D])
    }

    @Test func aCRFollowedByOtherBytesIsKeptAsSent() {
        #expect(NetasciiDecoder.decode([[0x0D, 0x41]]) == [0x0D, 0x41])
    }

    @Test func encodedCountMatchesTheEncoding() {
        let bytes: [UInt8] = Array("x\n\r\n\r".utf8)
        #expect(bytes.withUnsafeBytes { Netascii.encodedCount(of: $0) } == Netascii.encode(bytes).count)
    }
}
