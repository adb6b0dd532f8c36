import Glibc
import Logging
@testable import StampedeFiles
import StampedeIO
import StampedeTestSupport
import Testing

/// Issue 57: an HTTP loop hears that a file its answer waits for is read when its mailbox wakes it
/// (an eventfd in its epoll), not by looking every 2 ms: the descriptor is readable from the
/// disk thread's post until the loop collects, and only then.
@Suite struct LoadMailboxWakes {
    let dir = ScratchDirectory()

    func readable(_ fd: Int32) -> Bool {
        var watched = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        return poll(&watched, 1, 0) == 1 && watched.revents & Int16(POLLIN) != 0
    }

    @Test func aPostWakesTheLoopUntilItCollects() throws {
        dir.write("vmlinuz", Array(repeating: 7, count: 5000))
        let disk = DiskWork()
        let files = FileService(policy: AccessPolicy(root: dir.fd), remapRules: nil, cache: FileCache(wallClock: FileCacheVersions.later), disk: disk)
        let mailbox = try LoadMailbox.waking()
        let wake = try #require(mailbox.wakeDescriptor)
        #expect(!readable(wake))

        // Two requests of the loop wait for the one read of the file.
        for ticket: UInt64 in [41, 42] {
            guard case .loading = files.read(Array("vmlinuz".utf8), netascii: false,
                                             waiter: LoadWaiter(mailbox: mailbox, ticket: ticket)) else {
                Issue.record("a file not in the cache was not read on the disk thread")
                return
            }
        }
        #expect(!readable(wake))
        disk.drain()
        #expect(readable(wake))
        let outcomes = mailbox.collect()
        #expect(outcomes.map(\.ticket).sorted() == [41, 42])
        #expect(outcomes.allSatisfy { $0.outcome == .loaded(byThisRequest: $0.ticket == 41) })
        #expect(!readable(wake) && !mailbox.isAwaiting)
        #expect(mailbox.collect().isEmpty)
    }

    @Test func aPollingMailboxHasNoDescriptor() {
        #expect(LoadMailbox().wakeDescriptor == nil)
    }
}
