import CStampedeSys
import Glibc
import Logging
import StampedeBase
import StampedeIO
import Synchronization

/// What every protocol asks of the served root, in one place: a requested name through the remap
/// rules (`-m`), `--normalize` and `--validate`, the access policy, and the cache, to a lease on
/// the version of the file it names (`FileLease`), or the refusal (`FileRefusal`) that TFTP and
/// HTTP each say their own way. An event loop asks, and the file system is asked only on a disk
/// thread (`DiskWork`): a name is looked at on the loop from the kernel's caches alone
/// (`AccessPolicy.lookInMemory`), else on a disk thread; a version the cache does not hold is
/// opened and read on a disk thread. The request waits, its loop serves the others, and hears
/// through its `LoadMailbox` when to ask again. A file too large to cache is opened on a disk
/// thread too, and streamed as far as its bytes are read ahead (docs/ARCHITECTURE.md, "The file
/// service").
public final class FileService: Sendable {
    /// The disk threads a server gives its reads: a stuck disk holds as many files' first reads.
    public static let diskThreads = 4

    public let policy: AccessPolicy
    public let remapRules: RemapRuleSet?
    public let cache: FileCache
    /// Files made for the machine that asks (`--machines`), before the root.
    public let generated: (any GeneratedFiles)?
    let disk: DiskWork
    /// Versions being read on the disk thread, and who waits for each: one read per version,
    /// however many requests want it at once (a rack asking for ipxe.efi).
    private let loading = Mutex<[FileKey: [LoadWaiter]]>([:])
    /// Names being looked at on a disk thread, and who waits for each: one look per name, however
    /// many requests ask for it while the kernel's caches cannot say.
    private let looking = Mutex<[[UInt8]: [LoadWaiter]]>([:])
    /// Devices seen, and whether their file systems open without waiting (`opensLocally`).
    private let localDevices = Mutex<[UInt64: Bool]>([:])

    public init(policy: AccessPolicy, remapRules: RemapRuleSet?, cache: FileCache, disk: DiskWork, generated: (any GeneratedFiles)? = nil) {
        self.policy = policy
        self.remapRules = remapRules
        self.cache = cache
        self.generated = generated
        self.disk = disk
    }

    // MARK: Names

    /// What a request's name is now.
    public enum Naming {
        case named([UInt8])
        /// The rules run on a disk thread: `waiter`'s mailbox hears `.remapped` (or the refusal),
        /// and the request asks again.
        case loading
        case refused(FileRefusal)
    }

    /// The name to open for `filename` (`-m`), or the refusal the rules decide: an `a` rule's
    /// message, as tftpd-hpa answers (ERROR 2). Verbosity 3 traces every rule. Without rules, the
    /// name as asked. An `E` rule asks the access policy whether its result can be served: from
    /// the kernel's caches on the loop (a read's name looked at as `lookInMemory` looks); when
    /// they cannot say (a write's target, a name not looked up lately), the rules run again on a
    /// disk thread, whose probe opens the file as in.tftpd's does, and the request waits.
    /// `after`: the outcome the request waited for (nil: its first ask).
    public func remap(_ filename: [UInt8], isWrite: Bool, client: SocketAddress, logger: Logger, waiter: LoadWaiter,
                      after outcome: LoadOutcome? = nil) -> Naming {
        if case .remapped(let name) = outcome { return .named(name) }
        guard let rules = remapRules?.current else { return .named(filename) }
        let policy = self.policy
        var undecided = false
        var traced: [String] = []
        let tracing = logger.logLevel <= .trace
        let fromMemory = rules.apply(to: filename, isWrite: isWrite, client: client, servable: { name in
            guard !isWrite, let servable = policy.canServeInMemory(name) else {
                undecided = true
                return false
            }
            return servable
        }, trace: tracing ? { traced.append($0) } : nil)
        guard undecided else {
            for line in traced { logger.trace("\(client): \(line)") }
            return Self.naming(fromMemory, of: filename, client: client, logger: logger)
        }
        waiter.mailbox.expect()
        disk.submit {
            let outcome = rules.apply(to: filename, isWrite: isWrite, client: client, servable: { policy.canServe($0, isWrite: isWrite) },
                                      trace: tracing ? { logger.trace("\(client): \($0)") } : nil)
            switch Self.naming(outcome, of: filename, client: client, logger: logger) {
            case .named(let name): waiter.mailbox.post(waiter.ticket, .remapped(name))
            case .refused(let refusal): waiter.mailbox.post(waiter.ticket, .refused(refusal))
            case .loading: preconditionFailure("the rules' outcome is a name or a refusal")
            }
        }
        return .loading
    }

