"""What the parity tests (test_parity*.py) share: the peer, Debian unstable's in.tftpd (tftp-hpa
7.3, from the tree `make parity-deps` makes), run beside Stampede with the same flags, and a
client that plays one request against either and says what came back."""
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, SERVER_BINARY, free_udp_port
from tftpwire import ack, data, decode, request

# The in.tftpd of Debian unstable needs its glibc: it runs chrooted in the tree, in a mount
# namespace of its own where the test's directory is bound at the same path (it shares the network),
# as the benches run their peers.
sys.path.insert(0, str(REPO / "Benchmarks"))
from harness import SID, in_sid  # noqa: E402

PARITY_TFTPD = "tftp-hpa 7.3"


def in_tftpd(*args, share: Path):
    """The command that runs the tree's in.tftpd with `args`, `share` visible at its own path."""
    return in_sid(["/usr/sbin/in.tftpd", *args], share)


def tree_version():
    if os.geteuid() != 0 or not (SID / "usr" / "sbin" / "in.tftpd").exists():
        return None
    r = subprocess.run(["chroot", str(SID), "/usr/sbin/in.tftpd", "-V"], capture_output=True, text=True, timeout=10)
    return (r.stdout + r.stderr).splitlines()[0] if r.stdout + r.stderr else "nothing"


VERSION = tree_version()

# Every parity test module's pytestmark: skipped loudly without the peer, or with another version.
REQUIRES_PEER = [
    pytest.mark.skipif(os.geteuid() != 0, reason="tftpd-hpa with -s and -u needs root"),
    pytest.mark.skipif(VERSION is None, reason=f"no Debian unstable tree in {SID}: run `make parity-deps` (make test does)"),
    pytest.mark.skipif(VERSION not in (None, PARITY_TFTPD),
                       reason=f"{SID} has {VERSION!r}, the corpus was written for {PARITY_TFTPD!r}: "
                              f"rm -rf {SID} and make parity-deps, or bring the corpus to the new version"),
]

def compared(outcome):
    """What must match: an error's code, not its message (Stampede's may say more)."""
    return outcome[:2] if outcome[0] == "ERROR" else outcome


UPLOAD = os.urandom(70_000)


def make_root(path: Path) -> Path:
    path.mkdir()
    (path / "hello.txt").write_text("hello, rack\n")
    (path / "first.txt").write_text("the e rule ended here\n")
    (path / "text.txt").write_bytes(b"line one\nline two\r\nbare\rcr\n" * 200)
    (path / "one-mib.bin").write_bytes(bytes(range(256)) * 4096)
    (path / "v4.txt").write_text("IPv4 client\n")
    (path / "v6.txt").write_text("IPv6 client\n")
    (path / "pxelinux.cfg").mkdir()
    (path / "pxelinux.cfg" / "default").write_text("DEFAULT linux\n")
    (path / "hosts").mkdir()
    (path / "hosts" / "127.0.0.1").write_text("for 127.0.0.1\n")
    (path / "private").mkdir()
    (path / "private" / "key").write_text("secret\n")
    (path / "incoming").mkdir()
    for p in path.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    (path / "incoming").chmod(0o777)
    path.chmod(0o777)
    return path


