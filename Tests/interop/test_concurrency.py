"""1,000 concurrent downloads of one 1 MiB file: all complete, every byte right."""
import loadclient


def test_a_thousand_concurrent_downloads_of_one_file(serve, root, report):
    s = serve("--verbosity", "0")
    expected = (root / "one-mib.bin").read_bytes()
    ok, failures, seconds = loadclient.run((s.host, s.port), "one-mib.bin", 1000, expected, blksize=1468)
    rss = s.rss_kib()
    report(f"1000 x 1 MiB lockstep blksize 1468: {ok} ok in {seconds:.1f}s; server peak RSS {rss / 1024:.1f} MiB")
    assert failures == []
    assert ok == 1000
    # One cached image serves them all: far less than 1000 copies of the file.
    assert rss < 200 * 1024
