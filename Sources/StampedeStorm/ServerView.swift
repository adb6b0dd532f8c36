import Glibc
import StampedeBase
import StampedeIO
import StampedeHTTPWire

/// One reading of a server's metrics (`stampede storm --metrics URL`): every sample of the
/// exposition, by its name and labels as written (`stampede_requests_total{request="rrq",outcome="served"}`).
public struct MetricsSample: Sendable {
    public var values: [String: Double] = [:]

    public init(parsing text: String) {
        for line in text.split(separator: "\n") where !line.hasPrefix("#") {
            // The value is the last field but one when a timestamp follows; Stampede writes none.
            guard let space = line.lastIndex(of: " "), let value = Double(line[line.index(after: space)...]) else { continue }
            values[String(line[..<space])] = value
        }
    }

    /// The sum of every sample of `name` whose labels include `labels` (`outcome="served"`).
    public func sum(_ name: String, _ labels: [String] = []) -> Double {
        values.reduce(0) { total, entry in
            let key = entry.key
            guard key == name || key.hasPrefix(name + "{") else { return total }
            return labels.allSatisfy { key.contains($0) } ? total + entry.value : total
        }
    }

    /// Why a reading failed.
    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }

    /// GET `url` (http://HOST:PORT/PATH), at most `timeout` seconds.
    public static func read(_ url: String, timeout: Int = 5) throws(Failure) -> MetricsSample {
        guard url.hasPrefix("http://") else { throw Failure(description: "\(url): only http:// URLs") }
        let rest = url.dropFirst("http://".count)
        let authority = rest.prefix { $0 != "/" }
        let path = rest.dropFirst(authority.count)
        var host = String(authority), port = "80"
        if authority.hasPrefix("["), let close = authority.firstIndex(of: "]") {
            host = String(authority[authority.index(after: authority.startIndex)..<close])
            let after = authority[authority.index(after: close)...]
            if after.hasPrefix(":") { port = String(after.dropFirst()) }
        } else if let colon = authority.lastIndex(of: ":") {
            host = String(authority[..<colon])
            port = String(authority[authority.index(after: colon)...])
        }
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var found: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, port, &hints, &found) == 0, let info = found else {
            throw Failure(description: "\(url): cannot resolve \(host):\(port)")
        }
        defer { freeaddrinfo(found) }
        let fd = socket(info.pointee.ai_family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw Failure(description: "\(url): \(Errno.current)") }
        defer { close(fd) }
        var limit = timeval(tv_sec: timeout, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
        // A wait with a timeout (SO_RCVTIMEO, SO_SNDTIMEO) ends in EINTR when anything interrupts
        // it: a signal, or io_uring's task work for a ring on this thread (the storm's, its last
        // completions posted as its connections close). The call goes again; an interrupted
        // connect goes on in the kernel, and connect says EALREADY until it is done (EISCONN).
        var connected = connect(fd, info.pointee.ai_addr, info.pointee.ai_addrlen)
        var waited = 0  // milliseconds, up to `timeout`
        while connected != 0 && (errno == EINTR || errno == EALREADY) && waited < timeout * 1000 {
            usleep(1000)
            waited += 1
            connected = connect(fd, info.pointee.ai_addr, info.pointee.ai_addrlen)
        }
        guard connected == 0 || errno == EISCONN else {
            throw Failure(description: "\(url): cannot connect: \(Errno.current)")
        }
        func again(_ call: () -> Int) -> Int {
            var result = call()
            while result < 0 && errno == EINTR { result = call() }
            return result
        }
        let request = "GET \(path.isEmpty ? "/" : path) HTTP/1.1\r\nHost: \(authority)\r\nConnection: close\r\n\r\n"
        let sent = request.utf8CString.withUnsafeBytes { bytes in again { send(fd, bytes.baseAddress, bytes.count - 1, Int32(MSG_NOSIGNAL)) } }
        guard sent == request.utf8.count else { throw Failure(description: "\(url): cannot send the request: \(Errno.current)") }
        // The answer's head is read with the storm's own reader of answers (ReceivedResponseHead);
        // its body is read to its Content-Length, or to the end when it has none.
        var response: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        var head: (ReceivedResponseHead, length: Int)?
        while true {
            if let (parsed, length) = head, let expected = parsed.contentLength, response.count - length >= expected { break }
            let count = chunk.withUnsafeMutableBytes { bytes in again { recv(fd, bytes.baseAddress, bytes.count, 0) } }
            if count < 0 { throw Failure(description: "\(url): \(Errno.current)") }
            if count == 0 { break }
            response += chunk[..<count]
            if response.count > 64 << 20 { throw Failure(description: "\(url): the answer is over 64 MiB") }
            if head == nil {
                let read = response.withUnsafeBytes { bytes in Result { () throws(ReceivedResponseHead.Unreadable) in try ReceivedResponseHead.read(bytes) } }
                switch read {
                case .success(let parsed): head = parsed
                case .failure(let unreadable): throw Failure(description: "\(url): not an HTTP answer: \(unreadable.reason)")
                }
            }
        }
        guard let (parsed, length) = head else { throw Failure(description: "\(url): not an HTTP answer") }
        guard parsed.status == 200 else { throw Failure(description: "\(url): the server answered \(parsed.status)") }
        let body = response[length...].prefix(parsed.contentLength ?? Int.max)
        if let expected = parsed.contentLength, body.count < expected {
            throw Failure(description: "\(url): the answer ended after \(body.count) of its \(expected) bytes")
        }
        return MetricsSample(parsing: String(decoding: body, as: UTF8.self))
    }
}

