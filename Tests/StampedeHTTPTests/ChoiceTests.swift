import StampedeHTTPWire
import Testing
@testable import StampedeHTTP

@Suite struct ResponseChoice {
    let file = FileFacts(size: 1000, modified: 1_700_000_000, etag: EntityTag(inode: 0x1a, size: 1000, modified: 17, changed: 18))
    /// How the file's entity tag is said.
    let v1 = "\"1a-3e8-11-12\""

    func choice(_ headers: [String: String]) -> Choice {
        var head = RequestHead(method: .get, target: Array("/f".utf8), path: Array("/f".utf8), isHTTP11: true, keepAlive: true)
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
        #expect(choice(["if-none-match": v1]) == .notModified)
        #expect(choice(["if-none-match": "\"v0\", W/" + v1]) == .notModified)
        #expect(choice(["if-none-match": "*"]) == .notModified)
        #expect(choice(["if-none-match": "\"v0\""]) == .whole)
        // If-None-Match decides alone when both are there.
        #expect(choice(["if-none-match": "\"v0\"", "if-modified-since": HTTPDate.format(1_800_000_000)]) == .whole)
        #expect(choice(["if-modified-since": HTTPDate.format(1_700_000_000)]) == .notModified)
        #expect(choice(["if-modified-since": HTTPDate.format(1_699_999_999)]) == .whole)
        #expect(choice(["if-modified-since": "yesterday"]) == .whole)
        #expect(choice(["range": "bytes=0-9", "if-range": v1]) == .part(0..<10))
        #expect(choice(["range": "bytes=0-9", "if-range": "\"v0\""]) == .whole)
        #expect(choice(["range": "bytes=0-9", "if-range": HTTPDate.format(1_700_000_000)]) == .part(0..<10))
    }
}
