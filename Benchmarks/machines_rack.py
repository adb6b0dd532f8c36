#!/usr/bin/env python3
"""`make bench-machines`: what knowing each machine costs. A rack (20,000 machines: see MACHINES;
BENCH_MACHINES to change it) powering on over 3 s through
Stampede's proxy, TFTP and HTTP, each machine following the iPXE script it is given
(`storm --profile uefi-ipxe-follow`: EDK2's DHCP, ipxe.efi over TFTP, iPXE's autoexec.ipxe over
TFTP, then, where there is none, iPXE's DHCP and the boot.ipxe it names over HTTP, and the kernel
and initrd the script names over HTTP, every byte compared), three ways on each backend:

- none: no records; autoexec.ipxe is not found, and every machine gets the root's boot.ipxe.
- records: `--machines DIR`, a record per machine (its MAC, its kernel and initrd as the API's
  answers name them, http:// URLs, and its own command line): the server writes each machine's
  autoexec.ipxe, which iPXE 2.0 runs in place of its DHCP and the DHCP-named script; the storm
  plays the same directory (`storm --machines`), each script checked against its machine's record.
- api: `--machines-api`, .build/pixieapi (Benchmarks/PixieAPI/pixieapi.c, a server of pixiecore's
  API in C: the tests' pixieapi.py in Python took a core of the two for the seconds 20,000
  machines ask in) answering each machine's boot after 20 ms (at nice -10, BENCH_API_NICE: it
  stands for a service on a host of its own), beside an empty DIR; the server times each call
  (its metrics), and the report shows them and the API server's own CPU.

The lab of bench-dhcp: two namespaces joined by a veth pair, the server at 10.79.0.1, the storm in
4 processes (BENCH_SLICES), each its DHCP from an address of its own (10.79.0.57 and on), and each
machine's transfers from an address of its own (10.96.0.0/16), which its ProxyDHCP REQUEST names,
so the proxy binds it. 5 interleaved rounds (BENCH_ROUNDS; the order
of the configurations turns each round), the median round and the spread; the server's CPU, and
the part of it in user space, from a cgroup of its own (the API server's is not in it). Goal: records and the API add at most 5 % of
server CPU per machine, and the DHCP answers' p99 stays within one EDK2 retry (4 s). Root only.
Results: results/bench-machines.{json,md} (BENCH_OUTPUT names them otherwise, so that a narrowed run
does not replace the report's).

BENCH_BASELINE=PATH runs another stampede binary (an older build) as the server beside this one,
each rack twice back to back (which goes first turns each round), as rows `{backend}-baseline`
(BENCH_BASELINE_LABEL names them otherwise), and a table of this build's ratios to it, paired
within each round; the storm is this build's in both."""
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import (REPO, RESULTS, ROOT, STAMPEDE, CpuGroup, TCPMemory, cpu_seconds, fill_root, in_group, stamp_line, stop_all,  # noqa: E402
                     tcp_memory_cell, tcp_pressure_mb, write_results)
from proxy_dhcp import CLIENT, CLIENT_NS, HTTP_PORT, SERVER, SERVER_NS, make_lab, remove_lab  # noqa: E402

