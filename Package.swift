// swift-tools-version:6.1
import PackageDescription

// Stampede's parts, one target each (docs/ARCHITECTURE.md tells how they fit):
//   CStampedeSys      C: the Linux calls and macros Swift cannot see (mmsghdr, CMSG, openat2, epoll)
//   CStampedeRing     C: the io_uring engine over liburing (opaque ring, arrays of POD structs)
//   StampedeBase      what every part shares: monotonic time, log lines written without a String,
//                     digits, sanitized text, netascii. No import.
//   StampedeProtocol  TFTP itself: packets, the option table, the sender's, receiver's and client's
//                     state machines, timers, netascii. Pure logic: no syscall, no import.
//   StampedeIO        (on Base, not TFTP) the I/O contract every backend implements, socket addresses, errno, sockets,
//                     descriptors and files, threads and locks
//   StampedeFiles     the served root as every protocol reads it: the file service (names, remap
//                     rules, access policy), the cache of images and the lease on one, the disk thread
//   StampedeServing   what every serving loop shares, whatever it serves: what it counts, its
//                     clients' admission, the line it says per request
//   StampedeTFTPServer the TFTP server: workers, routing, transfers, uploads
//   StampedeHTTPWire  HTTP/1 itself: the request and response heads' grammar, statuses, dates. Pure.
//   StampedeDHCP      DHCP itself, for a proxyDHCP boot responder: the message codec, what a
//                     machine's request says of it, what the proxy answers, the IP and UDP
//                     envelope of its packets. Pure.
//   StampedeProxyDHCP the proxyDHCP responder (--proxy-dhcp): its sockets (port 67 through a packet
//                     socket, never bound), its thread, its limits and what it logs
//   CStampedeTLS      C: the OpenSSL 3 calls --https makes (Debian's libssl3, linked dynamically)
//   StampedeTLS       TLS for the HTTP engine: the certificate and key, the profile, a connection's
//                     session, kernel TLS's probe, and UEFI's signature list of CAs (tls-ca)
//   StampedeHTTP      the HTTP engine (connections as state machines, epoll, sendfile) and --http's
//                     answers: the same root, policy, rules and file images over HTTP/1.1 (on
//                     Files and Serving: not on TFTP)
//   StampedeGlibc     a backend: epoll + recvmmsg/sendmmsg
//   StampedeURing     a backend: the Swift side of the io_uring engine
//   StampedeMetrics   the operator's view: Prometheus exposition over the HTTP engine (its own
//                     loop and thread)
//   StampedeStorm     the load generator: many clients on a backend its caller gives it, and its
//                     reading of a server's metrics (storm --metrics)
//   stampede          the command line: serve (in.tftpd's flags), get, put, storm
// Hardened as Debian builds C (dpkg-buildflags): glibc's checked string and I/O calls where the
// optimizer can see the buffer's size (_FORTIFY_SOURCE needs -O, so release builds only), and
// stack canaries.
let strictC: [CSetting] = [.define("_GNU_SOURCE"), .define("_FORTIFY_SOURCE", to: "2", .when(configuration: .release)),
                           .unsafeFlags(["-Wall", "-Wextra", "-Werror", "-fstack-protector-strong"])]
let log = Target.Dependency.product(name: "Logging", package: "swift-log")

