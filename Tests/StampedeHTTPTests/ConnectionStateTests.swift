import StampedeBase
import StampedeHTTPWire
import Testing
@testable import StampedeHTTP

/// A connection's life without a socket: each test plays events at chosen times and reads what
/// the state says to do.
@Suite struct ConnectionStateSpec {
    static let second = nanosecondsPerSecond
    let limits = ConnectionState.Limits(requestTimeout: 10 * second, idleTimeout: 60 * second, sendTimeout: 60 * second,
                                        writeBudget: 4 << 20, lifetime: nil)

    func opened(at time: Nanoseconds = 0, limits: ConnectionState.Limits? = nil) -> ConnectionState {
        ConnectionState(limits: limits ?? self.limits, opened: time)
    }

    /// A head as a client sends it: asking to keep the connection, or to close it after.
    static func head(keepAlive: Bool = true, path: String = "/boot.ipxe") -> RequestHead {
        var parser = HeadParser()
        let text = "GET \(path) HTTP/1.1\r\nHost: rack\r\n" + (keepAlive ? "" : "Connection: close\r\n") + "\r\n"
        let parsed = Array(text.utf8).withUnsafeBytes { bytes in try? parser.parse(bytes) }
        guard case .complete(let head, _)? = parsed else { fatalError("the test's head did not parse") }
        return head
    }

    static let keptAlive = head()

    @Test func aRequestIsReadAnsweredAndTheConnectionWaitsForTheNext() {
        var state = opened()
        #expect(state.handle(.serviceBegins(inputLeft: false), now: 1) == .read)
        #expect(state.handle(.bytesRead, now: 1) == .parseNext)
        #expect(state.phase == .readingHead(since: 1))
        #expect(state.handle(.headIncomplete, now: 1) == .read)
        #expect(state.handle(.headParsed(Self.keptAlive, started: 1), now: 2) == .answer)
        #expect(state.phase == .answering(Self.keptAlive, started: 1) && !state.lastAnswer)
        #expect(state.handle(.answerReady, now: 2) == .write)
        #expect(state.handle(.wrote(100), now: 3) == .write)
        #expect(state.handle(.answerWritten(inputLeft: false), now: 4) == .read)
        #expect(state.phase == .idle(since: 4))
    }

    /// TLS: the handshake comes first, bounded by the request deadline from the accept; once it
    /// is done the connection is idle, and its idle time starts then.
    @Test func aTLSHandshakeIsBoundedByTheRequestDeadline() {
        var state = ConnectionState(limits: limits, opened: 0, handshake: true)
        #expect(state.phase == .handshaking(since: 0))
        #expect(state.handle(.tick, now: 10 * Self.second) == .none)
        #expect(state.handle(.tick, now: 10 * Self.second + 1) == .close(.handshakeTimedOut))
        #expect(state.phase == .closed)

        var finished = ConnectionState(limits: limits, opened: 0, handshake: true)
        #expect(finished.handle(.serviceBegins(inputLeft: false), now: 1) == .handshake)
        #expect(finished.handle(.handshakeDone, now: 9 * Self.second) == .read)
        #expect(finished.phase == .idle(since: 9 * Self.second))
        #expect(finished.handle(.tick, now: 30 * Self.second) == .none)
        #expect(finished.handle(.tick, now: 70 * Self.second) == .close(.idle))
        // A second "done" changes nothing.
        var once = ConnectionState(limits: limits, opened: 0, handshake: true)
        _ = once.handle(.handshakeDone, now: 1)
        _ = once.handle(.bytesRead, now: 2)
        #expect(once.handle(.handshakeDone, now: 3) == .none)
        #expect(once.phase == .readingHead(since: 2))
        // A failed one closes the connection, whatever its time.
        var failed = ConnectionState(limits: limits, opened: 0, handshake: true)
        #expect(failed.handle(.handshakeFailed, now: 1) == .close(.handshakeFailed))
        #expect(failed.phase == .closed && failed.handle(.serviceBegins(inputLeft: false), now: 2) == .none)
    }

