import CStampedeSys
import Glibc
import Logging
import StampedeFiles
import StampedeIO
import StampedeProtocol
import StampedeServing

/// Runs one worker per core, each on its own thread with its own backend and SO_REUSEPORT
/// listeners. Making a server binds every listener, so the caller can drop privileges before
/// `run` starts serving.
public final class Server<Backend: DatagramBackend> {
    public let workers: [Worker<Backend>]
    public let boundAddresses: [SocketAddress]
    /// The file labels every worker's duration histogram uses.
    public var fileLabels: FileLabels { workers[0].fileLabels }
    /// The limits every worker shares, and what says how long the server has been idle (`-t`).
    public var admission: Admission { workers[0].admission }
    /// The workers' disk thread (`DiskWork`), for the start's own disk work too.
    public var disk: DiskWork { workers[0].disk }
    /// The file service every worker reads through, for HTTP's loops to read through too.
    public var files: FileService { workers[0].files }
    let logger: Logger

    public init(configuration: ServerConfiguration, workerCount: Int, cache: FileCache,
                makeBackend: () throws(Errno) -> Backend) throws(StartFailure) {
        (workers, boundAddresses) = try Self.makeWorkers(configuration, workerCount, cache, makeBackend)
        self.logger = configuration.logger
    }

    /// Why a server could not start.
    public enum StartFailure: Error, CustomStringConvertible {
        /// A backend or a listener could not be made.
        case system(Errno)
        /// The backend's receive buffers cannot hold the largest DATA an upload may send, or a
        /// listener's the largest request (it would arrive cut short and be refused).
        case receiveBuffersTooSmall(backend: String, largest: Int, needed: Int)

        public var description: String {
            switch self {
            case .system(let error): return "\(error)"
            case .receiveBuffersTooSmall(let backend, let largest, let needed):
                return "the \(backend) backend receives datagrams of at most \(largest) bytes; uploads of the largest blksize allowed need \(needed) (lower -B, or give the backend larger buffers)"
            }
        }
    }

    private static func makeWorkers(_ configuration: ServerConfiguration, _ workerCount: Int, _ cache: FileCache,
                                    _ makeBackend: () throws(Errno) -> Backend) throws(StartFailure) -> ([Worker<Backend>], [SocketAddress]) {
        var workers: [Worker<Backend>] = []
        var addresses = configuration.listenAddresses
        // Another server on one of them (an earlier Stampede, a leftover in.tftpd) fails the start.
        do { addresses = try claimExclusively(addresses, stream: false) } catch { throw .system(error) }
        let admission = Admission(configuration)
        let fileLabels = FileLabels()
        let disk = DiskWork()
        // Looks and reads into the cache on disk threads of their own: behind a commit's fsync
        // (seconds on a slow disk) they would hold every request for a file not cached yet
        // (bench-disk: storm p99 1.0 s → 2.8 s when they shared one). Several, so that a file
        // whose disk is stuck holds no other file's read.
        let reads = DiskWork(threads: FileService.diskThreads)
        let files = FileService(policy: configuration.policy, remapRules: configuration.remapRules, cache: cache, disk: reads,
                                generated: configuration.generatedFiles)
        let needed = 4 + (configuration.optionLimits.maxBlockSize ?? TFTPOption.blksize.range.upperBound)
        for index in 0..<max(1, workerCount) {
            let backend: Backend
            do { backend = try makeBackend() } catch { throw .system(error) }
            guard backend.largestDatagram >= needed else {
                throw .receiveBuffersTooSmall(backend: backend.description, largest: backend.largestDatagram, needed: needed)
            }
            guard backend.largestListenerDatagram >= Request.largestDatagram else {
                throw .receiveBuffersTooSmall(backend: backend.description, largest: backend.largestListenerDatagram,
                                              needed: Request.largestDatagram)
            }
            let worker = Worker(backend: backend, configuration: configuration, cache: cache, index: index,
                                admission: admission, fileLabels: fileLabels, disk: disk, files: files)
            do throws(Errno) {
                if configuration.inheritedListeners.isEmpty {
                    addresses = try worker.bindListeners(addresses)
                } else {
                    // Every worker reads the same inherited sockets, each through its own descriptor.
                    addresses = try worker.adoptListeners(passedSockets(configuration.inheritedListeners, forLoop: index))
                }
            } catch {
                throw .system(error)
            }
            workers.append(worker)
        }
        return (workers, addresses)
    }

    /// Serves until SIGTERM/SIGINT and the grace period; returns the workers' summaries.
    public func run() -> WorkerSummary {
        let others = workers.dropFirst().map { worker in SystemThread(named: "tftp-\(worker.index)") { worker.run() } }
        workers[0].run()
        for thread in others { thread.join() }
        // The removals of uploads' temporary files that ended last, queued behind the commits.
        disk.drain()
        var total = WorkerSummary()
        for worker in workers {
            total.transfers += worker.summary.transfers
            total.failed += worker.summary.failed
            total.refused += worker.summary.refused
            total.notFound += worker.summary.notFound
            total.repeated += worker.summary.repeated
            total.unanswered += worker.summary.unanswered
            total.bytes += worker.summary.bytes
            total.lateTimers += worker.summary.lateTimers
            total.backend += worker.backend.statistics
        }
        return total
    }
}

