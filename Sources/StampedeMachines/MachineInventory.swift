import CStampedeSys
import Glibc
import Logging
import StampedeDHCP
import StampedeHTTPWire
import StampedeIO
import Synchronization

/// The site's inventory (`--machines-api URL`): pixiecore's API, asked what a machine boots —
/// `GET <api>/v1/boot/<mac>` with what Stampede knows of it as query parameters (`arch`, `uuid`,
/// `giaddr`, `stage`) — by a few threads of its own, never by an event loop or the proxy's.
///
/// - An answer is kept for `lifetime` seconds, a "not listed" (any 4xx) too. A machine whose
///   firmware starts a boot again once half of it has passed is answered from memory and asked
///   about again behind it, so that a machine that keeps booting never waits for a call; its
///   loaders' requests within a boot (iPXE's DHCP, its script) are answered from memory until the
///   answer expires, and ask nothing (a rack's boots, longer than half a lifetime, would each cost
///   a second call).
/// - A machine asked about while its call is out waits for that call: one call per machine.
/// - At most `callers` calls at once (64 by default), each at most `timeout` seconds; at most `waitingLimit`
///   machines wait for one (more are counted, `overflow`, and asked about at their next request).
/// - When the API cannot be reached (no connection, no answer in time, a 5xx), a machine keeps
///   its last answer until that expires; then it is as if the API did not list it (the records'
///   directory, then `--unknown-machines`), for `retryAfter` seconds before it is asked again.
///   Counted, and said once every `sayEvery` seconds.
///
/// Whoever asks is told when an answer came through a watch of its own (`watch()`: an eventfd
/// the IPv4 proxy and the DHCPv6 responder each poll).
public final class MachineInventory: Sendable {
    /// What the inventory says of a machine.
    public enum Said: Equatable, Sendable {
        /// Boot it as this record says (or leave it alone: an answer refused is an `ignore`).
        case record(MachineRecord)
        /// It does not list it (404, or another 4xx).
        case notListed
        /// Nobody answered.
        case unreachable
    }

    /// Who asks: the stage of the machine's boot (the query's `stage`).
    public enum Stage: String, Sendable {
        case dhcp, script
    }

    /// How calls ended, as the metrics count them.
    public enum Outcome: Int, CaseIterable, Sendable {
        case listed, notListed, refused, unreachable, overflow

        public var label: String {
            switch self {
            case .listed: "listed"
            case .notListed: "not_listed"
            case .refused: "refused"
            case .unreachable: "unreachable"
            case .overflow: "overflow"
            }
        }
    }

    /// What a call is given to do it: the URL, and at most how many seconds.
    public typealias Fetch = @Sendable (_ url: String, _ method: String, _ timeout: Int) throws(HTTPClient.Failure) -> HTTPClient.Answer

    /// Calls at once by default (`--machines-api-calls`).
    public static let defaultCallers = 64
    public static let timeout = 2
    public static let waitingLimit = 65_536
    /// Call times kept until the metrics take them, at most (they take them every second).
    public static let callTimesLimit = 65_536
    /// Machines whose answers are kept at most (past it, expired answers are dropped; then none kept).
    public static let keptLimit = 262_144
    static let retryAfter: Int64 = 5
    static let sayEvery: Int64 = 10

    /// The API's prefix, without a trailing `/`.
    public let url: String
    /// Seconds an answer is kept.
    public let lifetime: Int
    /// Calls at once at most: the threads that make them.
    public let callers: Int

    private struct Entry {
        var said: Said
        var expires: Int64
        var refresh: Int64
    }

    private struct Ask: Sendable {
        var machine: MachineIdentity
        /// When it was queued (monotonic nanoseconds).
        var queued: Int64
        var stage: Stage
        var relay: IPv4?
    }

    private enum Task: Sendable {
        case ask(Ask)
        case done([UInt8])
        case stop
    }

    private struct State {
        var kept: [HardwareKey: Entry] = [:]
        var asking: Set<HardwareKey> = []
        var tasks: [Task] = []
        var taken = 0
        var counts = [Int](repeating: 0, count: Outcome.allCases.count)
        var lastSaid: Int64?
        /// How long each call for a machine's boot took, until the metrics take them.
        var callTimes: [CallTime] = []
        /// Who is told of each answer.
        var watches: [InventoryWatch] = []
    }

    private let state = SleepingLock(State())
    nonisolated(unsafe) private let ready: UnsafeMutablePointer<sem_t>
    private let fetch: Fetch
    /// Where calls say what went wrong (given at `start`: after the log is set up).
    private let said = Mutex(Logger(label: "stampede"))
    private var logger: Logger { said.withLock { $0 } }
    private let clock: @Sendable () -> Int64
    private let threads: Mutex<[SystemThread]> = Mutex([])

