"""Fixtures that run the real `stampede` binary on loopback against real clients."""
import contextlib
import ctypes
import itertools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BINARY = Path(os.environ.get("STAMPEDE_BIN", REPO / ".build" / "release" / "stampede"))
# The servers the tests start, from another build if asked (to show a test fails on an older
# server while the clients, get and storm, stay this build's).
SERVER_BINARY = Path(os.environ.get("STAMPEDE_SERVER_BIN", BINARY))


def external_commands(variables=("TEST_COMMANDS", "BENCH_COMMANDS")):
    """{command: Debian package} from the Makefile's TEST_COMMANDS and BENCH_COMMANDS, the list
    `make deps` and `make bench-deps` install."""
    text = (REPO / "Makefile").read_text().replace("\\\n", " ")
    out = {}
    for variable in variables:
        match = re.search(rf"^{variable} :=(.*)$", text, re.MULTILINE)
        assert match, f"{variable} is not in the Makefile"
        out.update(pair.split(":", 1) for pair in match.group(1).split())
    return out


def find_command(name):
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")


# What runs one test at a time (pytest-xdist's loadgroup: a group's tests on one worker, in
# turn), while the other workers run the rest, which mostly wait (on clients, timeouts,
# retransmissions). "ports": racks and floods of thousands of sockets on loopback, CPU bound, some
# measuring. "namespaces": racks through loss and behind anycast in namespaces of their own (CPU
# bound), and the slow disk (whose test times a cached answer). "firmware": QEMU's emulated x86
# boots over IPv4; "firmware6": the x86 boots over IPv6 and the emulated ARM64 boots. So at most
# four load-bound tests share the two cores, one of each kind.
SERIAL_GROUPS = {
    "ports": ["test_scale.py", "test_rack.py", "test_concurrency.py", "test_overload.py", "test_shared_sockets.py",
              "test_faults.py", "test_livelocks.py", "test_storm.py", "test_metrics.py"],
    "namespaces": ["test_lossy_network.py", "test_anycast.py", "test_disk.py"],
    "firmware": ["test_firmware.py"],
    "firmware6": ["test_firmware_arm64.py", "test_firmware_ipv6.py"],
}
GROUP_OF = {name: group for group, names in SERIAL_GROUPS.items() for name in names}


# First: pytest-xdist reads the groups in a hook of its own (it names each grouped test
# "nodeid@group"), and a marker added after it is never seen: every test ran on any worker.
# (Under pytest 9.2 no group is kept at all: `make deps` installs pytest 8.)
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    for item in items:
        group = GROUP_OF.get(item.path.name)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session):
    """On a pytest-xdist worker of `--dist loadgroup`, every test of a serial group bears its
    group's name by now; a pytest or pytest-xdist that drops it would spread the group's tests
    over every worker without a word: the run stops instead."""
    if not getattr(session.config.option, "loadgroup", False):
        return
    lost = [item.nodeid for item in session.items
            if item.path.name in GROUP_OF and not item.nodeid.endswith("@" + GROUP_OF[item.path.name])]
    if lost:
        pytest.exit(f"pytest-xdist kept no serial group ({lost[0]}, {len(lost)} in all) under pytest {pytest.__version__}: "
                    "`make deps` installs the versions the suite runs with", returncode=3)


def pytest_sessionstart(session):
    """Every command the suite runs is there, or the run stops before its first test, naming
    the package to install (`make deps` installs them all). Spread over workers, the pytest whose
    groups pytest-xdist keeps (a worker that finds none stops the run, but says why only to
    itself)."""
    if session.config.getoption("dist", "no") == "loadgroup" and int(pytest.__version__.split(".")[0]) >= 9:
        pytest.exit(f"under pytest {pytest.__version__} pytest-xdist keeps no serial group (Tests/interop/conftest.py): "
                    "`make deps` installs pytest 8", returncode=3)
    missing = {c: p for c, p in external_commands(["TEST_COMMANDS"]).items() if not find_command(c)}
    if missing:
        names = ", ".join(f"{c} (Debian package {p})" for c, p in missing.items())
        pytest.exit(f"missing: {names}. `make deps` installs them; `make test` runs it first.", returncode=3)


