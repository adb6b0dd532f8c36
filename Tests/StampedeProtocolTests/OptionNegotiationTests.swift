import Testing
@testable import StampedeProtocol

@Suite struct OptionNegotiationSpec {
    func negotiate(_ options: [(String, String)], write: Bool = false, size: Int? = 1000, max: Int = 1468,
                   limits: OptionLimits = OptionLimits()) -> OptionNegotiation {
        OptionNegotiation(requested: options.map { (name: $0.0, value: $0.1) }, isWrite: write, fileSize: size,
                          maxBlockSize: max, limits: limits)
    }

    func oack(_ n: OptionNegotiation) -> [String] { n.acknowledged.map { "\($0.name)=\(String(decoding: $0.value, as: UTF8.self))" } }

    /// Each option has a slot of its own in a request's negotiation, one for each row of the
    /// table (a new option needs its row and a larger `PerOption`).
    @Test func everyOptionHasASlotOfItsOwn() {
        #expect(TFTPOption.allCases.map(\.row) == Array(0..<TFTPOption.allCases.count))
        var values = PerOption<Int>()
        for option in TFTPOption.allCases { values[option] = option.row * 10 }
        #expect(TFTPOption.allCases.allSatisfy { values[$0] == $0.row * 10 })
    }

    @Test func noOptionsMeansNoOptionAck() {
        let n = negotiate([])
        #expect(n.acknowledged.isEmpty)
        #expect(n.options == TransferOptions())
    }

    @Test func blockSizeIsClampedToTheServerMaximum() {
        #expect(oack(negotiate([("blksize", "65464")], max: 1468)) == ["blksize=1468"])
        #expect(oack(negotiate([("blksize", "65465")], max: 65464)) == ["blksize=65464"])
        #expect(oack(negotiate([("blksize", "8")])) == ["blksize=8"])
        #expect(negotiate([("blksize", "1024")]).options.blockSize == 1024)
    }

    @Test(arguments: ["0", "7", "abc", "", "-1", "1468 ", "99999999999999999999999"])
    func badBlockSizeIsDroppedAndTheTransferRunsAt512(value: String) {
        let n = negotiate([("blksize", value)])
        #expect(n.acknowledged.isEmpty)
        #expect(n.options.blockSize == 512)
    }

    @Test func windowSizeIsClampedToW() {
        #expect(oack(negotiate([("windowsize", "200")], limits: OptionLimits(maxWindowSize: 16))) == ["windowsize=16"])
        #expect(negotiate([("windowsize", "0")]).acknowledged.isEmpty)
        #expect(negotiate([("windowsize", "4")]).options.windowSize == 4)
    }

    @Test func timeoutMustBeOneTo255() {
        #expect(oack(negotiate([("timeout", "1")])) == ["timeout=1"])
        #expect(oack(negotiate([("timeout", "255")])) == ["timeout=255"])
        #expect(negotiate([("timeout", "0")]).acknowledged.isEmpty)
        #expect(negotiate([("timeout", "256")]).acknowledged.isEmpty)
    }

    @Test func readTransferSizeAnswersTheFileSize() {
        #expect(oack(negotiate([("tsize", "0")], size: 123456)) == ["tsize=123456"])
    }

    @Test func writeTransferSizeEchoesTheClient() {
        let n = negotiate([("tsize", "777")], write: true, size: nil)
        #expect(oack(n) == ["tsize=777"])
        #expect(n.options.transferSize == 777)
    }

    /// tftp-hpa 7.3: an option named twice counts with its last value.
    @Test func unknownAndRefusedOptionsAreNeverAnsweredAndARepeatedOneTakesItsLastValue() {
        let n = negotiate([("multicast", "x"), ("blksize", "1000"), ("blksize", "600"), ("tsize", "0")],
                          limits: OptionLimits(refused: ["tsize"]))
        #expect(oack(n) == ["blksize=600"])
    }

    /// tftp-hpa 7.3 reads an empty name or value (two NULs in a row) as the end of the options.
    @Test func anEmptyValueEndsTheList() {
        #expect(negotiate([("multicast", ""), ("blksize", "1024")]).acknowledged.isEmpty)
        #expect(oack(negotiate([("tsize", "0"), ("blksize", ""), ("windowsize", "4")])) == ["tsize=1000"])
    }

