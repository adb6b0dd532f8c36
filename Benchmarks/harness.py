"""What every bench and the interop suite share: where things are, free ports, the peers' Debian
unstable tree, servers started and stopped with their readiness waited for, their CPU counted by
cgroup (or /proc), their memory and descriptors sampled, and the results written stamped with
the date, the commit and the machine, for the report (`Benchmarks/report.py`).

A library: nothing here runs by itself. The benches (`compare.py`, `http_vs_nginx.py`, `anycast.py`,
`busy.py`) and `Tests/interop` import it."""
import json
import math
import os
import re
import resource
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STAMPEDE = REPO / ".build" / "release" / "stampede"
PEERS = REPO / ".build" / "peers" / "usr" / "sbin"
SID = REPO / ".build" / "sid"
ROOT = REPO / ".build" / "bench-root"
RESULTS = REPO / "results"
TICKS = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
FD_LIMIT = 20000


# Ports

def free_port(kind=socket.SOCK_DGRAM) -> int:
    """A port of 127.0.0.1 free now, UDP (or TCP: `socket.SOCK_STREAM`)."""
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_is_free(port: int, kind=socket.SOCK_DGRAM) -> bool:
    with socket.socket(socket.AF_INET, kind) as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


# The peers' tree

def in_sid(command, share=ROOT):
    """`command` run from the Debian unstable tree (its binaries need its glibc), in a mount
    namespace of its own where `share` is bound at its own path and /proc is mounted (a Swift
    program reads its arguments from /proc/self/cmdline); it shares the network. Every step
    execs, so the command keeps the pid (and the cgroup) it was started with."""
    script = 'mkdir -p "$0$1" && mount --bind "$1" "$0$1" && mount -t proc proc "$0/proc" && shift && exec chroot "$0" "$@"'
    return ["unshare", "--mount", "sh", "-c", script, str(SID), str(share), *map(str, command)]


# Processes and what they cost

def raise_fd_limit(limit=FD_LIMIT):
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))


def process_tree(pid: int):
    """pid and all its descendants."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                children = Path(f"/proc/{p}/task/{task}/children").read_text().split()
                todo.extend(int(c) for c in children)
        except OSError:
            pass
    return out


def cpu_seconds(pid: int, children=True) -> float:
    """User and system CPU of `pid` (all its threads), with its reaped children's if asked."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(fields[i]) for i in ((11, 12, 13, 14) if children else (11, 12))) / TICKS


def tree_cpu_seconds(pid: int) -> float:
    """A server's CPU with its children: reaped ones are in cutime/cstime, live ones read directly."""
    total = 0.0
    for p in process_tree(pid):
        try:
            total += cpu_seconds(p)
        except OSError:
            pass
    return total


class CpuGroup:
    """A cgroup v1 cpuacct group for one server and its children (tftpd-hpa forks one per transfer
    and ignores SIGCHLD, so /proc's cutime never sees them); None where cgroups are not writable."""

    BASE = Path("/sys/fs/cgroup/cpuacct")

    def __init__(self, name):
        self.path = self.BASE / f"stampede-bench-{os.getpid()}-{name}"
        self.path.mkdir()

    @classmethod
    def make(cls, name):
        try:
            return cls(name)
        except OSError:
            return None

    def join(self):
        """In the child before exec: the server and everything it forks are counted here."""
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def seconds(self) -> float:
        return int((self.path / "cpuacct.usage").read_text()) / 1e9

    def user_seconds(self) -> float:
        """The part of `seconds` spent in user space (the rest is the kernel's)."""
        return int((self.path / "cpuacct.usage_user").read_text()) / 1e9

    def remove(self):
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.1)


