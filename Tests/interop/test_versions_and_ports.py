"""What an operator trusts on the day the server is installed: a file rewritten in place while it is
streamed is never sent as a mix of two versions (TFTP and HTTP), one server per address (a
second Stampede, or anything else there, fails its start as in.tftpd's does), and a server out of
descriptors backs off instead of spinning."""
import os
import socket
import subprocess
import time

from conftest import Server, free_tcp_port, free_udp_port, run
from test_http import web  # noqa: F401 (a fixture)
from tftpwire import RawClient, ack, request


def rewrite_in_place(path, data):
    """Writes `data` over the file's bytes (same inode, same size: what `dd conv=notrunc`, an
    editor saving in place or a build writing its output does), its modification time moved."""
    with open(path, "r+b") as f:
        f.write(data)
    later = time.time() + 5
    os.utime(path, (later, later))


def test_a_streamed_tftp_download_fails_when_the_file_is_rewritten_in_place(serve, root):
    old, new = os.urandom(3 << 20), os.urandom(3 << 20)
    big = root / "big.img"
    big.write_bytes(old)
    big.chmod(0o644)
    s = serve("--cache-file-limit", "0")  # every file streamed, read block by block
    c = RawClient(s)
    reply, tid = c.exchange(request("big.img", options=[("blksize", "1468")]))
    assert reply[0] == "OACK"
    got, block, ended = bytearray(), 0, None
    c.send(ack(0), tid)
    while ended is None:
        reply, _ = c.receive()
        assert reply is not None, "no answer"
        if reply[0] == "ERROR":
            ended = reply[1]
            break
        assert reply[0] == "DATA"
        if reply[1][0] != (block + 1) & 0xFFFF:
            continue
        got += reply[1][1]
        block += 1
        if block == 100:
            rewrite_in_place(big, new)
        if len(reply[1][1]) < 1468:
            break
        c.send(ack(block), tid)
    # Never a whole-looking file of two versions: the transfer fails before its last block.
    assert ended is not None and ended[0] == 0 and "changed while it was sent" in ended[1], (ended, len(got))
    assert len(got) < len(old)
    assert s.log_lines("File changed while it was sent")
    # The new version is served whole afterwards.
    fetched = run(["curl", "-s", "--tftp-blksize", "1468", "-o", "-", f"tftp://127.0.0.1:{s.port}/big.img"])
    assert fetched.stdout == new


def test_a_streamed_file_renamed_over_mid_transfer_is_sent_whole_as_it_was(serve, root, tmp_path):
    """A release swapped by a rename is not a change to the open file: the running download keeps
    the old version, whole."""
    old = os.urandom(2 << 20)
    big = root / "big.img"
    big.write_bytes(old)
    big.chmod(0o644)
    s = serve("--cache-file-limit", "0")
    got = tmp_path / "got"
    reader = subprocess.Popen(["curl", "-s", "--limit-rate", "1M", "--tftp-blksize", "1468", "-o", str(got),
                               f"tftp://127.0.0.1:{s.port}/big.img"])
    time.sleep(0.7)
    fresh = root / "big.img.new"
    fresh.write_bytes(os.urandom(2 << 20))
    fresh.chmod(0o644)
    fresh.rename(big)
    assert reader.wait(timeout=60) == 0
    assert got.read_bytes() == old


def test_a_streamed_http_body_is_cut_short_when_the_file_is_rewritten_in_place(web, root):
    old, new = os.urandom(16 << 20), os.urandom(16 << 20)
    big = root / "big.img"
    big.write_bytes(old)
    big.chmod(0o644)
    s = web("--cache-file-limit", "0")
    # A client that reads slowly through a small window: the server is still sending when the
    # file changes (the kernel's buffers cannot hold the whole body).
    with socket.socket() as c:
        c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        c.settimeout(20)
        c.connect(("127.0.0.1", s.http_port))
        c.sendall(b"GET /big.img HTTP/1.1\r\nHost: x\r\n\r\n")
        got = b""
        while b"\r\n\r\n" not in got or len(got) < (1 << 20):
            got += c.recv(65536)
        rewrite_in_place(big, new)
        while chunk := c.recv(1 << 20):
            got += chunk
    head, _, body = got.partition(b"\r\n\r\n")
    # 200 with the whole Content-Length promised, then the connection closed before its last byte:
    # a short body the client sees as failed, never a whole-looking one of two versions.
    assert head.startswith(b"HTTP/1.1 200") and f"Content-Length: {16 << 20}".encode() in head
    assert len(body) < len(old), len(body)
    lines = s.log_lines("changed while it was sent")
    assert lines and "closed before the last byte" in lines[0], lines
    done = run(["curl", "-s", "-o", "-", f"http://127.0.0.1:{s.http_port}/big.img"])
    assert done.stdout == new


def test_a_one_byte_range_of_a_streamed_file_is_sent(web, root):
    """The last byte of a streamed body goes after the check: a body of one byte is all last byte."""
    data = os.urandom(1 << 20)
    (root / "big.img").write_bytes(data)
    (root / "big.img").chmod(0o644)
    s = web("--cache-file-limit", "0")
    for spec, part in (("0-0", data[:1]), ("-1", data[-1:]), ("1000-1001", data[1000:1002])):
        done = run(["curl", "-s", "-r", spec, "-o", "-", f"http://127.0.0.1:{s.http_port}/big.img"])
        assert done.stdout == part, spec


def second(binary, root, *args):
    """A second server's start, as its exit status and what it said."""
    r = run([str(binary), "-l", "-L", *args, str(root)], timeout=20)
    return r.returncode, r.stderr.decode(errors="replace")