    /// What the rules' outcome says of the request's name.
    private static func naming(_ outcome: RemapRules.Outcome, of filename: [UInt8], client: SocketAddress, logger: Logger) -> Naming {
        switch outcome {
        case .mapped(let mapped):
            return .named(mapped)
        case .refused(let message):
            return .refused(FileRefusal(.denied, message.map { String($0.prefix(200)) } ?? "Access violation"))
        case .failed(let failure):
            logger.error("\(client): remapping \"\(sanitizedForLog(filename))\": \(failure)")
            return .refused(FileRefusal(.denied, "Remap table failure"))
        }
    }

    // MARK: Reading

    /// What a request for a download gets now.
    public enum Reading: ~Copyable {
        case ready(FileLease)
        /// Its version is being read into the cache: `waiter`'s mailbox hears when, and the
        /// request asks again (or streams the file, `LoadOutcome.stream`).
        case loading
        case refused(FileRefusal)
    }

    /// The file `name` (already remapped) for a download: looked at beneath the root and judged by
    /// the policy (a generated file first: made for the client, or another of the root's), then its
    /// version from the cache without opening it, or opened and streamed (over
    /// `--cache-file-limit`, or `streaming`: the cache said so), or read into the cache on the
    /// disk thread while the request waits (`.loading`). Every file problem is found before
    /// anything is sent (EFI clients cannot take an ERROR after an OACK).
    /// `after`: the outcome of a read this request waited for (nil: its first ask).
    public func read(_ asked: [UInt8], netascii: Bool, client: SocketAddress, waiter: LoadWaiter, after outcome: LoadOutcome? = nil) -> Reading {
        if case .opened(let file) = outcome {
            return .ready(FileLease(.stream(file), version: file.version, cache: nil))
        }
        let name: [UInt8]
        switch generated?.file(asked, for: client) {
        case .made(let made)?:
            let image = FileImage.holding(made, netascii: netascii)
            return .ready(FileLease(.image(image), version: image.key, cache: nil))
        case .root(let other)?:
            name = other
        case nil:
            name = asked
        }
        let streaming = outcome == .stream
        // The request whose miss started the read was counted a miss; those that joined it, hits.
        let countsAsHit = outcome != .loaded(byThisRequest: true)
        // The name is looked at from the kernel's caches; when they cannot say without the file
        // system, a disk thread looks, and the request asks again.
        let seen: AccessPolicy.Sighting?
        do { seen = try policy.lookInMemory(name) } catch { return .refused(error) }
        guard let sighting = seen else { return lookOnDisk(name, waiter) }
        let key = FileKey(sighting.info, netascii: netascii)
        // A version the cache holds needs no descriptor: the key has its change time, so a chmod
        // or a rewrite is another version.
        if !streaming, let image = cache.loaded(key, countsAsHit: countsAsHit) {
            return .ready(FileLease(.image(image), version: key, cache: cache))
        }
        if key.size > cache.limits.fileLimit || streaming {
            guard !netascii else { return .refused(FileRefusal(.failed, "File too large for netascii")) }
            // On a local file system an open from the kernel's caches waits for nothing: made
            // here. Elsewhere (FUSE, NFS: the open asks the server) on a disk thread.
            guard opensLocally(sighting) else { return openOnDisk(name, waiter) }
            do throws(FileRefusal) {
                guard let file = try policy.openInMemory(sighting) else { return openOnDisk(name, waiter) }
                let version = FileKey(file.info, netascii: false)
                return .ready(FileLease(.stream(StreamedFile(file.descriptor, size: version.size, version: version)),
                                        version: version, cache: nil))
            } catch {
                return .refused(error)
            }
        }
        // Someone reads it already: wait for that read.
        let first = loading.withLock { loading in
            if loading[key] != nil {
                loading[key]!.append(waiter)
                return false
            }
            loading[key] = [waiter]
            return true
        }
        waiter.mailbox.expect()
        guard first else { return .loading }
        // Opened and read on a disk thread: an open asks the file system too (a network file
        // system's server, a FUSE daemon).
        disk.submit { [self] in
            let outcome: Loaded
            do throws(FileRefusal) {
                let file = try policy.openForReading(name)
                outcome = FileKey(file.info, netascii: netascii) == key ? load(file.descriptor.raw, file.info, netascii: netascii) : .changed
            } catch {
                outcome = .refused(error)
            }
            finishLoading(key, outcome)
        }
        return .loading
    }

