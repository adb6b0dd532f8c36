"""Faults a provisioning network throws at a server: request floods, limits, privileges."""
import os
import pwd
import re
import resource
import selectors
import socket
import time
from pathlib import Path

import pytest

from tftpwire import request

SO_RCVBUFFORCE = 33


def flood(server, name, sockets=20, each=1000, listen=0.9):
    """Sends sockets × each RRQs as fast as Python can, then counts for `listen` seconds the
    replies by opcode and code; DATA once per transfer (its client's port and its server port:
    past 1,024 a worker, transfers share server ports), not its retransmissions.
    The same request again from one port is a duplicate the server drops while its transfer runs:
    requests that should each start a transfer come from ports of their own (each=1)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, sockets + 256)), hard))
    clients = []
    selector = selectors.DefaultSelector()
    for _ in range(sockets):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            s.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, (16 << 20) // max(1, sockets // 20))
        except PermissionError:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 << 20)
        s.bind(("127.0.0.1", 0))
        s.setblocking(False)
        selector.register(s, selectors.EVENT_READ)
        clients.append(s)
    rrq = request(name)
    for _ in range(each):
        for s in clients:
            s.sendto(rrq, ("127.0.0.1", server.port))
    replies = {}
    transfers = set()
    deadline = time.time() + listen
    while time.time() < deadline:
        for key, _ in selector.select(0.05):
            s = key.fileobj
            while True:
                try:
                    packet, sender = s.recvfrom(2048)
                except BlockingIOError:
                    break
                if packet[1] == 3:
                    transfer = (s.getsockname()[1], sender)
                    if transfer in transfers:
                        continue
                    transfers.add(transfer)
                key_ = (packet[1], packet[3]) if packet[1] == 5 else (packet[1], None)
                replies[key_] = replies.get(key_, 0) + 1
    selector.close()
    for s in clients:
        s.close()
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return replies


def test_a_burst_of_20000_requests_is_answered_every_one(serve, report):
    s = serve()
    # A name the kernel has not looked up yet is looked up on a disk thread, and the same request
    # again from its port meanwhile is that request (dropped as a duplicate, answered once): the
    # first one makes the name known, as a rack's first machine does.
    assert flood(s, "no-such-file", sockets=1, each=1) == {(5, 1): 1}
    started = time.time()
    replies = flood(s, "no-such-file")
    assert replies == {(5, 1): 20000}, replies
    report(f"flood of 20,000 RRQs on {s.backend}: 20,000 ERROR 1 answered within {time.time() - started:.2f} s")
    assert s.alive


def unanswered_in_log(server):
    """The requests the server's log says it left unanswered while busy."""
    return sum(int(re.search(r"busy: (\d+) requests unanswered", line).group(1))
               for line in server.log_text().splitlines() if "requests unanswered in" in line)


def test_over_the_limit_requests_go_unanswered_and_the_log_counts_them(serve):
    """A firmware that hears ERROR 0 fails its boot; one that hears nothing asks again later."""
    s = serve("--max-transfers", "2000")
    replies = flood(s, "one-mib.bin", sockets=5000, each=1)
    # 2,000 transfers start (DATA 1); the other 3,000 requests hear nothing.
    assert replies == {(3, None): 2000}, replies
    s.stop()
    assert unanswered_in_log(s) == 3000
    assert "Server busy, try again later" in s.log_text()
    assert "3000 requests unanswered while busy" in s.log_text()


def test_with_when_busy_error_over_the_limit_requests_get_error_0(serve):
    s = serve("--max-transfers", "2000", "--when-busy", "error")
    replies = flood(s, "one-mib.bin", sockets=5000, each=1)
    # 2,000 transfers start (DATA 1); the other 3,000 hear ERROR 0 "server busy" at once.
    assert replies == {(3, None): 2000, (5, 0): 3000}, replies
    assert "Server busy" in s.log_text()