def test_a_second_server_on_the_same_addresses_exits_address_in_use(binary, root):
    """SO_REUSEPORT would let a second process of the same user bind the addresses and take half
    the clients (with its own root): as in.tftpd, the second server says the address is in use and
    exits, for TFTP, HTTP and metrics alike; the first keeps serving them all."""
    tftp, web, metrics = free_udp_port(), free_tcp_port(), free_tcp_port()
    first = Server(root, ("--http", f"127.0.0.1:{web}", "--metrics", f"127.0.0.1:{metrics}"), port=tftp)
    try:
        for args in (["-a", f"127.0.0.1:{tftp}"],
                     ["-a", f"0.0.0.0:{tftp}"],  # the wildcard overlaps it too
                     ["-a", f"127.0.0.1:{free_udp_port()}", "--http", f"127.0.0.1:{web}"],
                     ["-a", f"127.0.0.1:{free_udp_port()}", "--http", f":{web}"],
                     ["-a", f"127.0.0.1:{free_udp_port()}", "--metrics", f"127.0.0.1:{metrics}"]):
            status, said = second(binary, root, *args)
            assert status == 1 and "Address already in use" in said, (args, status, said)
        # The first serves on, every address its own.
        assert run(["curl", "-s", "-o", "-", f"tftp://127.0.0.1:{tftp}/hello.txt"]).stdout == b"hello, rack\n"
        assert run(["curl", "-s", "-o", "-", f"http://127.0.0.1:{web}/hello.txt"]).stdout == b"hello, rack\n"
        assert first.alive
    finally:
        first.stop()


def test_a_server_started_beside_another_program_on_its_port_exits(binary, root):
    """Anything on the address, whatever its options: a plain socket (in.tftpd's kind) and one
    with SO_REUSEPORT of the same user (a server of another make) both keep the port theirs."""
    for reuse in (False, True):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as other:
            if reuse:
                other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            other.bind(("127.0.0.1", 0))
            status, said = second(binary, root, "-a", f"127.0.0.1:{other.getsockname()[1]}")
            assert status == 1 and "Address already in use" in said, (reuse, status, said)


def test_out_of_descriptors_the_http_loop_waits_instead_of_spinning(web, root):
    """EMFILE on accept leaves the connection in the backlog and the listener readable: accepting
    again at once spun the loop (3 to 6 s of CPU per 3 s, TFTP starved, a line per try). The loop
    pauses accepting, says so at most once a second, and takes connections again once descriptors
    are free; a TFTP transfer running meanwhile goes on."""
    s = web("-u", "root")  # prlimit --pid needs the server's user (or CAP_SYS_RESOURCE, not here)
    tftp = RawClient(s)
    reply, tid = tftp.exchange(request("one-mib.bin", options=[("blksize", "1468")]))
    assert reply[0] == "OACK"
    tftp.send(ack(0), tid)
    held = [socket.create_connection(("127.0.0.1", s.http_port), timeout=5) for _ in range(20)]
    time.sleep(0.3)
    # Leave the server no descriptor to spare: its limit lowered to what it holds now.
    limit = s.fd_count() + 2
    assert run(["prlimit", f"--pid={s.process.pid}", f"--nofile={limit}:{limit}"]).returncode == 0
    waiting = [socket.create_connection(("127.0.0.1", s.http_port), timeout=5) for _ in range(30)]
    cpu = s.cpu_seconds()
    # The transfer that has its socket goes on, block by block, while accepting waits.
    got, block, slowest, started = bytearray(), 0, 0.0, time.time()
    while True:
        asked = time.time()
        reply, _ = tftp.receive()
        assert reply is not None and reply[0] == "DATA", reply
        if reply[1][0] != (block + 1) & 0xFFFF:
            continue
        slowest = max(slowest, time.time() - asked)
        got += reply[1][1]
        block += 1
        tftp.send(ack(block), tid)
        if len(reply[1][1]) < 1468:
            break
        if time.time() - started < 3:
            time.sleep(0.004)  # spread over the three seconds measured
    while time.time() - started < 3:
        time.sleep(0.1)
    spent = s.cpu_seconds() - cpu
    assert got == (root / "one-mib.bin").read_bytes()
    assert spent < 0.5, f"{spent:.2f} s of CPU in 3 s while out of descriptors"
    assert slowest < 0.5, f"a block took {slowest:.2f} s"
    lines = s.log_lines("Too many open files")
    assert lines and "accepting again in" in lines[0] and len(lines) <= 8, lines
    # Descriptors free again: the connections that waited are taken and answered.
    for c in held + waiting[5:]:
        c.close()
    for c in waiting[:5]:
        c.sendall(b"GET /hello.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        c.settimeout(10)
        answer = b""
        while chunk := c.recv(4096):
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"hello, rack\n")
        c.close()


def test_an_http_connection_limit_the_descriptors_cannot_hold_is_clamped_with_a_warning(root):
    port = free_tcp_port()
    s = Server(root, ("--http", f"127.0.0.1:{port}", "--http-max-connections", "5000"),
               prefix=("prlimit", "--nofile=600:600"))
    try:
        warning = s.log_lines("--http-max-connections 5000")
        assert warning and "serving at most" in warning[0], s.log_text()
        most = int(warning[0].split("serving at most ")[1].split()[0])
        assert 0 < most < 300  # two descriptors each, out of 600 less what the server holds
        # The start line comes after the warning: wait for it, do not read the log once.
        assert s.log_lines(f"at most {most} connections"), s.log_text()
    finally:
        s.stop()
