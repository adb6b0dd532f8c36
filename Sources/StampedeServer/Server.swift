import CStampedeSys
import Glibc
import Logging
import StampedeIO
import StampedeProtocol

/// Runs one worker per core, each on its own thread with its own backend and SO_REUSEPORT
/// listeners. `prepare` binds every listener first, so the caller can drop privileges before
/// `run` starts serving.
public final class Server<Backend: DatagramBackend> {
    public let workers: [Worker<Backend>]
    public let boundAddresses: [SocketAddress]
    let logger: Logger

    /// Throws the errno of a backend or a listener that cannot be made, or `ReceiveBuffersTooSmall`.
    public init(configuration: ServerConfiguration, workerCount: Int, cache: FileCache,
                makeBackend: () throws(Errno) -> Backend) throws {
        var workers: [Worker<Backend>] = []
        var addresses = configuration.listenAddresses
        let admission = Admission(configuration)
        for index in 0..<max(1, workerCount) {
            let backend = try makeBackend()
            // An upload's DATA cut short by a small buffer is dropped, and the upload stalls: say
            // so at start instead.
            let needed = 4 + (configuration.optionLimits.maxBlockSize ?? OptionNegotiation.blockSizeRange.upperBound)
            guard backend.largestDatagram >= needed else {
                throw ReceiveBuffersTooSmall(backend: backend.description, largest: backend.largestDatagram, needed: needed)
            }
            let worker = Worker(backend: backend, configuration: configuration, cache: cache, index: index,
                                admission: admission)
            if configuration.inheritedListeners.isEmpty {
                // A port 0 is chosen by the first bind; the other workers share that port.
                addresses = try worker.bindListeners(addresses)
            } else {
                // Every worker reads the same inherited sockets, each through its own descriptor.
                var fds: [Int32] = []
                for fd in configuration.inheritedListeners {
                    let own = index == 0 ? fd : fcntl(fd, F_DUPFD_CLOEXEC, 3)
                    if let error = Errno(result: own) { throw error }
                    fds.append(own)
                }
                addresses = try worker.adoptListeners(fds)
            }
            workers.append(worker)
        }
        self.workers = workers
        self.boundAddresses = addresses
        self.logger = configuration.logger
    }

    /// Serves until SIGTERM/SIGINT and the grace period; returns the workers' summaries.
    public func run() -> WorkerSummary {
        var threads: [pthread_t] = []
        for worker in workers.dropFirst() {
            let box = Unmanaged.passRetained(ThreadBody { worker.run() })
            var thread = pthread_t()
            let result = pthread_create(&thread, nil, { raw in
                let box = Unmanaged<ThreadBody>.fromOpaque(raw!).takeRetainedValue()
                box.body()
                return nil
            }, box.toOpaque())
            precondition(result == 0, "pthread_create: \(result)")
            threads.append(thread)
        }
        workers[0].run()
        for thread in threads { pthread_join(thread, nil) }
        var total = WorkerSummary()
        for worker in workers {
            total.transfers += worker.summary.transfers
            total.failed += worker.summary.failed
            total.unanswered += worker.summary.unanswered
            total.bytes += worker.summary.bytes
            total.sendFailures += worker.backend.sendFailures
        }
        return total
    }
}

/// A backend whose receive buffers cannot hold the largest DATA an upload may send.
public struct ReceiveBuffersTooSmall: Error, CustomStringConvertible {
    public let backend: String
    public let largest: Int
    public let needed: Int
    public var description: String {
        "the \(backend) backend receives datagrams of at most \(largest) bytes; uploads of the largest blksize allowed need \(needed) (lower -B, or give the backend larger buffers)"
    }
}

/// What a worker thread runs, passed through pthread_create's void pointer.
final class ThreadBody {
    let body: () -> Void
    init(_ body: @escaping () -> Void) { self.body = body }
}
