"""The file cache as a client sees it: consistent snapshots, streaming of large files."""
import os

import pytest

import loadclient
from conftest import run
from tftpwire import RawClient, ack, request


def read_lockstep(c, tid, first_reply, blksize=512):
    out = bytearray(first_reply[1][1])
    block = first_reply[1][0]
    c.send(ack(block), tid)
    while len(first_reply[1][1]) == blksize:
        reply, _ = c.receive()
        if reply[1][0] != (block + 1) & 0xFFFF:
            continue
        block += 1
        out += reply[1][1]
        c.send(ack(block), tid)
        if len(reply[1][1]) < blksize:
            break
    return bytes(out)


@pytest.mark.parametrize("how", ["rename", "rewrite-in-place", "truncate"])
def test_a_file_replaced_mid_transfer_never_yields_a_mixed_download(serve, root, how):
    original = (root / "one-mib.bin").read_bytes()
    s = serve()
    c = RawClient(s)
    first, tid = c.exchange(request("one-mib.bin"))
    assert first[0] == "DATA"
    replacement = os.urandom(1 << 19)
    if how == "rename":
        (root / "new.bin").write_bytes(replacement)
        (root / "new.bin").chmod(0o644)
        os.rename(root / "new.bin", root / "one-mib.bin")
    elif how == "rewrite-in-place":
        with open(root / "one-mib.bin", "r+b") as f:
            f.write(replacement)
    else:
        os.truncate(root / "one-mib.bin", 1000)
    assert read_lockstep(c, tid, first) == original
    # A new request sees the new version.
    now = (root / "one-mib.bin").read_bytes()
    assert RawClient(s).download("one-mib.bin") == now


def test_files_over_the_cache_limit_are_streamed_correctly(serve, root, report):
    big = root / "three-mib.bin"
    big.write_bytes(os.urandom(3 << 20))
    big.chmod(0o644)
    s = serve("--cache-file-limit", "1")
    expected = big.read_bytes()
    for extra in ([], ["--option", "blksize 1468"], ["--option", "blksize 1468", "--option", "windowsize 16"]):
        out = root.parent / "out"
        r = run(["atftp", *extra, "-g", "-r", "three-mib.bin", "-l", str(out), "127.0.0.1", str(s.port)])
        assert r.returncode == 0, r.stderr
        assert out.read_bytes() == expected
    ok, failures, seconds = loadclient.run((s.host, s.port), "three-mib.bin", 50, expected, blksize=1468, windowsize=8)
    assert failures == [] and ok == 50
    report(f"streamed (uncached) 50 x 3 MiB, blksize 1468, windowsize 8: {seconds:.1f}s")


def test_several_addresses_ipv4_and_ipv6(serve, root, tmp_path):
    from conftest import free_udp_port
    port = free_udp_port()
    s = serve("-a", f"[::1]:{port}")
    # The fixture's own -a is 127.0.0.1:<its port>; the extra one is IPv6.
    assert f"[::1]:{port}" in s.log_text() and f"backend {s.backend}" in s.log_text()
    out = tmp_path / "o6"
    r = run(["curl", "-sS", "-o", str(out), f"tftp://[::1]:{port}/hello.txt"])
    assert r.returncode == 0, r.stderr
    assert out.read_bytes() == b"hello, rack\n"
    assert RawClient(s).download("hello.txt") == b"hello, rack\n"
