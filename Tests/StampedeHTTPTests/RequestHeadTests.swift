import Testing
@testable import StampedeHTTP

@Suite struct RequestHeadParsing {
    func parse(_ text: String, limits: RequestHead.Limits = RequestHead.Limits()) -> Result<RequestHead.Parsed, RequestHead.Refusal> {
        Array(text.utf8).withUnsafeBytes { raw in Result { () throws(RequestHead.Refusal) in try RequestHead.parse(raw, limits: limits) } }
    }

    func head(_ text: String) throws -> (RequestHead, Int) {
        guard case .complete(let head, let length) = try parse(text).get() else {
            Issue.record("incomplete: \(text)")
            throw RequestHead.Refusal(.badRequest, "incomplete")
        }
        return (head, length)
    }

    func status(_ text: String, limits: RequestHead.Limits = RequestHead.Limits()) -> Status? {
        if case .failure(let refusal) = parse(text, limits: limits) { return refusal.status }
        return nil
    }

    @Test func aGetWithItsHeaders() throws {
        let text = "GET /boot/ipxe.efi?x=1 HTTP/1.1\r\nHost: boot\r\nRange: bytes=0-9\r\nIf-None-Match: \"a\"\r\n\r\nGET /next"
        let (head, length) = try head(text)
        #expect(head.method == .get)
        #expect(head.path == Array("/boot/ipxe.efi".utf8))
        #expect(head.isHTTP11 && head.keepAlive)
        #expect(head.range == "bytes=0-9")
        #expect(head.ifNoneMatch == "\"a\"")
        // The pipelined request after it is left for the next parse.
        #expect(length == text.utf8.count - "GET /next".utf8.count)
    }

    @Test func notAllOfItIsIncomplete() throws {
        #expect(try parse("GET / HTTP/1.1\r\nHost: x\r\n").get() == .incomplete)
        #expect(try parse("GET / HT").get() == .incomplete)
        #expect(try parse("").get() == .incomplete)
    }

    @Test func bareLineFeedsAndLeadingEmptyLinesAreTaken() throws {
        let (head, _) = try head("\r\n\nHEAD /a%20b HTTP/1.0\nConnection: Keep-Alive\n\n")
        #expect(head.method == .head)
        #expect(head.path == Array("/a b".utf8))
        #expect(!head.isHTTP11 && head.keepAlive)
    }

    @Test func whetherTheConnectionStays() throws {
        #expect(try !head("GET / HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, close\r\n\r\n").0.keepAlive)
        #expect(try !head("GET / HTTP/1.0\r\n\r\n").0.keepAlive)
    }

    @Test func theAbsoluteFormIsItsPath() throws {
        #expect(try head("GET http://boot.example:8080/vmlinuz HTTP/1.1\r\nHost: x\r\n\r\n").0.path == Array("/vmlinuz".utf8))
    }

    @Test func otherMethodsParseForTheirRefusal() throws {
        #expect(try head("OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n").0.method == .other("OPTIONS"))
        #expect(try head("DELETE /x HTTP/1.1\r\nHost: x\r\n\r\n").0.method == .other("DELETE"))
    }

    @Test func malformedHeadsAreRefusedWithTheirStatus() {
        #expect(status("GET /\r\n\r\n") == .badRequest)
        #expect(status("GET / HTTP/1.1\r\n\r\n") == .badRequest)  // no Host
        #expect(status("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n") == .badRequest)
        #expect(status("GET / HTTP/1.1\r\nHost : a\r\n\r\n") == .badRequest)
        #expect(status("GET / HTTP/1.1\r\nHost: a\r\n  folded\r\n\r\n") == .badRequest)
        #expect(status("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n") == .badRequest)
        #expect(status("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n") == nil)
        #expect(status("GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n") == .badRequest)
        #expect(status("GET /%4 HTTP/1.1\r\nHost: a\r\n\r\n") == .badRequest)
        #expect(status("GET /%00 HTTP/1.1\r\nHost: a\r\n\r\n") == .badRequest)
        #expect(status("GET x HTTP/1.1\r\nHost: a\r\n\r\n") == .badRequest)
        #expect(status("GET / HTTP/2.0\r\nHost: a\r\n\r\n") == .versionNotSupported)
        #expect(status("GET / HTTX/1.1\r\nHost: a\r\n\r\n") == .badRequest)
    }