RACK = ROOT / "machines-rack"
RECORDS = ROOT / "machines-records"
EMPTY = ROOT / "machines-empty"
FILES = {"ipxe.efi": 256 << 10, "vmlinuz": 512 << 10, "initrd.img": 1 << 20}
# A process holds at most 20,000 descriptors here (a TFTP socket or an HTTP connection per machine
# booting): the storm plays the rack in SLICES processes, each from an address of its own on the
# boot network (--dhcp: its boot server ACKs come back there).
MACHINES = int(os.environ.get("BENCH_MACHINES", "20000"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "5"))
BACKENDS = os.environ.get("BENCH_BACKENDS", "uring,glibc").split(",")
CONFIGURATIONS = os.environ.get("BENCH_CONFIGURATIONS", "none,records,api").split(",")
SOURCES = "10.96.0.0/16"
API_PORT = 8081
API_DELAY = 0.02
# Calls to the API at once (--machines-api-calls; the server's default is 64): 20,000 machines in 3 s
# ask 6,700 a second, and at 20 ms an answer 64 calls answer 3,200.
API_CALLS = int(os.environ.get("BENCH_API_CALLS", "256"))
# The API (in C: `make bench-machines` builds it) stands for a service on a host of its own; here it
# shares the two cores with the server and the storms (the tests' pixieapi.py, Python's asyncio, got
# a sixth of a core during the burst at their priority and answered in seconds, not 20 ms; at nice
# -10 it took most of a core from them for the seconds the machines ask in). It runs at this nice
# value (os.setpriority), so that it answers about as fast as it says; the server times each call
# (stampede_machines_api_call_seconds, read from METRICS_PORT at each round's end), and the report
# shows how long they took, and the API's own CPU.
API_NICE = int(os.environ.get("BENCH_API_NICE", "-10"))
PIXIE_API = REPO / ".build" / "pixieapi"
METRICS_PORT = 9101
SLICES = int(os.environ.get("BENCH_SLICES", "4"))
BASELINE = os.environ.get("BENCH_BASELINE")
BASELINE_LABEL = os.environ.get("BENCH_BASELINE_LABEL", "baseline")
OUTPUT = os.environ.get("BENCH_OUTPUT", "bench-machines")
# A directory: each run's server is profiled there while its storm runs (perf record, call graphs
# by frame pointer), {backend}-{configuration}-{round}.data, for `perf report -i` (perf: Debian's
# linux-perf, which `make bench-deps` installs).
PROFILE = os.environ.get("BENCH_PROFILE")


def mac(n):
    return f"52:54:00:{(n >> 16) & 0xff:02x}:{(n >> 8) & 0xff:02x}:{n & 0xff:02x}"


def prepare():
    fill_root(RACK, FILES)
    (RACK / "boot.ipxe").write_text("#!ipxe\nkernel vmlinuz initrd=initrd.img\ninitrd initrd.img\nboot\n")
    (RACK / "boot.ipxe").chmod(0o644)
    for directory in (RECORDS, EMPTY):
        directory.mkdir(parents=True, exist_ok=True)
    wanted = {f"node-{n:05d}" for n in range(MACHINES)}
    for stale in set(os.listdir(RECORDS)) - wanted - {".stampede-key"}:
        os.unlink(RECORDS / stale)
    answers = {}
    for n in range(MACHINES):
        path = RECORDS / f"node-{n:05d}"
        text = (f"mac = {mac(n + 1)}\nkernel = http://{SERVER}:{HTTP_PORT}/vmlinuz\ninitrd = http://{SERVER}:{HTTP_PORT}/initrd.img\n"
                f"cmdline = hostname=node-{n:05d} quiet\n")
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
        answers[mac(n + 1)] = {"kernel": f"http://{SERVER}:{HTTP_PORT}/vmlinuz", "initrd": [f"http://{SERVER}:{HTTP_PORT}/initrd.img"],
                               "cmdline": f"hostname=node-{n:05d} quiet"}
    # pixieapi.c's answers: a line each, "MAC BODY".
    (ROOT / "machines-answers.txt").write_text("".join(f"{m} {json.dumps(a)}\n" for m, a in answers.items()))


def limits():
    """Every descriptor the hard limit allows (20,000 here, with no CAP_SYS_RESOURCE to raise it)."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def api_priority():
    """The API's process before it execs: the descriptor limit, and its priority (API_NICE)."""
    limits()
    os.setpriority(os.PRIO_PROCESS, 0, API_NICE)


def server_metrics():
    """The server's metrics (its listener's text), read at the round's end."""
    read = ("import urllib.request; print(urllib.request.urlopen("
            f"'http://127.0.0.1:{METRICS_PORT}/metrics', timeout=10).read().decode())")
    return subprocess.run(["ip", "netns", "exec", SERVER_NS, sys.executable, "-c", read],
                          capture_output=True, text=True, check=True).stdout