    /// The version open on `fd` read into the cache.
    private func load(_ fd: Int32, _ info: stat, netascii: Bool) -> Loaded {
        do throws(Errno) {
            switch try cache.preload(fd: fd, info: info, netascii: netascii) {
            case .cached: return .cached
            case .stream: return .stream
            }
        } catch {
            switch error.rawValue {
            case ENOMEM: return .refused(FileRefusal(.busy, "File too large to serve now"))
            case EFBIG: return .refused(FileRefusal(.failed, "File too large for netascii"))
            default: return .refused(error.fileRefusal)
            }
        }
    }

    /// A name the kernel's caches could not resolve, looked at on a disk thread (however long the
    /// file system takes): the request hears `.looked` and asks again, or its refusal. Requests for
    /// the same name meanwhile wait for the same look.
    private func lookOnDisk(_ name: [UInt8], _ waiter: LoadWaiter) -> Reading {
        waiter.mailbox.expect()
        let first = looking.withLock { looking in
            defer { looking[name, default: []].append(waiter) }
            return looking[name] == nil
        }
        guard first else { return .loading }
        disk.submit { [self] in
            let outcome: LoadOutcome
            do throws(FileRefusal) {
                _ = try policy.look(name)
                outcome = .looked
            } catch {
                outcome = .refused(error)
            }
            for waiter in looking.withLock({ $0.removeValue(forKey: name) }) ?? [] {
                waiter.mailbox.post(waiter.ticket, outcome)
            }
        }
        return .loading
    }


    /// File systems whose opens of a cached name wait for nothing (no server asked, no page
    /// waited for: FUSE's open waits for the pages another read holds, NFS's asks its server),
    /// by `statfs`'s magic: ext2/3/4, XFS, Btrfs, F2FS, tmpfs, ramfs, overlayfs, squashfs, ZFS.
    static let localFileSystems: Set<Int> = [0xEF53, 0x5846_5342, 0x9123_683E, 0xF2F5_2010, 0x0102_1994, 0x8584_58F6,
                                             0x794C_7630, 0x7371_7368, 0x2FC1_2FC1]

    /// Whether the file looked at is on a local file system (`localFileSystems`): asked of the
    /// kernel once per device.
    private func opensLocally(_ sighting: borrowing AccessPolicy.Sighting) -> Bool {
        let device = UInt64(sighting.info.st_dev)
        if let known = localDevices.withLock({ $0[device] }) { return known }
        let local = Self.localFileSystems.contains(stampede_file_system_type(sighting.named.raw))
        localDevices.withLock { $0[device] = local }
        return local
    }

    /// A file to stream, opened on a disk thread (an open asks the file system: a FUSE or network
    /// file system's server; FUSE's waits for pages another read holds): the request hears
    /// `.opened` with it, and asks again (or its refusal). One open per request: each streams
    /// from a descriptor of its own.
    private func openOnDisk(_ name: [UInt8], _ waiter: LoadWaiter) -> Reading {
        waiter.mailbox.expect()
        disk.submit { [policy] in
            let outcome: LoadOutcome
            do throws(FileRefusal) {
                let file = try policy.openForReading(name)
                let version = FileKey(file.info, netascii: false)
                outcome = .opened(StreamedFile(file.descriptor, size: version.size, version: version))
            } catch {
                outcome = .refused(error)
            }
            waiter.mailbox.post(waiter.ticket, outcome)
        }
        return .loading
    }

    /// How a read on the disk thread went.
    private enum Loaded {
        case cached, stream
        /// The file opened was another version than the one looked at: ask again.
        case changed
        case refused(FileRefusal)
    }

    /// Tells everyone waiting for `key`'s read how it went (the first of them asked for it).
    private func finishLoading(_ key: FileKey, _ loaded: Loaded) {
        let waiters = loading.withLock { $0.removeValue(forKey: key) } ?? []
        for (index, waiter) in waiters.enumerated() {
            let outcome: LoadOutcome = switch loaded {
            case .cached: .loaded(byThisRequest: index == 0)
            case .stream: .stream
            case .changed: .looked
            case .refused(let refusal): .refused(refusal)
            }
            waiter.mailbox.post(waiter.ticket, outcome)
        }
    }