def pytest_configure(config):
    """Each process of the suite (each pytest-xdist worker) runs its tests in a network
    namespace of its own, loopback up: its own ports (no worker's server or client takes another's,
    a rack's ten thousand sockets exhaust no one else's ephemeral range, no server retransmits
    into another test's socket), its own ICMP rate limits. What a test makes beyond it (namespaces,
    veth links, taps) it makes from there. Without root, as it was: one network."""
    if os.geteuid() != 0:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), f"unshare(CLONE_NEWNET): {os.strerror(ctypes.get_errno())}")
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)


# The ports the tests give their servers. Not port 0's kind (the kernel's ephemeral range,
# net.ipv4.ip_local_port_range, 32768 and up): a port taken there and let go may be any socket's
# next, a client's or a transfer's, before the server binds it. Below it, a block of its own for
# each process of the suite (pytest-xdist's workers run side by side), taken in turn.
PORT_BLOCK = 1500
PORT_BASE = 20000 + int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0) % 8 * PORT_BLOCK
_ports = itertools.count()


def free_port() -> int:
    """A port of 127.0.0.1 free now for UDP and TCP alike, from this process's block."""
    for _ in range(PORT_BLOCK):
        port = PORT_BASE + next(_ports) % PORT_BLOCK
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp, socket.socket() as tcp:
                udp.bind(("127.0.0.1", port))
                tcp.bind(("127.0.0.1", port))
            return port
        except OSError:
            continue
    raise RuntimeError(f"no free port in {PORT_BASE}..{PORT_BASE + PORT_BLOCK - 1}")


def free_udp_port() -> int:
    return free_port()


