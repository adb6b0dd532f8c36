import StampedeTestSupport
import Testing

/// `--http`'s answers (`FileResponder`), through a real loop over loopback: what a head asks for
/// (a range, a validator, a method) gets the status, headers and bytes HTTP says.
@Suite struct FileResponderAnswers {
    let dir = ScratchDirectory()

    /// One request on a fresh connection, the answer whole (the server closes after it: each
    /// request says Connection: close).
    func ask(_ request: String, files: [String: [UInt8]]) throws -> (head: String, body: [UInt8]) {
        for (name, bytes) in files { dir.write(name, bytes) }
        let (bytes, ended) = try LoopbackHTTP(serving: dir).exchange(request) { _ in false }
        #expect(ended, "the connection stayed open after Connection: close")
        let end = try #require(LoopbackHTTP.offset(of: "\r\n\r\n", in: bytes))
        return (String(decoding: bytes[..<end], as: UTF8.self), Array(bytes[(end + 4)...]))
    }

    static let file = (0..<10_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }

    func header(_ name: String, in head: String) -> String? {
        head.split(separator: "\r\n").first { $0.lowercased().hasPrefix(name.lowercased() + ": ") }
            .map { String($0.dropFirst(name.count + 2)) }
    }

    @Test func aRangeIsAnsweredWithItsPart() throws {
        let (head, body) = try ask("GET /initrd HTTP/1.1\r\nHost: a\r\nRange: bytes=100-199\r\nConnection: close\r\n\r\n",
                                   files: ["initrd": Self.file])
        #expect(head.hasPrefix("HTTP/1.1 206 "), "\(head)")
        #expect(header("Content-Range", in: head) == "bytes 100-199/10000")
        #expect(body == Array(Self.file[100..<200]))
    }

    @Test func aRangeOutsideTheFileIs416WithItsSize() throws {
        let (head, _) = try ask("GET /initrd HTTP/1.1\r\nHost: a\r\nRange: bytes=20000-\r\nConnection: close\r\n\r\n",
                                files: ["initrd": Self.file])
        #expect(head.hasPrefix("HTTP/1.1 416 "), "\(head)")
        #expect(header("Content-Range", in: head) == "bytes */10000")
    }

    @Test func theETagOfTheVersionIs304AndAHeadHasNoBody() throws {
        let (first, _) = try ask("HEAD /initrd HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", files: ["initrd": Self.file])
        #expect(first.hasPrefix("HTTP/1.1 200 ") && header("Content-Length", in: first) == "10000", "\(first)")
        let etag = try #require(header("ETag", in: first))
        let (again, body) = try ask("GET /initrd HTTP/1.1\r\nHost: a\r\nIf-None-Match: \(etag)\r\nConnection: close\r\n\r\n", files: [:])
        #expect(again.hasPrefix("HTTP/1.1 304 ") && body.isEmpty, "\(again)")
    }

    @Test func otherMethodsAre405WithAllowAndAMissingFile404() throws {
        let (post, _) = try ask("POST /initrd HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                                files: ["initrd": Self.file])
        #expect(post.hasPrefix("HTTP/1.1 405 ") && header("Allow", in: post) == "GET, HEAD", "\(post)")
        let (missing, _) = try ask("GET /nothing HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", files: [:])
        #expect(missing.hasPrefix("HTTP/1.1 404 "), "\(missing)")
    }
}