def api_call_times(text):
    """The server's histograms of its calls to the API (stampede_machines_api_call_seconds) and of
    what the machines waited (..._wait_seconds: the call and the wait for a caller), from its
    metrics: the calls, their mean and the buckets their median and 99th percentile fall in, in ms."""
    def histogram(name):
        buckets, count, total = [], 0, 0.0
        for line in text.splitlines():
            if line.startswith(f'{name}_bucket{{le="') and '+Inf' not in line:
                buckets.append((float(line.split('"')[1]), float(line.split()[-1])))
            elif line.startswith(f"{name}_count"):
                count = int(float(line.split()[-1]))
            elif line.startswith(f"{name}_sum"):
                total = float(line.split()[-1])

        def bound(share):
            return next((round(le * 1000, 1) for le, n in sorted(buckets) if n >= share * count), None)
        return {"calls": count, "mean_ms": round(total / count * 1000, 1) if count else None,
                "p50_le_ms": bound(0.5), "p99_le_ms": bound(0.99)}
    return {**histogram("stampede_machines_api_call_seconds"), "waited": histogram("stampede_machines_api_wait_seconds")}


def slice_address(i):
    """Storm slice i's address on the boot network: CLIENT, then the ones after it."""
    first, last = CLIENT.rsplit(".", 1)
    return f"{first}.{int(last) + i}"


def server_of(row):
    """A row's backend and the binary its server runs: this build's, or BENCH_BASELINE's for a
    `{backend}-{label}` row."""
    backend, _, label = row.partition("-")
    return backend, (Path(BASELINE) if label else STAMPEDE)


def builds(backend):
    """The rows a backend's racks run as: this build's, and with BENCH_BASELINE the baseline's."""
    return [backend] + ([f"{backend}-{BASELINE_LABEL}"] if BASELINE else [])


def row_rank(row):
    """Where a row goes in the report: by backend as BENCH_BACKENDS names them, this build first."""
    backend, _, label = row.partition("-")
    return (BACKENDS.index(backend) if backend in BACKENDS else len(BACKENDS), backend, label)


def server_command(row, configuration):
    backend, binary = server_of(row)
    command = ["ip", "netns", "exec", SERVER_NS, binary, "-L", "-a", f"{SERVER}:69", "--verbosity", "0", "-u", "root",
               "--backend", backend, "--proxy-dhcp", SERVER, "--http", f"{SERVER}:{HTTP_PORT}",
               "--metrics", f"127.0.0.1:{METRICS_PORT}"]
    if configuration == "records":
        command += ["--machines", RECORDS]
    elif configuration == "api":
        command += ["--machines", EMPTY, "--machines-api", f"http://127.0.0.1:{API_PORT}/pixiecore",
                    "--machines-api-calls", API_CALLS]
    return [str(a) for a in command + [RACK]]