    /// `clock`: seconds on a monotonic clock (tests set it).
    /// `fetch`: nil, over a pool of kept connections, one for each caller.
    public init(url: String, lifetime: Int, callers: Int = MachineInventory.defaultCallers, fetch: Fetch? = nil,
                clock: @escaping @Sendable () -> Int64 = { stampede_monotonic_ns() / 1_000_000_000 }) {
        self.url = url.hasSuffix("/") ? String(url.dropLast()) : url
        self.lifetime = max(1, lifetime)
        self.callers = max(1, callers)
        let pool = HTTPClient.Pool(limit: max(1, callers))
        if let fetch {
            self.fetch = fetch
        } else {
            self.fetch = { url, method, timeout throws(HTTPClient.Failure) in try pool.request(url, method: method, timeout: timeout) }
        }
        self.clock = clock
        ready = .allocate(capacity: 1)
        sem_init(ready, 0, 0)
    }

    deinit {
        sem_destroy(ready)
        ready.deallocate()
    }

    /// A new watch, told of every answer from now on (one for each who waits for answers).
    public func watch() -> InventoryWatch {
        let watch = InventoryWatch()
        state.withLock { $0.watches.append(watch) }
        return watch
    }

    /// Starts the callers (after the server detached: threads do not cross a fork), which log
    /// to `logger`.
    public func start(logger: Logger) {
        said.withLock { $0 = logger }
        let started = (0..<callers).map { number in SystemThread(named: "machines-api-\(number)") { self.call() } }
        threads.withLock { $0 += started }
    }

    /// Lets the callers finish their calls and end.
    public func stop() {
        let running = threads.withLock { threads in
            defer { threads = [] }
            return threads
        }
        state.withLock { state in state.tasks += running.map { _ in .stop } }
        for _ in running { sem_post(ready) }
        for thread in running { thread.join() }
    }

    /// What the inventory says of `machine` now; nil while it is being asked (a watch says when
    /// to ask again). `stage` nil: what is known, asking nothing. `renews`: the machine's firmware
    /// starts a boot, and an answer past half its lifetime is asked about again behind it.
    public func said(of machine: MachineIdentity, stage: Stage?, relay: IPv4? = nil, renews: Bool = true) -> Said? {
        let mac = machine.hardwareAddress
        let key = HardwareKey(mac)
        let now = clock()
        func ask(_ stage: Stage) -> Task { .ask(Ask(machine: machine, queued: stampede_monotonic_ns(), stage: stage, relay: relay)) }
        let (said, queued): (Said?, Bool) = state.withLock { state in
            let entry = state.kept[key]
            if let entry, now < entry.expires {
                // Fresh: answered from memory; past its half-life asked again behind it.
                guard renews, now >= entry.refresh, let stage, !state.asking.contains(key) else { return (entry.said, false) }
                return (entry.said, Self.queue(ask(stage), key, &state))
            }
            guard let stage else { return (nil, false) }
            if state.asking.contains(key) { return (nil, false) }
            return (nil, Self.queue(ask(stage), key, &state))
        }
        if queued { sem_post(ready) }
        return said
    }

    private static func queue(_ task: Task, _ key: HardwareKey, _ state: inout State) -> Bool {
        guard state.tasks.count - state.taken < waitingLimit else {
            state.counts[Outcome.overflow.rawValue] += 1
            return false
        }
        state.asking.insert(key)
        state.tasks.append(task)
        return true
    }

    /// A machine said its boot is done: told to the API (`POST <api>/v1/done/<mac>`), and its
    /// answer forgotten, so that its next request asks again.
    public func done(_ mac: [UInt8]) {
        state.withLock { state in
            state.kept[HardwareKey(mac)] = nil
            state.tasks.append(.done(mac))
        }
        sem_post(ready)
    }

    /// Calls by outcome, since the start.
    public var counts: [Outcome: Int] {
        let counts = state.withLock { $0.counts }
        return Dictionary(uniqueKeysWithValues: Outcome.allCases.map { ($0, counts[$0.rawValue]) })
    }

    /// How long a call for a machine's boot took, in nanoseconds.
    public struct CallTime: Sendable {
        /// From its request sent to its answer read (or its failure): the API's time, and the network's.
        public var call: Int64
        /// From the machine's ask queued to its answer: what a machine waiting for it waited (the
        /// call, and before it the wait for a free caller).
        public var waited: Int64
    }

    /// The calls for machines' boots since the last time this was asked, timed: at most
    /// `callTimesLimit` (those past it are not timed; the calls' counts have them all).
    public func takeCallTimes() -> [CallTime] {
        state.withLock { state in
            defer { state.callTimes = [] }
            return state.callTimes
        }
    }

