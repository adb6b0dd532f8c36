"""Every resend counts against the patience, whatever provoked it (issue 21, defect 12): a peer
that keeps sending what cannot be used is given up as a silent one is, by the server and by
`stampede get` and `storm`, never kept alive for ever."""
import socket
import threading
import time

from conftest import BINARY, run, upload_temporaries
from tftpwire import RawClient, data, request


def test_an_upload_fed_wrong_block_numbers_is_given_up_and_leaves_nothing(serve, root):
    root.chmod(0o777)
    s = serve("-c", "-T", "200000")
    client = RawClient(s, timeout=0.05)
    reply, tid = client.exchange(request("pinned.bin", write=True, options=(("tsize", "100000"),)))
    assert reply[0] == "OACK", reply
    # Block 7 where 1 is due, every 50 ms: each re-ACK counted used to move the deadline on.
    started = time.time()
    while not s.log_lines('WRQ 127.0.0.1', timeout=0) and time.time() - started < 30:
        client.send(data(7, b"x" * 512), tid)
        client.receive()
    given_up = time.time() - started
    lines = s.log_lines('WRQ 127.0.0.1', timeout=0)
    assert lines and lines[0].endswith("timed out"), lines
    assert given_up < 10, given_up
    # The slot, the temporary file and the tsize reservation went with it.
    assert upload_temporaries(root) == []
    client.close()


class ResendingServer:
    """A fake server that sends DATA 1 of a two-block file and then, whatever the client says,
    sends DATA 1 again every 300 ms: a block the client has and cannot use."""

    def __init__(self):
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.listener.bind(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.serve)
        self.thread.start()

    def serve(self):
        self.listener.settimeout(5)
        try:
            _, client = self.listener.recvfrom(2048)
        except socket.timeout:
            return
        while not self.stop.wait(0.3):
            self.listener.sendto(data(1, b"x" * 512), client)

    def close(self):
        self.stop.set()
        self.thread.join()
        self.listener.close()


def test_get_gives_up_a_server_that_resends_a_block_it_cannot_use(tmp_path):
    server = ResendingServer()
    try:
        started = time.time()
        r = run([str(BINARY), "get", f"127.0.0.1:{server.port}", "f", str(tmp_path / "out"), "--no-tsize",
                 "--retries", "2"], timeout=60)
        elapsed = time.time() - started
    finally:
        server.close()
    assert r.returncode == 1 and b"timed out" in r.stderr, r.stderr
    assert elapsed < 30, elapsed
    assert not (tmp_path / "out").exists()


def test_storm_gives_up_a_server_that_resends_a_block_it_cannot_use():
    server = ResendingServer()
    try:
        r = run([str(BINARY), "storm", f"127.0.0.1:{server.port}", "f", "--clients", "1", "--no-tsize", "--retries", "3",
                 "--retransmit", "500", "--json"], timeout=60)
    finally:
        server.close()
    assert r.returncode == 1 and b'"failed": 1' in r.stdout, r.stdout
