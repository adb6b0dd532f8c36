// swift-tools-version:6.1
import PackageDescription

// The architecture in four parts (see ../shared/DESIGN.md):
//   CSources/      CStampedeSys: syscalls and macros Swift cannot see; CStampedeRing: the io_uring engine
//   StampedeCore   protocol, state machines, policy, file cache, the worker loop over a backend
//   StampedeGlibc  the pure-Swift epoll + recvmmsg/sendmmsg backend
//   StampedeURing  the Swift side of the io_uring backend
//   StampedeStorm  the load generator: many TFTP clients on one backend, every byte verified
//   stampede       the CLI: serve (in.tftpd flags), get, put, storm
let strictC: [CSetting] = [.define("_GNU_SOURCE"), .unsafeFlags(["-Wall", "-Wextra", "-Werror"])]

let package = Package(
    name: "Stampede",
    products: [
        .executable(name: "stampede", targets: ["stampede"]),
        .library(name: "Stampede", targets: ["StampedeCore", "StampedeGlibc", "StampedeURing", "StampedeStorm"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/ordo-one/benchmark", from: "1.38.1", traits: ["MallocInterposer"]),
    ],
    targets: [
        .target(name: "CStampedeSys", path: "CSources/CStampedeSys", cSettings: strictC),
        .systemLibrary(name: "CLibURing", path: "CSources/CLibURing", pkgConfig: "liburing",
                       providers: [.apt(["liburing-dev"])]),
        .target(name: "CStampedeRing", dependencies: ["CLibURing", "CStampedeSys"], path: "CSources/CStampedeRing", cSettings: strictC),
        .target(
            name: "StampedeCore",
            dependencies: ["CStampedeSys", .product(name: "Logging", package: "swift-log")]
        ),
        .target(name: "StampedeGlibc", dependencies: ["StampedeCore", "CStampedeSys"]),
        .target(name: "StampedeURing", dependencies: ["StampedeCore", "CStampedeSys", "CStampedeRing"]),
        .target(name: "StampedeStorm", dependencies: ["StampedeCore", "CStampedeSys"]),
        .executableTarget(
            name: "stampede",
            dependencies: [
                "StampedeCore", "StampedeGlibc", "StampedeURing", "StampedeStorm", "CStampedeSys",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // Micro-benchmarks of the hot path, with malloc counts (`make bench-micro`; thresholds in
        // Benchmarks/Thresholds). The end-to-end comparison is Benchmarks/compare.py (`make bench`).
        .executableTarget(name: "HotPath",
                          dependencies: ["StampedeCore", "StampedeGlibc", "CStampedeSys",
                                         .product(name: "Benchmark", package: "benchmark")],
                          path: "Benchmarks/HotPath",
                          plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]),
        .target(name: "StampedeTestSupport", dependencies: ["StampedeCore", "StampedeGlibc", "StampedeURing"],
                path: "Tests/StampedeTestSupport"),
        .testTarget(name: "StampedeCoreTests", dependencies: ["StampedeCore", "CStampedeSys", "StampedeTestSupport"]),
        // The backend contract, tested once for every backend, with a malloc counter for the hot path.
        .target(name: "CMallocCounter", path: "Tests/CMallocCounter", cSettings: strictC),
        .testTarget(name: "StampedeBackendTests",
                    dependencies: ["StampedeGlibc", "StampedeURing", "StampedeCore", "CStampedeSys", "CMallocCounter",
                                   "StampedeTestSupport", .product(name: "Logging", package: "swift-log")]),
        .testTarget(name: "StampedeStormTests",
                    dependencies: ["StampedeStorm", "StampedeGlibc", "StampedeURing", "StampedeCore", "CStampedeSys",
                                   "StampedeTestSupport", .product(name: "Logging", package: "swift-log")]),
    ],
    swiftLanguageModes: [.v5]
)