def test_a_flood_of_the_same_request_from_a_port_is_one_transfer_per_port(serve):
    """Issue 21, defect 2: a repeat of a running transfer's request is a duplicate, whoever
    sends it how often: 1,000 of them from each of 20 ports make 20 transfers, not 20,000."""
    s = serve()
    replies = flood(s, "one-mib.bin")
    assert replies == {(3, None): 20}, replies
    s.stop()
    assert "19980 repeats of a running or ended transfer's request dropped" in s.log_text()


def proc_status(pid):
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    return {k: v.split() for k, v in fields.items()}


def test_chroot_and_user_are_in_effect_after_binding_port_69(serve, root):
    if os.geteuid() != 0:
        pytest.skip("LOUD SKIP: needs root to bind port 69, chroot and change user")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.bind(("127.0.0.2", 69))
        except OSError:
            pytest.skip("LOUD SKIP: 127.0.0.2:69 is taken")
    s = serve("-s", "-u", "nobody", host="127.0.0.2", port=69)
    status = proc_status(s.process.pid)
    nobody = pwd.getpwnam("nobody").pw_uid
    # Every uid (real, effective, saved, fs) is nobody's; no supplementary root group; no capabilities.
    assert status["Uid"] == [str(nobody)] * 4
    assert "0" not in status["Groups"]
    assert int(status["CapEff"][0], 16) == 0
    # The process's root directory is the served directory.
    assert os.readlink(f"/proc/{s.process.pid}/root") == str(root)
    # ...and it still serves from the port it bound as root.
    from tftpwire import RawClient
    assert RawClient(s).download("hello.txt") == b"hello, rack\n"


def storm_json(server, root, clients):
    import json
    from conftest import BINARY, run
    r = run([str(BINARY), "storm", f"127.0.0.1:{server.port}", "one-mib.bin", "--clients", str(clients),
             "--blksize", "1468", "--verify", str(root / "one-mib.bin"), "--json"], timeout=120)
    return json.loads(r.stdout)


def test_out_of_file_descriptors_reads_share_sockets_and_every_client_is_served(serve, root, report):
    """atftpd dies at 1,024 sockets; with a hard limit of 64 descriptors Stampede gives 16
    transfers per worker sockets of their own and shares a few among the rest: 200 clients at
    once are all served, and none has to retry for want of a socket."""
    s = serve(prefix=["prlimit", "--nofile=64:64"])
    crowded = storm_json(s, root, 200)
    assert crowded["ok"] == 200, crowded["failures"]
    assert s.fd_count() <= 64
    s.stop()
    assert "further reads share 4 transfer sockets" in s.log_text()
    report(f"fd limit 64 ({s.backend}): 200 of 200 served at once through shared sockets, "
           f"p99 {crowded['p99_ms'] / 1000:.1f} s")


def test_out_of_file_descriptors_with_when_busy_error_nothing_is_refused(serve, root):
    # Where a full descriptor table used to answer ERROR 0, reads share sockets instead.
    s = serve("--when-busy", "error", prefix=["prlimit", "--nofile=64:64"])
    crowded = storm_json(s, root, 200)
    assert crowded["ok"] == 200, crowded["failures"]
    after = storm_json(s, root, 30)
    assert after["ok"] == 30, after
    assert s.alive


def test_a_memory_budget_smaller_than_the_files_streams_them(serve, root):
    import json
    from conftest import BINARY, run
    (root / "big.img").write_bytes(os.urandom(3 << 20))
    (root / "big.img").chmod(0o644)
    s = serve("--cache-size", "1")
    r = run([str(BINARY), "storm", f"127.0.0.1:{s.port}", "big.img", "--clients", "20", "--blksize", "1468",
             "--windowsize", "8", "--verify", str(root / "big.img"), "--json"], timeout=120)
    result = json.loads(r.stdout)
    assert r.returncode == 0 and result["ok"] == 20, result
    assert s.alive
