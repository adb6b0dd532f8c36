import Glibc

/// A thread of the system's (pthread): each worker, and each share of a storm, runs on one. The
/// body runs to its end; `join` waits for that, once.
public struct SystemThread: Sendable {
    private let id: pthread_t

    /// Starts `body` on a new thread.
    public init(_ body: @escaping @Sendable () -> Void) {
        final class Body {
            let run: @Sendable () -> Void
            init(_ run: @escaping @Sendable () -> Void) { self.run = run }
        }
        var id = pthread_t()
        let box = Unmanaged.passRetained(Body(body))
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
