"""The in.tftpd command line, signals, privileges, and `stampede get/put` as a client."""
import os
import signal
import socket
import subprocess
import time

import pytest

from conftest import BINARY, run
from tftpwire import RawClient, ack, request


def test_version(binary):
    for flag in ("-V", "--version"):
        r = run([str(binary), flag])
        assert r.returncode == 0 and b"stampede" in r.stdout


@pytest.mark.parametrize("args", [["-B", "7"], ["-B", "mtu100"], ["-B", "mtu-"], ["-B", "mtu-x"], ["-W", "-1"], ["-r", "multicast"], ["--window-bytes", "-1"], ["-R", "5:1"], ["-U", "9z"], ["-T", "5"], ["--backend", "x"],
                                  ["-S", "no-such-service"], ["-S", "0"], ["-S", "-1"], ["--port", "70000"],
                                  ["--service", "99999999999999999999999"], ["--max-upload", "1.5M"], ["--max-size", "16E"],
                                  ["--max-upload", "-1"], ["--normalize=bogus"], ["--map-steps", "0"], ["-a", "[::1"],
                                  ["-a", "127.0.0.1:no-such-service"], ["--map-client", "127.0.0.1"]])
def test_bad_flags_are_usage_errors(binary, root, args):
    r = run([str(binary), "-l", *args, str(root)])
    assert r.returncode == 64, r.stderr


@pytest.mark.parametrize("command", ["get", "put", "storm"])
@pytest.mark.parametrize("word", ["rollover=2", "cookie=", "cookie=" + "x" * 256, "utimeout=9999", "blksize2=7",
                                  "multicast=1", "blksize"])
def test_a_client_option_outside_the_table_is_a_usage_error(binary, command, word):
    args = {"get": ["127.0.0.1:9", "f"], "put": ["127.0.0.1:9", "f"], "storm": ["127.0.0.1:9", "f"]}[command]
    r = run([str(binary), command, "--option", word, *args])
    assert r.returncode == 64 and b"--option" in r.stderr, r.stderr


def test_service_names_resolve_through_services(binary, root):
    """-S takes a services(5) name, as in.tftpd does: asp is 27374/udp in netbase's /etc/services."""
    port = socket.getservbyname("asp", "udp")
    p = subprocess.Popen([str(binary), "-l", "-L", "-a", "127.0.0.1", "--service", "asp", "-u", "root", str(root)],
                         stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 10
        line = ""
        while time.time() < deadline and "serving" not in line:
            line = p.stderr.readline()
        assert f"on 127.0.0.1:{port} " in line, line
    finally:
        p.terminate()
        p.wait(timeout=10)


def test_sigterm_lets_running_transfers_finish_then_exits_0(serve, root):
    s = serve("--grace", "10")
    c = RawClient(s)
    reply, tid = c.exchange(request("one-mib.bin"))
    assert reply[0] == "DATA"
    s.process.send_signal(signal.SIGTERM)
    # Each worker notices at its next loop turn (at most half a second).
    deadline = time.time() + 3
    while time.time() < deadline and s.log_text().count("stopping: no new requests") < 2:
        time.sleep(0.05)
    # No new requests are taken...
    late = RawClient(s, timeout=0.5)
    assert late.exchange(request("hello.txt"))[0] is None
    # ...but the running transfer completes (skipping the retransmissions of the wait).
    out = bytearray(reply[1][1])
    block = 1
    while True:
        c.send(ack(block), tid)
        reply, _ = c.receive()
        while reply and reply[0] == "DATA" and reply[1][0] != (block + 1) & 0xFFFF:
            reply, _ = c.receive()
        assert reply and reply[0] == "DATA", reply
        out += reply[1][1]
        block += 1
        if len(reply[1][1]) < 512:
            c.send(ack(block), tid)
            break
    assert bytes(out) == (root / "one-mib.bin").read_bytes()
    assert s.process.wait(timeout=10) == 0


def test_grace_period_ends_stuck_transfers(serve):
    s = serve("--grace", "1")
    c = RawClient(s)
    assert c.exchange(request("one-mib.bin"))[0][0] == "DATA"
    s.process.send_signal(signal.SIGTERM)
    assert s.process.wait(timeout=5) == 0
    reply, _ = c.receive()
    while reply and reply[0] == "DATA":  # retransmissions before the abort
        reply, _ = c.receive()
    assert reply == ("ERROR", (0, "Server shutting down"))
    assert "aborted by shutdown" in s.log_text()


def test_pidfile_is_written_and_removed(serve, tmp_path):
    # Written before the privilege drop; removed at exit where the remaining user may.
    pidfile = tmp_path / "stampede.pid"
    s = serve("-P", str(pidfile), "-u", "root" if os.geteuid() == 0 else "nobody")
    assert pidfile.read_text().strip() == str(s.process.pid)
    s.stop()
    assert not pidfile.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="LOUD SKIP: chroot and user switching need root")
