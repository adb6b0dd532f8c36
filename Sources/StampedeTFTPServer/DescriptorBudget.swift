/// How a process's open-file limit is shared out between what may hold descriptors, so that a
/// limit the flags allow is one the kernel allows too: an HTTP connection holds its socket and,
/// while it streams a file, that file (two); a cached image HTTP sends with sendfile holds its
/// memfd; a TFTP read beyond `transferSockets` shares a socket instead of taking one. Pure: the
/// command line computes it once from the limit and the flags.
public struct DescriptorBudget: Equatable, Sendable {
    /// Kept for what a server holds whatever its load (listeners, rings, epolls and their eventfds, the metrics
    /// listener and its connections, logs, the pidfile, the shared transfer sockets), and for
    /// TFTP's streamed files and the opens of files being looked at.
    public var reserve: Int
    /// Images in memfds at most (0: no HTTP, no memfd); beyond, an image is anonymous memory,
    /// which HTTP sends with send instead of sendfile.
    public var images: Int
    /// HTTP connections open at once (0 without HTTP).
    public var httpConnections: Int
    /// TFTP transfers with a socket of their own, all workers together.
    public var transferSockets: Int
    /// What the operator asked that the limit cannot hold, and what is served instead.
    public var warnings: [String] = []

    /// Descriptors an HTTP connection may hold: its socket, and a streamed file.
    public static let perConnection = 2
    /// The HTTP connections a server opens at most by default.
    public static let defaultConnections = 16384

    /// `limit`: RLIMIT_NOFILE as it will be when serving. `imageBytes`: the cache's budget;
    /// `smallestImage`: the size from which images are memfds (nil: no HTTP). The two counts
    /// are the flags' (nil: not given).
    public init(limit: Int, imageBytes: Int, smallestImage: Int?, httpConnections: Int?, transferSockets: Int?) {
        let limit = max(limit, 16)
        guard let smallestImage else {
            // TFTP alone: what the reserve leaves is for transfer sockets.
            reserve = min(1024, limit / 2)
            images = 0
            self.httpConnections = 0
            self.transferSockets = transferSockets ?? limit - reserve
            return
        }
        reserve = min(1024, limit / 4)
        let unreserved = limit - reserve
        images = min(imageBytes / max(1, smallestImage), unreserved / 8)
        let available = unreserved - images
        let most = available / Self.perConnection
        if let asked = httpConnections, asked > most {
            warnings.append("""
                --http-max-connections \(asked): the open-file limit (\(limit)) holds \(most) connections \
                (each may hold a socket and a streamed file, beside \(reserve + images) other descriptors): \
                serving at most \(most)
                """)
        }
        let connections = min(httpConnections ?? min(Self.defaultConnections, available * 3 / 10), most)
        self.httpConnections = connections
        // HTTP's connections come out of the same descriptors: the TFTP reads beyond share sockets.
        self.transferSockets = transferSockets ?? available - connections * Self.perConnection
    }
}
