"""Duplicated and reordered datagrams (both directions, through tests' own relay): every client
still gets every byte, and no Sorcerer's Apprentice storm of resends follows."""
import os

import pytest

from conftest import BINARY, run
from relay import Relay


@pytest.mark.parametrize("windowsize", [1, 8])
def test_stampede_get_through_duplication_and_reordering(serve, root, tmp_path, report, windowsize):
    s = serve()
    relay = Relay(s.port, duplicate=0.1, reorder=0.1, seed=windowsize)
    try:
        out = tmp_path / "out.bin"
        r = run([str(BINARY), "get", f"127.0.0.1:{relay.port}", "one-mib.bin", str(out), "--blksize", "1468",
                 "--windowsize", str(windowsize)], timeout=120)
        assert r.returncode == 0, r.stderr
        assert out.read_bytes() == (root / "one-mib.bin").read_bytes()
        # The client is done when it has sent its last ACK; the relay may still be holding it.
        lines = s.log_lines('"one-mib.bin"')
    finally:
        relay.close()
    assert relay.counts["duplicated"] > 50 and relay.counts["reordered"] > 50
    assert lines, s.log_text()
    line = lines[-1]
    resent = int(line.split("retransmits=")[1].split(":")[0])
    # Duplicate ACKs never double the stream: resends stay a small fraction of the 715 blocks.
    assert resent < 100, line
    report(f"1 MiB through 10% duplication + 10% reordering, window {windowsize} ({s.backend}): "
           f"{relay.counts['duplicated']} duplicated, {relay.counts['reordered']} reordered, {resent} server resends")


def test_tftp_hpa_client_through_duplication_and_reordering(serve, root, tmp_path):
    """tftp-hpa's client, lockstep at 512 bytes: 512 blocks (256 KiB) through the relay, each a
    chance of a duplicate or a reordering; every byte must arrive."""
    (root / "quarter-mib.bin").write_bytes(os.urandom(256 << 10))
    (root / "quarter-mib.bin").chmod(0o644)
    s = serve()
    relay = Relay(s.port, duplicate=0.1, reorder=0.1, seed=7)
    try:
        out = tmp_path / "hpa.bin"
        r = run(["tftp", "-m", "binary", "127.0.0.1", str(relay.port), "-c", "get", "quarter-mib.bin", str(out)], timeout=120)
        assert r.returncode == 0, r.stderr
        assert out.read_bytes() == (root / "quarter-mib.bin").read_bytes()
    finally:
        relay.close()