def test_secure_chroots_and_drops_to_the_user(serve, root):
    s = serve("-s", "-u", "nobody")
    status = open(f"/proc/{s.process.pid}/status").read()
    uid_line = [l for l in status.splitlines() if l.startswith("Uid:")][0]
    assert uid_line.split()[1:] == ["65534"] * 4
    assert os.readlink(f"/proc/{s.process.pid}/root") == str(root)
    assert RawClient(s).download("hello.txt") == b"hello, rack\n"


def test_port_range(serve):
    s = serve("-R", "41000:41010")
    for _ in range(3):
        c = RawClient(s)
        reply, tid = c.exchange(request("hello.txt"))
        assert reply[0] == "DATA" and 41000 <= tid[1] <= 41010
        c.send(ack(1), tid)


def test_blocksize_windowsize_and_refuse_limits(serve):
    s = serve("-B", "1024", "-W", "4", "-r", "tsize")
    reply, _ = RawClient(s).exchange(request("one-mib.bin", options=[("blksize", 1468), ("windowsize", 16), ("tsize", 0)]))
    assert reply == ("OACK", {"blksize": "1024", "windowsize": "4"})


def test_default_blksize_limit_follows_the_loopback_mtu(serve):
    s = serve()
    reply, _ = RawClient(s).exchange(request("one-mib.bin", options=[("blksize", 65464)]))
    mtu = int(open("/sys/class/net/lo/mtu").read())
    assert reply == ("OACK", {"blksize": str(min(65464, mtu - 32))})


@pytest.mark.skipif(os.geteuid() != 0, reason="LOUD SKIP: needs root to keep -u root")
def test_permissive_serves_files_that_are_not_world_readable(serve, root):
    (root / "private.bin").write_bytes(b"only root")
    (root / "private.bin").chmod(0o600)
    assert RawClient(serve()).exchange(request("private.bin"))[0][1][0] == 2
    assert RawClient(serve("-p", "-u", "root")).download("private.bin") == b"only root"


def test_umask_applies_to_created_files(serve, root, tmp_path):
    root.chmod(0o777)
    s = serve("-c", "-U", "027")
    src = tmp_path / "x"
    src.write_bytes(b"data")
    assert run([str(BINARY), "put", f"127.0.0.1:{s.port}", str(src), "made.bin"]).returncode == 0
    assert (root / "made.bin").stat().st_mode & 0o777 == 0o640


@pytest.mark.parametrize("options", [[], ["-b", "1468"], ["-b", "1468", "-w", "16"], ["--mode", "netascii"], ["--no-tsize"]])
def test_stampede_get_and_put_round_trip(serve, root, tmp_path, options):
    root.chmod(0o777)
    s = serve("-c")
    name = "text.txt" if "netascii" in options else "one-mib.bin"
    out = tmp_path / "got"
    r = run([str(BINARY), "get", f"127.0.0.1:{s.port}", name, str(out), *options])
    assert r.returncode == 0, r.stderr
    assert out.read_bytes() == (root / name).read_bytes()
    r = run([str(BINARY), "put", f"127.0.0.1:{s.port}", str(out), "back.bin", *options])
    assert r.returncode == 0, r.stderr
    assert (root / "back.bin").read_bytes() == (root / name).read_bytes()


def test_stampede_get_queues_the_whole_window_it_asks(serve, root, tmp_path):
    """256 blocks of 1468 bytes (7.3's default window) are more than Linux's default receive
    queue holds (208 KiB): `get` grows its queue to the window it asks, so no window loses its
    tail and the server sends every block once. With the default queue every window lost its
    tail and waited out a timeout (50 MB took 22 s)."""
    big = root / "eight-mib.bin"
    big.write_bytes(os.urandom(8 << 20))
    big.chmod(0o644)
    s = serve()
    out = tmp_path / "got"
    r = run([str(BINARY), "get", f"127.0.0.1:{s.port}", big.name, str(out), "-b", "1468", "-w", "256"])
    assert r.returncode == 0, r.stderr
    assert out.read_bytes() == big.read_bytes()
    line = s.log_lines(f'"{big.name}"')[0]
    assert "windowsize=256" in line and "retransmits=0" in line, line


def test_stampede_get_of_a_missing_file_fails_and_leaves_no_file(serve, tmp_path):
    s = serve()
    out = tmp_path / "nothing"
    r = run([str(BINARY), "get", f"127.0.0.1:{s.port}", "missing.bin", str(out)])
    assert r.returncode == 1
    assert b"server error 1" in r.stderr
    assert not out.exists() and not list(tmp_path.glob("nothing*"))