    /// `machine`'s query: `<api>/v1/boot/<mac>?arch=N&uuid=U&giaddr=A&stage=S`.
    private func query(_ ask: Ask) -> String {
        var query = "\(url)/v1/boot/\(ask.machine.hardwareAddress.hardwareAddressText(separator: ":"))?"
        if let architecture = ask.machine.architecture { query += "arch=\(architecture)&" }
        if let uuid = ask.machine.uuid { query += "uuid=\(uuid)&" }
        if let relay = ask.relay { query += "giaddr=\(relay)&" }
        return query + "stage=\(ask.stage.rawValue)"
    }

    /// A caller's thread: a task at a time, until a stop.
    private func call() {
        while true {
            while sem_wait(ready) != 0 {}
            let task: Task? = state.withLock { state in
                guard state.taken < state.tasks.count else { return nil }
                let task = state.tasks[state.taken]
                state.taken += 1
                if state.taken > 1024 && state.taken * 2 > state.tasks.count {
                    state.tasks.removeFirst(state.taken)
                    state.taken = 0
                }
                return task
            }
            switch task {
            case .ask(let ask)?: answer(ask)
            case .done(let mac)?: report(mac)
            case .stop?: return
            case nil: continue
            }
        }
    }

    private func answer(_ ask: Ask) {
        let mac = ask.machine.hardwareAddress
        var name: String { mac.hardwareAddressText(separator: ":") }  // for a line the log writes
        let outcome: Outcome
        let said: Said
        var now: Int64 = 0
        let asked = stampede_monotonic_ns()
        do {
            let answer = try fetch(query(ask), "GET", Self.timeout)
            now = clock()
            switch answer.status {
            case 200:
                switch InventoryAnswer.record(answer.body, mac: mac, api: url) {
                case .success(let record):
                    (outcome, said) = (.listed, .record(record))
                case .failure(let refused):
                    logger.warning("machine \(name): the answer of \(url) is refused, the machine left alone: \(refused)")
                    let ignore = MachineRecord(name: InventoryAnswer.recordName, selectors: [(.hardwareAddress(mac), 0)], action: .ignore)
                    (outcome, said) = (.refused, .record(ignore))
                }
            case 400..<500:
                (outcome, said) = (.notListed, .notListed)
            default:
                throw HTTPClient.Failure(description: "\(url) answered \(answer.status)")
            }
        } catch {
            now = clock()
            (outcome, said) = (.unreachable, .unreachable)
            let say = state.withLock { state in
                guard state.lastSaid.map({ now - $0 >= Self.sayEvery }) ?? true else { return false }
                state.lastSaid = now
                return true
            }
            if say {
                logger.warning("""
                    the machine API cannot be asked about \(name): \(error); a machine keeps its last answer until it \
                    expires, then gets the records' directory and --unknown-machines
                    """)
            }
        }
        let answered = stampede_monotonic_ns()
        let took = CallTime(call: answered - asked, waited: answered - ask.queued)
        let key = HardwareKey(mac)
        let watches = state.withLock { state in
            state.asking.remove(key)
            state.counts[outcome.rawValue] += 1
            if state.callTimes.count < Self.callTimesLimit { state.callTimes.append(took) }
            if said == .unreachable, let kept = state.kept[key], now < kept.expires {
                // The last answer holds until it expires; after it, "unreachable" for a while.
                state.kept[key]!.refresh = min(kept.expires, now + Self.retryAfter)
            } else if said == .unreachable {
                Self.keep(mac, Entry(said: said, expires: now + Self.retryAfter, refresh: now + Self.retryAfter), now: now, &state)
            } else {
                Self.keep(mac, Entry(said: said, expires: now + Int64(lifetime), refresh: now + Int64(lifetime + 1) / 2), now: now, &state)
            }
            return state.watches
        }
        for watch in watches { watch.tell(mac) }
    }

    private static func keep(_ mac: [UInt8], _ entry: Entry, now: Int64, _ state: inout State) {
        let key = HardwareKey(mac)
        if state.kept.count >= keptLimit && state.kept[key] == nil {
            state.kept = state.kept.filter { $0.value.expires > now }
            guard state.kept.count < keptLimit else { return }
        }
        state.kept[key] = entry
    }

    private func report(_ mac: [UInt8]) {
        let name = mac.hardwareAddressText(separator: ":")
        do {
            let answer = try fetch("\(url)/v1/done/\(name)", "POST", Self.timeout)
            guard (200..<300).contains(answer.status) else {
                logger.warning("machine \(name): its boot is done, and \(url)/v1/done/\(name) answered \(answer.status)")
                return
            }
            logger.info("machine \(name): its boot is done, told to \(url)")
        } catch {
            logger.warning("machine \(name): its boot is done, and the machine API could not be told: \(error)")
        }
    }
}