def free_tcp_port() -> int:
    return free_port()


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
        self.argv = [*prefix, str(SERVER_BINARY), "-l", "-L", "-a", address, "-v", "--backend", backend, *args, str(root)]
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
        if not self.log.closed:
            self.log.flush()
        return self.log_path.read_text(errors="replace")

    def log_lines(self, text: str, timeout=10.0, count=1) -> list:
        """The log's lines holding `text`, waiting up to `timeout` for `count` of them: a line is
        written when the server ends the transfer, which may be after the client has exited."""
        deadline = time.time() + timeout
        while True:
            lines = [line for line in self.log_text().splitlines() if text in line]
            if len(lines) >= count or time.time() >= deadline:
                return lines
            time.sleep(0.05)

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
        return -1

    def cpu_seconds(self) -> float:
        """User + system CPU of the server process so far (all its threads)."""
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def udp_sockets(self) -> list:
        """The local (address, port) of every UDP socket the server holds, from /proc/net/udp{,6}."""
        inodes = set()
        for fd in os.listdir(f"/proc/{self.process.pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{self.process.pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        found = []
        for table, family in (("udp", socket.AF_INET), ("udp6", socket.AF_INET6)):
            for line in Path(f"/proc/{self.process.pid}/net/{table}").read_text().splitlines()[1:]:
                fields = line.split()
                if fields[9] not in inodes:
                    continue
                address, port = fields[1].split(":")
                raw = bytes.fromhex(address)
                # /proc prints each 32-bit word in host order.
                raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
                found.append((socket.inet_ntop(family, raw), int(port, 16)))
        return found

    def fd_count(self) -> int:
        return len(os.listdir(f"/proc/{self.process.pid}/fd"))

    def idle_fd_count(self, still=0.3, timeout=5.0) -> int:
        """The descriptor count once it has held still for `still` seconds: after the "serving"
        line, the disk thread still walks the root for interrupted uploads' temporary files,
        holding a directory open while it does."""
        deadline = time.time() + timeout
        count, since = self.fd_count(), time.time()
        while time.time() - since < still and time.time() < deadline:
            time.sleep(0.05)
            now = self.fd_count()
            if now != count:
                count, since = now, time.time()
        return count

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


def metrics_url(server) -> str:
    """Where the server says it serves its metrics: a line written just after "serving", which
    the server may not have written yet when the test reads its log."""
    match = re.search(r"metrics on (http://\S+/metrics)", "\n".join(server.log_lines("metrics on")))
    assert match, server.log_text()
    return match.group(1)


def upload_temporaries(directory: Path, settle=2.0) -> list:
    """The temporary files of uploads left in `directory`, once the server's disk thread has had
    `settle` seconds to remove those of uploads that ended (it removes them, not the loop)."""
    deadline = time.time() + settle
    while True:
        left = [p.name for p in directory.iterdir() if p.name.startswith(".stampede-upload")]
        if not left or time.time() >= deadline:
            return left
        time.sleep(0.02)


def run(argv, timeout=120, **kw):
    return subprocess.run(argv, capture_output=True, timeout=timeout, **kw)


class NetworkNamespace:
    """A network namespace made for one test: `inside` is the command prefix that runs a program
    in it; `sockets()` makes Python sockets created in its block belong to it."""

    def __init__(self, name):
        self.name = name
        self.inside = ["ip", "netns", "exec", name]

    def run_inside(self, argv, **kw):
        return run([*self.inside, *argv], **kw)

    def write_sysctl(self, key, value):
        r = self.run_inside(["sh", "-c", f"echo {value} > /proc/sys/{key.replace('.', '/')}"])
        assert r.returncode == 0, r.stderr

    @contextlib.contextmanager
    def sockets(self):
        libc = ctypes.CDLL(None, use_errno=True)
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        target = os.open(f"/run/netns/{self.name}", os.O_RDONLY)
        try:
            assert libc.setns(target, CLONE_NEWNET) == 0, os.strerror(ctypes.get_errno())
            yield
        finally:
            assert libc.setns(own, CLONE_NEWNET) == 0, os.strerror(ctypes.get_errno())
            os.close(own)
            os.close(target)


CLONE_NEWNET = 0x40000000


@pytest.fixture
def network_namespace():
    """make(loss=0, icmp_unlimited=False) -> a new NetworkNamespace with loopback up, where an
    nftables rule drops `loss` % of all UDP datagrams each way (the kernel here has no netem), and
    where ICMP errors are not rate-limited if asked (Linux sends 1,000 a second at most, fewer per
    destination)."""
    if os.geteuid() != 0:
        pytest.skip("LOUD SKIP: network namespaces and nftables need root")
    made = []

    def make(loss=0, icmp_unlimited=False):
        namespace = NetworkNamespace(f"stampede-test-{os.getpid()}-{len(made)}")
        assert run(["ip", "netns", "add", namespace.name]).returncode == 0
        made.append(namespace.name)
        assert run([*namespace.inside, "ip", "link", "set", "lo", "up"]).returncode == 0
        if loss:
            # Each datagram, not each send. A segmented send (UDP GSO: the server's window in one
            # call) is one packet on output, and on lo one packet on input too, so a rule there
            # would drop a whole window or none of it (0 or 16 of 16, never a part). With
            # gso_max_segs 1, lo cuts every send into its datagrams on its way out, and the rule
            # on input drops each of them, silently, as a path does.
            assert run([*namespace.inside, "ip", "link", "set", "lo", "gso_max_segs", "1"]).returncode == 0
            for rule in (["add", "table", "inet", "loss"],
                         ["add", "chain", "inet", "loss", "in", "{ type filter hook input priority 0; }"],
                         ["add", "rule", "inet", "loss", "in", "meta", "l4proto", "udp", "numgen", "random",
                          "mod", "100", "lt", str(loss), "drop"]):
                r = run([*namespace.inside, "nft", *rule])
                assert r.returncode == 0, r.stderr
        if icmp_unlimited:
            namespace.write_sysctl("net.ipv4.icmp_ratelimit", 0)
            namespace.write_sysctl("net.ipv4.icmp_msgs_per_sec", 0)
        return namespace

    yield make
    for name in made:
        run(["ip", "netns", "del", name])


@pytest.fixture
def boot_link(network_namespace):
    """(server namespace, client namespace) joined by a veth pair, veth-s at dhcpwire.SERVER and
    veth-c at dhcpwire.CLIENT: a boot network of its own, where broadcasts go."""
    import dhcpwire
    server, client = network_namespace(), network_namespace()
    r = run(["ip", "link", "add", "veth-s", "netns", server.name, "type", "veth", "peer", "name", "veth-c", "netns", client.name])
    assert r.returncode == 0, r.stderr
    for namespace, device, address in ((server, "veth-s", dhcpwire.SERVER), (client, "veth-c", dhcpwire.CLIENT)):
        for argv in (["ip", "addr", "add", f"{address}/24", "dev", device], ["ip", "link", "set", device, "up"]):
            r = namespace.run_inside(argv)
            assert r.returncode == 0, r.stderr
    return server, client


@pytest.fixture
def link6(network_namespace):
    """(server namespace, client namespace) joined by veth-s and veth-c, IPv6 only, no DAD wait:
    veth-s at dhcp6wire.SERVER6, veth-c at dhcp6wire.CLIENT6."""
    from dhcp6wire import CLIENT6, SERVER6
    server, client = network_namespace(), network_namespace()
    r = run(["ip", "link", "add", "veth-s", "netns", server.name, "type", "veth", "peer", "name", "veth-c", "netns", client.name])
    assert r.returncode == 0, r.stderr
    for namespace, device, address in ((server, "veth-s", SERVER6), (client, "veth-c", CLIENT6)):
        namespace.write_sysctl(f"net.ipv6.conf.{device}.accept_dad", 0)
        for argv in (["ip", "-6", "addr", "add", f"{address}/64", "dev", device, "nodad"], ["ip", "link", "set", device, "up"]):
            r = namespace.run_inside(argv)
            assert r.returncode == 0, r.stderr
    # The link-local addresses a multicast leaves from.
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if b"fe80" in client.run_inside(["ip", "-6", "addr", "show", "dev", "veth-c"]).stdout:
            break
        time.sleep(0.05)
    return server, client


@pytest.fixture
def machine_api(tmp_path):
    """start(namespace, answers, delay=0) -> (URL, lines): pixieapi.py, a server of pixiecore's
    documented API, on the namespace's loopback; `lines()` is what it was asked."""
    started = []

    def start(namespace, answers, delay=0.0):
        port = free_tcp_port()
        (tmp_path / "answers.json").write_text(json.dumps(answers))
        out = open(tmp_path / "api.log", "w+")
        p = subprocess.Popen([*namespace.inside, sys.executable, os.path.join(os.path.dirname(__file__), "pixieapi.py"),
                              "--port", str(port), "--prefix", "/pixiecore", "--answers", str(tmp_path / "answers.json"),
                              "--delay", str(delay)], stdout=out, stderr=subprocess.STDOUT)
        started.append(p)
        deadline = time.time() + 10
        while "ready" not in (tmp_path / "api.log").read_text() and time.time() < deadline:
            time.sleep(0.05)
        return f"http://127.0.0.1:{port}/pixiecore", lambda: (tmp_path / "api.log").read_text().splitlines()[1:]

    yield start
    for p in started:
        p.kill()
        p.wait()


@pytest.fixture(params=BACKENDS)
def proxy(request, boot_link, root):
    """start(*flags) -> a Server on the server namespace, TFTP on 10.78.0.1 and --proxy-dhcp there."""
    from dhcpwire import SERVER
    server_ns, _ = boot_link
    started = []

    def start(*flags, http=True):
        extra = ["--http", f"{SERVER}:8080"] if http else []
        s = Server(root, ["--proxy-dhcp", SERVER, *extra, *flags], host=SERVER, backend=request.param, prefix=server_ns.inside)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


@pytest.fixture
def machine(boot_link):
    """A machine on the boot link's client side (dhcpwire.Machine): asks and hears DHCP."""
    import dhcpwire
    m = dhcpwire.Machine(boot_link[1])
    yield m
    m.close()
