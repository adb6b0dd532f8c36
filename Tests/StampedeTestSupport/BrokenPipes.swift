import Glibc

/// What the stampede binary does at its start (`Stampede.main`): a write to a connection its peer
/// closed fails with EPIPE instead of killing the process. sendfile and OpenSSL's writes take no
/// MSG_NOSIGNAL, so a test that serves HTTP, or speaks TLS, in its own process does the same
/// before it starts (`_ = brokenPipesIgnored`).
public let brokenPipesIgnored: Void = {
    signal(SIGPIPE, SIG_IGN)
}()