    // MARK: Streamed files

    /// How much of a streamed file one read-ahead reads.
    public static let readAheadBytes = 8 << 20

    /// Reads `file`'s next `readAheadBytes` from `offset` on a disk thread, so that a send from them
    /// (a sendfile, a read of a block) finds them in the page cache instead of waiting on the disk
    /// on an event loop; `waiter` hears `.readAhead(through:)`. One at a time per file: false (and
    /// nothing asked) while one is under way, or when the file is read to its end, or when the page
    /// cache holds those bytes already (cachestat: then they are ready at once, no disk thread;
    /// asked only where the file system reads from the cache without waiting,
    /// `StreamedFile.pageCacheIsExact`. A page being read in for another request counts as held:
    /// a send from it waits for that read, as long as the disk takes over it.)
    @discardableResult
    public func readAhead(_ file: StreamedFile, from offset: Int, waiter: LoadWaiter) -> Bool {
        guard !file.readingAhead, offset < file.size else { return false }
        let end = min(file.size, offset + Self.readAheadBytes)
        if file.pageCacheIsExact && stampede_range_cached(file.descriptor, off_t(offset), end - offset) == 1 {
            file.readAhead(done: end)
            return false
        }
        // Its own descriptor: the answer may end, and close the file's, before the read does.
        let fd = dup(file.descriptor)
        guard fd >= 0 else { return false }
        file.readingAhead = true
        waiter.mailbox.expect()
        disk.submit {
            defer { Glibc.close(fd) }
            // Faulted into a mapping (MAP_POPULATE waits for the disk and copies nothing), else
            // read into a buffer. An error or a shorter file: the send finds it itself, and says so.
            if stampede_populate(fd, off_t(offset), end - offset) != 0 {
                let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 4096)
                defer { buffer.deallocate() }
                var at = offset
                while at < end {
                    let count = pread(fd, buffer.baseAddress, min(buffer.count, end - at), off_t(at))
                    if count < 0 && errno == EINTR { continue }
                    guard count > 0 else { break }
                    at += count
                }
            }
            waiter.mailbox.post(waiter.ticket, .readAhead(through: end))
        }
        return true
    }

    // MARK: Writing

    /// What a request for an upload gets now.
    public enum Writing {
        case ready(Upload)
        /// Its temporary file is being made on a disk thread: `waiter`'s mailbox hears `.created`
        /// (or the refusal), and the request asks again.
        case loading
        case refused(FileRefusal)
    }

    /// An upload of `name` (already remapped): the data goes to a temporary file beside it, made
    /// on a disk thread (the directory's lookup, the target's permissions and the file's creation
    /// all ask the file system). `after`: the outcome the request waited for (nil: its first ask).
    public func write(_ name: [UInt8], waiter: LoadWaiter, after outcome: LoadOutcome? = nil) -> Writing {
        if case .created(let upload) = outcome { return .ready(upload) }
        waiter.mailbox.expect()
        disk.submit { [policy] in
            let outcome: LoadOutcome
            do throws(FileRefusal) { outcome = .created(try policy.openForWriting(name)) } catch { outcome = .refused(error) }
            waiter.mailbox.post(waiter.ticket, outcome)
        }
        return .loading
    }
}

/// How a read on the disk thread went, for each request that waited for it.
public enum LoadOutcome: Equatable, Sendable {
    /// The version is in the cache: ask again (`after:` this). `byThisRequest`: the read was the
    /// one this request's miss started.
    case loaded(byThisRequest: Bool)
    /// The cache cannot hold it (its budget): ask again (`after:` this), streaming it.
    case stream
    /// Its name was looked at on a disk thread (the kernel's caches could not resolve it), or
    /// the version opened there was not the one looked at: ask again.
    case looked
    /// A file to stream was opened on a disk thread: ask again (`after:` this), and it is lent.
    case opened(StreamedFile)
    /// An upload's temporary file was made on a disk thread: ask again (`after:` this), and it is
    /// the upload's.
    case created(Upload)
    /// The remap rules, which probe the file system (`E`), made this name of the one asked for on
    /// a disk thread: the request goes on with it (`remap(after:)`).
    case remapped([UInt8])
    /// A streamed file's bytes up to `through` were read on a disk thread (`FileService.readAhead`):
    /// they are in the page cache, and a send from them waits for no disk.
    case readAhead(through: Int)
    case refused(FileRefusal)
}

