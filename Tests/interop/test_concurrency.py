"""1,000 concurrent downloads of one 256 KiB file: all complete, every byte right."""
import os

import loadclient


def test_a_thousand_concurrent_downloads_of_one_file(serve, root, report):
    expected = os.urandom(256 << 10)
    (root / "quarter-mib.bin").write_bytes(expected)
    (root / "quarter-mib.bin").chmod(0o644)
    s = serve("--verbosity", "0")
    ok, failures, seconds = loadclient.run((s.host, s.port), "quarter-mib.bin", 1000, expected, blksize=1468)
    rss = s.rss_kib()
    report(f"1000 x 256 KiB lockstep blksize 1468: {ok} ok in {seconds:.1f}s; server peak RSS {rss / 1024:.1f} MiB")
    assert failures == []
    assert ok == 1000
    # One cached image serves them all: far less than 1000 copies of the file (250 MiB).
    assert rss < 128 * 1024
