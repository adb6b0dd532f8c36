import Logging
@testable import StampedeFiles
import StampedeIO
import StampedeTestSupport
import Testing

/// Issue 57, item 4: the remap rules' `E` probe asks the kernel's caches on the loop; what they
/// cannot answer (a name not looked up lately, an upload's target) is asked on a disk thread, and
/// the request hears the name the rules made (`.remapped`).
@Suite struct RemapProbesOffTheLoop {
    let dir = ScratchDirectory()
    let disk = DiskWork(threads: 1)
    let logger = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })
    let client = SocketAddress(parsing: "192.0.2.7:2000", defaultPort: 0)!

    func service() throws -> FileService {
        let rules = try RemapRules(parsing: Array("rE ^(.*)$ \\1.here\nr ^.*$ default\n".utf8))
        return FileService(policy: AccessPolicy(root: dir.fd, allowCreate: true), remapRules: RemapRuleSet(rules),
                           cache: FileCache(), disk: disk)
    }

    func remap(_ files: FileService, _ name: String, isWrite: Bool = false, mailbox: LoadMailbox) -> String? {
        switch files.remap(Array(name.utf8), isWrite: isWrite, client: client, logger: logger,
                           waiter: LoadWaiter(mailbox: mailbox, ticket: 1)) {
        case .named(let mapped): String(decoding: mapped, as: UTF8.self)
        case .loading: nil
        case .refused(let refusal): "refused: \(refusal.message)"
        }
    }

    @Test func theCachesAnswerOnTheLoopAndADiskThreadWhatTheyCannot() throws {
        dir.write("a.here", [1])
        dir.write("default", [2])
        let files = try service()
        let mailbox = LoadMailbox()
        // a.here was just written: the caches know it, and the rule exits with it.
        #expect(remap(files, "a", mailbox: mailbox) == "a.here")
        // b.here was never looked up: a disk thread probes it, finds none, and the next rule names
        // the default.
        let random = "b\(UInt64.random(in: 0...UInt64.max))"
        #expect(remap(files, random, mailbox: mailbox) == nil)
        disk.drain()
        #expect(mailbox.collect().map(\.outcome) == [.remapped(Array("default".utf8))])
        // Now the caches know it is missing: answered on the loop.
        #expect(remap(files, random, mailbox: mailbox) == "default")
        // An upload's target is always probed on a disk thread (a new file may be made here).
        #expect(remap(files, "new", isWrite: true, mailbox: mailbox) == nil)
        disk.drain()
        #expect(mailbox.collect().map(\.outcome) == [.remapped(Array("new.here".utf8))])
        // The outcome heard is the name: asked again after it, no rule runs.
        #expect(files.remap(Array("zzz".utf8), isWrite: false, client: client, logger: logger,
                            waiter: LoadWaiter(mailbox: mailbox, ticket: 2), after: .remapped(Array("x".utf8))) == .named(Array("x".utf8)))
    }
}

extension FileService.Naming: Equatable {
    public static func == (a: Self, b: Self) -> Bool {
        switch (a, b) {
        case (.named(let x), .named(let y)): x == y
        case (.loading, .loading): true
        case (.refused(let x), .refused(let y)): x == y
        default: false
        }
    }
}