def outcome(port, name, write, mode, options, upload=None):
    """What the server answered: ("DATA", bytes[, OACK]), ("WROTE", n[, OACK]), ("ERROR", code,
    message) or ("SILENT",). The OACK (its (name, value) pairs, sorted) is given when options were
    asked. Reads and writes follow what the OACK grants: blksize or blksize2, windowsize (an ACK
    per window), rollover (the block after 65535)."""
    upload = UPLOAD if upload is None else upload
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.settimeout(3)
    # A whole window of the largest blocks waits here (SO_RCVBUFFORCE: root passes rmem_max).
    sock.setsockopt(socket.SOL_SOCKET, 33, 32 << 20)
    blksize, window, rollover = 512, 1, 0

    def wire(n):
        return n & 0xFFFF if rollover == 0 or n <= 65535 else (n - 65536) % 65535 + 1

    try:
        sock.sendto(request(name, mode, options, write=write), ("127.0.0.1", port))
        received = bytearray()
        done = acked = 0  # blocks received in order (a read), or acknowledged (a write)
        negotiated = ()
        blocks = len(upload) // blksize + 1
        while True:
            try:
                packet, tid = sock.recvfrom(70000)
            except socket.timeout:
                return ("SILENT",)
            kind, fields = decode(packet)
            if kind == "ERROR":
                return ("ERROR", fields[0], fields[1])
            if kind == "OACK":
                granted = {key.lower(): value for key, value in fields.items()}
                blksize = int(granted.get("blksize", granted.get("blksize2", 512)))
                window = int(granted.get("windowsize", 1))
                rollover = int(granted.get("rollover", 0))
                negotiated = tuple(sorted(fields.items()))
                blocks = len(upload) // blksize + 1
                if not write:
                    sock.sendto(ack(0), tid)
                    continue
            shown = (negotiated,) if options else ()
            if write and kind in ("ACK", "OACK"):
                if kind == "ACK":
                    named = [n for n in range(done, min(done + window, blocks) + 1) if wire(n) == fields[0]]
                    if not named:
                        continue
                    done = named[0]
                if done == blocks:
                    return ("WROTE", len(upload)) + shown
                for n in range(done + 1, min(done + window, blocks) + 1):
                    sock.sendto(data(wire(n), upload[(n - 1) * blksize:n * blksize]), tid)
                continue
            if kind == "DATA" and fields[0] == wire(done + 1):
                received += fields[1]
                done += 1
                last = len(fields[1]) < blksize
                if last or done - acked >= window:
                    sock.sendto(ack(wire(done)), tid)
                    acked = done
                if last:
                    return ("DATA", bytes(received)) + shown
    finally:
        sock.close()


class TftpdHpa:
    def __init__(self, root: Path, args):
        self.port = free_udp_port()
        self.root = root
        self.process = subprocess.Popen(in_tftpd("-l", "-L", "-a", f"127.0.0.1:{self.port}", *args, root,
                                                 share=root.parent), stderr=subprocess.PIPE)
        deadline = time.time() + 10
        while time.time() < deadline and outcome(self.port, "hello.txt", False, "octet", ())[0] != "DATA":
            assert self.process.poll() is None, self.process.stderr.read()
            time.sleep(0.1)

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=10)


def assert_same_outcomes(theirs, ours, requests, label, deliberate=None):
    """Each request to both servers: the same outcome, or the pair `deliberate` lists for (name,
    write). Returns Stampede's outcomes."""
    outcomes = []
    for name, write, mode, options in requests:
        expected = compared(outcome(theirs.port, name, write, mode, options))
        outcomes.append(got := compared(outcome(ours.port, name, write, mode, options)))
        assert (expected, got) == (deliberate or {}).get((name, write), (expected, expected)), \
            f"{label} {name}: tftpd-hpa {expected[:3]!r:.300}, stampede {got[:3]!r:.300}"
    return outcomes


def run_both(argv, tmp_path, timeout=10):
    """Each server with `argv` to the end (usage errors), as (7.3's, Stampede's) CompletedProcess."""
    theirs = subprocess.run(in_tftpd(*argv, share=tmp_path), capture_output=True, timeout=timeout)
    ours = subprocess.run([str(SERVER_BINARY), *map(str, argv)], capture_output=True, timeout=timeout)
    return theirs, ours


def start_both(args, tmp_path, directory=None, **popen):
    """Both servers on free ports, each with `-a 127.0.0.1:PORT ARGS ROOT` (ARGS: `args`, or
    `args(who)`; ROOT: its root, or `directory(root)`); a list of (process, port, root), 7.3's
    first."""
    started = []
    tmp_path.mkdir(parents=True, exist_ok=True)
    for who in ("tftpd-hpa", "stampede"):
        root = make_root(tmp_path / who)
        port = free_udp_port()
        argv = ["-a", f"127.0.0.1:{port}", *(args(who) if callable(args) else args), directory(root) if directory else root]
        command = in_tftpd(*argv, share=tmp_path) if who == "tftpd-hpa" else [str(SERVER_BINARY), *map(str, argv)]
        started.append((subprocess.Popen(command, **popen), port, root))
    return started


def serves(port, seconds=10):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if outcome(port, "hello.txt", False, "octet", ())[0] == "DATA":
            return True
    return False

