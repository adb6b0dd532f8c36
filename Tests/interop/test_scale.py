"""5,000 concurrent downloads through the io_uring backend, two rounds: every byte right,
no growth in the server's file descriptors or memory (the second round runs on what the first left)."""
import os
import resource
import time

import pytest

import loadclient
from conftest import Server


def settled_fd_count(server, target, seconds=3.0):
    """The server's fd count once its last transfers have taken their final ACKs."""
    deadline = time.time() + seconds
    while server.fd_count() != target and time.time() < deadline:
        time.sleep(0.05)
    return server.fd_count()


def test_five_thousand_concurrent_downloads_two_rounds(root, binary, report):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < 6000:
        pytest.skip(f"LOUD SKIP: RLIMIT_NOFILE hard limit {hard} is below 6,000 client sockets")
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    # 256 KiB each (45 windows of 4 at blksize 1468): 5,000 transfers still run at once, and the
    # suite does not wait for 10 GB to cross a Python client.
    (root / "quarter-mib.bin").write_bytes(os.urandom(256 << 10))
    (root / "quarter-mib.bin").chmod(0o644)
    s = Server(root, ("--verbosity", "0"), backend="uring")
    try:
        expected = (root / "quarter-mib.bin").read_bytes()
        idle_fds = s.idle_fd_count()
        rounds = []
        for round_number in range(2):
            ok, failures, seconds = loadclient.run((s.host, s.port), "quarter-mib.bin", 5000, expected,
                                                   blksize=1468, windowsize=4, deadline=300)
            assert failures == [], f"round {round_number}: {len(failures)} failed, e.g. {failures[:3]}"
            assert ok == 5000
            rounds.append((seconds, settled_fd_count(s, idle_fds), s.rss_kib()))
        for seconds, fds, rss in rounds:
            report(f"uring 5000 x 256 KiB (blksize 1468, windowsize 4): {seconds:.1f}s, "
                   f"server fds after {fds} (idle {idle_fds}), peak RSS {rss / 1024:.1f} MiB")
        # Every transfer socket is closed after each round...
        assert all(fds == idle_fds for _, fds, _ in rounds)
        # ...and memory reached its high-water mark in the first round.
        assert rounds[1][2] <= rounds[0][2] * 1.05 + 1024
    finally:
        s.stop()
