import NIOCore
import NIOHTTP1
import NIOPosix

/// `--metrics`: the exposition over HTTP/1.1 (`GET /metrics`), on one SwiftNIO event loop of its
/// own, never a worker's. A scraper cannot hold the server: each connection must send a request
/// within `requestDeadline` of opening or of its last answer, however slowly it sends its bytes
/// (a slowloris is cut off at the deadline); beyond `maxConnections` at once a new connection is
/// closed as soon as it is accepted, so idle connections cost at most that many descriptors.
public final class MetricsListener: Sendable {
    public static let defaultPort = 9469
    public static let maxConnections = 16
    public static let requestDeadline = TimeAmount.seconds(10)

    /// The address it listens on (with the port the kernel chose for port 0).
    public let address: String
    private let group: MultiThreadedEventLoopGroup
    private let channel: any Channel

    public init(host: String, port: Int, exporter: MetricsExporter) throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let loop = group.next()
        let connections = NIOLoopBoundBox.makeBoxSendingValue(0, as: Int.self, eventLoop: loop)
        let bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 64)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    guard connections.value < Self.maxConnections else {
                        channel.close(promise: nil)
                        return
                    }
                    connections.value += 1
                    channel.closeFuture.whenComplete { _ in connections.value -= 1 }
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline(withErrorHandling: true)
                    try channel.pipeline.syncOperations.addHandler(ScrapeHandler(exporter: exporter))
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

    /// Stops listening and closes every connection.
    public func shutdown() {
        try? channel.close().wait()
        try? group.syncShutdownGracefully()
    }
}

/// One connection: answers `GET /metrics` with the exposition, anything else with 404 or 405.
final class ScrapeHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let exporter: MetricsExporter
    private var request: HTTPRequestHead?
    private var deadline: Scheduled<Void>?

    init(exporter: MetricsExporter) {
        self.exporter = exporter
    }

    func handlerAdded(context: ChannelHandlerContext) {
        armDeadline(context)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        deadline?.cancel()
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
        let keepAlive = head.isKeepAlive
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
