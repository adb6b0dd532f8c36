import CMallocCounter
import Testing
import StampedeBase
@testable import StampedeProtocol

@Suite struct PacketCodec {
    func parse(_ bytes: [UInt8]) -> Result<Request, Request.ParseError> {
        bytes.withUnsafeBytes { raw in Result { () throws(Request.ParseError) in try Request.parse(raw) } }
    }

    func decode(_ bytes: [UInt8]) -> String {
        bytes.withUnsafeBytes { raw in
            switch TransferPacket(raw) {
            case .data(let block, let payload): return "data \(block) \(Array(payload))"
            case .ack(let block): return "ack \(block)"
            case .error(let code, let message): return "error \(code) \(String(decoding: message.prefix { $0 != 0 }, as: UTF8.self))"
            case .optionAck: return "oack"
            case .request: return "request"
            case .malformed: return "malformed"
            }
        }
    }

    /// The mode is lower-cased; option names are kept as spelled (the OACK answers in that spelling).
    @Test func readRequestWithOptionsKeepsOrderAndSpelling() throws {
        let bytes: [UInt8] = [0, 1] + Array("boot/pxelinux.0".utf8) + [0] + Array("OCTET".utf8) + [0]
            + Array("BlkSize".utf8) + [0] + Array("1468".utf8) + [0] + Array("tsize".utf8) + [0] + [48, 0]
        let request = try parse(bytes).get()
        #expect(!request.isWrite)
        #expect(request.filename == Array("boot/pxelinux.0".utf8))
        #expect(request.mode == "octet")
        #expect(request.options.map(\.name) == ["BlkSize", "tsize"])
        #expect(request.options.map(\.value) == ["1468", "0"])
    }

    @Test func writeRequestRoundTrips() throws {
        let request = Request(isWrite: true, filename: Array("up.bin".utf8), mode: "octet", options: [("tsize", "42")])
        #expect(try parse(request.encoded()).get() == request)
    }

    /// What a client's receive queue must hold: the window it asks, of the largest block it asks.
    @Test func theLargestWindowARequestMayBeSent() {
        func window(_ options: [(name: String, value: String)]) -> (Int, Int) {
            let w = Request(isWrite: false, filename: [0x66], mode: "octet", options: options).largestWindow
            return (w.datagrams, w.size)
        }
        #expect(window([]) == (1, 516))
        #expect(window([("BlkSize", "1468"), ("WINDOWSIZE", "256")]) == (256, 1472))
        #expect(window([("blksize2", "8192"), ("blksize", "1024"), ("windowsize", "4")]) == (4, 8196))
        #expect(window([("blksize", "99999"), ("windowsize", "70000")]) == (65535, 65468))
        #expect(window([("blksize", "x"), ("windowsize", "-3"), ("tsize", "0")]) == (1, 516))
    }

    @Test func filenameKeepsJunkBytes() throws {
        let bytes: [UInt8] = [0, 1, 0x66, 0xFF, 0xFF, 0, 0x6F, 0x63, 0x74, 0x65, 0x74, 0]
        #expect(try parse(bytes).get().filename == [0x66, 0xFF, 0xFF])
    }

    @Test func missingTerminatorsAreRejected() {
        #expect(parse([0, 1] + Array("file".utf8)) == .failure(.missingTerminator))
        #expect(parse([0, 1] + Array("file".utf8) + [0] + Array("octet".utf8)) == .failure(.missingTerminator))
        #expect(parse([0, 1, 0, 0]) == .failure(.emptyMode))
    }

    @Test func truncatedAndForeignPacketsAreNotRequests() {
        #expect(parse([]) == .failure(.notARequest))
        #expect(parse([0]) == .failure(.notARequest))
        #expect(parse([0, 3, 0, 1]) == .failure(.notARequest))
        #expect(parse([0, 9, 1, 0]) == .failure(.notARequest))
    }

    @Test func aThousandOptionsCostNoMoreThanTheLimit() throws {
        var bytes: [UInt8] = [0, 1] + Array("f".utf8) + [0] + Array("octet".utf8) + [0]
        for i in 0..<1000 { bytes += Array("opt\(i)".utf8) + [0] + Array("1".utf8) + [0] }
        #expect(try parse(bytes).get().options.count == Request.optionLimit)
    }