extension LoadOutcome {
    /// The rules' name (`.remapped`): the request's first ask of its file is still to come.
    public var isRemapped: Bool {
        if case .remapped = self { true } else { false }
    }
}

/// A request waiting for a read: which mailbox hears of it, under which ticket.
public struct LoadWaiter: Sendable {
    public let mailbox: LoadMailbox
    public let ticket: UInt64

    public init(mailbox: LoadMailbox, ticket: UInt64) {
        self.mailbox = mailbox
        self.ticket = ticket
    }
}

/// Where an event loop (a TFTP worker, an HTTP loop) hears that the reads its requests wait for
/// are done: the disk thread posts, the loop collects. The mailbox wakes the loop (`waking`: an
/// eventfd the post writes and the loop watches); a loop whose mailbox could not have one (no
/// descriptor left) waits at most `pollInterval` per turn while any read is awaited, so that a
/// request goes on within a few milliseconds.
public final class LoadMailbox: Sendable {
    public static let pollInterval: Nanoseconds = 2_000_000
    private let posted = Mutex<[(ticket: UInt64, outcome: LoadOutcome)]>([])
    /// Reads this loop's requests wait for (touched by the loop only, through `expect` and
    /// `collect`; atomic for Sendable's sake).
    private let awaited = Atomic<Int>(0)
    private let tickets = Atomic<UInt64>(0)
    /// A wake was written and not yet drained (so a turn with nothing posted reads nothing).
    private let signaled = Atomic<Bool>(false)
    /// Readable once a read was posted, until `collect`; nil unless the mailbox wakes. The
    /// mailbox's own eventfd, closed with it.
    public let wakeDescriptor: Int32?

    /// A mailbox the loop polls.
    public init() { wakeDescriptor = nil }

    private init(wake: Int32) { wakeDescriptor = wake }

    deinit { if let fd = wakeDescriptor { Glibc.close(fd) } }

    /// A mailbox whose posts make `wakeDescriptor` readable, for a loop that watches it.
    public static func waking() throws(Errno) -> LoadMailbox {
        let fd = stampede_eventfd()
        if let error = Errno(result: fd) { throw error }
        return LoadMailbox(wake: fd)
    }

    /// A ticket for the next request that may wait, for a loop that has no ticket of its own.
    public func nextTicket() -> UInt64 { tickets.add(1, ordering: .relaxed).newValue }

    func expect() { awaited.add(1, ordering: .relaxed) }

    func post(_ ticket: UInt64, _ outcome: LoadOutcome) {
        posted.withLock { $0.append((ticket, outcome)) }
        wake()
    }

    /// Wakes the loop (a waking mailbox's descriptor becomes readable until the next `collect`):
    /// for other disk work whose outcome the loop keeps apart (a TFTP upload's commit), posted
    /// before the wake. The loop collects the mailbox first, then that work's outcomes.
    public func wake() {
        // One write per collect at most: the loop drains only after a wake was written.
        if let fd = wakeDescriptor, !signaled.exchange(true, ordering: .sequentiallyConsistent) {
            var one: UInt64 = 1
            _ = Glibc.write(fd, &one, 8)  // EAGAIN only when the counter is full: readable anyway
        }
    }

    /// Whether a request of this loop waits for a read.
    public var isAwaiting: Bool { awaited.load(ordering: .relaxed) > 0 }

    /// What was posted since the last collect (and the wake read, so that it waits for the next).
    public func collect() -> [(ticket: UInt64, outcome: LoadOutcome)] {
        // Drained before the flag is cleared, the flag cleared before the posts are taken: a post
        // after the clear writes again and wakes the next poll; one before is taken now.
        if let fd = wakeDescriptor, signaled.load(ordering: .sequentiallyConsistent) {
            var count: UInt64 = 0
            _ = Glibc.read(fd, &count, 8)
            signaled.store(false, ordering: .sequentiallyConsistent)
        }
        guard isAwaiting else { return [] }
        let outcomes = posted.withLock { posted in
            defer { posted.removeAll(keepingCapacity: true) }
            return posted
        }
        awaited.subtract(outcomes.count, ordering: .relaxed)
        return outcomes
    }
}
