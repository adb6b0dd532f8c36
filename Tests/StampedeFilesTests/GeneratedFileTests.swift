import Glibc
@testable import StampedeFiles
import StampedeIO
import StampedeTestSupport
import Testing

/// Where a client comes from, for reads whose answer does not depend on it.
let aClient = SocketAddress(parsing: "192.0.2.7:1024", defaultPort: 0)!

/// Files made for the client that asks (`GeneratedFiles`): asked before the root, for the
/// client's address; nil is the root's file; the bytes are served as an image of their own.
@Suite struct GeneratedFilesBeforeTheRoot {
    struct Scripts: GeneratedFiles {
        func file(_ name: [UInt8], for client: SocketAddress) -> GeneratedFile? {
            if name == Array("mine.ipxe".utf8) { return .root(Array("other.txt".utf8)) }
            return name == Array("boot.ipxe".utf8) ? .made(Array("#!ipxe\necho \(client)\n".utf8)) : nil
        }
    }

    @Test func aMadeFileIsServedForItsClientAndTheRestFromTheRoot() throws {
        let dir = ScratchDirectory()
        dir.write("boot.ipxe", Array("the root's script\n".utf8))
        dir.write("other.txt", Array("the root's other\n".utf8))
        let files = FileService(policy: AccessPolicy(root: dir.fd), remapRules: nil, cache: FileCache(), disk: DiskWork(), generated: Scripts())
        let waiter = LoadWaiter(mailbox: LoadMailbox(), ticket: 1)
        guard case .ready(let lease) = files.read(Array("boot.ipxe".utf8), netascii: false, client: aClient, waiter: waiter) else {
            Issue.record("the made file was not ready at once")
            return
        }
        let made = Array("#!ipxe\necho 192.0.2.7:1024\n".utf8)
        #expect(lease.image.map { Array($0.bytes) } == made)
        #expect(lease.version.size == made.count)
        // Netascii: the bytes as the mode sends them.
        guard case .ready(let text) = files.read(Array("boot.ipxe".utf8), netascii: true, client: aClient, waiter: waiter) else {
            Issue.record("the made file was not ready at once")
            return
        }
        #expect(text.image.map { Array($0.bytes) } == Array("#!ipxe\r\necho 192.0.2.7:1024\r\n".utf8))
        // Another script is another version.
        let other = SocketAddress(parsing: "192.0.2.8:1024", defaultPort: 0)!
        guard case .ready(let second) = files.read(Array("boot.ipxe".utf8), netascii: false, client: other, waiter: waiter) else { return }
        #expect(second.version != lease.version)
        // A name it does not make is the root's, and one it names another of the root's is that
        // one, asked again after its read on the disk thread too.
        for name in ["other.txt", "mine.ipxe"] {
            var outcome: LoadOutcome?
            for _ in 0..<3 {
                switch files.read(Array(name.utf8), netascii: false, client: aClient, waiter: waiter, after: outcome) {
                case .ready(let root):
                    #expect(root.image.map { Array($0.bytes) } == Array("the root's other\n".utf8), "\(name)")
                    outcome = nil
                case .loading:
                    files.disk.drain()
                    outcome = waiter.mailbox.collect().last?.outcome
                    continue
                case .refused(let refusal): Issue.record("refused: \(refusal)")
                }
                break
            }
        }
    }
}
