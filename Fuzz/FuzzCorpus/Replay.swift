import Glibc
import StampedeIO

/// Runs a fuzz harness. Built with -sanitize=fuzzer -DFUZZING (`make fuzz`), libFuzzer drives it
/// with its own command line; otherwise it replays the corpus files named on the command line,
/// so that an ordinary build of a harness is a tool that replays a corpus or a crash input
/// (`swift run PacketFuzz Fuzz/corpus/packet/*`).
public func runHarness(_ harness: @escaping (UnsafeRawBufferPointer) -> Void) -> Int32 {
    #if FUZZING
    current = harness
    var argc = CommandLine.argc
    var argv = CommandLine.unsafeArgv
    return LLVMFuzzerRunDriver(&argc, &argv) { data, size in
        current!(UnsafeRawBufferPointer(start: data, count: size))
        return 0
    }
    #else
    return replay(Array(CommandLine.arguments.dropFirst()), through: harness)
    #endif
}

#if FUZZING
/// libFuzzer's entry for programs that keep their own main (LLVM 11 and later).
@_silgen_name("LLVMFuzzerRunDriver")
func LLVMFuzzerRunDriver(_ argc: UnsafeMutablePointer<Int32>,
                         _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>>,
                         _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> Int32) -> Int32

/// The harness the C callback calls: one per process, set before libFuzzer starts.
nonisolated(unsafe) private var current: ((UnsafeRawBufferPointer) -> Void)?
#endif

func replay(_ paths: [String], through harness: (UnsafeRawBufferPointer) -> Void) -> Int32 {
    for path in paths {
        guard let bytes = try? readWholeFile(path) else {
            print("\(path): cannot read")
            return 1
        }
        bytes.withUnsafeBytes(harness)
    }
    print("\(paths.count) inputs replayed, no property broken")
    return 0
}
