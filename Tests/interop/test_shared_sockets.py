"""More reads than descriptors: beyond --max-transfer-sockets (by default 1,024 a worker, fewer
when the open file limit less a reserve holds fewer) reads share a worker's pool of transfer
sockets. Real clients must not notice, a stranger on a shared port gets ERROR 5, and a server held
to a few hundred descriptors serves a thousand machines at once."""
import json
import threading
import time

from conftest import BINARY, run
from tftpwire import RawClient, ack, request

SHARING = "further reads share"


def fetch_with_every_client(port, name, out_dir):
    """The file as curl, tftp-hpa, atftp and busybox each read it."""
    # curl 7.88 rejects an OACK with tsize 0 whoever the server (see test_clients.py).
    extra = ["--tftp-no-options"] if name == "empty.bin" else []
    commands = {
        "curl": ["curl", "-sS", *extra, "-o", str(out_dir / "curl"), f"tftp://127.0.0.1:{port}/{name}"],
        "tftp-hpa": ["tftp", "127.0.0.1", str(port), "-m", "binary", "-c", "get", name, str(out_dir / "tftp-hpa")],
        "atftp": ["atftp", "-g", "-r", name, "-l", str(out_dir / "atftp"), "127.0.0.1", str(port)],
        "busybox": ["busybox", "tftp", "-g", "-r", name, "-l", str(out_dir / "busybox"), "127.0.0.1", str(port)],
    }
    results = {}
    for client, argv in commands.items():
        r = run(argv, timeout=60)
        assert r.returncode == 0, f"{client}: {r.stderr.decode(errors='replace')}"
        results[client] = (out_dir / client).read_bytes()
    return results


def test_real_clients_read_through_shared_sockets(serve, root, tmp_path):
    s = serve("--max-transfer-sockets", "0")
    for name in ("one-mib.bin", "hello.txt", "exact-512.bin", "empty.bin"):
        for client, got in fetch_with_every_client(s.port, name, tmp_path).items():
            assert got == (root / name).read_bytes(), f"{client} read {name} wrong"
    assert SHARING in s.log_text()


def test_a_stranger_on_a_shared_port_gets_error_5_and_the_transfer_goes_on(serve, root):
    s = serve("--max-transfer-sockets", "0")
    client = RawClient(s)
    reply, tid = client.exchange(request("one-mib.bin", options=(("blksize", "1024"),)))
    assert reply[0] == "OACK"
    stranger = RawClient(s)
    stranger.send(ack(0), tid)
    answer, sender = stranger.receive()
    assert answer == ("ERROR", (5, "Unknown transfer ID")) and sender == tid
    # The client's transfer was not disturbed: it reads the whole file from the same port.
    client.send(ack(0), tid)
    out = bytearray()
    while True:
        reply, sender = client.receive()
        assert sender == tid and reply[0] == "DATA", reply
        block, payload = reply[1]
        if block == (len(out) // 1024 + 1) & 0xFFFF:
            out += payload
        client.send(ack(block), tid)
        if len(payload) < 1024:
            break
    assert bytes(out) == (root / "one-mib.bin").read_bytes()
    for c in (client, stranger):
        c.close()


def test_a_server_with_few_descriptors_serves_a_thousand_machines_at_once(serve, root, report):
    # The kernel refuses the server's 301st descriptor; a thousand transfers run at once (each
    # client holds its first ACK for a second).
    s = serve(prefix=("prlimit", "--nofile=300:300"))
    idle = s.idle_fd_count()
    peak = [idle]
    done = threading.Event()

    def sample():
        while not done.is_set():
            try:
                peak[0] = max(peak[0], s.fd_count())
            except FileNotFoundError:
                return
            time.sleep(0.05)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        r = run([str(BINARY), "storm", f"127.0.0.1:{s.port}", "one-mib.bin", "--clients", "1000", "--blksize", "1468",
                 "--hold", "1", "--verify", str(root / "one-mib.bin"), "--json"], timeout=180)
    finally:
        done.set()
        sampler.join()
    result = json.loads(r.stdout)
    assert r.returncode == 0, r.stderr.decode(errors="replace") + s.log_text()[-2000:]
    assert result["ok"] == 1000 and result["peak_active"] == 1000
    assert peak[0] <= 300
    assert SHARING in s.log_text()
    # The shared sockets close with their last transfer: back to the idle count.
    deadline = time.time() + 10
    while s.fd_count() != idle and time.time() < deadline:
        time.sleep(0.1)
    assert s.fd_count() == idle
    report(f"1,000 machines at once on a server held to 300 descriptors ({s.backend}): peak {peak[0]} fds, "
           f"p99 {result['p99_ms']:.0f} ms")


def test_uploads_never_share_they_are_refused_as_busy(serve, root):
    root.chmod(0o777)  # the server writes as nobody
    s = serve("--max-transfer-sockets", "0", "-c", "--when-busy", "error")
    client = RawClient(s)
    reply, _ = client.exchange(request("new.bin", write=True))
    assert reply[0] == "ERROR" and reply[1][0] == 0 and "out of sockets" in reply[1][1], reply
    client.close()
