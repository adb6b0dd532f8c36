"""The operator's view: `--metrics` (Prometheus), `--log-format json`, systemd's notify protocol,
`storm --metrics`, the Grafana dashboard. Checked with Prometheus's own tools and a real
Prometheus, against what real clients and the storm did."""
import json
import os
import re
import resource
import signal
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from conftest import BINARY, REPO, free_tcp_port, free_udp_port, metrics_url, run
from tftpwire import RawClient, data, error, request


def scrape(url) -> str:
    with urllib.request.urlopen(url, timeout=5) as answer:
        assert answer.status == 200
        assert answer.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return answer.read().decode()


def samples(text) -> dict:
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
    return out


def total(values, name, **labels) -> float:
    wanted = [f'{k}="{v}"' for k, v in labels.items()]
    return sum(v for k, v in values.items()
               if (k == name or k.startswith(name + "{")) and all(w in k for w in wanted))


def curl(port, name, out):
    return subprocess.run(["curl", "-s", "-o", str(out), f"tftp://127.0.0.1:{port}/{name}"], timeout=30).returncode


def test_the_exposition_passes_promtool_and_counts_what_curl_did(serve, root, tmp_path):
    # With --http: its loops count, but have no backend of their own to report.
    s = serve("--metrics", "127.0.0.1:0", "--http", f"127.0.0.1:{free_tcp_port()}")
    url = metrics_url(s)
    for _ in range(3):
        assert curl(s.port, "one-mib.bin", tmp_path / "got") == 0
    for name in ("missing-a", "missing-b"):
        assert curl(s.port, name, tmp_path / "nothing") != 0
    time.sleep(0.3)
    text = scrape(url)
    check = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stdout + check.stderr
    values = samples(text)
    assert total(values, "stampede_requests_total", request="rrq", outcome="served") == 3
    assert total(values, "stampede_requests_total", request="rrq", outcome="not_found") == 2
    assert total(values, "stampede_requests_total") == 5
    assert total(values, "stampede_file_bytes_total", direction="sent") == 3 << 20
    assert total(values, "stampede_transfer_duration_seconds_count", file="one-mib.bin") == 3
    assert total(values, "stampede_transfers_running") == 0
    assert total(values, "stampede_cache_hits_total") == 2 and total(values, "stampede_cache_misses_total") == 1
    assert total(values, "stampede_build_info", backend=s.backend) == 1
    assert total(values, "stampede_backend_sent_datagrams_total") >= 3 * 2049
    assert total(values, "process_cpu_seconds_total") > 0
    # Only io_uring has provided buffers to run out of.
    assert ("stampede_backend_receive_buffer_exhausted_total" in values) == (s.backend == "uring")
    assert ("stampede_backend_completions_lost_total" in values) == (s.backend == "uring")
    assert total(values, "stampede_workers") == int(re.search(r"with (\d+) workers", s.log_text()).group(1))


PXELINUX_FILES = {"pxelinux.0": 42_000, "ldlinux.c32": 122_000, "pxelinux.cfg/default": 40,
                  "vmlinuz": 1_500_000, "initrd.img": 2_500_000}


def pxelinux_root(root):
    (root / "pxelinux.cfg").mkdir()
    for name, size in PXELINUX_FILES.items():
        (root / name).write_bytes(os.urandom(size))


class Prometheus:
    """A real Prometheus (Debian's), scraping one target every second."""

    def __init__(self, target, directory):
        self.port = free_tcp_port()
        config = directory / "prometheus.yml"
        config.write_text(f"""
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: stampede
    static_configs:
      - targets: ["{target}"]
""")
        self.log = open(directory / "prometheus.log", "w")
        self.process = subprocess.Popen(
            ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={directory / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}"], stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=1) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError("prometheus did not start: " + (directory / "prometheus.log").read_text()[-2000:])

    def query(self, expression, at=None) -> float:
        parameters = {"query": expression} | ({"time": f"{at:.3f}"} if at else {})
        address = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode(parameters)
        with urllib.request.urlopen(address, timeout=5) as answer:
            result = json.load(answer)["data"]["result"]
        return float(result[0]["value"][1]) if result else float("nan")

    def wait_for(self, expression, condition, seconds=30):
        """Until `expression` has a value that meets `condition` (NaN: no value yet)."""
        deadline = time.time() + seconds
        while not condition(value := self.query(expression)):
            assert time.time() < deadline, f"{expression} is still {value}"
            time.sleep(0.3)

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=30)
        self.log.close()


