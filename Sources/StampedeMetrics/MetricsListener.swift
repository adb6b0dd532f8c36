import NIOCore
import NIOHTTP1
import NIOPosix

/// `--metrics`: the exposition over HTTP/1.1 (`GET /metrics`), on one SwiftNIO event loop of its
/// own, never a worker's. Its memory is the TFTP server's, so a scraper cannot make it grow nor
/// hold it: each connection must send a request within `requestDeadline` of opening or of its
/// last answer, however slowly it sends its bytes (a slowloris is cut off at the deadline); a
/// connection lives at most `connectionLifetime` (its answer after that says Connection: close);
/// one that asks faster than it reads is closed once `pendingLimit` bytes of answers wait for it
/// (pipelined GETs never read grew the server by 494 MiB per 60,000); a request that does not
/// parse is answered 400 and closed; beyond `maxConnections` at once a new connection is closed
/// as soon as it is accepted, so connections cost at most that many descriptors.
public final class MetricsListener: Sendable {
    public static let defaultPort = 9469
    public static let maxConnections = 16
    public static let requestDeadline = TimeAmount.seconds(10)
    public static let connectionLifetime = TimeAmount.seconds(60)
    /// Answers written and not yet taken by the peer's socket, beyond which its reads stop (NIO's
    /// high water mark) and its next answer closes it instead.
    public static let pendingLimit = 256 * 1024

    /// The address it listens on (with the port the kernel chose for port 0).
    public let address: String
    private let group: MultiThreadedEventLoopGroup
    private let channel: any Channel

    /// `lifetime`: how long a connection may live (`connectionLifetime`; shorter in tests).
    public init(host: String, port: Int, exporter: MetricsExporter, lifetime: TimeAmount = connectionLifetime) throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let loop = group.next()
        let connections = NIOLoopBoundBox.makeBoxSendingValue(0, as: Int.self, eventLoop: loop)
        let bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 64)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.writeBufferWaterMark, value: .init(low: Self.pendingLimit / 4, high: Self.pendingLimit))
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    guard connections.value < Self.maxConnections else {
                        channel.close(promise: nil)
                        return
                    }
                    connections.value += 1
                    channel.closeFuture.whenComplete { _ in connections.value -= 1 }
                    // Reads stop while answers wait beyond the high water mark.
                    try channel.pipeline.syncOperations.addHandler(BackPressureHandler())
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline(withErrorHandling: true)
                    try channel.pipeline.syncOperations.addHandler(ScrapeHandler(exporter: exporter, lifetime: lifetime))
                }
            }
        do {
            channel = try bootstrap.bind(host: host, port: port).wait()
        } catch {
            try? group.syncShutdownGracefully()
            throw error
        }
        self.group = group
        let bound = channel.localAddress
        address = bound.map { address in
            let ip = address.ipAddress ?? host
            return (ip.contains(":") ? "[\(ip)]" : ip) + ":\(address.port ?? port)"
        } ?? "\(host):\(port)"
        // Served transfers' durations wait in small logs per worker: empty them every second.
        loop.scheduleRepeatedTask(initialDelay: .seconds(1), delay: .seconds(1)) { _ in exporter.drainDurations() }
    }

    /// Stops listening, for a process about to exit: its connections and its event loop thread
    /// end with the process. NIO's graceful shutdown of the thread answers through Dispatch,
    /// whose worker pool reads /proc/TID/stat and kills the process when it cannot, as under
    /// `-s` (no /proc in the chroot): a server stopped on SIGTERM exited with SIGILL.
    public func stopListening() {
        try? channel.close().wait()
    }

    /// Stops listening and closes every connection and the event loop thread (not under a chroot:
    /// see `stopListening`).
    public func shutdown() {
        stopListening()
        try? group.syncShutdownGracefully()
    }
}

/// One connection: answers `GET /metrics` with the exposition, anything else with 404 or 405.
final class ScrapeHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let exporter: MetricsExporter
    private let lifetime: TimeAmount
    private var request: HTTPRequestHead?
    private var deadline: Scheduled<Void>?
    private var end: Scheduled<Void>?
    private var expired = false

    init(exporter: MetricsExporter, lifetime: TimeAmount) {
        self.exporter = exporter
        self.lifetime = lifetime
    }

    func handlerAdded(context: ChannelHandlerContext) {
        armDeadline(context)
        // Past its lifetime the next answer closes the connection; one that asks nothing more is
        // closed at the request deadline after it.
        let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        end = context.eventLoop.scheduleTask(in: lifetime) { bound.value.0.expired = true }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        deadline?.cancel()
        end?.cancel()
    }

    /// A request that does not parse: the error handler before this one answered 400; the
    /// connection goes now rather than hold its place until the deadline.
    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }

    /// The connection must bring its next request within the deadline, whatever it sends meanwhile.
    private func armDeadline(_ context: ChannelHandlerContext) {
        deadline?.cancel()
        let bound = NIOLoopBound(context, eventLoop: context.eventLoop)
        deadline = context.eventLoop.scheduleTask(in: MetricsListener.requestDeadline) { bound.value.close(promise: nil) }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            request = head
        case .body:
            break
        case .end:
            guard let head = request else { return }
            request = nil
            respond(to: head, context: context)
        }
    }

    private func respond(to head: HTTPRequestHead, context: ChannelHandlerContext) {
        guard context.channel.isWritable else {
            // Asking faster than it reads (pipelined requests, answers not taken): what waits for
            // it is already at the limit, and it gets no more.
            context.close(promise: nil)
            return
        }
        let path = head.uri.split(separator: "?", maxSplits: 1).first.map(String.init) ?? head.uri
        let status: HTTPResponseStatus
        var body: [UInt8]
        var headers = HTTPHeaders()
        if head.method != .GET && head.method != .HEAD {
            status = .methodNotAllowed
            headers.add(name: "Allow", value: "GET, HEAD")
            body = Array("GET /metrics\n".utf8)
        } else if path == "/metrics" {
            status = .ok
            body = exporter.scrape()
        } else {
            status = .notFound
            body = Array("stampede serves its metrics at /metrics\n".utf8)
        }
        headers.add(name: "Content-Type", value: status == .ok ? "text/plain; version=0.0.4; charset=utf-8" : "text/plain; charset=utf-8")
        headers.add(name: "Content-Length", value: "\(body.count)")
        let keepAlive = head.isKeepAlive && !expired
        if !keepAlive { headers.add(name: "Connection", value: "close") }
        if head.method == .HEAD { body = [] }
        context.write(wrapOutboundOut(.head(HTTPResponseHead(version: head.version, status: status, headers: headers))), promise: nil)
        if !body.isEmpty {
            context.write(wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(bytes: body)))), promise: nil)
        }
        if keepAlive {
            context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
            armDeadline(context)
        } else {
            let bound = NIOLoopBound(context, eventLoop: context.eventLoop)
            context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in bound.value.close(promise: nil) }
        }
    }
}
