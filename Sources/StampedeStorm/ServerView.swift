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

    public typealias Failure = HTTPClient.Failure

    /// GET `url` (http://HOST:PORT/PATH), at most `timeout` seconds: the exposition there.
    public static func read(_ url: String, timeout: Int = 5) throws(Failure) -> MetricsSample {
        MetricsSample(parsing: String(decoding: try HTTPClient.body(url, timeout: timeout), as: UTF8.self))
    }
}

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