let package = Package(
    name: "Stampede",
    products: [
        .executable(name: "stampede", targets: ["stampede"]),
        .library(name: "Stampede", targets: ["StampedeBase", "StampedeProtocol", "StampedeIO", "StampedeFiles", "StampedeServing", "StampedeTFTPServer",
                                             "StampedeGlibc", "StampedeURing", "StampedeStorm"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
        .package(url: "https://github.com/apple/swift-atomics", from: "1.3.0"),
    ],
    targets: [
        .target(name: "CStampedeSys", path: "CSources/CStampedeSys", cSettings: strictC),
        .systemLibrary(name: "CLibURing", path: "CSources/CLibURing", pkgConfig: "liburing",
                       providers: [.apt(["liburing-dev"])]),
        .target(name: "CStampedeRing", dependencies: ["CLibURing", "CStampedeSys"], path: "CSources/CStampedeRing",
                cSettings: strictC),

        .target(name: "CStampedeTLS", path: "CSources/CStampedeTLS", cSettings: strictC,
                linkerSettings: [.linkedLibrary("ssl"), .linkedLibrary("crypto")]),
        .target(name: "StampedeTLS", dependencies: ["CStampedeTLS", "StampedeIO"]),

        .target(name: "StampedeBase"),
        .target(name: "StampedeProtocol", dependencies: ["StampedeBase"]),
        .target(name: "StampedeIO", dependencies: ["StampedeBase", "CStampedeSys"]),
        .target(name: "StampedeFiles", dependencies: ["StampedeBase", "StampedeIO", "CStampedeSys", log]),
        .target(name: "StampedeServing", dependencies: ["StampedeBase", "StampedeIO", "CStampedeSys", log,
                                                      .product(name: "Atomics", package: "swift-atomics")]),
        .target(name: "StampedeTFTPServer", dependencies: ["StampedeBase", "StampedeProtocol", "StampedeIO", "StampedeFiles", "StampedeServing",
                                                     "CStampedeSys", log, .product(name: "Atomics", package: "swift-atomics")]),
        .target(name: "StampedeHTTPWire", dependencies: ["StampedeBase", "StampedeIO", "CStampedeSys"]),
        .target(name: "StampedeDHCP", dependencies: ["StampedeBase"]),
        .target(name: "StampedeMachines", dependencies: ["StampedeDHCP", "StampedeFiles", "StampedeHTTPWire", "StampedeIO", "StampedeBase", "CStampedeSys", log]),
        .target(name: "StampedeProxyDHCP", dependencies: ["StampedeDHCP", "StampedeMachines", "StampedeServing", "StampedeIO", "StampedeBase",
                                                        "CStampedeSys", log]),
        .target(name: "StampedeHTTP", dependencies: ["StampedeHTTPWire", "StampedeTLS", "StampedeFiles", "StampedeServing", "StampedeIO",
                                                   "StampedeBase", "CStampedeSys", log, .product(name: "Atomics", package: "swift-atomics")]),
        .target(name: "StampedeMetrics",
                dependencies: ["StampedeFiles", "StampedeServing", "StampedeHTTP", "StampedeDHCP", "StampedeProxyDHCP", "StampedeTLS", "StampedeIO", "StampedeBase", log,
                               .product(name: "Prometheus", package: "swift-prometheus"),
                               .product(name: "CoreMetrics", package: "swift-metrics")]),
        .target(name: "StampedeGlibc", dependencies: ["StampedeBase", "StampedeIO", "CStampedeSys"]),
        .target(name: "StampedeURing", dependencies: ["StampedeBase", "StampedeIO", "CStampedeSys", "CStampedeRing"]),
        .target(name: "StampedeStorm", dependencies: ["StampedeBase", "StampedeProtocol", "StampedeIO", "StampedeHTTPWire", "StampedeDHCP", "StampedeTLS",
                                                     "CStampedeSys"]),
        .executableTarget(
            name: "stampede",
            dependencies: ["StampedeBase", "StampedeProtocol", "StampedeIO", "StampedeFiles", "StampedeServing", "StampedeTFTPServer", "StampedeDHCP", "StampedeProxyDHCP", "StampedeMachines", "StampedeGlibc", "StampedeURing",
                           "StampedeStorm", "StampedeMetrics", "StampedeHTTP", "StampedeTLS", "CStampedeSys", log,
                           .product(name: "ArgumentParser", package: "swift-argument-parser")]
        ),

        // libFuzzer harnesses (`make fuzz` builds them with -sanitize=fuzzer and -DFUZZING); an
        // ordinary build makes each a tool that replays corpus files through its harness.
        .target(name: "FuzzCorpus", dependencies: ["StampedeIO"], path: "Fuzz/FuzzCorpus"),
        .executableTarget(name: "PacketFuzz", dependencies: ["StampedeBase", "StampedeProtocol", "FuzzCorpus"], path: "Fuzz/PacketFuzz"),
        .executableTarget(name: "OptionAckFuzz", dependencies: ["StampedeBase", "StampedeProtocol", "FuzzCorpus"],
                          path: "Fuzz/OptionAckFuzz"),
        .executableTarget(name: "DHCPFuzz", dependencies: ["StampedeDHCP", "FuzzCorpus"], path: "Fuzz/DHCPFuzz"),
        .executableTarget(name: "HeadFuzz", dependencies: ["StampedeHTTPWire", "FuzzCorpus"], path: "Fuzz/HeadFuzz"),
        .executableTarget(name: "RemapFuzz", dependencies: ["StampedeFiles", "StampedeIO", "FuzzCorpus"],
                          path: "Fuzz/RemapFuzz"),

        .target(name: "StampedeTestSupport", dependencies: ["StampedeBase", "StampedeProtocol", "StampedeIO", "StampedeServing", "StampedeTFTPServer", "StampedeGlibc", "StampedeURing", log],
                path: "Tests/StampedeTestSupport"),
        .testTarget(name: "StampedeBaseTests", dependencies: ["StampedeBase"]),
        .testTarget(name: "StampedeProtocolTests", dependencies: ["StampedeBase", "StampedeProtocol", "CMallocCounter"]),
        // The command line's plan (`serve`'s flags and what they make), against the executable.
        .testTarget(name: "StampedeCommandTests",
                    dependencies: ["stampede", "StampedeFiles", "StampedeServing", "StampedeTFTPServer", "StampedeDHCP", "StampedeIO", "StampedeBase", "StampedeProtocol", "CMallocCounter", log]),
        .testTarget(name: "StampedeHTTPWireTests", dependencies: ["StampedeHTTPWire", "StampedeIO"]),
        .testTarget(name: "StampedeDHCPTests", dependencies: ["StampedeDHCP"]),
        .testTarget(name: "StampedeMachinesTests", dependencies: ["StampedeMachines", "StampedeDHCP", "StampedeFiles", "StampedeHTTPWire", "StampedeIO", "StampedeTestSupport", log]),
        .testTarget(name: "StampedeProxyDHCPTests",
                    dependencies: ["StampedeProxyDHCP", "StampedeDHCP", "StampedeMachines", "StampedeHTTPWire", "StampedeBase", "StampedeProtocol", log]),
        .testTarget(name: "StampedeTLSTests", dependencies: ["StampedeTLS", "StampedeTestSupport"]),
        .testTarget(name: "StampedeHTTPTests",
                    dependencies: ["StampedeHTTP", "StampedeHTTPWire", "StampedeFiles", "StampedeServing", "StampedeIO", "StampedeBase",
                                   "CMallocCounter", "StampedeTestSupport", log]),
        .testTarget(name: "StampedeFilesTests", dependencies: ["StampedeFiles", "StampedeIO", "StampedeBase", "StampedeTestSupport", log]),
        .testTarget(name: "StampedeTFTPServerTests",
                    dependencies: ["StampedeTFTPServer", "StampedeFiles", "StampedeServing", "StampedeBase", "StampedeProtocol", "StampedeIO", "StampedeTestSupport", "StampedeMetrics", "StampedeStorm",
                                   "CMallocCounter", log]),
        // The backend contract, tested once for every backend, with a malloc counter for the hot path.
        .target(name: "CMallocCounter", path: "Tests/CMallocCounter", cSettings: strictC),
        .testTarget(name: "StampedeBackendTests",
                    dependencies: ["StampedeGlibc", "StampedeURing", "StampedeFiles", "StampedeTFTPServer", "StampedeBase", "StampedeProtocol", "StampedeIO",
                                   "CMallocCounter", "StampedeTestSupport", log]),
        .testTarget(name: "StampedeStormTests",
                    dependencies: ["StampedeStorm", "StampedeFiles", "StampedeServing", "StampedeTFTPServer", "StampedeHTTP", "StampedeMetrics", "StampedeHTTPWire", "StampedeGlibc", "StampedeURing",
                                   "StampedeBase", "StampedeProtocol", "StampedeIO", "StampedeDHCP", "StampedeTestSupport", log]),
    ]
)