    @Test func limitsAreKeptBeforeTheWholeHeadArrives() {
        var limits = RequestHead.Limits()
        limits.lineBytes = 32
        limits.headBytes = 64
        limits.headerCount = 2
        #expect(status("GET /" + String(repeating: "a", count: 40), limits: limits) == .uriTooLong)
        #expect(status("GET / HTTP/1.1\r\nX: " + String(repeating: "b", count: 60), limits: limits) == .headersTooLarge)
        #expect(status("GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nHost: x\r\n\r\n", limits: limits) == .headersTooLarge)
        #expect(status("GET / HTTP/1.1\r\nHost: x\r\n\r\n", limits: limits) == nil)
    }
}

@Suite struct ResponseChoice {
    let file = FileFacts(size: 1000, modified: 1_700_000_000, etag: "\"v1\"")

    func choice(_ headers: [String: String]) -> Choice {
        var head = RequestHead(method: .get, target: "/f", path: Array("/f".utf8), isHTTP11: true, keepAlive: true)
        head.range = headers["range"]
        head.ifRange = headers["if-range"]
        head.ifNoneMatch = headers["if-none-match"]
        head.ifModifiedSince = headers["if-modified-since"]
        return Choice(head, file)
    }

    @Test func ranges() {
        #expect(choice([:]) == .whole)
        #expect(choice(["range": "bytes=0-99"]) == .part(0..<100))
        #expect(choice(["range": "bytes=900-"]) == .part(900..<1000))
        #expect(choice(["range": "bytes=-100"]) == .part(900..<1000))
        #expect(choice(["range": "bytes=-5000"]) == .part(0..<1000))
        #expect(choice(["range": "bytes=990-5000"]) == .part(990..<1000))
        #expect(choice(["range": "bytes=1000-"]) == .unsatisfiable)
        #expect(choice(["range": "bytes=-0"]) == .unsatisfiable)
        // Ignored: several ranges, other units, nonsense.
        #expect(choice(["range": "bytes=0-1,5-6"]) == .whole)
        #expect(choice(["range": "items=0-1"]) == .whole)
        #expect(choice(["range": "bytes=9-1"]) == .whole)
        #expect(choice(["range": "bytes=a-"]) == .whole)
    }

    @Test func conditions() {
        #expect(choice(["if-none-match": "\"v1\""]) == .notModified)
        #expect(choice(["if-none-match": "\"v0\", W/\"v1\""]) == .notModified)
        #expect(choice(["if-none-match": "*"]) == .notModified)
        #expect(choice(["if-none-match": "\"v0\""]) == .whole)
        // If-None-Match decides alone when both are there.
        #expect(choice(["if-none-match": "\"v0\"", "if-modified-since": HTTPDate.format(1_800_000_000)]) == .whole)
        #expect(choice(["if-modified-since": HTTPDate.format(1_700_000_000)]) == .notModified)
        #expect(choice(["if-modified-since": HTTPDate.format(1_699_999_999)]) == .whole)
        #expect(choice(["if-modified-since": "yesterday"]) == .whole)
        #expect(choice(["range": "bytes=0-9", "if-range": "\"v1\""]) == .part(0..<10))
        #expect(choice(["range": "bytes=0-9", "if-range": "\"v0\""]) == .whole)
        #expect(choice(["range": "bytes=0-9", "if-range": HTTPDate.format(1_700_000_000)]) == .part(0..<10))
    }

    @Test func datesRoundTrip() {
        #expect(HTTPDate.format(784_111_777) == "Sun, 06 Nov 1994 08:49:37 GMT")
        #expect(HTTPDate.parse("Sun, 06 Nov 1994 08:49:37 GMT") == 784_111_777)
        #expect(HTTPDate.parse("Sunday, 06-Nov-94 08:49:37 GMT") == nil)
    }

    @Test func mediaTypes() {
        #expect(ResponseHead.contentType(of: Array("/EFI/BOOT/BOOTX64.EFI".utf8)) == "application/efi")
        #expect(ResponseHead.contentType(of: Array("/boot/x.ipxe".utf8)).hasPrefix("text/plain"))
        #expect(ResponseHead.contentType(of: Array("/vmlinuz".utf8)) == "application/octet-stream")
    }
}
