import StampedeBase
import StampedeFiles
import StampedeHTTPWire
import StampedeServing

/// What an HTTP loop serves (`HTTPLoop`): the loop reads heads and writes answers, its responder
/// decides the answers: the files of the root (`FileResponder`), or the metrics (StampedeMetrics'
/// `MetricsResponder`). A responder belongs to its loop and runs on its thread.
protocol HTTPResponder: AnyObject {
    /// Answers `head` on `connection` (whose state says whether the answer is its last): sets
    /// `connection.response` (and lends it the file, `connection.lend`) and returns true, or returns false when the
    /// answer waits for a file a disk thread reads (the connection's state then holds the head:
    /// `.waitingForFile`), to be made by `resume` when it is read. `started`: when the head's
    /// first byte came.
    func answer(_ head: RequestHead, on connection: Connection, started: Nanoseconds) -> Bool

    /// Answers a head that waited for its file, now that the disk thread has read it (or not);
    /// `reads`: the reads of it before this one. Returns false if it must wait again.
    func resume(_ head: RequestHead, started: Nanoseconds, reads: Int, on connection: Connection, after outcome: LoadOutcome) -> Bool

    /// The answer to a head that could not be read or came too slowly: its status, with a short
    /// text saying it unless the request was a HEAD (`withBody`).
    func refuse(_ status: Status, _ reason: String, withBody: Bool, on connection: Connection, started: Nanoseconds)

    /// An answer ended: written whole, or abandoned (`abandoned`: why, and how it counts).
    func ended(_ response: Response, on connection: Connection, abandoned: (why: String, result: WorkerMetrics.Result)?)

    /// Where this loop hears of the reads its answers wait for (nil: none ever waits).
    var loads: LoadMailbox? { get }

    /// Has `file`'s bytes from `offset` read ahead on a disk thread for `connection`'s answer
    /// (`FileService.readAhead`); the loop hears `.readAhead(through:)` under the connection's tag.
    /// False when none was asked (one is under way, or the file is read to its end).
    func readAhead(_ file: StreamedFile, from offset: Int, for connection: Connection) -> Bool
}