def test_raspberry_pi_duplicate_rrq_gets_two_transfers_and_the_abandoned_one_ends_quietly(serve, root):
    s = serve("-T", "100000", "--retries", "2")
    keeper, dropper = RawClient(s), RawClient(s)
    dropper.send(request("hello.txt"))
    assert keeper.download("hello.txt") == b"hello, rack\n"
    s.log_lines("timed out", timeout=5)
    lines = [l for l in s.log_text().splitlines() if 'RRQ' in l and 'hello.txt' in l and 'bytes=' in l]
    assert len(lines) == 2
    assert any(l.endswith(": ok") for l in lines) and any("timed out" in l for l in lines)


@pytest.mark.parametrize("command", ["get", "put", "storm"])
@pytest.mark.parametrize("args", [["--blksize", "4"], ["--blksize", "7"], ["--blksize", "65465"], ["--windowsize", "0"],
                                  ["--windowsize", "32768"], ["--timeout", "0"], ["--timeout", "256"]])
def test_client_values_outside_the_rfc_ranges_are_usage_errors(command, args, tmp_path):
    """Issue 11: `get --blksize 4` used to trap on a server's OACK echoing 4; now refused at once."""
    local = tmp_path / "f"
    local.write_bytes(b"x")
    r = run([str(BINARY), command, "127.0.0.1:9", "f" if command != "put" else str(local), *args])
    assert r.returncode == 64, (r.returncode, r.stderr)
    assert b"must be within" in r.stderr
    assert not (tmp_path / "f.stampede-part").exists()


class OptionAckServer:
    """A fake server that answers any request with one OACK of its choosing, and records what
    the client sends back to its transfer port."""

    def __init__(self, oack_options):
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.listener.bind(("127.0.0.1", 0))
        self.transfer = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.transfer.bind(("127.0.0.1", 0))
        self.transfer.settimeout(5)
        self.port = self.listener.getsockname()[1]
        self.body = b"".join(f"{k}\0{v}\0".encode() for k, v in oack_options)

    def answer_one(self):
        packet, client = self.listener.recvfrom(2048)
        self.transfer.sendto(b"\0\6" + self.body, client)
        return packet, self.transfer.recvfrom(2048)[0]


@pytest.mark.parametrize("oack", [[("blksize", "4")], [("blksize", "2000")], [("windowsize", "70000")],
                                  [("timeout", "9")], [("mtu", "1500")], [("blksize", "x")]])
def test_a_bad_option_ack_is_refused_with_error_8_and_reported(oack, tmp_path):
    import threading
    server = OptionAckServer(oack)
    seen = {}
    thread = threading.Thread(target=lambda: seen.update(reply=server.answer_one()))
    thread.start()
    r = run([str(BINARY), "get", f"127.0.0.1:{server.port}", "f", str(tmp_path / "out"), "--blksize", "1024",
             "--windowsize", "4", "--timeout", "3"], timeout=30)
    thread.join(10)
    assert r.returncode == 1, r.stderr
    assert b"protocol error" in r.stderr and b"refused with ERROR 8" in r.stderr
    request_packet, answer = seen["reply"]
    assert answer[:4] == b"\0\5\0\x08", answer
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.stampede-part").exists()


def test_windows_above_32767_are_clamped_with_a_warning(serve):
    """Block numbers wrap at 65,536: with a window of 32,768 or more, a reordered old ACK looks new
    and the file is silently corrupted. A tftpd-hpa -W above that still starts, clamped. (Without
    --window-bytes 0, its 4 MiB bound the window first: 8,192 blocks of 512 bytes.)"""
    s = serve("-W", "65535", "--window-bytes", "0")
    assert "granting at most 32767" in s.log_text()
    reply, _ = RawClient(s).exchange(request("one-mib.bin", options=[("windowsize", 40000)]))
    assert reply == ("OACK", {"windowsize": "32767"})
    bounded = serve("-W", "65535")
    reply, _ = RawClient(bounded).exchange(request("one-mib.bin", options=[("windowsize", 40000)]))
    assert reply == ("OACK", {"windowsize": "8192"})


def test_get_never_writes_through_a_symlink_at_its_temporary_name(serve, root, tmp_path):
    """A symlink planted at NAME.stampede-part (a shared directory, a root user) must not make
    `stampede get` write into its target."""
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / "out.bin.stampede-part").symlink_to(victim)
    s = serve()
    r = run([str(BINARY), "get", f"127.0.0.1:{s.port}", "one-mib.bin", str(tmp_path / "out.bin")])
    assert r.returncode == 0, r.stderr
    assert victim.read_text() == "precious"
    assert (tmp_path / "out.bin").read_bytes() == (root / "one-mib.bin").read_bytes()
    assert (tmp_path / "out.bin.stampede-part").is_symlink()
