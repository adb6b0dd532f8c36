"""A lossy network: server and clients in a network namespace made for the test, where an
nftables rule drops N % of all UDP (the kernel here has no netem). Every transfer must still
complete with every byte right; the report gives the retransmissions and the slowdown."""
import json
import os
import subprocess

import pytest

from conftest import BINARY

SIZE = 128 << 10
CLIENTS = 500


def storm(inside, server, *args):
    r = subprocess.run([*inside, str(BINARY), "storm", f"127.0.0.1:{server.port}", "boot.img", "--clients", str(CLIENTS),
                        "--blksize", "1468", "--verify", str(server.root / "boot.img"), "--json", *args],
                       capture_output=True, text=True, timeout=300)
    return r.returncode, json.loads(r.stdout), r.stderr


@pytest.mark.parametrize("window", [1, 16])
@pytest.mark.parametrize("loss", [1, 5])
def test_every_transfer_completes_through_loss(serve, root, network_namespace, report, loss, window):
    (root / "boot.img").write_bytes(os.urandom(SIZE))
    (root / "boot.img").chmod(0o644)
    options = ["--windowsize", str(window)] if window > 1 else []
    clean = network_namespace().inside
    _, baseline, err = storm(clean, serve(prefix=clean), *options)
    assert baseline["ok"] == CLIENTS, err
    lossy = network_namespace(loss).inside
    s = serve(prefix=lossy)
    code, result, err = storm(lossy, s, *options)
    assert code == 0 and result["ok"] == CLIENTS and result["failed"] == 0, (result, err)
    assert result["bytes"] == CLIENTS * SIZE
    # Loss happened and was repaired (our ACK resends, the server's DATA resends).
    assert result["retransmits"] + result["duplicates"] > 0
    report(f"{loss}% loss, {CLIENTS} x {SIZE >> 10} KiB, window {window}, {s.backend}: "
           f"{result['seconds']:.1f} s vs {baseline['seconds']:.2f} s without loss "
           f"(x{result['seconds'] / baseline['seconds']:.0f}), p99 {result['p99_ms'] / 1000:.1f} s, "
           f"{result['retransmits']} client resends, {result['duplicates']} duplicate DATA")


def test_the_adaptive_timeout_repairs_loss_faster_than_a_fixed_second(serve, root, network_namespace, report):
    """1 % loss, lockstep: a lost DATA costs the fixed timer a second; the adaptive one, a few
    round trips (at least 100 ms). A lost ACK is the client's to resend either way (1 s here)."""
    (root / "boot.img").write_bytes(os.urandom(SIZE))
    (root / "boot.img").chmod(0o644)
    results = {}
    for mode, args in (("fixed", ["--fixed-timeout"]), ("adaptive", [])):
        inside = network_namespace(1).inside
        code, result, err = storm(inside, serve(*args, prefix=inside))
        assert code == 0 and result["ok"] == CLIENTS, (result, err)
        results[mode] = result
    fixed, adaptive = results["fixed"], results["adaptive"]
    report(f"1% loss, {CLIENTS} x {SIZE >> 10} KiB lockstep: fixed 1 s timeout {fixed['seconds']:.1f} s "
           f"(p50 {fixed['p50_ms'] / 1000:.2f} s), adaptive {adaptive['seconds']:.1f} s (p50 {adaptive['p50_ms'] / 1000:.2f} s)")
    assert adaptive["p50_ms"] < fixed["p50_ms"]
