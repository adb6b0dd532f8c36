import Glibc
import StampedeBase
import StampedeIO
import Synchronization

/// Shared by all workers: one image per file version, reference-counted by the transfers using
/// it, unreferenced images kept for the next request and evicted least recently used beyond a
/// memory budget. The lock is held for bookkeeping only, never while reading a file or sending.
public final class FileCache: Sendable {
    public struct Limits: Sendable {
        /// Bytes of images kept in memory, referenced or not (with a memfd's padding).
        public var budget: Int
        /// A larger file is streamed from its descriptor instead of cached.
        public var fileLimit: Int
        /// Images of this many bytes or more live in a memfd, which HTTP sends with sendfile; each
        /// holds a descriptor while cached (nil: none does, the server serves no HTTP).
        public var sharedFrom: Int?
        /// Memfds open at most, in the process (`DescriptorBudget.images`): beyond, an image is
        /// anonymous memory, which HTTP sends with send.
        public var sharedImages: Int
        public init(budget: Int = 1 << 30, fileLimit: Int = 256 << 20, sharedFrom: Int? = nil, sharedImages: Int = .max) {
            self.budget = budget
            self.fileLimit = fileLimit
            self.sharedFrom = sharedFrom
            self.sharedImages = sharedImages
        }
    }

    public enum Source {
        case image(FileImage)
        /// Too large or over the budget: the transfer reads blocks from the open file, this long.
        case stream(size: Int)
    }

    private struct Entry {
        var image: FileImage
        var users: Int
        var lastUse: UInt64
        /// Loaded at least `racyWindow` after its version's last change (see `racyWindow`).
        var settled: Bool
        /// Not evicted before then (wall clock), though unused: loaded for requests that will
        /// take it at their next turn (`preload`).
        var heldUntil: Int64 = 0
    }

    private struct State {
        var entries: [FileKey: Entry] = [:]
        /// Images taken out of `entries` while transfers still use them (racy ones, reloaded).
        var retired: [ObjectIdentifier: Entry] = [:]
        var bytes = 0
        var clock: UInt64 = 0
        var counts = Statistics()
        /// Versions a worker is reading now, for the others to wait for.
        var loading: [FileKey: Gate] = [:]
    }

    /// A file changed this recently before it was read may have been changed again within the
    /// same timestamp tick (a coarse clock; 2 s on FAT) with no time nor size telling: git's
    /// "racily clean" files. Such an image is shared while the window lasts, like any read of a
    /// file being written; the first request after it reads the file again, once.
    public static let racyWindow: Int64 = 2 * 1_000_000_000

    /// How long a version loaded ahead (`preload`) is kept from eviction for the requests that
    /// asked for it to take.
    public static let holdWindow: Int64 = 2 * 1_000_000_000

    public let limits: Limits
    private let state = Mutex(State())
    /// Wall-clock nanoseconds, as file times are (tests pass their own).
    private let wallClock: @Sendable () -> Int64

    public init(limits: Limits = Limits(), wallClock: @escaping @Sendable () -> Int64 = FileCache.realTime) {
        self.limits = limits
        self.wallClock = wallClock
    }