class Sampler(threading.Thread):
    """Peak RSS (MiB), open fds and processes over a server's process tree, every 100 ms."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.peak_rss, self.peak_fds, self.peak_processes = pid, 0.0, 0, 0
        self.stopping = threading.Event()

    def sample(self):
        rss = fds = 0
        tree = process_tree(self.pid)
        for p in tree:
            try:
                rss += int(Path(f"/proc/{p}/statm").read_text().split()[1]) * PAGE
                fds += len(os.listdir(f"/proc/{p}/fd"))
            except OSError:
                pass
        self.peak_rss = max(self.peak_rss, rss / 1048576)
        self.peak_fds = max(self.peak_fds, fds)
        self.peak_processes = max(self.peak_processes, len(tree))

    def run(self):
        while not self.stopping.wait(0.1):
            self.sample()


class TCPMemory(threading.Thread):
    """The host's TCP memory (/proc/net/sockstat's "mem", in pages: the kernel's count for all
    sockets of every namespace, the storm's too) every 100 ms while a run lasts: its peak, and the
    seconds it spent at or over the pressure mark (tcp_mem's second figure, read in this, the
    host's namespace), past which the kernel prunes receive queues and shrinks send buffers."""

    def __init__(self):
        super().__init__(daemon=True)
        self.pressure = int(Path("/proc/sys/net/ipv4/tcp_mem").read_text().split()[1])
        self.peak, self.over = 0, 0
        self.stopping = threading.Event()

    @staticmethod
    def pages():
        for line in Path("/proc/net/sockstat").read_text().splitlines():
            field = line.split()
            if field and field[0] == "TCP:":
                return int(field[field.index("mem") + 1])
        return 0

    def run(self):
        while not self.stopping.wait(0.1):
            pages = self.pages()
            self.peak = max(self.peak, pages)
            self.over += pages >= self.pressure

    def stop(self) -> dict:
        self.stopping.set()
        self.join()
        return {"peak_mb": round(self.peak * PAGE / 1e6), "pressure_mb": round(self.pressure * PAGE / 1e6),
                "seconds_over": round(self.over / 10, 1)}


def tcp_memory_cell(results) -> str:
    """The host's TCP memory over rounds (each a dict with a TCPMemory's "tcp_memory", or without
    one where it was run before it was sampled) as a report's cell: the largest peak, and the
    seconds spent at or over the pressure mark in all of them."""
    known = [r["tcp_memory"] for r in results if r.get("tcp_memory")]
    if not known:
        return "—"
    return f"{max(t['peak_mb'] for t in known)} ({sum(t['seconds_over'] for t in known):.1f} s)"


def tcp_pressure_mb(results):
    """The pressure mark (MB) the rounds' TCP memory was sampled against, or None."""
    return next((r["tcp_memory"]["pressure_mb"] for r in results if r.get("tcp_memory")), None)


def memory(pid: int) -> dict:
    """A process tree's resident memory now, in MiB: in all, and its kinds (/proc/PID/status):
    anonymous (heaps, stacks), shared memory (Stampede's file images are memfds) and mapped files
    (the binary and its libraries)."""
    kinds = {"RssAnon:": "anon", "RssShmem:": "shmem", "RssFile:": "file"}
    total = {"anon": 0.0, "shmem": 0.0, "file": 0.0}
    for p in process_tree(pid):
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                field = line.split()
                if field and field[0] in kinds:
                    total[kinds[field[0]]] += int(field[1]) / 1024
        except OSError:
            pass
    return {"rss": round(sum(total.values()), 1), **{kind: round(mib, 1) for kind, mib in total.items()}}


def in_group(group):
    """What a server's process runs before it execs (subprocess's preexec_fn): the descriptor
    limit every bench gives, and `group`'s cgroup (if any), so that its CPU is counted there."""
    def prepare():
        raise_fd_limit()
        if group:
            group.join()
    return prepare


def wait_for_tcp(port, process, name):
    """Waits until something accepts on 127.0.0.1:`port`; kills `process` and raises if nothing does within 10 s."""
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    process.kill()
    raise RuntimeError(f"{name} did not start on {port}")


def start(name, command, port, log, group=None, kind=socket.SOCK_DGRAM, timeout=10):
    """Starts a server in a session of its own (its fd limit raised, in `group` if given) and
    waits until it holds `port` (or dies: RuntimeError)."""
    prepare = in_group(group)

    process = subprocess.Popen([str(a) for a in command], stdout=log, stderr=subprocess.STDOUT,
                               preexec_fn=prepare, start_new_session=True)
    deadline = time.time() + timeout
    while time.time() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited with {process.returncode}")
        if not port_is_free(port, kind):
            time.sleep(0.2)
            return process
        time.sleep(0.05)
    raise RuntimeError(f"{name} did not bind port {port}")


def stop(process):
    """SIGTERM to the server's session, SIGKILL after 10 s."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def stop_all(processes, group=None):
    """SIGTERM to each, SIGKILL after 20 s; then the cgroup, if any, goes."""
    for process in processes:
        process.terminate()
    for process in processes:
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    if group:
        group.remove()


# The peers, as the benches run them

def nginx_config(name, listen, root, tls=None):
    """nginx as the benchmarks run it (Debian unstable's nginx-light): every worker, sendfile on,
    no access log, an error line for each file not found (nginx's default, and Stampede's
    --verbosity 0, which logs each refusal as a warning), keep-alive as long as the client wants, `listen` (ADDRESS:PORT) serving
    `root`. `tls`: (certificate, key, ciphers, DH parameters) for an HTTPS server with TLS 1.2 and
    1.3 and the server's order of `ciphers`, as Stampede's profile offers them (DHE needs the
    parameters: Stampede's OpenSSL picks RFC 7919's ffdhe2048 for a 2048-bit key). The file's path."""
    config = ROOT / f"nginx-{name}.conf"
    ssl = "" if tls is None else f"""
        ssl_certificate {tls[0]};
        ssl_certificate_key {tls[1]};
        ssl_protocols TLSv1.2 TLSv1.3;
        ssl_ciphers {tls[2]};
        ssl_dhparam {tls[3]};
        ssl_prefer_server_ciphers on;
        ssl_session_cache shared:bench:10m;"""
    config.write_text(f"""
user root;
worker_processes auto;
worker_rlimit_nofile {FD_LIMIT};
daemon off;
pid {ROOT}/nginx-{name}.pid;
error_log {ROOT}/nginx-{name}.error.log warn;
events {{ worker_connections {FD_LIMIT}; }}
http {{
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_timeout 60;
    keepalive_requests 1000000;
    default_type application/octet-stream;
    server {{
        listen {listen} reuseport{" ssl" if tls else ""};
        root {root};{ssl}
    }}
}}
""")
    return config


WRK_UNITS = {"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}


def wrk(url, connections, seconds):
    """wrk (Debian's: two threads, keep-alive) on `url` for `seconds`: the requests made, the bytes
    read, the non-2xx answers and wrk's socket errors."""
    command = ["wrk", "-t", "2", "-c", str(connections), "-d", f"{seconds}s", "--timeout", "30s", url]
    out = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 120,
                         preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))).stdout
    match = re.search(r"(\d+) requests in [\d.]+\w+, ([\d.]+)(\w+) read", out)
    if not match:
        raise RuntimeError(f"wrk said: {out}")
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    socket_errors = re.search(r"Socket errors: (.*)", out)
    return {"requests": int(match.group(1)), "bytes": float(match.group(2)) * WRK_UNITS[match.group(3)],
            "non_2xx": int(errors.group(1)) if errors else 0, "socket_errors": socket_errors.group(1) if socket_errors else ""}


