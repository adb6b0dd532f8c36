// swift-tools-version:6.1
import PackageDescription

// The hot path's micro-benchmarks (package-benchmark, with malloc counts: `make bench-micro`), in
// a package of their own beside Stampede's, so that the benchmark package and all it builds (its
// plugin, malloc interposer, swift-numerics, swift-system) are no part of Stampede's build or of
// `swift test`'s. The rest of Benchmarks/ is Python and C, which SwiftPM leaves alone.
let package = Package(
    name: "StampedeBenchmarks",
    dependencies: [
        .package(name: "Stampede", path: ".."),
        .package(url: "https://github.com/ordo-one/benchmark", from: "1.38.1", traits: ["MallocInterposer"]),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
    ],
    targets: [
        // The plugin takes a benchmark to be an executable target in a folder named Benchmarks.
        .executableTarget(name: "HotPath",
                          dependencies: [.product(name: "Stampede", package: "Stampede"), .product(name: "Logging", package: "swift-log"),
                                         .product(name: "Benchmark", package: "benchmark")],
                          path: "HotPath",
                          plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]),
    ]
)
