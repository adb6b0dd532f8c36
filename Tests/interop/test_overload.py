"""Overload and clients that vanish: the server survives any load and any error path, serves every
transfer it started byte for byte, and gives back every socket."""
import json
import os
import select
import socket
import subprocess
import time

from conftest import BINARY
from test_scale import settled_fd_count
from tftpwire import ack, decode, request


def storms(server, name, clients, expected, *args, count=2):
    """`count` storm processes started together, each with `clients` clients, every byte verified."""
    processes = [subprocess.Popen([str(BINARY), "storm", f"127.0.0.1:{server.port}", name, "--clients", str(clients),
                                   "--verify", str(expected), "--json", *args],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(count)]
    results = []
    for p in processes:
        out, err = p.communicate(timeout=300)
        assert out, err
        results.append(json.loads(out))
    return results


def test_two_storms_at_once_leave_the_server_standing(serve, root, report):
    """Issue 11's crash at a size CI affords: two load processes started together, 256 KiB each with
    blksize 1468 and windowsize 4, against the default command line (-s when root). The io_uring
    engine used to release a slot twice here and corrupt its heap (5 of 7 runs of this size)."""
    (root / "f.bin").write_bytes(os.urandom(256 << 10))
    (root / "f.bin").chmod(0o644)
    s = serve(*(["-s"] if os.geteuid() == 0 else []))
    idle = s.idle_fd_count()
    started = time.time()
    results = storms(s, "f.bin", 4000, root / "f.bin", "--blksize", "1468", "--windowsize", "4")
    assert s.alive
    ok = sum(r["ok"] for r in results)
    assert all(r["failures"] == {} for r in results), [r["failures"] for r in results]
    assert ok == 8000
    assert settled_fd_count(s, idle, seconds=10) == idle
    assert "invariant" not in s.log_text()
    report(f"two storms x 4,000 x 256 KiB on {s.backend}: {ok} of 8,000 byte-exact in {time.time() - started:.1f} s, "
           f"fds back to {idle}")


def vanishing_clients(server, name, count, blocks, deadline=60, source="127.0.0.1"):
    """`count` clients ask for `name` (blksize 1468, windowsize 16) at once, each take `blocks`
    blocks, then close their sockets without a word: the server's next DATA draws ECONNREFUSED.
    Returns how many vanished that way. `source`: their address (a round of its own per address:
    a port a vanished client freed, taken by the next round with the same request, would be the
    same client asking again while its transfer still runs, a duplicate)."""
    pending = {}
    for _ in range(count):
        c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        c.bind((source, 0))
        c.setblocking(False)
        c.sendto(request(name, options=(("blksize", 1468), ("windowsize", 16))), ("127.0.0.1", server.port))
        pending[c] = 0
    vanished = 0
    end = time.time() + deadline
    while pending and time.time() < end:
        ready, _, _ = select.select(list(pending), [], [], 0.5)
        for c in ready:
            try:
                packet, tid = c.recvfrom(2048)
            except BlockingIOError:
                continue
            kind, fields = decode(packet)
            if kind == "OACK":
                c.sendto(ack(0), tid)
                continue
            assert kind == "DATA", (kind, fields)
            pending[c] += 1
            if pending[c] >= blocks:
                c.close()
                del pending[c]
                vanished += 1
            elif pending[c] % 16 == 0:
                c.sendto(ack(fields[0]), tid)
    for c in pending:
        c.close()
    return vanished


def test_clients_that_vanish_while_large_windows_fill_the_send_arena(serve, root, network_namespace, report):
    """Issue 11 item 2 end to end: half the clients close their sockets mid-transfer (ECONNREFUSED
    on the server's next DATA) while the other half stream windows of 32 x 64 KiB blocks read from
    disk (streamed: --cache-file-limit 1, so every block is copied into the engine's 8 MiB send
    arena and fills it, flushing sends mid-turn). In a namespace of its own where ICMP is not
    rate-limited, so that every vanished client is found by its ECONNREFUSED. Every streamed
    transfer is byte-exact and the server's descriptors return to idle."""
    (root / "big.img").write_bytes(os.urandom(6 << 20))
    (root / "big.img").chmod(0o644)
    namespace = network_namespace(icmp_unlimited=True)
    s = serve("--cache-file-limit", "1", prefix=namespace.inside)
    idle = s.idle_fd_count()
    streamers = subprocess.Popen([*namespace.inside, str(BINARY), "storm", f"127.0.0.1:{s.port}", "big.img",
                                  "--clients", "6", "--blksize", "65464", "--windowsize", "32",
                                  "--verify", str(root / "big.img"), "--json"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    vanished = 0
    with namespace.sockets():
        for round in range(3):
            vanished += vanishing_clients(s, "one-mib.bin", 200, blocks=40, source=f"127.0.{round + 2}.1")
    out, err = streamers.communicate(timeout=300)
    result = json.loads(out)
    assert vanished == 600
    assert result["ok"] == 6 and result["failed"] == 0, result
    assert s.alive
    assert settled_fd_count(s, idle, seconds=10) == idle
    endings = [line.rsplit(": ", 1)[1] for line in s.log_text().splitlines() if '"one-mib.bin"' in line]
    assert len(endings) == 600 and set(endings) == {"client port unreachable"}, set(endings)
    report(f"{s.backend}: 600 clients vanished mid-transfer (600 ECONNREFUSED) while 6 streamed 6 MiB in windows "
           f"of 32 x 64 KiB ({result['seconds']:.1f} s, {result['retransmits']} storm resends): all 6 byte-exact, "
           f"fds back to {idle}")