def test_a_real_prometheus_scraping_a_storm_agrees_with_the_storm(serve, root, tmp_path):
    pxelinux_root(root)
    s = serve("--metrics", "127.0.0.1:0")
    url = metrics_url(s)
    prometheus = Prometheus(url.removeprefix("http://").removesuffix("/metrics"), tmp_path)
    try:
        prometheus.wait_for('up{job="stampede"}', lambda up: up == 1)
        machines = 40
        started = time.time()
        # Powered on over 4 s, so that Prometheus scrapes the rack while it boots.
        r = run([str(BINARY), "storm", f"127.0.0.1:{s.port}", "--profile", "pxelinux", "--clients", str(machines),
                 "--ramp", "4", "--verify-root", str(root), "--metrics", url, "--json"], timeout=120)
        result = json.loads(r.stdout)
        assert r.returncode == 0, r.stderr
        finished = time.time()
        served = sum(stage["ok"] for stage in result["stages"])
        not_found = sum(stage["not_found"] for stage in result["stages"])
        assert served == 5 * machines and not_found == 10 * machines  # pxelinux.cfg/UUID, 01-MAC, 8 hex names
        assert result["bytes"] == machines * sum(PXELINUX_FILES.values())
        # Prometheus scrapes during the storm; its last scrape is at least a second after the storm.
        prometheus.wait_for('timestamp(up{job="stampede"})', lambda scraped: scraped >= finished + 1.5)
        assert prometheus.query('up{job="stampede"}') == 1
        assert prometheus.query('sum(stampede_requests_total{outcome="served"})') == served
        assert prometheus.query('sum(stampede_requests_total{outcome="not_found"})') == not_found
        assert prometheus.query('sum(stampede_requests_total)') == served + not_found
        assert prometheus.query('sum(stampede_file_bytes_total{direction="sent"})') == result["bytes"]
        assert prometheus.query('sum(stampede_transfer_duration_seconds_count{file="vmlinuz"})') == machines
        assert prometheus.query('sum(stampede_transfer_duration_seconds_count{file="pxelinux.cfg/default"})') == machines
        during = prometheus.query('sum(stampede_requests_total)', at=started + 2.5)
        assert 0 < during < served + not_found, "no scrape saw the rack half booted"
        # The storm's own reading of the server agrees too.
        view = result["server"]
        assert view["requests"] == {"tftp": {"served": served, "not_found": not_found}}
        assert view["file_bytes_sent"] == result["bytes"] and view["file_bytes_sent_by_protocol"] == {"tftp": result["bytes"]}
        assert view["cpu_s"] > 0 and view["system_calls"] > 0 and view["datagrams_per_send"] >= 1
    finally:
        prometheus.stop()


def test_idle_connections_and_a_slowloris_change_no_transfer(serve, root):
    s = serve("--metrics", "127.0.0.1:0")
    url = metrics_url(s)
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    baseline = s.idle_fd_count()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    idle = []
    stop = threading.Event()
    slowloris_closed = []

    def slowloris():
        with socket.create_connection(("127.0.0.1", port)) as c:
            opened = time.time()
            try:
                for byte in b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 1000:
                    if stop.is_set():
                        return
                    c.send(bytes([byte]))
                    time.sleep(0.2)
            except OSError:
                slowloris_closed.append(time.time() - opened)
    try:
        talker = threading.Thread(target=slowloris)
        talker.start()
        for _ in range(1000):
            c = socket.socket()
            c.setblocking(True)
            c.connect(("127.0.0.1", port))
            idle.append(c)
        assert s.fd_count() <= baseline + 16 + 4  # at most 16 connections held at once
        r = run([str(BINARY), "storm", f"127.0.0.1:{s.port}", "one-mib.bin", "--clients", "200", "--blksize", "1468",
                 "--verify", str(root / "one-mib.bin"), "--json"], timeout=120)
        result = json.loads(r.stdout)
        assert r.returncode == 0 and result["ok"] == 200 and result["failed"] == 0, r.stderr
        assert result["bytes"] == 200 << 20
        # Every held connection is cut at its request deadline (10 s), the slowloris with them.
        talker.join(timeout=20)
        assert slowloris_closed and slowloris_closed[0] < 15
        # The idle connections accepted last are cut at their own deadlines, a little later.
        deadline = time.time() + 15
        while s.fd_count() > baseline + 2:
            assert time.time() < deadline, f"{s.fd_count()} descriptors, {baseline} before"
            time.sleep(0.5)
        values = samples(scrape(url))
        assert total(values, "stampede_requests_total", outcome="served") == 200
    finally:
        stop.set()
        for c in idle:
            c.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.parametrize("flags", [
    ["--metrics", "nonsense"], ["--metrics", "127.0.0.1"], ["--metrics", "127.0.0.1:70000"],
    ["--metrics", "tftp.example:9469"], ["--metrics", "[::1:9469"], ["--log-format", "xml"],
])
def test_bad_flags_are_refused_at_start_with_exit_64(root, flags):
    r = run([str(BINARY), "-l", "-L", "-a", f"127.0.0.1:{free_udp_port()}", *flags, str(root)], timeout=10)
    assert r.returncode == 64, r.stderr
    assert flags[0] in r.stderr.decode()