def one_round(row, configuration, index):
    group = CpuGroup.make(f"machines-{row}-{configuration}-{index}")
    log = open(ROOT / f"bench-machines-{row}-{configuration}.log", "w")
    api = None
    if configuration == "api":
        api = subprocess.Popen([str(a) for a in ["ip", "netns", "exec", SERVER_NS, PIXIE_API, "--port", API_PORT, "--prefix", "/pixiecore",
                                                 "--answers", ROOT / "machines-answers.txt", "--delay-ms", round(API_DELAY * 1000)]],
                               stdout=subprocess.DEVNULL, stderr=log, preexec_fn=api_priority)
    joined = in_group(group)
    server = subprocess.Popen(server_command(row, configuration), stdout=log, stderr=subprocess.STDOUT,
                              preexec_fn=lambda: (joined(), limits()))
    try:
        time.sleep(2.0)
        if server.poll() is not None:
            raise RuntimeError(f"{row} {configuration} exited with {server.returncode}: see {log.name}")
        before = group.seconds() if group else 0.0
        before_user = group.user_seconds() if group else 0.0
        api_before = cpu_seconds(api.pid, children=False) if api else 0.0
        # The storm in SLICES processes (see MACHINES), each its share of the machines.
        storm = ["ip", "netns", "exec", CLIENT_NS, STAMPEDE, "storm", f"{SERVER}:69", "--profile", "uefi-ipxe-follow",
                 "--http", f"{SERVER}:{HTTP_PORT}", "--clients", MACHINES, "--ramp", "3", "--verify-root", RACK,
                 "--source-range", "10.96.0.1", "--json"]
        if configuration != "none":
            storm += ["--machines", RECORDS]
        profiler = None
        if PROFILE:
            Path(PROFILE).mkdir(parents=True, exist_ok=True)
            profiler = subprocess.Popen(["perf", "record", "-q", "-F", "499", "-g", "-p", str(server.pid),
                                         "-o", str(Path(PROFILE) / f"{row}-{configuration}-{index}.data")],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        tcp = TCPMemory()
        tcp.start()
        storms = [subprocess.Popen([str(a) for a in storm + ["--dhcp", slice_address(i), "--slice", f"{i}/{SLICES}"]],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=limits) for i in range(SLICES)]
        outputs = [p.communicate(timeout=3600) for p in storms]
        for out, err in outputs:
            if not out.strip():
                raise RuntimeError(f"storm printed nothing: {err[-2000:]}")
        slices = [json.loads(out) for out, _ in outputs]
        tcp_memory = tcp.stop()
        if profiler:
            profiler.send_signal(2)
            profiler.wait()
        cpu = (group.seconds() if group else 0.0) - before
        user = (group.user_seconds() if group else 0.0) - before_user
        metrics = server_metrics()
        # Kept beside the round's log, for what the table does not show (requests left alone, and why).
        (ROOT / f"bench-machines-{row}-{configuration}.metrics").write_text(metrics)
        calls = api_call_times(metrics) if api else None
        if calls is not None:
            # The API server's own CPU: not in the server's cgroup, but taken from the cores they share.
            calls["api_cpu_s"] = round(cpu_seconds(api.pid, children=False) - api_before, 3)
    finally:
        stop_all([server], group)
        if api:
            api.terminate()
            api.wait()
    # Summed over the slices; a slice's percentiles cannot be merged exactly: p50 is the slices'
    # median, p99 their largest (an upper bound of the whole rack's).
    def stage_p99(name):
        """None when no machine got through it (iPXE's DHCP, where each ran its autoexec.ipxe)."""
        stages = [next(s for s in r["stages"] if s["stage"] == name) for r in slices]
        return round(max(s["p99_ms"] for s in stages) / 1000, 3) if any(s["ok"] for s in stages) else None
    ok = sum(r["ok"] for r in slices)
    failures = {}
    for r in slices:
        for kind, count in r["failures"].items():
            failures[kind] = failures.get(kind, 0) + count
    return {"ok": ok, "failed": sum(r["failed"] for r in slices), "failures": failures,
            "failure_examples": [e for r in slices for e in r["failure_examples"]][:5],
            "p50_s": round(sorted(r["p50_ms"] for r in slices)[len(slices) // 2] / 1000, 3),
            "p99_s": round(max(r["p99_ms"] for r in slices) / 1000, 3),
            "uefi_dhcp_p99_s": stage_p99("uefi dhcp pxe arch=7"), "ipxe_dhcp_p99_s": stage_p99("ipxe dhcp ipxe arch=7"),
            "dhcp_retransmits": sum(s["retransmits"] for r in slices for s in r["stages"] if " dhcp " in s["stage"]),
            "tftp_retransmits": sum(s["retransmits"] for r in slices for s in r["stages"] if " dhcp " not in s["stage"]),
            "server_cpu_s": round(cpu, 3), "cpu_us_per_machine": round(cpu / max(1, ok) * 1e6, 1),
            "user_us_per_machine": round(user / max(1, ok) * 1e6, 1),
            "storm_cpu_s": round(sum(r["client_cpu_s"] for r in slices), 3), "seconds": max(r["seconds"] for r in slices),
            "api_calls": calls, "tcp_memory": tcp_memory,
            # Datagrams the storm's sockets dropped, their receive queues full (SO_RXQ_OVFL).
            "storm_queue_drops": sum(r.get("socket_queue_drops") or 0 for r in slices)}


def median(results, key):
    ordered = sorted(results, key=lambda r: r[key])
    return ordered[len(ordered) // 2], ordered[0][key], ordered[-1][key]


def main():
    if os.geteuid() != 0:
        sys.exit("bench-machines needs root: network namespaces and cgroups")
    if PROFILE and not shutil.which("perf"):
        sys.exit("BENCH_PROFILE needs perf: make bench-deps (Debian's linux-perf)")
    if "api" in CONFIGURATIONS and not PIXIE_API.exists():
        sys.exit(f"the api racks need {PIXIE_API}: make bench-machines builds it")
    prepare()
    rounds = {(r, c): [] for b in BACKENDS for r in builds(b) for c in CONFIGURATIONS}
    remove_lab()
    make_lab()
    # bench-dhcp's lab routes a /20 of machines' addresses; this rack needs more.
    subprocess.run(["ip", "-n", CLIENT_NS, "route", "add", "local", SOURCES, "dev", "lo"], check=True)
    subprocess.run(["ip", "-n", SERVER_NS, "route", "add", SOURCES, "via", CLIENT], check=True)
    for i in range(1, SLICES):
        subprocess.run(["ip", "-n", CLIENT_NS, "addr", "add", f"{slice_address(i)}/24", "dev", "veth-c"], check=True)
    # Each machine is a host of its own: the port unreachable its closed TFTP port answers a late
    # datagram with (a stale duplicate request's OACK, under load) is not held back by the rate
    # limit one host has (1,000 a second), which left the server resending to 20,000 machines'
    # closed ports for half a minute each.
    for key, value in (("icmp_ratelimit", 0), ("icmp_msgs_per_sec", 1000000), ("icmp_msgs_burst", 1000000)):
        subprocess.run(["ip", "netns", "exec", CLIENT_NS, "sh", "-c", f"echo {value} > /proc/sys/net/ipv4/{key}"], check=True)
    try:
        for index in range(ROUNDS):
            for backend in BACKENDS:
                order = CONFIGURATIONS[index % 3:] + CONFIGURATIONS[:index % 3]
                # With a baseline, each rack twice back to back, which build first turning each round.
                rows = builds(backend)[::-1] if index % 2 else builds(backend)
                for configuration, row in [(c, r) for c in order for r in rows]:
                    r = one_round(row, configuration, index)
                    rounds[(row, configuration)].append(r)
                    print(f"round {index + 1} {row} {configuration}: {r['ok']} ok, {r['failed']} failed, p50 {r['p50_s']} s, "
                          f"p99 {r['p99_s']} s, DHCP p99 {r['uefi_dhcp_p99_s']}/{r['ipxe_dhcp_p99_s']} s, "
                          f"server CPU {r['server_cpu_s']} s ({r['cpu_us_per_machine']} µs a machine, {r['user_us_per_machine']} in user space)"
                          f"{', API calls ' + api_calls(r) if r.get('api_calls') else ''}, TCP memory peak {r['tcp_memory']['peak_mb']} MB "
                          f"({r['tcp_memory']['seconds_over']} s at the pressure mark), the storm's queues dropped {r['storm_queue_drops']} "
                          f"{r['failures'] or ''} "
                          f"{'; '.join(r['failure_examples'])}", flush=True)
    finally:
        remove_lab()
    markdown = report(rounds)
    write_results(OUTPUT, {"machines": MACHINES, "api_delay_s": API_DELAY,
                                     "rounds": {f"{b} {c}": rs for (b, c), rs in rounds.items()}, "summary": summary(rounds)}, markdown)
    print(markdown)


def summary(rounds):
    return {f"{b} {c}": median(rs, "cpu_us_per_machine")[0] for (b, c), rs in rounds.items()}


def report(rounds):
    """The tables, from every round: the median round by server CPU per machine with the spread,
    the median by its user-space part; and, paired within each round (whose three racks ran back
    to back, on the host as it was then), the ratio of the whole to the rack without records and
    what the user-space part adds as a share of that rack's whole CPU: their medians and spreads."""
    backends = sorted({b for b, _ in rounds}, key=row_rank)
    configurations = [c for c in CONFIGURATIONS if any(k[1] == c for k in rounds)]
    count = len(next(iter(rounds.values())))
    lines = [f"What knowing each machine costs: {MACHINES} machines powering on over 3 s, storm --profile uefi-ipxe-follow --dhcp "
             "(EDK2's DHCP, ipxe.efi 256 KiB over TFTP, autoexec.ipxe over TFTP: without records not found, then iPXE's DHCP and the "
             "root's boot.ipxe over HTTP; with records or the API written for the machine, and run by iPXE in place of its DHCP (— in the "
             f"iPXE DHCP column); the 512 KiB kernel and 1 MiB initrd the script names over HTTP, every byte compared{'' if SLICES == 1 else f'; the storm in {SLICES} processes, p50 their median, p99 their largest'}), without records, with a record per machine "
             f"(--machines), and with pixiecore's API answering in {int(API_DELAY * 1000)} ms (--machines-api, {API_CALLS} calls at once); {count} interleaved "
             "rounds, the median round by server CPU per machine (its spread), the median of its part in user space; and, each round's "
             "racks paired (they ran one after another), the median of each round's ratio to the rack without records and of what the user-space "
             "part adds per machine as a share of that rack's whole CPU (their spreads):", "",
             "| backend | machines known by | booted / failed | boot p50 s | boot p99 s | EDK2 DHCP p99 s | iPXE DHCP p99 s "
             "| DHCP retransmissions | TFTP retransmissions | server CPU µs per machine (spread) | × none | of it in user space (spread) "
             "| added in user space, % of none's CPU | API calls: ms each as the server saw it, mean, p99 ≤ | ms a machine waited, mean, p99 ≤ "
             "| the API's server: CPU s "
             "| host TCP memory: peak MB, largest of the rounds (s at the pressure mark) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for backend in backends:
        bases = rounds.get((backend, "none"), [])
        for configuration in configurations:
            r, low, high = median(rounds[(backend, configuration)], "cpu_us_per_machine")
            u, user_low, user_high = median(rounds[(backend, configuration)], "user_us_per_machine")
            paired = [(x["cpu_us_per_machine"] / n["cpu_us_per_machine"], (x["user_us_per_machine"] - n["user_us_per_machine"]) / n["cpu_us_per_machine"] * 100)
                      for x, n in zip(rounds[(backend, configuration)], bases) if n["cpu_us_per_machine"]]
            ratio = paired_cell([p[0] for p in paired], "{:.3f}")
            added = paired_cell([p[1] for p in paired], "{:+.1f} %")
            lines.append(f"| {backend} | {configuration} | {r['ok']} / {r['failed']} | {r['p50_s']} | {r['p99_s']} | {r['uefi_dhcp_p99_s']} "
                         f"| {'—' if r['ipxe_dhcp_p99_s'] is None else r['ipxe_dhcp_p99_s']} | {r['dhcp_retransmits']} | {r['tftp_retransmits']} | {r['cpu_us_per_machine']} ({low}–{high}) | {ratio} "
                         f"| {u['user_us_per_machine']} ({user_low}–{user_high}) | {added} | {api_calls(r)} "
                         f"| {tcp_memory_cell(rounds[(backend, configuration)])} |")
    pressure = tcp_pressure_mb([r for rs in rounds.values() for r in rs])
    if pressure:
        lines += ["", f"The host's TCP memory (/proc/net/sockstat, every 100 ms: the server's sockets and the storm's) against "
                  f"its pressure mark, {pressure} MB (tcp_mem), past which the kernel prunes receive queues and shrinks send "
                  "buffers, and transfers stall: the server caps what each connection may hold unsent at its share of 256 MiB, "
                  "at least 128 KiB (docs/ARCHITECTURE.md)."]
    if "api" in configurations:
        lines += ["", f"The API's server (Benchmarks/PixieAPI/pixieapi.c: one thread, epoll) stands for a service on a host of its own; here it shares "
                  f"the two cores, so it runs at nice {API_NICE}, and the server times each of its calls and what each machine waited "
                  "for one, the call and the wait for a free caller before it (from stampede_machines_api_call_seconds "
                  "and stampede_machines_api_wait_seconds, read at the round's end; p99 as the bound of the bucket it falls in); "
                  "the API's server's own CPU during the storm is in the column after them (/proc: not in the server's)."]
    moved = "; ".join(f"{b}: from {min(r['user_us_per_machine'] for r in rounds[(b, 'none')])} to "
                      f"{max(r['user_us_per_machine'] for r in rounds[(b, 'none')])} µs a machine" for b in backends if (b, "none") in rounds)
    lines += ["", "A rack this size overloads the two cores the server and the storm share: rounds whose boots ran long (a boot "
              "p99 past 20 s) cost more CPU in the kernel, whatever the server knows, so the whole CPU's ratio moves by ±15 % "
              "from run to run. What knowing each machine adds is work in user space (records "
              "looked up, scripts written, the API's answers read), which moves less, but with the host too (the rack without "
              f"records took, in user space, {moved} across this run's rounds): the column \"added in "
              "user space\" is that work, per machine, against the whole CPU a machine costs without records, taken in each "
              "round against that round's rack without records (a round's racks ran one after another), its median and spread."]
    lines += against_baseline(rounds, backends, configurations)
    failed = [(b, c, i + 1, r) for (b, c), rs in rounds.items() for i, r in enumerate(rs) if r["failed"]]
    if not failed:
        lines += ["", f"No machine failed in any of the {count} rounds."]
    else:
        lines += ["", "Rounds in which a machine failed (of every round, not only the median), and what the storm said of the first few:", ""]
        for backend, configuration, index, r in failed:
            said = "; ".join(r.get("failure_examples", [])) or "not kept by this run"
            kinds = ", ".join(f"{count} {kind}" for kind, count in sorted(r["failures"].items()))
            lines.append(f"- {backend} {configuration}, round {index}: {r['failed']} failed ({kinds}): {said}")
    return "\n".join(lines)


def against_baseline(rounds, backends, configurations):
    """The rows of this build against its baseline's (BENCH_BASELINE), if any ran: each round's
    ratio, paired (the two racks ran back to back), the median and spread of each."""
    pairs = [(b, base) for b in backends for base in backends if "-" not in b and base.startswith(b + "-")]
    if not pairs:
        return []
    lines = ["", "This build against the baseline (another binary, the rows named after it), each rack of one round paired with the "
             "baseline's of the same round (they ran back to back): the median of each round's ratio and its spread, below 1 where this "
             "build took less:", "",
             "| backend | machines known by | server CPU per machine | of it in user space | boot p50 | boot p99 "
             "| TFTP retransmissions | failed, this / baseline (all rounds) |",
             "|---|---|---|---|---|---|---|---|"]
    for backend, base in pairs:
        for configuration in configurations:
            this, that = rounds.get((backend, configuration), []), rounds.get((base, configuration), [])
            def ratio(key):
                return paired_cell([x[key] / y[key] for x, y in zip(this, that) if y[key]], "{:.3f}")
            lines.append(f"| {backend} | {configuration} | {ratio('cpu_us_per_machine')} | {ratio('user_us_per_machine')} | {ratio('p50_s')} "
                         f"| {ratio('p99_s')} | {ratio('tftp_retransmits')} | {sum(r['failed'] for r in this)} / {sum(r['failed'] for r in that)} |")
    return lines


def paired_cell(values, form):
    """The median of a round-by-round figure and its spread, as the report's cell."""
    if not values:
        return "—"
    ordered = sorted(values)
    middle = form.format(ordered[len(ordered) // 2])
    return middle if ordered[0] == ordered[-1] else f"{middle} ({form.format(ordered[0])}–{form.format(ordered[-1])})"


def api_calls(r):
    """A round's API calls as the report's cell: their mean and the bucket bound of their p99."""
    calls = r.get("api_calls")
    if not calls or not calls["calls"]:
        return "— | — | —"
    waited = calls.get("waited") or {}
    return (f"{calls['calls']}: {calls['mean_ms']}, {calls['p99_le_ms']} | {waited.get('mean_ms')}, {waited.get('p99_le_ms')} "
            f"| {calls.get('api_cpu_s', '—')}")


def report_again():
    """`--report`: results/bench-machines.md (BENCH_OUTPUT's) written again from its JSON's rounds,
    under their stamp."""
    data = json.loads((RESULTS / f"{OUTPUT}.json").read_text())
    rounds = {tuple(key.split(" ")): rs for key, rs in data["rounds"].items()}
    (RESULTS / f"{OUTPUT}.md").write_text(f"{stamp_line(data['stamp'])}\n\n{report(rounds).strip()}\n")


if __name__ == "__main__":
    report_again() if sys.argv[1:] == ["--report"] else main()