    public static let realTime: @Sendable () -> Int64 = {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec)
    }

    public var residentBytes: Int { state.withLock { $0.bytes } }
    public var imageCount: Int { state.withLock { $0.entries.count } }

    /// What the cache holds and has done, for the metrics.
    public struct Statistics: Sendable, Equatable {
        public var images = 0
        public var bytes = 0
        /// Acquires that found the version they asked for already loaded.
        public var hits = 0
        /// Acquires that loaded their file (or tried to).
        public var misses = 0
        /// Unused images dropped to make room.
        public var evictions = 0
        /// Files served without an image: over the file limit or the budget.
        public var streamed = 0
        /// Images loaded within `racyWindow` of their file's last change (read again after it).
        public var racy = 0
    }

    public var statistics: Statistics {
        state.withLock { state in
            var statistics = state.counts
            statistics.images = state.entries.count
            statistics.bytes = state.bytes
            return statistics
        }
    }

    /// The image of the open file `fd` (whose fstat is `info`), loading it when no transfer has
    /// it yet. Each successful acquire must be paired with `release`: outside this module, only a
    /// `FileLease` (the file service's) holds an image, and gives it back when it ends.
    /// A file that changes while it is read is read again as the version it became, judged
    /// anew against the limits: one that grew past them is streamed, never loaded past them.
    /// One worker reads a version at a time: another that wants it meanwhile waits for that read
    /// (it would read the same bytes, or stream them for want of budget), then shares the image.
    func acquire(fd: Int32, info: stat, netascii: Bool) throws(Errno) -> Source {
        var key = FileKey(info, netascii: netascii)
        var versions = 0
        while true {
            switch claim(key) {
            case .image(let image): return .image(image)
            case .wait(let gate):
                gate.wait()
                continue
            case .load:
                break
            }
            // This worker reads `key` now; whatever the way out (the next version too), those
            // waiting for it go on.
            let claimed = key
            defer { doneLoading(claimed) }
            guard key.size <= limits.fileLimit else {
                if netascii { throw Errno(EFBIG) }
                state.withLock { $0.counts.streamed += 1 }
                return .stream(size: key.size)
            }
            // netascii can double a file (every LF becomes CR LF), and a memfd pads its tail:
            // reserve the worst case.
            let most = netascii ? 2 * key.size : key.size
            let reserved = FileImage.residentCount(of: most, inMemfd: shares(most))
            guard reserve(reserved) else {
                if netascii { throw Errno(ENOMEM) }
                state.withLock { $0.counts.streamed += 1 }
                return .stream(size: key.size)
            }
            let loaded: Loaded
            let loadedAt = wallClock()
            do {
                loaded = try load(fd: fd, key: key)
            } catch {
                state.withLock { $0.bytes -= reserved }
                throw error
            }
            switch loaded {
            case .image(let image):
                return .image(insert(image, reserved: reserved, loadedAt: loadedAt))
            case .changed(let now):
                state.withLock { $0.bytes -= reserved }
                key = now
                versions += 1
                if versions == 4 { throw Errno(EBUSY) }
            }
        }
    }

    /// What `preload` made of a file.
    public enum Preloaded: Equatable, Sendable {
        /// Its version is in the cache now, held there for `holdWindow`: ask for it by its key.
        case cached(FileKey)
        /// Too large for the limits or the budget: each request streams it.
        case stream(size: Int)
    }

    /// Reads the open file `fd` into the cache, as `acquire` does, for requests that will take
    /// it later (the file service loads on the disk thread, and the requests ask again): the
    /// version is held from eviction for `holdWindow` meanwhile, so that a load for another
    /// request cannot push it out before they come for it.
    public func preload(fd: Int32, info: stat, netascii: Bool) throws(Errno) -> Preloaded {
        switch try acquire(fd: fd, info: info, netascii: netascii) {
        case .stream(let size):
            return .stream(size: size)
        case .image(let image):
            let until = wallClock() + Self.holdWindow
            state.withLock { state in
                if var entry = state.entries[image.key], entry.image === image {
                    entry.heldUntil = until
                    state.entries[image.key] = entry
                }
            }
            release(image)
            return .cached(image.key)
        }
    }

    private enum Claim {
        case image(FileImage)
        /// Another worker reads this version now.
        case wait(Gate)
        /// Nobody has it: the caller reads it (a gate now says so to the others).
        case load
    }

    private func claim(_ key: FileKey) -> Claim {
        let now = wallClock()
        return state.withLock { state in
            if let image = Self.take(&state, key, now: now) { return .image(image) }
            if let gate = state.loading[key] { return .wait(gate) }
            state.counts.misses += 1
            state.loading[key] = Gate()
            return .load
        }
    }

    /// The image of version `key` if it is loaded and current, for a request that has not
    /// opened its file (`FileService.read`); nil: `acquire` it from the open
    /// file. Paired with `release`, as `acquire` is.
    /// `countsAsHit`: false for the request whose own miss read it (counted then).
    public func loaded(_ key: FileKey, countsAsHit: Bool = true) -> FileImage? {
        let now = wallClock()
        return state.withLock { Self.take(&$0, key, now: now, countsAsHit: countsAsHit) }
    }

    /// A hit: `key`'s image, one more user on it.
    private static func take(_ state: inout State, _ key: FileKey, now: Int64, countsAsHit: Bool = true) -> FileImage? {
        if let entry = state.entries[key], !entry.settled, now - key.lastChange >= racyWindow {
            // Racy, and its window is over: read the file again; transfers on the old image keep it.
            retire(&state, key)
        }
        guard var entry = state.entries[key] else { return nil }
        if countsAsHit { state.counts.hits += 1 }
        state.clock += 1
        entry.users += 1
        entry.lastUse = state.clock
        state.entries[key] = entry
        return entry.image
    }

    private func doneLoading(_ key: FileKey) {
        state.withLock { $0.loading.removeValue(forKey: key) }?.open()
    }

    func release(_ image: FileImage) {
        let now = wallClock()
        state.withLock { state in
            if var entry = state.entries[image.key], entry.image === image {
                entry.users -= 1
                state.entries[image.key] = entry
                Self.evict(&state, budget: limits.budget, now: now)
            } else if var entry = state.retired[ObjectIdentifier(image)] {
                entry.users -= 1
                if entry.users > 0 {
                    state.retired[ObjectIdentifier(image)] = entry
                } else {
                    state.retired[ObjectIdentifier(image)] = nil
                    state.bytes -= image.residentCount
                }
            }
        }
    }

    /// Takes `key`'s entry out of the cache: freed now if unused, else when its last user ends.
    private static func retire(_ state: inout State, _ key: FileKey) {
        guard let entry = state.entries.removeValue(forKey: key) else { return }
        if entry.users > 0 {
            state.retired[ObjectIdentifier(entry.image)] = entry
        } else {
            state.bytes -= entry.image.residentCount
        }
    }

    /// Makes room for `size` bytes by evicting unreferenced images; false if it cannot.
    private func reserve(_ size: Int) -> Bool {
        let now = wallClock()
        return state.withLock { state in
            Self.evict(&state, budget: limits.budget - size, now: now)
            guard state.bytes + size <= limits.budget else { return false }
            state.bytes += size
            return true
        }
    }

    /// `loadedAt`: when the read began (wall clock).
    private func insert(_ image: FileImage, reserved: Int, loadedAt: Int64) -> FileImage {
        let settled = loadedAt - image.key.lastChange >= Self.racyWindow
        return state.withLock { state in
            if !settled { state.counts.racy += 1 }
            state.bytes += image.residentCount - reserved
            state.clock += 1
            if var existing = state.entries[image.key] {
                // Another worker loaded the same version meanwhile: share theirs.
                state.bytes -= image.residentCount
                existing.users += 1
                existing.lastUse = state.clock
                state.entries[image.key] = existing
                return existing.image
            }
            state.entries[image.key] = Entry(image: image, users: 1, lastUse: state.clock, settled: settled)
            return image
        }
    }

    private static func evict(_ state: inout State, budget: Int, now: Int64) {
        while state.bytes > budget {
            guard let victim = state.entries.filter({ $0.value.users == 0 && $0.value.heldUntil <= now })
                .min(by: { $0.value.lastUse < $1.value.lastUse }) else { return }
            state.entries[victim.key] = nil
            state.bytes -= victim.value.image.residentCount
            state.counts.evictions += 1
        }
    }

    private enum Loaded {
        case image(FileImage)
        /// The file changed while it was read (it is now this version): nothing was kept.
        case changed(FileKey)
    }

    /// Reads the file as version `key` and checks that it did not change while being read, so
    /// an image is always one consistent version.
    private func load(fd: Int32, key: FileKey) throws(Errno) -> Loaded {
        let raw: FileImage.Memory
        do {
            // A netascii file's raw bytes are converted into another image: only that one is shared.
            raw = try FileImage.read(fd: fd, size: key.size, shared: !key.netascii && shares(key.size))
        } catch where error.rawValue == EAGAIN {
            return .changed(try Self.restat(fd, netascii: key.netascii))  // it shrank
        }
        let after: FileKey
        do {
            after = try Self.restat(fd, netascii: key.netascii)
        } catch {
            FileImage.free(raw)
            throw error
        }
        guard after == key else {
            FileImage.free(raw)
            return .changed(after)
        }
        guard key.netascii else {
            FileImage.seal(raw)
            return .image(FileImage(raw, key: key))
        }
        let input = UnsafeRawBufferPointer(raw.buffer)
        let converted: FileImage.Memory
        do {
            let count = Netascii.encodedCount(of: input)
            converted = try FileImage.allocate(count, shared: shares(count))
        } catch {
            FileImage.free(raw)
            throw error
        }
        if converted.buffer.count > 0 { _ = Netascii.encode(input, into: converted.buffer) }
        FileImage.free(raw)
        FileImage.seal(converted)
        return .image(FileImage(converted, key: key))
    }

    /// Whether an image of `count` bytes lives in a memfd (`Limits.sharedFrom`), while the
    /// descriptors for them last (`Limits.sharedImages`; loads at once may pass it by one each).
    private func shares(_ count: Int) -> Bool {
        guard let from = limits.sharedFrom, count >= from else { return false }
        return FileImage.openMemfds.load(ordering: .relaxed) < limits.sharedImages
    }

    private static func restat(_ fd: Int32, netascii: Bool) throws(Errno) -> FileKey {
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw Errno.current }
        return FileKey(info, netascii: netascii)
    }
}