def test_a_metrics_port_in_use_stops_the_start_with_a_clear_error(root):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = run([str(BINARY), "-l", "-L", "-a", f"127.0.0.1:{free_udp_port()}", "--metrics", f"127.0.0.1:{port}",
                 str(root)], timeout=10)
    assert r.returncode == 1
    assert f"cannot serve metrics on 127.0.0.1:{port}" in r.stderr.decode()


def test_storm_refuses_a_metrics_url_it_cannot_read(serve):
    s = serve()
    r = run([str(BINARY), "storm", f"127.0.0.1:{s.port}", "hello.txt", "--metrics", f"http://127.0.0.1:{free_tcp_port()}/metrics"])
    assert r.returncode == 2 and b"--metrics" in r.stderr and b"cannot connect" in r.stderr


def test_storm_refuses_a_metrics_url_that_is_not_http_with_exit_64(serve):
    s = serve()
    r = run([str(BINARY), "storm", f"127.0.0.1:{s.port}", "hello.txt", "--metrics", "ftp://127.0.0.1/metrics"])
    assert r.returncode == 64 and b"--metrics" in r.stderr


def test_the_json_log_has_one_object_per_finished_transfer(serve, root, tmp_path):
    s = serve("--log-format", "json")
    assert curl(s.port, "hello.txt", tmp_path / "got") == 0
    assert curl(s.port, "missing", tmp_path / "nothing") != 0
    time.sleep(0.3)
    s.stop()
    lines = [json.loads(line) for line in s.log_text().splitlines() if line.strip()]
    assert all({"time", "level", "message"} <= set(line) for line in lines)
    transfers = [line for line in lines if line.get("event") == "transfer"]
    assert len(transfers) == 1
    t = transfers[0]
    assert t["file"] == "hello.txt" and t["request"] == "rrq" and t["outcome"] == "served"
    assert t["bytes"] == len("hello, rack\n") and isinstance(t["duration_s"], float) and t["retransmits"] == 0
    assert t["client"].startswith("127.0.0.1:") and "tsize" in t["options"]
    refused = [line for line in lines if line.get("event") == "refused"]
    assert len(refused) == 1 and refused[0]["outcome"] == "not_found" and refused[0]["error_code"] == 1


def notify_socket(tmp_path):
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = tmp_path / "notify"
    listener.bind(str(path))
    os.chmod(path, 0o777)
    listener.settimeout(10)
    return listener, path