/// What a server's own metrics say happened between two readings: the server's view of a storm,
/// printed beside the storm's.
public struct ServerView: Sendable {
    public let before: MetricsSample
    public let after: MetricsSample

    public init(before: MetricsSample, after: MetricsSample) {
        self.before = before
        self.after = after
    }

    /// How much the samples of `name` with `labels` grew.
    public func delta(_ name: String, _ labels: [String] = []) -> Double {
        after.sum(name, labels) - before.sum(name, labels)
    }

    /// Requests by protocol (tftp first), and in each by outcome, those that happened.
    public var outcomes: [(protocol: String, outcomes: [(String, Int)])] {
        var totals: [String: [String: Int]] = [:]
        for (key, value) in after.values where key.hasPrefix("stampede_requests_total{") {
            let labels = key.dropFirst("stampede_requests_total{".count).split(separator: ",")
            func label(_ name: String) -> String? {
                labels.first { $0.hasPrefix(name + "=\"") }.map { String($0.dropFirst(name.count + 2).prefix { $0 != "\"" }) }
            }
            guard let outcome = label("outcome") else { continue }
            let change = Int(value - (before.values[key] ?? 0))
            if change != 0 { totals[label("protocol") ?? "tftp", default: [:]][outcome, default: 0] += change }
        }
        return totals.sorted { ($0.key == "tftp" ? 0 : 1, $0.key) < ($1.key == "tftp" ? 0 : 1, $1.key) }.map { protocolName, counts in
            (protocolName, counts.sorted { ($1.value, $0.key) < ($0.value, $1.key) })
        }
    }

    /// File bytes sent over `protocolName` (tftp, http).
    public func fileBytesSent(over protocolName: String) -> Int {
        Int(delta("stampede_file_bytes_total", ["direction=\"sent\"", "protocol=\"\(protocolName)\""]))
    }

    public var cpuSeconds: Double { delta("process_cpu_seconds_total") }
    public var retransmissions: Int { Int(delta("stampede_retransmissions_total")) }
    public var duplicateAcks: Int { Int(delta("stampede_duplicate_acks_total")) }
    public var fileBytesSent: Int { Int(delta("stampede_file_bytes_total", ["direction=\"sent\""])) }
    public var systemCalls: Int { Int(delta("stampede_backend_system_calls_total")) }
    public var datagramsPerSend: Double {
        let operations = delta("stampede_backend_send_operations_total")
        return operations > 0 ? delta("stampede_backend_sent_datagrams_total") / operations : 0
    }
    public var sendFailures: Int { Int(delta("stampede_backend_send_failures_total")) }

    public var text: String {
        let byProtocol = outcomes
        let requests = byProtocol.map { entry in
            entry.protocol + " " + entry.outcomes.map { "\($0.1) \(String($0.0.map { $0 == "_" ? " " : $0 }))" }.joined(separator: ", ")
        }.joined(separator: "; ")
        let bytes = byProtocol.count > 1
            ? " (" + byProtocol.map { "\($0.protocol) \(fileBytesSent(over: $0.protocol))" }.joined(separator: ", ") + ")" : ""
        return """
            server (its metrics): CPU \(decimalText(cpuSeconds, places: 2)) s; requests: \(requests.isEmpty ? "none" : requests)
            server: \(fileBytesSent) file bytes sent\(bytes), \(retransmissions) retransmissions, \(duplicateAcks) duplicate ACKs, \
            \(sendFailures) datagrams the kernel refused; \(systemCalls) system calls, \(decimalText(datagramsPerSend, places: 2)) datagrams per send
            """
    }

    public var json: String {
        let byProtocol = outcomes
        let requests = byProtocol.map { entry in
            "\"\(entry.protocol)\": {" + entry.outcomes.map { "\"\($0.0)\": \($0.1)" }.joined(separator: ", ") + "}"
        }.joined(separator: ", ")
        let bytes = byProtocol.map { "\"\($0.protocol)\": \(fileBytesSent(over: $0.protocol))" }.joined(separator: ", ")
        return """
            {"cpu_s": \(decimalText(cpuSeconds, places: 3)), "requests": {\(requests)}, "file_bytes_sent": \(fileBytesSent), \
            "file_bytes_sent_by_protocol": {\(bytes)}, \
            "retransmissions": \(retransmissions), "duplicate_acks": \(duplicateAcks), "send_failures": \(sendFailures), \
            "system_calls": \(systemCalls), "datagrams_per_send": \(decimalText(datagramsPerSend, places: 3))}
            """
    }
}
