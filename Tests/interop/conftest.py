"""Fixtures that run the real `stampede` binary on loopback against real clients."""
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BINARY = Path(os.environ.get("STAMPEDE_BIN", REPO / ".build" / "release" / "stampede"))


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One stampede process serving `root` on 127.0.0.1:`port`."""

    def __init__(self, root: Path, args=(), host="127.0.0.1", backend="auto", port=None, prefix=()):
        self.root = root
        self.backend = backend
        self.host = host
        self.port = port or free_udp_port()
        self.log_path = root.parent / f"server-{self.port}.log"
        address = f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"
        # `prefix`: run inside something, as `ip netns exec NAME` for a lossy network.
        self.argv = [*prefix, str(BINARY), "-l", "-L", "-a", address, "-v", "--backend", backend, *args, str(root)]
        self.log = open(self.log_path, "w")
        self.process = subprocess.Popen(self.argv, stdout=self.log, stderr=subprocess.STDOUT)
        self.wait_ready()

    def wait_ready(self):
        deadline = time.time() + 10
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited {self.process.returncode}: {self.log_text()}")
            if "serving" in self.log_text():
                return
            time.sleep(0.02)
        raise RuntimeError("server did not start: " + self.log_text())

    def log_text(self) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
        return -1

    def cpu_seconds(self) -> float:
        """User + system CPU of the server process so far (all its threads)."""
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def fd_count(self) -> int:
        return len(os.listdir(f"/proc/{self.process.pid}/fd"))

    def stop(self, expect_code=0, timeout=15):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout=timeout)
        self.log.close()
        assert code == expect_code, f"server exit {code}\n{self.log_path.read_text(errors='replace')[-3000:]}"

    @property
    def alive(self) -> bool:
        return self.process.poll() is None


@pytest.fixture(scope="session")
def binary() -> Path:
    assert BINARY.exists(), f"{BINARY} missing: run `make test` (it builds in release first)"
    return BINARY


@pytest.fixture
def root(tmp_path) -> Path:
    r = tmp_path / "root"
    r.mkdir()
    (r / "hello.txt").write_text("hello, rack\n")
    (r / "one-mib.bin").write_bytes(os.urandom(1 << 20))
    (r / "exact-512.bin").write_bytes(os.urandom(512 * 4))
    (r / "empty.bin").write_bytes(b"")
    (r / "text.txt").write_bytes(b"line one\nline two\r\nbare\rcr\n" * 200)
    for f in r.iterdir():
        f.chmod(0o644)
    return r


BACKENDS = os.environ.get("STAMPEDE_BACKENDS", "uring,glibc").split(",")


@pytest.fixture(params=BACKENDS)
def serve(request, root, binary):
    """serve(*args) starts a server on `root`, once per backend (every test that serves runs on
    each); every server is stopped (and must exit 0) at the end."""
    servers = []

    def start(*args, host="127.0.0.1", port=None, prefix=()):
        s = Server(root, args, host=host, backend=request.param, port=port, prefix=prefix)
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.stop()


MEASUREMENTS = []


@pytest.fixture
def report():
    """report(line): a measurement shown in the summary of every run (not a pass criterion)."""
    return MEASUREMENTS.append


def pytest_terminal_summary(terminalreporter):
    if MEASUREMENTS:
        terminalreporter.section("measurements")
        for line in MEASUREMENTS:
            terminalreporter.write_line(line)


def run(argv, timeout=120, **kw):
    return subprocess.run(argv, capture_output=True, timeout=timeout, **kw)
