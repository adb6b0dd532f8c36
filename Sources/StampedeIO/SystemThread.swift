import CStampedeSys
import Glibc

/// A thread of the system's (pthread): each worker, and each share of a storm, runs on one. The
/// body runs to its end; `join` waits for that, once.
public struct SystemThread: Sendable {
    private let id: pthread_t

    /// Starts `body` on a new thread named `name` (what `top -H` and `ps -L` show, and
    /// /proc/PID/task/TID/comm: at most 15 bytes, the rest cut).
    public init(named name: String, _ body: @escaping @Sendable () -> Void) {
        final class Body {
            let run: @Sendable () -> Void
            init(_ run: @escaping @Sendable () -> Void) { self.run = run }
        }
        var id = pthread_t()
        let name = String(decoding: name.utf8.prefix(15), as: UTF8.self)
        let box = Unmanaged.passRetained(Body {
            _ = stampede_name_thread(name)
            body()
        })
        let result = pthread_create(&id, nil, { raw in
            Unmanaged<Body>.fromOpaque(raw!).takeRetainedValue().run()
            return nil
        }, box.toOpaque())
        // Only EAGAIN (no threads left) or a broken attribute: the process cannot run as asked.
        precondition(result == 0, "pthread_create: \(Errno(result))")
        self.id = id
    }

    /// Waits for the body to end.
    public func join() {
        pthread_join(id, nil)
    }
}
