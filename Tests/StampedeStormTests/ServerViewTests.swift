import StampedeFiles
import StampedeMetrics
import StampedeServing
import StampedeStorm
import Testing

@Suite struct ServerViewSpec {
    /// A reading through a real metrics endpoint: the answer's head read by the storm's reader of
    /// answers, its body to its Content-Length; another path's 404 is a failure that says so.
    @Test func aReadingComesFromTheEndpointAndA404IsAFailure() throws {
        let worker = WorkerMetrics(.tftp)
        worker.countRequest(.read, .served)
        worker.publish()
        let exporter = MetricsExporter(workers: [worker], cache: FileCache(), fileLabels: FileLabels(),
                                       build: BuildInfo(version: "test", backend: "none", features: []))
        let listener = try MetricsListener(host: "127.0.0.1", port: 0, exporter: exporter, lifetime: 5_000_000_000)
        defer { listener.shutdown() }
        let sample = try MetricsSample.read("http://\(listener.address)/metrics")
        #expect(sample.sum("stampede_requests_total", [#"outcome="served""#]) == 1)
        #expect(sample.values.count > 20)
        #expect {
            _ = try MetricsSample.read("http://\(listener.address)/other")
        } throws: { "\($0)".contains("the server answered 404") }
        #expect(throws: MetricsSample.Failure.self) { _ = try MetricsSample.read("https://\(listener.address)/metrics") }
    }

    /// `storm --metrics`: what the server said happened, by protocol, between two readings.
    @Test func requestsAndBytesAreSplitByProtocol() {
        let before = MetricsSample(parsing: """
            stampede_requests_total{protocol="tftp",request="rrq",outcome="served"} 5
            stampede_requests_total{protocol="http",request="get",outcome="served"} 1
            stampede_file_bytes_total{protocol="tftp",direction="sent"} 100
            stampede_file_bytes_total{protocol="http",direction="sent"} 10
            """)
        let after = MetricsSample(parsing: """
            stampede_requests_total{protocol="tftp",request="rrq",outcome="served"} 25
            stampede_requests_total{protocol="tftp",request="rrq",outcome="not_found"} 20
            stampede_requests_total{protocol="tftp",request="rrq",outcome="probe"} 20
            stampede_requests_total{protocol="http",request="get",outcome="served"} 61
            stampede_requests_total{protocol="http",request="head",outcome="served"} 1
            stampede_requests_total{protocol="http",request="get",outcome="not_found"} 0
            stampede_file_bytes_total{protocol="tftp",direction="sent"} 1100
            stampede_file_bytes_total{protocol="http",direction="sent"} 50010
            """)
        let view = ServerView(before: before, after: after)
        let outcomes = view.outcomes
        #expect(outcomes.map(\.protocol) == ["tftp", "http"])
        #expect(outcomes[0].outcomes.map { "\($0.0)=\($0.1)" } == ["not_found=20", "probe=20", "served=20"])
        #expect(outcomes[1].outcomes.map { "\($0.0)=\($0.1)" } == ["served=61"])
        #expect(view.fileBytesSent == 51_000 && view.fileBytesSent(over: "http") == 50_000)
        #expect(view.text.contains("requests: tftp 20 not found, 20 probe, 20 served; http 61 served"), "\(view.text)")
        #expect(view.text.contains("51000 file bytes sent (tftp 1000, http 50000)"), "\(view.text)")
        #expect(view.json.contains(#""requests": {"tftp": {"not_found": 20, "probe": 20, "served": 20}, "http": {"served": 61}}"#), "\(view.json)")
        #expect(view.json.contains(#""file_bytes_sent_by_protocol": {"tftp": 1000, "http": 50000}"#), "\(view.json)")
    }
}
