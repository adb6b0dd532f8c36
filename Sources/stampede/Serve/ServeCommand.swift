import ArgumentParser
import CStampedeSys
import Glibc
import Logging
import StampedeFiles
import StampedeGlibc
import StampedeIO
import StampedeMachines
import StampedeMetrics
import StampedeProtocol
import StampedeProxyDHCP
import StampedeTFTPServer
import StampedeTLS
import StampedeURing

/// `stampede [serve]`: the in.tftpd (tftpd-hpa) command line, plus long options of our own.
/// The flags are `ServeOptions`; this gathers what only the host can say (where the sockets come
/// from, the addresses, the limits, the root), in in.tftpd's order, makes the plan
/// (`ServePlan`) and hands it to `ServerStartup`.
struct ServeCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve", abstract: "Serve a directory over TFTP (accepts tftpd-hpa's in.tftpd flags).")

    @OptionGroup var options: ServeOptions

    func run() throws {
        if options.version {
            print(Stampede.versionText(ioURing: URingBackend.probe()))
            return
        }
        let rules = try options.mapFile.map(loadRules)
        let machines = try options.machines.map(loadMachines)
        if let mapTest = options.mapTest { return try MapTest(options: options, rules: rules?.current).run(mapTest) }
        let mode = try ServingMode.of(options)
        for (flag, given) in [("--http", !options.http.isEmpty), ("--https", !options.https.isEmpty),
                              ("--proxy-dhcp", !options.proxyDHCP.isEmpty)] where mode == .inetd && given {
            throw serveFailure("\(flag) needs a server that stays (-l, -L or --systemd): under inetd each request starts another", status: 64)
        }
        let destination = try logDestination(mode)
        destination.bootstrap(level: LogDestination.level(verbosity: options.level), format: options.logFormat, lines: options.lineFormat)
        let logger = Logger(label: "stampede")
        for warning in rules?.current.warnings ?? [] { logger.warning("-m \(options.mapFile!): \(warning)") }
        let detached = try detach(mode)
        // In the process that serves, before -s hides the file's directory (as in.tftpd does).
        let pid: PidFile?
        do { pid = try options.pidfile.map { path throws(Errno) in try PidFile(path) } } catch {
            throw serveFailure("-P \(options.pidfile!): \(error)")
        }
        defer { if let problem = pid?.remove() { logger.notice("\(problem)") } }
        let root = try servedDirectory()
        let inherited = Glibc.umask(0)
        Glibc.umask(inherited)
        var fileLimit = rlim_t(1024)
        switch liftFileLimit() {
        case .success(let limit): fileLimit = limit
        case .failure(let error): logger.warning("could not raise the open file limit: \(error)")
        }

        // Resolved before -s: a chroot has no /etc/passwd, /etc/hosts or /etc/services (nor
        // /run/systemd/notify, nor /proc).
        let account = try Account.lookUp(options.user)
        let plan = try makePlan(mode, fileLimit: fileLimit, inheritedUmask: inherited)
        for warning in plan.warnings { logger.warning("\(warning)") }
        for notice in plan.notices { logger.notice("\(notice)") }
        // Read as the starting user and before -s: the key may be readable by root alone, and
        // live outside the served root.
        let tls = try options.tlsCertificate.map { certificate in try loadIdentity(certificate: certificate, key: options.tlsKey!, logger) }
        let notifier = SystemdNotifier()
        let processFigures = options.metrics == nil ? nil : ProcessFigures()
        let rootFD: Int32
        do { rootFD = try AccessPolicy.openRoot(root) } catch {
            // EX_NOINPUT, as in.tftpd exits when its directory is not there.
            throw serveFailure("cannot open \(root): \(error)", status: [ENOENT, ENOTDIR].contains(error.rawValue) ? 66 : 1)
        }
        if options.secure {
            guard chroot(root) == 0, chdir("/") == 0 else { throw serveFailure("-s: chroot \(root): \(Errno.current)") }
        }

        var configuration = ServerConfiguration(listenAddresses: [], policy: plan.policy(root: rootFD), logger: logger)
        plan.configure(&configuration)
        configuration.remapRules = rules
        // Done URLs name the first boot network's HTTP (docs/machines.md): IPv4's, else IPv6's.
        let firstBoot = options.proxyDHCP.first.map(\.description) ?? options.proxyDHCP6.first.map(\.host)
        let serving = machines.map { records, watch in
            MachineServing(records: records, watch: watch, httpBase: firstBoot.flatMap { ServePlan.httpBase($0, options) },
                           logger: logger, json: options.logFormat == .json)
        }
        configuration.generatedFiles = serving?.boot
        configuration.onHangup = hangup(destination, tls, logger)
        let startup = ServerStartup(plan: plan, configuration: configuration, cache: FileCache(limits: plan.cacheLimits),
                                    account: account, root: root, detached: detached, processFigures: processFigures,
                                    notifier: notifier, tls: tls, machines: serving)
        let segmentation = !options.noSegmentation
        if plan.useURing {
            var ring = URingBackend.Configuration()
            ring.segmentation = segmentation
            try startup.run(backendName: "uring") { () throws(Errno) in try URingBackend(configuration: ring) }
        } else {
            try startup.run(backendName: "glibc") { () throws(Errno) in try GlibcBackend(segmentation: segmentation) }
        }
    }

    /// in.tftpd detaches unless -L; inetd and systemd supervise the process themselves.
    func detach(_ mode: ServingMode) throws -> ServerStartup.Detached? {
        guard mode == .standalone && !options.foreground else { return nil }
        var null: Int32 = -1
        let ready = stampede_detach(&null)
        if ready < 0 { throw serveFailure("cannot detach into the background: \(Errno(-ready))") }
        return ServerStartup.Detached(ready: ready, null: null)
    }

    /// The plan, from the flags and what only the host can say (its addresses, limits, cores,
    /// umask, io_uring, the interfaces --proxy-dhcp names). Resolved before -s: a chroot has no
    /// /etc/hosts or /etc/services.
    func makePlan(_ mode: ServingMode, fileLimit: rlim_t, inheritedUmask: mode_t) throws -> ServePlan {
        var facts = ServePlan.Facts(mode: mode, addresses: mode == .standalone ? try listenAddresses(options) : [],
                                    fileLimit: Int(min(fileLimit, rlim_t(Int.max))), processors: Int(sysconf(Int32(_SC_NPROCESSORS_ONLN))),
                                    inheritedUmask: inheritedUmask, uring: URingBackend.probe())
        facts.bootInterfaces = try options.proxyDHCP.map { address in
            do { return try NetworkInterface.holding(SocketAddress(ipv4: address, port: 0)) } catch {
                throw serveFailure("--proxy-dhcp \(address): no interface of this host has this address", status: 65)
            }
        }
        facts.bootInterfaces6 = try options.proxyDHCP6.map { address in
            do { return try NetworkInterface.holding(address) } catch {
                throw serveFailure("--proxy-dhcp6 \(address.host): no interface of this host has this address", status: 65)
            }
        }
        do { return try ServePlan(options, facts) } catch { throw serveFailure(error.message, status: error.status) }
    }

    /// What SIGHUP does: the log file reopened (after logrotate moved it), --https's certificate
    /// and key read again; what failed, or nil.
    func hangup(_ destination: LogDestination, _ tls: TLSIdentity?, _ logger: Logger) -> @Sendable () -> String? {
        let reopen: (@Sendable () -> String?)? = if case .file(let file) = destination { file.reopen } else { nil }
        return {
            var problems = reopen?().map { [$0] } ?? []
            if let tls {
                switch tls.reload() {
                case .success(let context):
                    logger.notice("SIGHUP: --https certificate for \(context.names) loaded again (expires \(TLSContext.date(context.notAfter))); new connections use it")
                case .failure(let problem):
                    problems.append("--https: \(problem): still serving the certificate loaded before")
                }
            }
            return problems.isEmpty ? nil : problems.joined(separator: "; ")
        }
    }

    /// `--logfile`, `--stderr`, `--stdout`, `--syslog`; without them syslog, or standard error in
    /// the foreground. In inetd mode fds 0-2 are the socket: syslog whatever is asked.
    func logDestination(_ mode: ServingMode) throws -> LogDestination {
        let syslog = LogDestination.syslog(identity: Stampede.invokedName)
        if let logfile = options.logfile {
            do { return .file(try LogFile(logfile)) } catch { throw serveFailure("--logfile \(logfile): \(error)") }
        }
        if mode == .inetd { return syslog }
        switch options.logTarget {
        case .stderr: return .standardError
        case .stdout: return .standardOutput
        case .syslog: return syslog
        case nil: return options.foreground ? .standardError : syslog
        }
    }

    /// --https's certificate and key, checked now: a problem exits 78 (EX_CONFIG) naming the file
    /// and why; what firmware may not accept, and a key others can read, are warnings.
    func loadIdentity(certificate: String, key: String, _ logger: Logger) throws -> TLSIdentity {
        let identity: TLSIdentity
        do {
            identity = try TLSIdentity(certificate: certificate, key: key, profile: options.tlsProfile,
                                       kernelTLS: options.tlsKernel && KernelTLS.probe().available)
        } catch {
            throw serveFailure("--https: \(error)", status: 78)
        }
        for warning in identity.context.warnings { logger.warning("--https: \(warning)") }
        if let exposure = identity.keyExposure { logger.warning("--https: \(exposure)") }
        return identity
    }

    /// The -m file, read now and again on SIGHUP (`RuleFile`).
    func loadRules(_ path: String) throws -> RemapRuleSet {
        let file: RuleFile
        do { file = try RuleFile(path, maxSteps: options.mapSteps) } catch { throw serveFailure("-m \(path): cannot read: \(error)") }
        do {
            return RemapRuleSet(try file.load(), reload: file.load)
        } catch let error as RemapRulesError {
            // tftpd-hpa exits with EX_CONFIG on a bad rule file.
            writeToStandardError(error.lines.map { "stampede: -m \(path): \($0)\n" }.joined())
            throw ExitCode(78)
        } catch {
            throw serveFailure("-m \(path): \(error)")
        }
    }

    /// `--machines DIR`, read before anything serves and watched from now on (the path may be
    /// outside a chroot): a bad record is refused with every fault, each with its file and line
    /// (EX_CONFIG, as a bad -m file).
    func loadMachines(_ path: String) throws -> (MachineRecords, RecordWatch) {
        let records: MachineRecords
        do {
            records = try MachineRecords(try MachineDirectory(path), unknown: options.unknownMachines ?? .ignore,
                                         inventory: options.machinesAPI.map { MachineInventory(url: $0, lifetime: options.machinesAPICache, callers: options.machinesAPICalls) })
        } catch {
            writeToStandardError(error.errors.map { "stampede: --machines: \($0)\n" }.joined())
            throw ExitCode(78)
        }
        do { return (records, try RecordWatch(records)) } catch { throw serveFailure("--machines \(path): cannot watch for changes: \(error)") }
    }

    /// The directory served: `--path-prefix` joined to the one named (in.tftpd 7.3's rules: the
    /// named directory is absolute unless -s or -j, the prefix must be a directory, and "/" may be
    /// served only with one; exit 65 otherwise).
    func servedDirectory() throws -> String {
        let named = options.directory.first ?? "/srv/tftp"
        // A relative directory would be resolved against wherever the server was started from,
        // which a supervisor does not promise; under -s and -j it is the root, named once.
        if !named.hasPrefix("/") && !options.secure && !options.jail { throw serveFailure("invalid directory path: \(named)", status: 65) }
        guard let pathPrefix = options.pathPrefix else {
            if FilenameProcessing.normalize(Array(named.utf8), .path) == [UInt8(ascii: "/")] && named.hasPrefix("/") {
                throw serveFailure("/ as the directory to serve needs --path-prefix", status: 65)
            }
            return named
        }
        var info = stat()
        guard stat(pathPrefix, &info) == 0 else { throw serveFailure("--path-prefix \(pathPrefix): \(Errno.current)", status: 65) }
        guard info.st_mode & S_IFMT == S_IFDIR else { throw serveFailure("--path-prefix \(pathPrefix): not a directory", status: 65) }
        // One "/" between them, as 7.3 joins them ("/" and "/srv/root" serve "/srv/root", not "//srv/root").
        let prefix = pathPrefix.hasSuffix("/") ? String(pathPrefix.dropLast(pathPrefix.reversed().prefix { $0 == "/" }.count)) : pathPrefix
        return prefix + (named.hasPrefix("/") ? "" : "/") + named
    }
}