def test_systemd_hears_ready_watchdog_pings_and_stopping(root, tmp_path):
    listener, path = notify_socket(tmp_path)
    port = free_udp_port()
    environment = dict(os.environ, NOTIFY_SOCKET=str(path), WATCHDOG_USEC="200000")
    args = ["-s", "-u", "nobody"] if os.geteuid() == 0 else []
    server = subprocess.Popen([str(BINARY), "-l", "-L", "-a", f"127.0.0.1:{port}", *args, str(root)], env=environment,
                              stderr=subprocess.PIPE)
    try:
        ready = listener.recv(4096).decode()
        assert "READY=1" in ready and f"MAINPID={server.pid}" in ready
        # Ready means served: a request right now is answered.
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as c:
            c.settimeout(2)
            c.sendto(b"\x00\x01hello.txt\x00octet\x00", ("127.0.0.1", port))
            assert c.recvfrom(600)[0][:4] == b"\x00\x03\x00\x01"
        pings, started = 0, time.time()
        while time.time() - started < 1.0:
            if listener.recv(4096) == b"WATCHDOG=1":
                pings += 1
        assert pings >= 4  # every 100 ms, half the interval
        server.send_signal(signal.SIGTERM)
        heard = b""
        while b"STOPPING=1" not in heard:
            heard = listener.recv(4096)
        assert server.wait(timeout=15) == 0
    finally:
        if server.poll() is None:
            server.kill()
        listener.close()


def test_the_shipped_units_use_notify_and_systemd_reads_them_without_a_word(tmp_path):
    for unit in (REPO / "contrib" / "systemd").iterdir():
        if unit.suffix in (".service", ".socket"):
            (tmp_path / unit.name).write_text(unit.read_text().replace("@SBINDIR@", str(BINARY.parent)))
    for unit in ("stampede.service", "stampede-standalone.service"):
        text = (tmp_path / unit).read_text()
        assert "Type=notify" in text and "WatchdogSec=" in text, unit
    units = sorted(p.name for p in tmp_path.iterdir())
    # Documentation=man:stampede(8): the page the package installs, found where it is kept.
    pages = tmp_path / "man"
    (pages / "man8").mkdir(parents=True)
    (pages / "man8" / "stampede.8").write_text((REPO / "docs" / "stampede.8").read_text())
    check = run(["systemd-analyze", "verify", *units], cwd=tmp_path, env={**os.environ, "MANPATH": str(pages)})
    assert check.returncode == 0 and not check.stdout and not check.stderr, check.stderr.decode()


def test_the_grafana_dashboard_asks_only_for_metrics_the_server_exposes(serve, root, tmp_path):
    (tmp_path / "machines").mkdir()
    s = serve("--metrics", "127.0.0.1:0", "--machines", str(tmp_path / "machines"))
    assert curl(s.port, "hello.txt", tmp_path / "got") == 0
    time.sleep(0.3)
    exposed = set(re.findall(r"^# TYPE (\S+)", scrape(metrics_url(s)), re.MULTILINE))
    dashboard = json.loads((REPO / "contrib" / "grafana" / "stampede-rack-boot.json").read_text())
    expressions = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]
    titles = " ".join(panel["title"].lower() for panel in dashboard["panels"])
    for wanted in ("transfers running", "throughput", "failures", "p99", "dhcp", "machines by stage"):
        assert wanted in titles
    names = {re.sub(r"_(bucket|sum|count)$", "", n) for e in expressions for n in re.findall(r"\b((?:stampede|process)_\w+)", e)}
    assert names and names <= exposed, names - exposed


@pytest.mark.skipif(os.geteuid() != 0, reason="LOUD SKIP: chroot and user switching need root")
def test_process_figures_are_read_under_chroot_and_another_user(serve, root):
    """Issue 21, defect 6: under -s (the shipped unit's default) /proc was opened after the chroot,
    and both process figures read 0."""
    s = serve("-s", "-u", "nobody", "--metrics", "127.0.0.1:0")
    values = samples(scrape(metrics_url(s)))
    assert values["process_resident_memory_bytes"] > 1 << 20
    # Listeners, the io_uring ring or epoll, the root, the metrics listener and its loop: more than 5.
    assert values["process_open_fds"] > 5
    assert abs(values["process_open_fds"] - s.fd_count()) <= 2