    /// What a service of the connection starts with, by where its life is: the loop does what
    /// the state says, and nothing else.
    @Test func aServiceBeginsWithWhatThePhaseNeeds() {
        var state = opened()
        #expect(state.handle(.serviceBegins(inputLeft: true), now: 1) == .parseNext)
        #expect(state.handle(.bytesRead, now: 1) == .parseNext)
        #expect(state.handle(.headParsed(Self.keptAlive, started: 1), now: 1) == .answer)
        #expect(state.handle(.serviceBegins(inputLeft: false), now: 1) == .none)
        #expect(state.handle(.fileLoading, now: 1) == .none)
        #expect(state.handle(.serviceBegins(inputLeft: false), now: 2) == .none)
        #expect(state.handle(.answerReady, now: 3) == .write)
        #expect(state.handle(.serviceBegins(inputLeft: true), now: 4) == .write)
        #expect(state.handle(.answerWritten(inputLeft: true), now: 5) == .parseNext)
        #expect(state.handle(.serviceBegins(inputLeft: false), now: 6) == .read)
    }

    /// Requests sent back to back: each answered in order, the next parsed from what is already
    /// read, its head taken to have begun when the one before was answered.
    @Test func pipelinedRequestsAreParsedFromWhatIsAlreadyRead() {
        var state = opened()
        _ = state.handle(.bytesRead, now: 1)
        _ = state.handle(.headParsed(Self.keptAlive, started: 1), now: 1)
        _ = state.handle(.answerReady, now: 1)
        #expect(state.handle(.answerWritten(inputLeft: true), now: 5) == .parseNext)
        #expect(state.phase == .readingHead(since: 5))
        _ = state.handle(.headParsed(Self.head(keepAlive: false), started: 6), now: 6)
        _ = state.handle(.answerReady, now: 6)
        // The second asked to close: its answer is the last, whatever else was read.
        #expect(state.lastAnswer)
        #expect(state.handle(.answerWritten(inputLeft: true), now: 7) == .close(.answeredLast))
        #expect(state.phase == .closed)
    }

    @Test func aHeadTooSlowIsAnswered408AndClosed() {
        var state = opened()
        _ = state.handle(.bytesRead, now: 1 * Self.second)
        #expect(state.handle(.tick, now: 11 * Self.second) == .none)  // 10 s: not past it yet
        _ = state.handle(.bytesRead, now: 11 * Self.second)  // more bytes do not move the deadline
        #expect(state.handle(.tick, now: 11 * Self.second + 1) == .answerTimeoutThenClose)
        #expect(state.phase == .closed)
    }

    @Test func anIdleConnectionClosesQuietlyAfterTheIdleTimeout() {
        var state = opened(at: 0)
        #expect(state.handle(.tick, now: 60 * Self.second) == .none)
        #expect(state.handle(.tick, now: 60 * Self.second + 1) == .close(.idle))
        // The clock starts again after each answer.
        var served = opened(at: 0)
        _ = served.handle(.headParsed(Self.keptAlive, started: 50 * Self.second), now: 50 * Self.second)
        _ = served.handle(.answerReady, now: 50 * Self.second)
        _ = served.handle(.answerWritten(inputLeft: false), now: 55 * Self.second)
        #expect(served.handle(.tick, now: 100 * Self.second) == .none)
        #expect(served.handle(.tick, now: 116 * Self.second) == .close(.idle))
    }

    @Test func anAnswerTheClientStopsTakingIsAbandonedAfterTheSendTimeout() {
        var state = opened()
        _ = state.handle(.headParsed(Self.keptAlive, started: 0), now: 0)
        _ = state.handle(.answerReady, now: 0)
        _ = state.handle(.wrote(1000), now: 30 * Self.second)
        #expect(state.handle(.tick, now: 90 * Self.second) == .none)  // progress at 30 s
        #expect(state.handle(.tick, now: 90 * Self.second + 1) == .close(.stalled))
    }