    @Test func answersFollowTheTablesOrder() {
        #expect(oack(negotiate([("tsize", "0"), ("windowsize", "8"), ("cookie", "c"), ("blksize", "1468")]))
            == ["blksize=1468", "cookie=c", "tsize=1000", "windowsize=8"])
    }

    /// Names are case-insensitive (RFC 2347); the answer keeps the client's spelling, as 7.3's does.
    @Test func anOptionIsAnsweredAsTheClientSpelledIt() {
        #expect(oack(negotiate([("BLKSIZE", "1000"), ("Cookie", "Q")])) == ["BLKSIZE=1000", "Cookie=Q"])
        #expect(negotiate([("TSIZE", "0")], limits: OptionLimits(refused: ["tsize"])).acknowledged.isEmpty)
    }

    /// What tftp-hpa 7.3 answers, probed: the largest power of two not above the request, the
    /// server's maximum or 32768; a valid blksize wins whichever comes first.
    @Test func blksize2GrantsAPowerOfTwo() {
        #expect(oack(negotiate([("blksize2", "1000")])) == ["blksize2=512"])
        #expect(oack(negotiate([("blksize2", "5000")], max: 65464)) == ["blksize2=4096"])
        #expect(oack(negotiate([("blksize2", "65464")], max: 65464)) == ["blksize2=32768"])
        #expect(oack(negotiate([("blksize2", "5000")], max: 1000)) == ["blksize2=512"])
        #expect(oack(negotiate([("blksize2", "8")])) == ["blksize2=8"])
        #expect(negotiate([("blksize2", "7")]).acknowledged.isEmpty)
        #expect(negotiate([("blksize2", "1024")]).options.blockSize == 1024)
        #expect(oack(negotiate([("blksize2", "600"), ("blksize", "1000")])) == ["blksize=1000"])
        #expect(oack(negotiate([("blksize", "5"), ("blksize2", "600")])) == ["blksize2=512"])
    }

    @Test func utimeoutIsMicrosecondsAndWinsOverTimeout() {
        #expect(oack(negotiate([("utimeout", "10000")])) == ["utimeout=10000"])
        #expect(negotiate([("utimeout", "250000")]).options.retransmitTimeout == 250_000_000)
        #expect(negotiate([("utimeout", "9999")]).acknowledged.isEmpty)
        #expect(negotiate([("utimeout", "255000001")]).acknowledged.isEmpty)
        #expect(oack(negotiate([("timeout", "3"), ("utimeout", "20000")])) == ["utimeout=20000"])
        #expect(oack(negotiate([("utimeout", "5"), ("timeout", "3")])) == ["timeout=3"])
        #expect(negotiate([("timeout", "3")]).options.retransmitTimeout == 3 * second)
    }

    @Test func rolloverIsZeroOrOne() {
        #expect(oack(negotiate([("rollover", "1")])) == ["rollover=1"])
        #expect(negotiate([("rollover", "1")]).options.numbering == BlockNumbering(rollover: 1))
        #expect(oack(negotiate([("rollover", "0")])) == ["rollover=0"])
        #expect(negotiate([("rollover", "2")]).acknowledged.isEmpty)
        #expect(negotiate([("rollover", "65535")]).acknowledged.isEmpty)
    }

    @Test func aCookieIsEchoedByteForByte() {
        let latin1: [UInt8] = [0xE9, 0x74, 0xE9]
        let n = OptionNegotiation(requested: [("cookie", "\u{FFFD}t\u{FFFD}")], cookie: latin1, isWrite: false, fileSize: 1,
                                  maxBlockSize: 1468, limits: OptionLimits())
        #expect(n.acknowledged.map(\.value) == [latin1])
        #expect(n.options.cookie == latin1)
        #expect(oack(negotiate([("cookie", String(repeating: "x", count: 255))])).count == 1)
        #expect(negotiate([("cookie", String(repeating: "x", count: 256))]).acknowledged.isEmpty)
        #expect(negotiate([("cookie", "")]).acknowledged.isEmpty)
        #expect(oack(negotiate([("cookie", "a"), ("cookie", "b")])) == ["cookie=b"])
    }

    /// An RRQ asks the size with 0; tftp-hpa 7.3 answers no other value.
    @Test func aReadsTsizeOtherThanZeroIsDropped() {
        #expect(negotiate([("tsize", "5")]).acknowledged.isEmpty)
    }

    /// --window-bytes: blksize × windowsize within it; fewer than two blocks is lockstep, with no
    /// windowsize in the OACK (tftp-hpa 7.3: 300 at 65464 bytes is 64 under its 4 MiB). -W is
    /// 256, as 7.3's, unless changed.
    @Test func theWindowStaysWithinTheWindowBytesAndOneBlockIsLockstep() {
        #expect(oack(negotiate([("windowsize", "300")])) == ["windowsize=256"])
        #expect(oack(negotiate([("windowsize", "300")], limits: OptionLimits(maxWindowSize: 64))) == ["windowsize=64"])
        let wide = OptionLimits(maxWindowSize: 1024)
        #expect(oack(negotiate([("windowsize", "300"), ("blksize", "65464")], max: 65464, limits: wide)) == ["blksize=65464", "windowsize=64"])
        #expect(oack(negotiate([("windowsize", "300"), ("blksize", "1024")], limits: wide)) == ["blksize=1024", "windowsize=300"])
        let tight = OptionLimits(maxWindowBytes: 100_000)
        #expect(oack(negotiate([("blksize", "65464"), ("windowsize", "8")], max: 65464, limits: tight)) == ["blksize=65464"])
        #expect(negotiate([("blksize", "65464"), ("windowsize", "8")], max: 65464, limits: tight).options.windowSize == 1)
        #expect(oack(negotiate([("windowsize", "300"), ("blksize", "65464")], max: 65464,
                               limits: OptionLimits(maxWindowSize: 256, maxWindowBytes: 0))) == ["blksize=65464", "windowsize=256"])
        #expect(negotiate([("windowsize", "1")]).acknowledged.isEmpty)
    }
}