def dnsmasq_command(binary, root):
    """dnsmasq as a TFTP server only (port=0: no DNS), on 127.0.0.1:69 (it has no TFTP port option)."""
    return [binary, "-k", "--port=0", "--enable-tftp", f"--tftp-root={root}", "--tftp-max=20000",
            "--listen-address=127.0.0.1", "--bind-interfaces", "--user=root", "--pid-file=", "--quiet-tftp",
            "--log-facility=-"]


def tftpd_hpa_command(binary, root, port):
    return [binary, "-L", "-l", "-a", f"127.0.0.1:{port}", "-u", "root", "-s", root]


# Files served

def fill_root(directory, files):
    """Random files of the sizes given ({name: bytes}) under `directory`, kept from run to run
    while their size is right; world-readable, as a server's root must be."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, size in files.items():
        path = directory / name
        if not path.exists() or path.stat().st_size != size:
            path.write_bytes(os.urandom(size))
        path.chmod(0o644)
    directory.chmod(0o755)


# Figures

def median_spread(values):
    """A figure over interleaved rounds: (median, lowest, highest)."""
    ordered = sorted(values)
    return ordered[len(ordered) // 2], ordered[0], ordered[-1]


def with_spread(median, low, high) -> str:
    """How the tables print a figure over rounds: "median (lowest–highest)"."""
    return f"{median} ({low}–{high})"


def percentile(sorted_values, p):
    """The storm's rule (StormReport.percentile): the ceil(p% of n)-th value."""
    if not sorted_values:
        return 0
    rank = math.ceil(p / 100 * len(sorted_values)) - 1
    return sorted_values[max(0, min(len(sorted_values) - 1, rank))]


def stamp() -> dict:
    """When, from what and where a result was measured: the commit is the tree's when the bench
    started (`AT_START`: the binaries it measures were built from it), not when it ended."""
    return {**stamp_now(), "commit": AT_START["commit"]}


def stamp_now() -> dict:
    """When, from what and where, now."""
    try:
        commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                timeout=10).stdout.strip() or "unknown"
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip() != ""
    except OSError:
        commit, dirty = "unknown", False
    model = "unknown"
    try:
        model = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "commit": commit + ("+changes" if dirty else ""),
            "machine": {"cpus": os.cpu_count(), "model": model, "kernel": os.uname().release,
                        "memory_gib": round(os.sysconf("SC_PHYS_PAGES") * PAGE / 2**30)}}


AT_START = stamp_now()


def stamp_line(stamped: dict) -> str:
    machine = stamped["machine"]
    return (f"Measured {stamped['date']} at commit {stamped['commit']} on {machine['cpus']} cores ({machine['model']}, "
            f"{machine['memory_gib']} GiB), kernel {machine['kernel']}.")


def write_results(name, data: dict, markdown: str) -> dict:
    """results/NAME.json (the data, with its stamp) and results/NAME.md (the stamp, then the
    tables): what `Benchmarks/report.py` assembles into docs/BENCHMARKS.md. Returns the stamp."""
    RESULTS.mkdir(exist_ok=True)
    stamped = stamp()
    (RESULTS / f"{name}.json").write_text(json.dumps({"stamp": stamped, **data}, indent=2))
    (RESULTS / f"{name}.md").write_text(f"{stamp_line(stamped)}\n\n{markdown.strip()}\n")
    return stamped
