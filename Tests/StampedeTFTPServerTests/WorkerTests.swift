import CMallocCounter
import CStampedeSys
import Glibc
import Logging
@testable import StampedeFiles
import StampedeIO
import StampedeProtocol
import StampedeServing
@testable import StampedeTFTPServer
import StampedeTestSupport
import Testing

@Suite(.serialized) struct WorkerSpec {
    let dir = ScratchDirectory()
    let backend = FakeBackend()
    let worker: Worker<FakeBackend>
    let client = SocketAddress(parsing: "127.0.0.1:40000", defaultPort: 0)!
    let local = SocketAddress(parsing: "127.0.0.1:69", defaultPort: 0)!

    init() throws {
        var configuration = ServerConfiguration(listenAddresses: [local], policy: AccessPolicy(root: dir.fd),
                                                logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }))
        configuration.optionLimits.maxBlockSize = 1468
        worker = Worker(backend: backend, configuration: configuration, cache: FileCache(), index: 0)
        try worker.bindListeners([local])
    }

    /// Delivers `bytes` (the datagram keeps pointing at the test's copy during the turn).
    func deliver(_ bytes: [UInt8], tag: UInt64) -> [[UInt8]] {
        backend.sent = []
        backend.inbox.append((tag, bytes, client, local))
        worker.turnSettling(now: stampede_monotonic_ns(), maxWait: 0)
        return backend.sent.map(\.bytes)
    }

    func request(_ name: String, mode: String = "octet", _ options: [(name: String, value: String)] = [], write: Bool = false) -> [[UInt8]] {
        deliver(Request(isWrite: write, filename: Array(name.utf8), mode: mode, options: options).encoded(), tag: backend.tags[0])
    }

    var transferTag: UInt64 { backend.tags.last! }

    @Test func aPlainReadRequestGetsDataBlockOneAtOnce() {
        dir.write("f", [UInt8]("hello"))
        #expect(request("f") == [[0, 3, 0, 1] + [UInt8]("hello")])
        #expect(deliver([0, 4, 0, 1], tag: transferTag) == [])
        #expect(worker.activeTransfers == 0)
        #expect(worker.summary.transfers == 1 && worker.summary.failed == 0)
    }

    @Test func optionsGetAnOptionAckThenDataAfterAckZero() {
        dir.write("f", Array(repeating: 9, count: 2000))
        #expect(request("f", [("blksize", "1468"), ("tsize", "0")])
            == [PacketWriter.optionAck([("blksize", "1468"), ("tsize", "2000")])])
        let first = deliver([0, 4, 0, 0], tag: transferTag)
        #expect(first == [[0, 3, 0, 1] + Array(repeating: 9, count: 1468)])
    }

    /// A window waits whole in the transfer socket's queue: a download's in the send queue (a
    /// full one drops the rest), an upload's in the receive queue; lockstep keeps the default.
    @Test func aTransferSocketQueuesTheWindowItGrants() {
        dir.write("f", Array(repeating: 9, count: 2_000_000))
        _ = request("f", [("blksize", "1468"), ("windowsize", "300")])
        #expect(backend.lastTransferBuffers == SocketBuffers(send: 256 * (1472 + 832)))
        _ = request("f", [("blksize", "1468")])
        #expect(backend.lastTransferBuffers == SocketBuffers())
        dir.write("up", [], mode: 0o666)
        _ = request("up", [("blksize", "1024"), ("windowsize", "16")], write: true)
        #expect(backend.lastTransferBuffers == SocketBuffers(receive: 16 * (1028 + 832)))
    }

    @Test func theUEFISizeProbeEndsQuietly() {
        dir.write("f", [1, 2, 3])
        _ = request("f", [("tsize", "0")])
        #expect(deliver([0, 5, 0, 8, 0], tag: transferTag) == [])
        #expect(worker.activeTransfers == 0)
        #expect(worker.summary.failed == 0)
    }

    @Test func refusalsComeFromTheListenerWithTheRightCode() {
        #expect(request("missing").first?.prefix(4) == [0, 5, 0, 1])
        #expect(request("f", mode: "mail").first?.prefix(4) == [0, 5, 0, 4])
        #expect(request("../x").first?.prefix(4) == [0, 5, 0, 2])
        #expect(request("up", write: true).first?.prefix(4) == [0, 5, 0, 1])
        #expect(deliver([0, 1] + [UInt8]("nonul"), tag: backend.tags[0]).first?.prefix(4) == [0, 5, 0, 4])
        #expect(deliver([0, 42, 1, 2], tag: backend.tags[0]).first?.prefix(4) == [0, 5, 0, 4])
        #expect(deliver([0, 4, 0, 1], tag: backend.tags[0]) == [])
        #expect(worker.activeTransfers == 0)
    }

    /// A refusal's line (every "File not found" at -v 0: a dozen per PXELINUX config search)
    /// says the client, the request and the error; a handler that takes lines gets it as the
    /// bytes of the text an event would carry (IPv4 and IPv6 clients, a name the rules changed,
    /// one too long for any path, a control character).
    @Test(arguments: [false, true])
    func aRefusalsLineSaysTheClientTheRequestAndTheError(asBytes: Bool) throws {
        let log = LogLines()
        var configuration = ServerConfiguration(listenAddresses: [local], policy: AccessPolicy(root: dir.fd),
                                                logger: log.logger(level: .warning, asBytes: asBytes))
        configuration.remapRules = RemapRuleSet(try RemapRules(parsing: Array(#"r ^x(.*) pxelinux.cfg/\1"#.utf8)))
        let backend = FakeBackend()
        let worker = Worker(backend: backend, configuration: configuration, cache: FileCache(), index: 0)
        try worker.bindListeners([local])
        let v6 = SocketAddress(parsing: "[2001:db8::12:34]:65535", defaultPort: 0)!
        for (client, name) in [(client, "nothere"), (v6, "xnothere"), (client, "a\tb"), (client, String(repeating: "a", count: 4097))] {
            backend.inbox.append((backend.tags[0], Request(isWrite: false, filename: Array(name.utf8), mode: "octet").encoded(), client, local))
            worker.turnSettling(now: stampede_monotonic_ns(), maxWait: 0)
        }
        #expect(log.all == [
            #"warning 127.0.0.1:40000: RRQ "nothere" octet: refused: error 1 "File not found""#,
            #"warning [2001:db8::12:34]:65535: RRQ "xnothere" octet remapped to "pxelinux.cfg/nothere": refused: error 1 "File not found""#,
            #"warning 127.0.0.1:40000: RRQ "a\x09b" octet: refused: error 1 "File not found""#,
            #"warning 127.0.0.1:40000: RRQ "\#(String(repeating: "a", count: 256))…" octet (a name of 4097 bytes, more than 4096): refused: error 1 "File not found""#,
        ])
    }

    /// Logging a refusal to a handler that takes lines costs no allocation: the same requests
    /// refused logged and not logged allocate alike.
    @Test func loggingARefusalAllocatesNothing() throws {
        func allocations(logged: Bool) throws -> (allocations: UInt64, lines: Int) {
            let lines = LineCount()
            let configuration = ServerConfiguration(listenAddresses: [local], policy: AccessPolicy(root: dir.fd),
                                                    logger: Logger(label: "test") { _ -> any LogHandler in
                                                        if logged { DiscardingLineLogHandler(count: lines) } else { SwiftLogNoOpLogHandler() }
                                                    })
            let backend = FakeBackend()
            let worker = Worker(backend: backend, configuration: configuration, cache: FileCache(), index: 0)
            try worker.bindListeners([local])
            let request = Request(isWrite: false, filename: Array("pxelinux.cfg/01-52-54-00-12-34-56".utf8), mode: "octet").encoded()
            let v6 = SocketAddress(parsing: "[2001:db8:4:5:6:7:8:9]:40000", defaultPort: 0)!
            func refuse(_ count: Int) {
                for n in 0..<count {
                    backend.sent.removeAll(keepingCapacity: true)
                    backend.inbox.append((backend.tags[0], request, n % 2 == 0 ? client : v6, local))
                    worker.turnSettling(now: stampede_monotonic_ns(), maxWait: 0)
                }
            }
            refuse(100)
            let counted = withoutThrowHooks {
                malloc_counter_start()
                refuse(500)
                return malloc_counter_stop()
            }
            return (counted, lines.value.load(ordering: .relaxed))
        }
        let logged = try allocations(logged: true), silent = try allocations(logged: false)
        #expect(logged.lines == 600 && silent.lines == 0)
        #expect(logged.allocations == silent.allocations, "\(logged.allocations) allocations logged, \(silent.allocations) not")
    }

    @Test func remapRulesChooseTheFileAndAnAbortRuleRefusesWithErrorTwo() throws {
        dir.write("pxelinux.0", [UInt8]("pxe"))
        var configuration = ServerConfiguration(listenAddresses: [local], policy: AccessPolicy(root: dir.fd),
                                                logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }))
        configuration.remapRules = RemapRuleSet(try RemapRules(parsing: Array(#"""
            a \.\. No\ climbing
            ri ^.*/?(pxelinux\.0)$ \L\1
            """#.utf8)))
        let backend = FakeBackend()
        let worker = Worker(backend: backend, configuration: configuration, cache: FileCache(), index: 0)
        try worker.bindListeners([local])
        func request(_ name: String) -> [UInt8] {
            backend.sent = []
            backend.inbox.append((backend.tags[0], Request(isWrite: false, filename: Array(name.utf8), mode: "octet").encoded(), client, local))
            worker.turnSettling(now: stampede_monotonic_ns(), maxWait: 0)
            return backend.sent.first?.bytes ?? []
        }
        #expect(request("boot/x86/PXELINUX.0") == [0, 3, 0, 1] + [UInt8]("pxe"))
        #expect(request("../pxelinux.0") == [0, 5, 0, 2] + [UInt8]("No climbing") + [0])
        #expect(request("other") == [0, 5, 0, 1] + [UInt8]("File not found") + [0])
    }

    @Test func singlePortTransfersRunOnTheListenerToldApartByClientPort() throws {
        dir.write("f", [UInt8](repeating: 7, count: 700))
        var configuration = ServerConfiguration(listenAddresses: [local], policy: AccessPolicy(root: dir.fd),
                                                logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }))
        configuration.singlePort = true
        let backend = FakeBackend()
        let worker = Worker(backend: backend, configuration: configuration, cache: FileCache(), index: 0)
        try worker.bindListeners([local])
        let other = SocketAddress(parsing: "127.0.0.1:40001", defaultPort: 0)!
        func send(_ bytes: [UInt8], from peer: SocketAddress) -> [(socket: SocketHandle, bytes: [UInt8], to: SocketAddress?)] {
            backend.sent = []
            backend.inbox.append((backend.tags[0], bytes, peer, local))
            worker.turnSettling(now: stampede_monotonic_ns(), maxWait: 0)
            return backend.sent
        }
        let rrq = Request(isWrite: false, filename: Array("f".utf8), mode: "octet").encoded()
        #expect(send(rrq, from: client).map(\.socket) == [SocketHandle(0)])     // DATA 1 from the listener
        #expect(send(rrq, from: other).first?.bytes.prefix(4) == [0, 3, 0, 1])
        #expect(backend.tags.count == 1)                          // no transfer sockets
        #expect(send([0, 4, 0, 1], from: client).first?.bytes.prefix(4) == [0, 3, 0, 2])
        #expect(send([0, 4, 0, 2], from: client).isEmpty)          // done
        #expect(worker.activeTransfers == 1)
        // The same request again from the same port is a duplicate: the running transfer goes on.
        #expect(send(rrq, from: other).isEmpty)
        #expect(worker.activeTransfers == 1)
        #expect(send([0, 4, 0, 1], from: other).first?.bytes.prefix(4) == [0, 3, 0, 2])
        #expect(send([0, 4, 0, 2], from: other).isEmpty)
        #expect(worker.activeTransfers == 0 && backend.closed.isEmpty)
        // A stranger's ACK on the listener is not a session's: ignored, as on any listener.
        #expect(send([0, 4, 0, 1], from: client).isEmpty)
    }

    /// Over a limit the server is busy: by default it leaves the request unanswered (the client
    /// sends it again), with `--when-busy error` it answers ERROR 0.
    @Test(arguments: BusyReply.allCases)
    func limitsPerClientAndInAllRefuseAndFreeUpWhenTransfersEnd(whenBusy: BusyReply) throws {
        dir.write("f", Array(repeating: 1, count: 2000))
        var configuration = ServerConfiguration(listenAddresses: [local], policy: AccessPolicy(root: dir.fd),
                                                logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }))
        configuration.maxTransfersPerClient = 2
        configuration.whenBusy = whenBusy
        func busy(_ message: String) -> [UInt8]? {
            whenBusy == .error ? PacketWriter.error(TFTPError(.notDefined, message)) : nil
        }
        let admission = Admission(maxTransfers: 3, maxPerClient: 2)
        let limited = Worker(backend: backend, configuration: configuration, cache: FileCache(), index: 0, admission: admission)
        try limited.bindListeners([local])
        let listener = backend.tags.last!
        func request(from peer: SocketAddress) -> [UInt8]? {
            backend.sent = []
            backend.inbox.append((listener, Request(isWrite: false, filename: Array("f".utf8), mode: "octet", options: []).encoded(),
                                  peer, local))
            limited.turnSettling(now: stampede_monotonic_ns(), maxWait: 0)
            return backend.sent.first?.bytes
        }
        var a = client, b = SocketAddress(parsing: "127.0.0.2:40000", defaultPort: 0)!
        #expect(request(from: a)?.prefix(2) == [0, 3])
        a.port += 1
        #expect(request(from: a)?.prefix(2) == [0, 3])
        a.port += 1
        // A third from the same machine (another port): refused, the others run on.
        #expect(request(from: a) == busy("Too many transfers from your address"))
        #expect(request(from: b)?.prefix(2) == [0, 3])
        b.port += 1
        // Three running in all: the next client is refused as busy.
        #expect(request(from: b) == busy("Server busy, try again later"))
        #expect(admission.runningTransfers == 3 && limited.activeTransfers == 3)
        #expect(limited.summary.unanswered == (whenBusy == .silence ? 2 : 0))
        // One ends (ACK of its last block): a place is free again.
        let first = backend.tags[backend.tags.count - 3]
        backend.sent = []
        backend.inbox.append((first, [0, 4, 0, 1], client, local))
        limited.turnSettling(now: stampede_monotonic_ns(), maxWait: 0)
        backend.inbox.append((first, [0, 4, 0, 2], client, local))
        limited.turnSettling(now: stampede_monotonic_ns(), maxWait: 0)
        backend.inbox.append((first, [0, 4, 0, 3], client, local))
        limited.turnSettling(now: stampede_monotonic_ns(), maxWait: 0)
        backend.inbox.append((first, [0, 4, 0, 4], client, local))
        limited.turnSettling(now: stampede_monotonic_ns(), maxWait: 0)
        #expect(admission.runningTransfers == 2)
        #expect(request(from: b)?.prefix(2) == [0, 3])
    }

    /// Issue 11: one spoofed RRQ asking for timeout 255 held a slot, a socket and an image for
    /// about 7,900 s while its OACKs went to the victim. Now: -T's patience (1 s base: 31 s).
    @Test func aRequestWhoseClientNeverAnswersIsGivenUpAfterTheServersOwnPatience() {
        dir.write("f", Array(repeating: 1, count: 100_000))
        let start = stampede_monotonic_ns()
        #expect(request("f", [("timeout", "255"), ("blksize", "1468"), ("windowsize", "64")]).first?.prefix(2) == [0, 6])
        var oacks = 1
        var now = start
        while worker.activeTransfers > 0 && now < start + 100 * 1_000_000_000 {
            now += 100_000_000
            backend.sent = []
            worker.turnSettling(now: now, maxWait: 0)
            oacks += backend.sent.filter { $0.bytes.prefix(2) == [0, 6] }.count
            #expect(backend.sent.allSatisfy { $0.bytes.prefix(2) == [0, 6] })  // nothing but the OACK
        }
        #expect(worker.activeTransfers == 0)
        #expect(now - start <= 32 * 1_000_000_000)
        #expect(oacks == 6)
    }

    /// A worker whose cache streams every file (a file limit of 0): each block read as it goes.
    func streamingWorker() throws -> Worker<FakeBackend> {
        var configuration = ServerConfiguration(listenAddresses: [local], policy: AccessPolicy(root: dir.fd),
                                                logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }))
        configuration.optionLimits.maxBlockSize = 1468
        let streaming = Worker(backend: backend, configuration: configuration,
                               cache: FileCache(limits: .init(budget: 1 << 20, fileLimit: 0)), index: 0)
        try streaming.bindListeners([local])
        return streaming
    }

    /// A streamed file that cannot be read (EIO here: a descriptor pread refuses) must end the
    /// transfer with an ERROR, never with a short block the client takes for the file's end.
    @Test func aStreamedFileThatCannotBeReadEndsWithAnErrorNotAShortBlock() throws {
        dir.write("big", Array(repeating: 5, count: 4000))
        let streaming = try streamingWorker()
        let listener = backend.tags.last!
        backend.inbox.append((listener, Request(isWrite: false, filename: Array("big".utf8), mode: "octet").encoded(), client, local))
        streaming.turnSettling(now: stampede_monotonic_ns(), maxWait: 0)
        let slot = try #require(streaming.table.running.first)
        guard case .stream(let file) = streaming.table[slot].source else { Issue.record("not streamed"); return }
        // The file goes bad under the transfer: its descriptor now reads as a directory does (EISDIR).
        streaming.table[slot].lease = FileLease(.stream(StreamedFile(try Descriptor(opening: dir.path, flags: O_RDONLY | O_DIRECTORY),
                                                                     size: 4000, version: file.version)),
                                                version: file.version, cache: nil)
        backend.sent = []
        backend.inbox.append((transferTag, [0, 4, 0, 1], client, local))
        streaming.turnSettling(now: stampede_monotonic_ns(), maxWait: 0)
        #expect(backend.sent.map { Array($0.bytes.prefix(4)) } == [[0, 5, 0, 0]])
        #expect(streaming.activeTransfers == 0)
    }

    /// A streamed file rewritten in place mid-transfer would send a mix of two versions: the
    /// last block is never sent once the file is not the version opened; an ERROR is.
    @Test func aStreamedFileRewrittenInPlaceEndsWithAnErrorBeforeItsLastBlock() throws {
        let path = dir.write("big", Array(repeating: 5, count: 4000))
        let streaming = try streamingWorker()
        let listener = backend.tags.last!
        let options = Request(isWrite: false, filename: Array("big".utf8), mode: "octet", options: [("blksize", "1468")])
        backend.inbox.append((listener, options.encoded(), client, local))
        streaming.turnSettling(now: stampede_monotonic_ns(), maxWait: 0)
        backend.sent = []
        backend.inbox.append((transferTag, [0, 4, 0, 0], client, local))
        streaming.turnSettling(now: stampede_monotonic_ns(), maxWait: 0)
        #expect(backend.sent.map { Array($0.bytes.prefix(4)) } == [[0, 3, 0, 1]])
        // Rewritten in place: the same inode and size, other bytes, its time moved.
        let f = open(path, O_WRONLY)
        _ = Array(repeating: UInt8(6), count: 4000).withUnsafeBytes { pwrite(f, $0.baseAddress, $0.count, 0) }
        var times = [timespec(tv_sec: 1_000_000, tv_nsec: 0), timespec(tv_sec: 1_000_000, tv_nsec: 0)]
        futimens(f, &times)
        close(f)
        backend.sent = []
        backend.inbox.append((transferTag, [0, 4, 0, 1], client, local))
        streaming.turnSettling(now: stampede_monotonic_ns(), maxWait: 0)
        #expect(backend.sent.map { Array($0.bytes.prefix(4)) } == [[0, 3, 0, 2]])  // not the last: not asked
        backend.sent = []
        backend.inbox.append((transferTag, [0, 4, 0, 2], client, local))
        streaming.turnSettling(now: stampede_monotonic_ns(), maxWait: 0)
        let answer = try #require(backend.sent.first?.bytes)
        #expect(answer.prefix(4) == [0, 5, 0, 0])
        #expect(String(decoding: answer.dropFirst(4).prefix { $0 != 0 }, as: UTF8.self) == "File changed while it was sent (written to)")
        #expect(streaming.activeTransfers == 0 && streaming.summary.failed == 1)
    }

    @Test func aSlotsLateDatagramsAreIgnoredAfterItEnds() {
        dir.write("f", [1])
        _ = request("f")
        let old = transferTag
        _ = deliver([0, 4, 0, 1], tag: old)
        dir.write("g", [2])
        _ = request("g")
        // The slot is reused with a new generation; the old tag no longer reaches it.
        #expect(deliver([0, 4, 0, 1], tag: old) == [])
        #expect(worker.activeTransfers == 1)
    }

    @Test func dataToAReaderIsAnIllegalOperation() {
        dir.write("f", Array(repeating: 1, count: 600))
        _ = request("f")
        #expect(deliver([0, 3, 0, 1, 9], tag: transferTag).first?.prefix(4) == [0, 5, 0, 4])
        #expect(worker.activeTransfers == 0)
    }
}

/// Transfers per client machine (`--max-per-client`).
@Suite struct AdmissionSpec {
    func address(_ text: String) -> SocketAddress { SocketAddress(parsing: text, defaultPort: 0)! }

    /// Defect 1 of issue 21: counted by its /64, an IPv6 rack got 64 transfers at once in all.
    @Test func anIPv6ClientIsCountedAsAHostAndItsSlash64HasACapOfItsOwn() {
        let admission = Admission(maxTransfers: 100_000, maxPerClient: 2, maxPerPrefix: 700)
        // A rack of 300 machines in one /64, each asking twice: all in.
        for machine in 1...300 {
            for port in [1000, 1001] {
                #expect(admission.admit(address("[2001:db8:1:2::\(String(machine, radix: 16))]:\(port)")) == nil)
            }
        }
        // A third from one of them: its own limit.
        #expect(admission.admit(address("[2001:db8:1:2::1]:1002"))?.message == "Too many transfers from your address")
        // A host rotating through the /64 runs into the prefix's cap: 600 taken, 100 more fit.
        for machine in 301...400 { #expect(admission.admit(address("[2001:db8:1:2::\(String(machine, radix: 16))]:7")) == nil) }
        #expect(admission.admit(address("[2001:db8:1:2::ffff]:7"))?.message == "Too many transfers from your network")
        #expect(admission.admit(address("[2001:db8:1:3::1]:7")) == nil)
        admission.release(address("[2001:db8:1:2::1]:1000"))
        #expect(admission.admit(address("[2001:db8:1:2::ffff]:7")) == nil)
        // An IPv4 client (mapped, on a dual-stack socket) has no /64.
        #expect(admission.admit(address("[::ffff:10.0.0.1]:7")) == nil)
    }

    @Test func anIPv4ClientIsCountedByItsAddressWhateverItsPort() {
        let admission = Admission(maxTransfers: 100, maxPerClient: 1)
        #expect(admission.admit(address("10.0.0.7:2070")) == nil)
        #expect(admission.admit(address("10.0.0.7:2071")) != nil)
        #expect(admission.admit(address("10.0.0.8:2070")) == nil)
    }

    @Test func theDefaultLimitLeavesLoopbackAloneAnExplicitOneDoesNot() {
        let configuration = ServerConfiguration(listenAddresses: [], policy: AccessPolicy(root: -1),
                                                logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }))
        #expect(configuration.maxTransfersPerClient == 64)
        let byDefault = Admission(configuration)
        for port in 1...200 { #expect(byDefault.admit(address("127.0.0.1:\(port)")) == nil) }
        for port in 1...64 { #expect(byDefault.admit(address("10.1.1.1:\(port)")) == nil) }
        #expect(byDefault.admit(address("10.1.1.1:65")) != nil)
        let explicit = Admission(maxTransfers: 100, maxPerClient: 1)
        #expect(explicit.admit(address("127.0.0.1:1")) == nil)
        #expect(explicit.admit(address("127.0.0.1:2")) != nil)
        #expect(explicit.admit(address("[::1]:1")) == nil)
        #expect(explicit.admit(address("[::1]:2")) != nil)
    }
}