def test_each_end_of_a_transfer_is_counted_as_what_it_was(serve, root):
    """Issue 21, defect 6: any client ERROR after an OACK counted as a size probe; upload re-ACKs
    were not retransmissions."""
    root.chmod(0o777)
    s = serve("--metrics", "127.0.0.1:0", "-c")
    url = metrics_url(s)

    def ended_after_oack(options, code, message=""):
        client = RawClient(s)
        reply, tid = client.exchange(request("one-mib.bin", options=options))
        assert reply[0] == "OACK", reply
        client.send(error(code, message), tid)
        client.close()

    ended_after_oack((("tsize", "0"), ("blksize", "1468")), 8)  # EDK2's size probe
    ended_after_oack((("blksize", "1468"),), 8)                 # refused options, no size asked: the client's error
    ended_after_oack((("tsize", "0"),), 0, "abort")             # a client that gave up
    ended_after_oack((("tsize", "0"),), 5, "Unknown transfer ID")  # the client runs another transfer of it
    # An upload whose client sends DATA 1 twice: the second gets ACK 1 again, a retransmission.
    writer = RawClient(s)
    reply, tid = writer.exchange(request("up.bin", write=True))
    assert reply == ("ACK", (0, b"")), reply
    for _ in range(2):
        writer.send(data(1, b"x" * 512), tid)
        assert writer.receive() == (("ACK", (1, b"")), tid)
    writer.send(data(2, b"end"), tid)
    assert writer.receive() == (("ACK", (2, b"")), tid)
    writer.close()
    time.sleep(0.3)
    values = samples(scrape(url))
    assert total(values, "stampede_requests_total", request="rrq", outcome="probe") == 1
    assert total(values, "stampede_requests_total", request="rrq", outcome="client_error") == 2
    assert total(values, "stampede_requests_total", request="rrq", outcome="duplicate") == 1
    assert total(values, "stampede_requests_total", request="wrq", outcome="served") == 1
    assert total(values, "stampede_retransmissions_total") == 1


def test_the_exit_line_tells_transfers_from_refused_requests(serve, root):
    """Issue 21, defect 6: a PXELINUX configuration search's "not found"s were failed transfers."""
    s = serve()
    client = RawClient(s)
    for name in ("pxelinux.cfg/01-52-54-00-12-34-56", "pxelinux.cfg/C0A80001", "pxelinux.cfg/C0A8", "pxelinux.cfg/C"):
        assert client.exchange(request(name))[0] == ("ERROR", (1, "File not found"))
    assert client.download("hello.txt") == b"hello, rack\n"
    client.close()
    s.stop()
    line = s.log_lines("stopped after")[0]
    assert "stopped after 1 transfers (0 failed" in line, line
    assert "4 requests refused (4 of them for a file not there)" in line, line


def vm_rss_kib(pid) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def test_a_scraper_that_asks_and_never_reads_costs_bounded_memory_and_is_closed(serve, root):
    """Issue 21, defect 13: one connection pipelining GET /metrics and never reading grew the
    server by 494 MiB for 60,000 requests; the memory is the TFTP server's."""
    s = serve("--metrics", "127.0.0.1:0")
    url = metrics_url(s)
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    scrape(url)
    before = vm_rss_kib(s.process.pid)
    greedy = socket.create_connection(("127.0.0.1", port))
    greedy.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    greedy.settimeout(2)
    request_bytes = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 1000
    sent = 0
    try:
        for _ in range(60):
            greedy.sendall(request_bytes)
            sent += 1000
    except (socket.timeout, BrokenPipeError, ConnectionResetError):
        pass  # the server stopped reading, or closed
    time.sleep(1)
    grown_mib = (vm_rss_kib(s.process.pid) - before) / 1024
    assert grown_mib < 32, f"the server grew {grown_mib:.0f} MiB for {sent} pipelined requests"
    # The server closed the connection (it asked for more than it took): its answers, then the end.
    greedy.settimeout(5)
    try:
        while greedy.recv(65536):
            pass
        closed = True
    except ConnectionResetError:
        closed = True
    except socket.timeout:
        closed = False
    greedy.close()
    assert closed, "the connection is still open"
    # Everybody else is served as before.
    assert total(samples(scrape(url)), "stampede_workers") >= 1
    assert RawClient(s).download("hello.txt") == b"hello, rack\n"


def test_a_request_that_does_not_parse_is_answered_400_and_closed_at_once(serve):
    """Issue 21, defect 13: after its 400 the connection held its place until the deadline."""
    s = serve("--metrics", "127.0.0.1:0")
    port = int(metrics_url(s).rsplit(":", 1)[1].split("/")[0])
    with socket.create_connection(("127.0.0.1", port)) as c:
        c.settimeout(5)
        started = time.time()
        c.sendall(b"GARBAGE\x00\x01 nonsense\r\n\r\n")
        answer = b""
        while chunk := c.recv(4096):
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 400"), answer
        assert time.time() - started < 2
