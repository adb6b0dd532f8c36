import Testing
@testable import StampedeProtocol

@Suite struct OptionNegotiationSpec {
    func negotiate(_ options: [(String, String)], write: Bool = false, size: Int? = 1000, max: Int = 1468,
                   limits: OptionLimits = OptionLimits()) -> OptionNegotiation {
        OptionNegotiation(requested: options.map { (name: $0.0, value: $0.1) }, isWrite: write, fileSize: size,
                          maxBlockSize: max, limits: limits)
    }

    func oack(_ n: OptionNegotiation) -> [String] { n.acknowledged.map { "\($0.name)=\($0.value)" } }

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

    @Test func unknownRefusedAndRepeatedOptionsAreNeverAnswered() {
        let n = negotiate([("multicast", ""), ("blksize", "1000"), ("blksize", "600"), ("tsize", "0")],
                          limits: OptionLimits(refused: ["tsize"]))
        #expect(oack(n) == ["blksize=1000"])
    }

    @Test func answersKeepTheClientsOrder() {
        #expect(oack(negotiate([("tsize", "0"), ("windowsize", "8"), ("blksize", "1468")]))
            == ["tsize=1000", "windowsize=8", "blksize=1468"])
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
        #expect(options.blockSize == 1024 && options.timeoutSeconds == 3 && options.transferSize == 99 && options.windowSize == 8)
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
