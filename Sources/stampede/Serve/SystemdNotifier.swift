import CStampedeSys
import Glibc
import Logging
import StampedeBase
import StampedeIO
import StampedeProtocol
import StampedeServing

/// sd_notify(3) without libsystemd: `Type=notify` readiness and the watchdog. The socket named by
/// NOTIFY_SOCKET (a path, or `@` for an abstract one) is connected when the command starts, before
/// a chroot (-s) could hide it; each notification is one datagram.
final class SystemdNotifier: Sendable {
    private let socket: Int32
    /// WATCHDOG_USEC, when systemd asks for keep-alive pings (and WATCHDOG_PID, if set, is ours).
    let watchdogInterval: Nanoseconds?

    /// From the environment; nil when the process was not started by systemd with Type=notify.
    init?() {
        guard let name = getenv("NOTIFY_SOCKET").map({ String(cString: $0) }), name.count > 1,
              name.hasPrefix("/") || name.hasPrefix("@") else { return nil }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        var path = Array(name.utf8)
        if path[0] == UInt8(ascii: "@") { path[0] = 0 }
        guard path.count < MemoryLayout.size(ofValue: address.sun_path) else { return nil }
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: path) }
        let fd = Glibc.socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return nil }
        let length = socklen_t(MemoryLayout<sa_family_t>.size + path.count)
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, length) }
        }
        guard connected == 0 else {
            close(fd)
            return nil
        }
        socket = fd
        let pid = getenv("WATCHDOG_PID").flatMap { pid_t(String(cString: $0)) }
        if let usec = getenv("WATCHDOG_USEC").flatMap({ Int64(String(cString: $0)) }), usec > 0,
           pid == nil || pid == getpid() {
            watchdogInterval = usec * 1000
        } else {
            watchdogInterval = nil
        }
        // Children (none today) must not talk to systemd in our name.
        unsetenv("NOTIFY_SOCKET")
    }

    deinit { close(socket) }

    /// Never waits: a supervisor that stops reading (its queue full) must not hold a stop or a loop.
    func notify(_ state: String) {
        _ = state.utf8CString.withUnsafeBytes {
            send(socket, $0.baseAddress, $0.count - 1, Int32(MSG_NOSIGNAL) | Int32(MSG_DONTWAIT))
        }
    }

    /// Pings the watchdog at half its interval while every loop is turning (a TFTP worker turns
    /// at least twice a second, an HTTP loop four times), says STOPPING=1 once a stop is asked;
    /// until `done`. `heartbeats`: each loop's name and the metrics it stamps each turn with.
    func supervise(heartbeats: [(name: String, metrics: WorkerMetrics)], logger: Logger, done: () -> Bool) {
        let interval = watchdogInterval.map { $0 / 2 } ?? 100_000_000
        var stopping = false
        var lastPing: Nanoseconds = 0
        var stalled: Int?
        while true {
            // Read before the stop: workers with nothing running end at once after it, and a
            // stop seen only after `done` would never be said.
            let finished = done()
            let now = stampede_monotonic_ns()
            if !stopping && stampede_stop_requested() != 0 {
                stopping = true
                notify("STOPPING=1\nSTATUS=stopping: finishing the running transfers")
            }
            if finished { break }
            if let watchdog = watchdogInterval, now - lastPing >= interval {
                // An idle worker turns every half second; one silent for the whole interval (2 s at
                // least) is stuck, and systemd may restart the server.
                let patience = max(watchdog, 2 * nanosecondsPerSecond)
                let stuck = heartbeats.firstIndex { now - Nanoseconds($0.metrics.value(.lastTurn)) > patience }
                if let stuck {
                    if stalled != stuck {
                        logger.error("\(heartbeats[stuck].name) has not turned for more than the watchdog interval: not pinging systemd")
                    }
                } else {
                    notify("WATCHDOG=1")
                    lastPing = now
                }
                stalled = stuck
            }
            usleep(UInt32(min(interval, 100_000_000) / 1000))
        }
    }
}