    /// A connection that could write on yields after the budget, so the loop's other connections
    /// get their turn; the budget starts afresh at its next service.
    @Test func theWriteBudgetYieldsTheTurn() {
        var small = limits
        small.writeBudget = 1000
        var state = opened(limits: small)
        _ = state.handle(.headParsed(Self.keptAlive, started: 0), now: 0)
        _ = state.handle(.answerReady, now: 0)
        #expect(state.handle(.serviceBegins(inputLeft: false), now: 0) == .write)
        #expect(state.handle(.wrote(600), now: 0) == .write)
        #expect(state.handle(.wrote(400), now: 0) == .yieldTurn)
        #expect(state.handle(.serviceBegins(inputLeft: false), now: 1) == .write)
        #expect(state.handle(.wrote(999), now: 1) == .write)
    }

    /// SIGTERM: nothing closes for the stop itself. An answer being written finishes and keeps
    /// the connection; the next request is answered as the last; one that asks nothing goes
    /// after the drain timeout, counted from the stop.
    @Test func aStopDrainsEachConnectionAfterOneMoreAnswer() {
        var writing = opened()
        _ = writing.handle(.headParsed(Self.keptAlive, started: 0), now: 0)
        _ = writing.handle(.answerReady, now: 0)
        _ = writing.handle(.stop, now: 10)
        #expect(writing.handle(.answerWritten(inputLeft: false), now: 20) == .read)  // not the last: it said keep-alive
        _ = writing.handle(.headParsed(Self.keptAlive, started: 30), now: 30)
        #expect(writing.lastAnswer)
        _ = writing.handle(.answerReady, now: 30)
        #expect(writing.handle(.answerWritten(inputLeft: false), now: 40) == .close(.answeredLast))

        var idle = opened(at: 0)
        _ = idle.handle(.stop, now: 5 * Self.second)
        #expect(idle.handle(.tick, now: 6 * Self.second) == .none)
        #expect(idle.handle(.tick, now: 6 * Self.second + 1) == .close(.drained))

        var asking = opened()
        _ = asking.handle(.bytesRead, now: 0)
        _ = asking.handle(.stop, now: 1)
        _ = asking.handle(.headParsed(Self.keptAlive, started: 1), now: 2)
        #expect(asking.lastAnswer)
    }

    @Test func aRefusedHeadIsTheLastAnswer() {
        var state = opened()
        _ = state.handle(.bytesRead, now: 0)
        #expect(state.handle(.headRefused, now: 1) == .write)
        #expect(state.lastAnswer)
        #expect(state.handle(.answerWritten(inputLeft: true), now: 2) == .close(.answeredLast))
    }

    /// The head waits with the state, which counts the reads of its file: the loop asks the
    /// responder again with both when a read is done.
    @Test func anAnswerWaitingForItsFileHasNoDeadlineAndWritesWhenItComes() {
        var state = opened()
        _ = state.handle(.headParsed(Self.keptAlive, started: 0), now: 0)
        _ = state.handle(.fileLoading, now: 0)
        #expect(state.phase == .waitingForFile(Self.keptAlive, started: 0, since: 0, reads: 0))
        #expect(state.handle(.tick, now: 600 * Self.second) == .none)
        // Read, and changed while it was read: read again.
        #expect(state.handle(.fileLoading, now: 600 * Self.second) == .none)
        #expect(state.phase == .waitingForFile(Self.keptAlive, started: 0, since: 600 * Self.second, reads: 1))
        #expect(state.handle(.answerReady, now: 601 * Self.second) == .write)
        #expect(state.phase == .writing(lastProgress: 601 * Self.second))
    }