    /// Bytes after the last NUL (some ROMs pad) and an option name without its value are left
    /// out; a cookie's value is kept as its bytes.
    @Test func paddingAndANameWithoutItsValueAreLeftOut() throws {
        let head: [UInt8] = [0, 1] + Array("f".utf8) + [0] + Array("octet".utf8) + [0]
        let cookie: [UInt8] = Array("Cookie".utf8) + [0, 0xC0, 0xFF, 0]
        let request = try parse(head + cookie + Array("tsize".utf8) + [0, 48, 0] + Array("blksize".utf8) + [0] + [0x31, 0x34]).get()
        #expect(request.options.map(\.name) == ["Cookie", "tsize"])
        #expect(request.cookie == [0xC0, 0xFF])
        #expect(try parse(head + Array("tsize".utf8) + [0, 48, 0] + Array("blksize".utf8) + [0]).get().options.map(\.name) == ["tsize"])
    }

    /// A request is read where it lies: its name and its option list are the only copies made
    /// (the options' names and values are small Strings, kept inline).
    @Test func anRRQWithOptionsCostsItsNameAndItsOptionList() throws {
        let bytes: [UInt8] = [0, 1] + Array("pxelinux.cfg/01-52-54-00-12-34-56".utf8) + [0] + Array("octet".utf8) + [0]
            + Array("tsize".utf8) + [0, 48, 0] + Array("blksize".utf8) + [0] + Array("1408".utf8) + [0]
        var options = 0
        let allocations = bytes.withUnsafeBytes { raw in
            // Once before counting: what the runtime makes on a first use (metadata, caches) is
            // no request's cost, and whether another test made it first depends on their order.
            _ = try? Request.parse(raw)
            malloc_counter_start()
            for _ in 0..<100 { options += (try? Request.parse(raw))?.options.count ?? 0 }
            return malloc_counter_stop()
        }
        #expect(options == 200)
        #expect(allocations <= 200, "\(allocations) allocations in 100 requests")
    }

    /// The mode is lowercased as String.lowercased does it, the ASCII ones in place; "cookie" is
    /// found in any case and no other name is taken for it.
    @Test(arguments: ["OcTeT", "NETASCII", "mail", "Ö-octet", "ÉTÉ", String(repeating: "A", count: 40), "o\u{7F}ctet@[`{"])
    func theModeIsLowercasedAsAStringWouldBe(mode: String) throws {
        let request = try parse([0, 1] + Array("f".utf8) + [0] + Array(mode.utf8) + [0]).get()
        #expect(request.mode == mode.lowercased())
    }

    @Test(arguments: [("cookie", true), ("COOKIE", true), ("CooKie", true), ("cookies", false), ("cooki", false),
                      ("cOOkI\u{05}", false), ("cookie\u{00E9}", false), ("c@@kie", false)])
    func theCookieOptionInAnyCase(name: String, isCookie: Bool) throws {
        let request = try parse([0, 1] + Array("f".utf8) + [0] + Array("octet".utf8) + [0] + Array(name.utf8) + [0, 0x41, 0]).get()
        #expect((request.cookie == [0x41]) == isCookie)
    }

    @Test func transferPacketsDecodeInPlace() {
        #expect(decode([0, 3, 0xFF, 0xFF, 1, 2]) == "data 65535 [1, 2]")
        #expect(decode([0, 3, 0, 1]) == "data 1 []")
        #expect(decode([0, 4, 1, 0]) == "ack 256")
        #expect(decode([0, 5, 0, 8] + Array("no".utf8) + [0]) == "error 8 no")
        #expect(decode([0, 4, 1]) == "malformed")
        #expect(decode([0, 7, 0, 0]) == "malformed")
        #expect(decode([0, 1] + Array("x".utf8) + [0]) == "request")
    }

    @Test func errorPacketIsCodeMessageNul() {
        let bytes = PacketWriter.error(TFTPError(.fileNotFound, "File not found"))
        #expect(bytes == [0, 5, 0, 1] + Array("File not found".utf8) + [0])
    }

    @Test func errorMessageIsCutToFitAPacket() {
        let bytes = PacketWriter.error(TFTPError(.notDefined, String(repeating: "x", count: 2000)))
        #expect(bytes.count == 512)
        #expect(bytes.last == 0)
    }

    @Test func optionAckListsNameValuePairs() {
        #expect(PacketWriter.optionAck([("blksize", "1468"), ("tsize", "9")])
            == [0, 6] + Array("blksize".utf8) + [0] + Array("1468".utf8) + [0] + Array("tsize".utf8) + [0] + Array("9".utf8) + [0])
    }

    @Test func logSanitizingEscapesControlAndHighBytes() {
        #expect(sanitizedForLog([0x61, 0x0A, 0xFF, 0x22]) == "a\\x0a\\xff\\x22")
        #expect(sanitizedForLog(Array(repeating: UInt8(0x61), count: 600)).count == 257)
    }
}
