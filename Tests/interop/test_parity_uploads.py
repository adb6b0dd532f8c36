"""Parity of uploads' bounds with tftp-hpa 7.3 (issue 22): `--max-upload`/`--max-size` (a tsize
above it refused at once, data past it or past the upload's own tsize ending the upload with
ERROR 2, nothing of it left behind; 0 is --read-only) and the sizes it takes, played against
Debian unstable's in.tftpd and Stampede with the same flags."""
import os
import time

import pytest

from parity import REQUIRES_PEER, compared, outcome, run_both, start_both, serves

pytestmark = REQUIRES_PEER

# (name, tsize or None, bytes sent)
UPLOADS = [("a", None, 1000), ("b", None, 1024), ("c", None, 1025), ("d", None, 2000), ("e", 1024, 1024),
           ("f", 1025, 1025), ("g", 1024, 1500), ("h", 500, 700), ("i", 500, 300), ("k", 1024, 1000),
           ("l", 2048, 1000), ("m", 600, 600)]


def upload_outcomes(port, root):
    """What each upload got, and what is left under its name once the server is done with it."""
    got = {}
    for name, tsize, size in UPLOADS:
        options = [("tsize", str(tsize))] if tsize is not None else []
        got[name] = compared(outcome(port, name, True, "octet", options, upload=os.urandom(size)))[:2]
    time.sleep(0.5)  # 7.3's process removes a failed upload's file as it exits
    return [(name, got[name], (root / name).stat().st_size if (root / name).exists() else None) for name in got]


@pytest.mark.parametrize("flags", [[], ["--max-upload", "1k"], ["--max-size", "1K"], ["--max-upload", "1024"],
                                   ["--max-upload", "0"]], ids=lambda f: " ".join(f) or "no limit")
def test_uploads_are_bounded_as_7_3_bounds_them(tmp_path, flags):
    started = start_both(["-L", "-s", "-c", "-u", "root", *flags], tmp_path)
    try:
        assert all(serves(port) for _, port, _ in started)
        (_, theirs_port, theirs_root), (_, ours_port, ours_root) = started
        theirs = upload_outcomes(theirs_port, theirs_root)
        ours = upload_outcomes(ours_port, ours_root)
        assert ours == theirs
        refused = [name for name, got, _ in ours if got[0] == "ERROR"]
        if not flags:
            assert refused == ["g", "h"], ours  # more than their own tsize
        elif flags[1] == "0":
            assert len(refused) == len(UPLOADS)
        else:
            assert refused == ["c", "d", "f", "g", "h", "l"], ours
        assert all(size is None for name, _, size in ours if name in refused), ours
    finally:
        for process, _, _ in started:
            process.terminate()
            process.wait(timeout=10)


def test_an_upload_that_runs_over_leaves_the_file_it_would_replace(tmp_path):
    """A deliberate difference: 7.3 writes into the file and removes it when the upload runs over;
    Stampede writes beside it and leaves it as it was (docs/drop-in.md)."""
    started = start_both(["-L", "-s", "-c", "-u", "root", "--max-upload", "1k"], tmp_path)
    try:
        assert all(serves(port) for _, port, _ in started)
        left = []
        for _, port, root in started:
            (root / "hello.txt").chmod(0o666)
            got = compared(outcome(port, "hello.txt", True, "octet", [], upload=os.urandom(5000)))
            time.sleep(0.5)
            left.append((got[:2], (root / "hello.txt").read_bytes() if (root / "hello.txt").exists() else None))
        assert left == [(("ERROR", 2), None), (("ERROR", 2), b"hello, rack\n")], left
    finally:
        for process, _, _ in started:
            process.terminate()
            process.wait(timeout=10)


@pytest.mark.parametrize("size,status", [("1.5M", 64), ("-1", 64), ("abc", 64), ("10x", 64), ("0x10", 64),
                                         ("18446744073709551616", 64), ("16E", 64)])
def test_bad_sizes_are_usage_errors_in_both(tmp_path, size, status):
    theirs, ours = run_both(["-L", "-a", "127.0.0.1:0", "-u", "root", "--max-upload", size, tmp_path], tmp_path, timeout=3)
    assert theirs.returncode == ours.returncode == status, (theirs, ours)


def test_a_tsize_of_0_bounds_nothing_where_7_3_takes_it_as_0_bytes(tmp_path):
    """A deliberate difference: curl announces tsize 0 for an upload whose size it does not know
    (`curl -T -`); 7.3 ends such an upload at its first byte, Stampede takes it."""
    started = start_both(["-L", "-s", "-c", "-u", "root"], tmp_path)
    try:
        assert all(serves(port) for _, port, _ in started)
        got = [compared(outcome(port, "unknown-size", True, "octet", [("tsize", "0")], upload=os.urandom(1500)))[:2]
               for _, port, _ in started]
        assert got == [("ERROR", 2), ("WROTE", 1500)], got
    finally:
        for process, _, _ in started:
            process.terminate()
            process.wait(timeout=10)
