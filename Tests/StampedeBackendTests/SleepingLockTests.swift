import StampedeIO
import Testing

/// The machines' tables are shared by the loops, the proxy and the API's callers through a
/// `SleepingLock`: what one thread does to its state under the lock, the others see whole.
@Suite struct SleepingLockSpec {
    @Test func threadsThatShareTheStateEachSeeItWhole() {
        let lock = SleepingLock((a: 0, b: 0, torn: 0))
        let threads = (0..<8).map { number in
            SystemThread(named: "lock-test-\(number)") {
                for _ in 0..<20_000 {
                    lock.withLock { state in
                        // Two fields changed together: no thread finds one changed without the other.
                        if state.a != state.b { state.torn += 1 }
                        state.a += 1
                        state.b += 1
                    }
                }
            }
        }
        for thread in threads { thread.join() }
        let state = lock.withLock { $0 }
        #expect(state.a == 160_000 && state.b == 160_000 && state.torn == 0)
    }

    @Test func anErrorThrownUnderTheLockLeavesItFree() {
        struct Refused: Error {}
        let lock = SleepingLock([Int]())
        #expect(throws: Refused.self) { try lock.withLock { (state) throws(Refused) in state.append(1); throw Refused() } }
        #expect(lock.withLock { $0 } == [1], "taken again: the throw unlocked it")
    }
}