    /// Each head is answered as asked: the one the state holds is the last parsed, and whether it
    /// closes the connection is its own.
    @Test func thePhaseHoldsTheHeadBeingAnswered() {
        var state = opened()
        let first = Self.head(path: "/first"), last = Self.head(keepAlive: false, path: "/last")
        _ = state.handle(.bytesRead, now: 1)
        #expect(state.handle(.headParsed(first, started: 1), now: 2) == .answer)
        guard case .answering(let held, let started) = state.phase else { Issue.record("not answering"); return }
        #expect(held.path == first.path && started == 1 && !state.lastAnswer)
        _ = state.handle(.answerReady, now: 2)
        _ = state.handle(.answerWritten(inputLeft: true), now: 3)
        #expect(state.handle(.headParsed(last, started: 3), now: 3) == .answer)
        #expect(state.phase == .answering(last, started: 3) && state.lastAnswer)
    }

    /// The metrics endpoint's connections live a minute at most: the answer after that says close.
    @Test func pastItsLifetimeTheNextAnswerIsTheLast() {
        var aged = limits
        aged.lifetime = 60 * Self.second
        var state = opened(at: 0, limits: aged)
        _ = state.handle(.headParsed(Self.keptAlive, started: 59 * Self.second), now: 59 * Self.second)
        #expect(!state.lastAnswer)
        _ = state.handle(.answerReady, now: 59 * Self.second)
        _ = state.handle(.answerWritten(inputLeft: false), now: 59 * Self.second)
        _ = state.handle(.headParsed(Self.keptAlive, started: 60 * Self.second), now: 60 * Self.second)
        #expect(state.lastAnswer)
    }

    @Test func aPeerThatLeavesClosesTheConnection() {
        var state = opened()
        #expect(state.handle(.peerGone, now: 1) == .close(.peerGone))
        #expect(state.phase == .closed)
    }
}

/// The HTTP loop's epoll tag: a generation kept to its 30 bits never reaches the kind's bits, so
/// after 2^30 connections in one slot its events are still read as the connection's.
@Suite struct HTTPTagLayout {
    @Test func listenersConnectionsAndTheMailboxReadBackAsMade() {
        #expect(HTTPTag.listener(3).kind == .listener(3))
        #expect(HTTPTag.connection(slot: 7, generation: 9).kind == .connection(slot: 7, generation: 9))
        #expect(HTTPTag.mailbox.kind == .mailbox)
        #expect(HTTPTag(rawValue: 0).kind == nil && HTTPTag(rawValue: 3 << 62 | 1).kind == nil)
    }

    @Test func theGenerationWrapsWithinItsBitsNeverIntoTheKind() {
        let top = HTTPTag.generationMask
        #expect(HTTPTag.next(after: top - 1) == top)
        #expect(HTTPTag.next(after: top) == 0)
        for generation: UInt32 in [0, 1, 1 << 29, top, 1 << 30, 1 << 31, UInt32.max] {
            for slot in [0, 1, Int(UInt32.max)] {
                #expect(HTTPTag.connection(slot: slot, generation: generation).kind
                        == .connection(slot: slot, generation: generation & top))
            }
        }
    }
}

/// HTTPS connections share one budget of unsent ciphertext: a few fast connections keep
/// autotuning's buffers, a rack of them about 128 KiB each (never less).
@Suite struct UnsentLimitSpec {
    @Test func theBudgetIsSharedOutBetween128KiBAndNone() {
        #expect(HTTPLoop.unsentLimit(open: 1) == nil)
        #expect(HTTPLoop.unsentLimit(open: 64) == nil)  // 4 MiB each: autotuning's own maximum
        #expect(HTTPLoop.unsentLimit(open: 100) == Int32((256 << 20) / 100))
        #expect(HTTPLoop.unsentLimit(open: 2000) == Int32((256 << 20) / 2000))
        #expect(HTTPLoop.unsentLimit(open: 4000) == 128 << 10)
        #expect(HTTPLoop.unsentLimit(open: 20000) == 128 << 10)
        #expect(HTTPLoop.unsentLimit(open: 0) == nil)
    }
}