@Suite struct OptionAckSpec {
    let asked: [(name: String, value: String)] = [("blksize", "1468"), ("timeout", "3"), ("tsize", "0"), ("windowsize", "16")]

    func read(_ options: [(name: String, value: String)]) -> Result<TransferOptions, OptionAckError> {
        let body = Array(PacketWriter.optionAck(options).dropFirst(2))
        return body.withUnsafeBytes { bytes in Result { () throws(OptionAckError) in try TransferOptions(optionAck: bytes, asked: asked) } }
    }

    @Test func valuesWithinWhatWasAskedAreTaken() throws {
        let options = try read([("blksize", "1024"), ("timeout", "3"), ("tsize", "99"), ("windowsize", "8")]).get()
        #expect(options.blockSize == 1024 && options.retransmitTimeout == 3 * second && options.transferSize == 99 && options.windowSize == 8)
    }

    @Test func anythingElseIsRefusedWithWhatCameBack() {
        for (bad, asked) in [(("blksize", "1469"), "1468"), (("windowsize", "17"), "16"), (("timeout", "4"), "3"),
                             (("blksize", "7"), "1468"), (("windowsize", "0"), "16")] {
            guard case .failure(let error) = read([bad]) else { Issue.record("accepted \(bad)"); continue }
            #expect(error.description == "the server acknowledged \(bad.0)=\(bad.1), which is not what we asked (\(asked))")
        }
        guard case .failure(let unasked) = read([("mtu", "1500")]) else { Issue.record("accepted mtu"); return }
        #expect(unasked.description == "the server acknowledged mtu=1500, which we did not ask for")
        guard case .failure(let error) = read([("tsize", "-1")]) else { Issue.record("accepted tsize -1"); return }
        #expect(error.description == "option tsize=-1 is no number")
    }

    @Test func theOptionsOfTftpHpa7AreReadAsAsked() throws {
        let asked: [(name: String, value: String)] = [("blksize2", "1500"), ("utimeout", "20000"), ("rollover", "1"), ("cookie", "rack-7")]
        let body = Array(PacketWriter.optionAck([("blksize2", "1024"), ("utimeout", "20000"), ("rollover", "1"), ("cookie", "rack-7")]).dropFirst(2))
        let options = try body.withUnsafeBytes { bytes throws(OptionAckError) in try TransferOptions(optionAck: bytes, asked: asked) }
        #expect(options.blockSize == 1024 && options.retransmitTimeout == 20_000_000)
        #expect(options.numbering == BlockNumbering(rollover: 1) && options.cookie == Array("rack-7".utf8))
        for bad in [("blksize2", "1000"), ("cookie", "rack-8"), ("rollover", "0"), ("utimeout", "20001")] {
            let body = Array(PacketWriter.optionAck([bad]).dropFirst(2))
            let result = body.withUnsafeBytes { bytes in Result { () throws(OptionAckError) in try TransferOptions(optionAck: bytes, asked: asked) } }
            guard case .failure = result else { Issue.record("accepted \(bad)"); continue }
        }
    }

    /// Issue 11: `stampede get --blksize 4` against dnsmasq, which echoes 4, trapped on `8...4`.
    /// No asked value and no acknowledged value may trap; out-of-range ones are refused.
    @Test func valuesOutsideTheRFCRangesAreRefusedWhateverWasAsked() {
        let cases: [(asked: (name: String, value: String), answer: (name: String, value: String))] = [
            (("blksize", "4"), ("blksize", "4")), (("blksize", "7"), ("blksize", "7")), (("blksize", "0"), ("blksize", "0")),
            (("blksize", "70000"), ("blksize", "65465")), (("windowsize", "0"), ("windowsize", "0")),
            (("windowsize", "65535"), ("windowsize", "40000")), (("timeout", "0"), ("timeout", "0")),
            (("timeout", "300"), ("timeout", "300")), (("blksize", "abc"), ("blksize", "512")),
            (("blksize", "99999999999999999999999"), ("blksize", "99999999999999999999999")),
        ]
        for (asked, answer) in cases {
            let body = Array(PacketWriter.optionAck([answer]).dropFirst(2))
            let result = body.withUnsafeBytes { bytes in
                Result { () throws(OptionAckError) in try TransferOptions(optionAck: bytes, asked: [asked]) }
            }
            guard case .failure = result else { Issue.record("accepted \(answer) after asking \(asked)"); continue }
        }
    }
}
