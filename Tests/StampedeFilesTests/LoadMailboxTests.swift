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

        // Two requests of the loop wait for the one read of the file. The disk thread is held
        // until both asked: a read it finished between them made the second one a cache hit.
        let held = Gate()
        defer { held.open() }  // also where a failed expectation returns early
        disk.submit { held.wait() }
        for ticket: UInt64 in [41, 42] {
            guard case .loading = files.read(Array("vmlinuz".utf8), netascii: false, client: aClient,
                                             waiter: LoadWaiter(mailbox: mailbox, ticket: ticket)) else {
                Issue.record("a file not in the cache was not read on the disk thread")
                return
            }
        }
        #expect(!readable(wake))
        held.open()
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

/// Issue 57, item 4: a name the kernel's caches cannot resolve is looked at once on a disk thread,
/// however many requests ask for it meanwhile, and each of them hears how it went.
@Suite struct NamesLookedAtOnTheDisk {
    @Test func requestsForANameBeingLookedAtEachHearTheOneLook() throws {
        let dir = ScratchDirectory()
        dir.write("present.bin", [1, 2, 3])
        let disk = DiskWork(threads: 1)
        let files = FileService(policy: AccessPolicy(root: dir.fd), remapRules: nil, cache: FileCache(), disk: disk)
        let mailbox = LoadMailbox()
        // The disk thread is held, so that both requests come while the look is still to be made.
        let held = Gate()
        disk.submit { held.wait() }
        let absent = Array("absent-\(UInt64.random(in: 0...UInt64.max))".utf8)
        for ticket: UInt64 in [1, 2] {
            guard case .loading = files.read(absent, netascii: false, client: aClient, waiter: LoadWaiter(mailbox: mailbox, ticket: ticket)) else {
                Issue.record("a name never looked up was answered from memory")
                return
            }
        }
        held.open()
        disk.drain()
        let heard = mailbox.collect().sorted { $0.ticket < $1.ticket }
        #expect(heard.map(\.ticket) == [1, 2])
        #expect(heard.allSatisfy { $0.outcome == .refused(FileRefusal(.notFound, "File not found")) })
    }
}
