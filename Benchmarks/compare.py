#!/usr/bin/env python3
"""`make bench`: Stampede on each backend and every peer server installed, side by side in one run.

Each (server, scenario) pair starts a fresh server on loopback, plays the scenario with
`stampede storm` (io_uring, every byte verified), and measures the server: CPU from a cpuacct
cgroup the server starts in (every thread and every forked child: tftpd-hpa forks one per
transfer and ignores SIGCHLD, so /proc's cutime never sees them; without cgroups, /proc is the
fallback and the JSON says so), peak RSS and open fds summed over the server's process tree
from /proc, sampled every 100 ms. Results go to results/bench.{json,md,svg}; the table goes to stdout.

Stampede runs on each backend with windows sent as segmented sends (UDP GSO, the default) and,
in the windowed scenarios, with --no-gso: what io_uring adds and what GSO adds, side by side.
Before the servers, the kernel floor (Benchmarks/Floor/floor.c, built as .build/floor): the
sender's CPU per GB for the same datagrams with sendmmsg and with GSO, no TFTP at all; and the
kernel's price for lockstep (Benchmarks/Floor/lockstep.c, .build/floor-lockstep): a datagram out
and its ACK in per block over as many socket pairs as a lockstep scenario has clients at once,
served by io_uring and by epoll, and, for the storm of small transfers, the same with a socket of
its own opened, bound, connected and closed for each transfer and its request and OACK (and with
those sockets kept from one transfer to the next). Each scenario's row says how far the server is
from the floor for its kind of transfer.

The peers are those operators run now, tftp-hpa 7.3's in.tftpd and dnsmasq 2.93, run from the
Debian unstable tree `make parity-deps` makes (chrooted in a mount namespace of their own where
the bench root is bound, sharing the network), and, as a second row, Debian 12's tftpd-hpa 5.2
(`tftpd-hpa-5.2`) and dnsmasq 2.90 (`dnsmasq-2.90`). Each row's version is in the JSON and the
table's header. Per-transfer logging is off for every server that has a switch for it (Stampede
--verbosity 0, dnsmasq --quiet-tftp, atftpd --verbose=1); tftpd-hpa logs no transfer by default.
Two runs of the same pair differ by 10-15 % on a shared 2-core machine, so Stampede (both
backends) and dnsmasq, the figures the project is judged by, run BENCH_ROUNDS times (default 3),
interleaved, and the table shows the median round with the spread of server CPU per GB;
the other peers run once (they are far from the others, and this keeps `make bench` near
15 minutes). Every round is kept in the JSON.
Environment: BENCH_SERVERS, BENCH_SCENARIOS (comma lists) narrow the run; BENCH_ROUNDS sets the
rounds; the rack runs once unless BENCH_RACK_ROUNDS says more rounds (interleaved with the
others as theirs are, each round a row); BENCH_QUICK=1 shrinks every scenario tenfold (a smoke test, not a measurement);
BENCH_BASELINE=PATH adds another stampede binary (an older build) on each backend, as
stampede-uring-baseline and stampede-glibc-baseline, interleaved with the others: a before/after
comparison in one run (BENCH_BASELINE_LABEL names it otherwise: `make bench-static` calls the
dynamically linked build `dynamic`). BENCH_OUTPUT names the results' files (default bench).
"""
import json
import shutil
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness import (PEERS, RESULTS, ROOT, SID, STAMPEDE, CpuGroup, Sampler, dnsmasq_command, free_port, in_sid, percentile,  # noqa: F401
                     port_is_free, process_tree, raise_fd_limit, start, stop, tftpd_hpa_command, tree_cpu_seconds, write_results)

REPO = Path(__file__).resolve().parents[1]
OUTPUT = os.environ.get("BENCH_OUTPUT", "bench")
QUICK = os.environ.get("BENCH_QUICK") == "1"
SCENARIO_LIMIT = 180  # seconds before a storm is interrupted
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
RACK_ROUNDS = int(os.environ.get("BENCH_RACK_ROUNDS", "1"))
FLOOR = REPO / ".build" / "floor"
FLOOR_LOCKSTEP = REPO / ".build" / "floor-lockstep"
BASELINE_LABEL = os.environ.get("BENCH_BASELINE_LABEL", "baseline")
REPEATED = {"stampede-uring", "stampede-glibc", "stampede-uring-nogso", "stampede-glibc-nogso", "dnsmasq",
            f"stampede-uring-{BASELINE_LABEL}", f"stampede-glibc-{BASELINE_LABEL}"}
WINDOWED = {"initrd", "uefi"}


@dataclass(frozen=True)
class Scenario:
    """What the storm plays against each server: the file it asks for, its size, the storm's
    arguments, what it shows; `processes`: storm processes for a boot profile (`--slice`),
    `rounds`: played in every round (else once: the long ones)."""
    name: str
    file: str
    size: int
    storm: list = field(default_factory=list)
    shows: str = ""
    processes: int = 1
    every_round: bool = True
    # Seconds before its storm is interrupted.
    limit: int = SCENARIO_LIMIT


SCENARIOS = [
    Scenario("rack-boot", "1mib.bin", 1 << 20, ["--clients", "1000", "--blksize", "1468"],
             "1,000 clients at once x 1 MiB, blksize 1468, lockstep"),
    Scenario("initrd", "64mib.bin", 64 << 20, ["--clients", "16", "--blksize", "1468", "--windowsize", "16"],
             "16 clients x 64 MiB, blksize 1468, windowsize 16"),
    Scenario("uefi", "1mib.bin", 1 << 20, ["--clients", "400", "--blksize", "1468", "--windowsize", "4"],
             "400 clients at once x 1 MiB, blksize 1468, windowsize 4 (EDK2's UEFI PXE default)"),
    Scenario("storm", "32kib.bin", 32 << 10, ["--clients", "400", "--total", "10000", "--blksize", "1468"],
             "10,000 transfers of 32 KiB, 400 at a time"),
    Scenario("scale", "32kib.bin", 32 << 10, ["--clients", "10000", "--blksize", "1468", "--timeout", "10", "--hold", "4"],
             "10,000 transfers held open at once (each client holds its first ACK 4 s)"),
    # A boot profile: the storm in 4 processes, each machine from its own loopback address, once.
    Scenario("rack", "ipxe.efi", 1 << 20, ["--profile", "uefi-ipxe-tftp", "--stages", "4", "--clients", "20000", "--ramp", "3"],
             "20,000 machines powering on over 3 s, each the uefi-ipxe-tftp profile's first stages: the UEFI size probe, "
             "ipxe.efi (1 MiB), autoexec.ipxe (not found), boot.ipxe; the storm in 4 processes, every process at most "
             "20,000 descriptors", processes=4, every_round=False, limit=420),
]


class Peer:
    """How to start one server: a name, a command for (root, port), and whether it is installed."""

    def __init__(self, name, binary, command, fixed_port=None, scenarios=None):
        self.name, self.binary, self.command, self.fixed_port = name, binary, command, fixed_port
        # Only these scenarios (None: all).
        self.scenarios = scenarios

    @property
    def installed(self) -> bool:
        return Path(self.binary).exists() if "/" in str(self.binary) else shutil.which(self.binary) is not None


def stampede(backend, *flags, binary=STAMPEDE):
    return lambda root, port: [binary, "-l", "-L", "-a", f"127.0.0.1:{port}", "-u", "root", "--verbosity", "0",
                               "--backend", backend, *flags, root]


BASELINE = os.environ.get("BENCH_BASELINE")


SERVERS = [
    Peer("stampede-uring", STAMPEDE, stampede("uring")),
    Peer("stampede-glibc", STAMPEDE, stampede("glibc")),
    # GSO changes only windows: these run where there are windows.
    Peer("stampede-uring-nogso", STAMPEDE, stampede("uring", "--no-gso"), scenarios=WINDOWED),
    Peer("stampede-glibc-nogso", STAMPEDE, stampede("glibc", "--no-gso"), scenarios=WINDOWED),
    *([Peer(f"stampede-uring-{BASELINE_LABEL}", BASELINE, stampede("uring", binary=BASELINE)),
       Peer(f"stampede-glibc-{BASELINE_LABEL}", BASELINE, stampede("glibc", binary=BASELINE))] if BASELINE else []),
    # dnsmasq has no TFTP port option: it serves on 69. --tftp-max raised from its default of 50.
    Peer("dnsmasq", SID / "usr/sbin/dnsmasq", lambda root, port: in_sid(dnsmasq_command("/usr/sbin/dnsmasq", root)), fixed_port=69),
    Peer("dnsmasq-2.90", "dnsmasq", lambda root, port: dnsmasq_command("dnsmasq", root), fixed_port=69),
    Peer("tftpd-hpa", SID / "usr/sbin/in.tftpd", lambda root, port: in_sid(tftpd_hpa_command("/usr/sbin/in.tftpd", root, port))),
    Peer("tftpd-hpa-5.2", PEERS / "in.tftpd", lambda root, port: tftpd_hpa_command(PEERS / "in.tftpd", root, port)),
    # --maxthread raised from its default of 100.
    Peer("atftpd", PEERS / "atftpd",
         lambda root, port: [PEERS / "atftpd", "--daemon", "--no-fork", "--port", str(port), "--bind-address",
                             "127.0.0.1", "--user", "root", "--group", "root", "--maxthread", "20000",
                             "--verbose=1", "--logfile", "-", root]),
]


def version_of(peer) -> str:
    """The version a peer says it is (its first line), for the table."""
    if peer.name.startswith("stampede"):
        return ""
    binary = str(peer.binary)
    flag = "--version" if "dnsmasq" in binary else "-V"
    command = ["chroot", str(SID), binary[len(str(SID)):], flag] if binary.startswith(str(SID)) else [binary, flag]
    try:
        r = subprocess.run(command, capture_output=True, text=True, timeout=10)
    except OSError:
        return "?"
    return ((r.stdout + r.stderr).strip().splitlines() or ["?"])[0]


def make_root():
    ROOT.mkdir(parents=True, exist_ok=True)
    for scenario in SCENARIOS:
        path, size = ROOT / scenario.file, scenario.size
        if not path.exists() or path.stat().st_size != size:
            with open(path, "wb") as f:
                f.write(os.urandom(size))
    # The script iPXE reads in the rack scenario (autoexec.ipxe is absent on purpose).
    (ROOT / "boot.ipxe").write_text("#!ipxe\nkernel vmlinuz\ninitrd initrd.img\nboot\n")
    ROOT.chmod(0o755)
    for f in ROOT.iterdir():
        f.chmod(0o644)


def quick(args):
    """BENCH_QUICK: a tenth of every count."""
    out = list(args)
    for i, a in enumerate(out[:-1]):
        if a in ("--clients", "--total"):
            out[i + 1] = str(max(1, int(out[i + 1]) // 10))
    return out


def run_one(peer, scenario, log):
    name, file, args = scenario.name, scenario.file, scenario.storm
    port = peer.fixed_port or free_port()
    if peer.fixed_port and not port_is_free(port):
        return {"server": peer.name, "scenario": name, "error": f"port {port} is in use"}
    if QUICK:
        args = quick(args)
    group = CpuGroup.make(f"{peer.name}-{name}")
    process = start(peer.name, peer.command(ROOT, port), port, log, group)
    sampler = Sampler(process.pid)
    sampler.sample()
    def server_cpu():
        return group.seconds() if group else tree_cpu_seconds(process.pid)
    cpu0 = server_cpu()
    udp0 = udp_counters()
    sampler.start()
    started = time.monotonic()
    if scenario.processes > 1:
        # Each process plays a slice of the rack, from its own loopback addresses.
        commands = [[str(STAMPEDE), "storm", f"127.0.0.1:{port}", *args, "--verify-root", str(ROOT), "--json",
                     "--slice", f"{i}/{scenario.processes}"] for i in range(scenario.processes)]
    else:
        commands = [[str(STAMPEDE), "storm", f"127.0.0.1:{port}", file, *args, "--retries", "3",
                     "--verify", str(ROOT / file), "--json"]]
    # Their reports go to files: one of 10,000 machines is larger than a pipe holds, and a storm
    # that cannot write it would wait (until the limit below) for a reader that waits for it.
    files = [(tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")) for _ in commands]
    storms = [subprocess.Popen(c, stdout=out, stderr=err, text=True, preexec_fn=raise_fd_limit)
              for c, (out, err) in zip(commands, files)]
    # A server that dies (atftpd past 1,024 sockets) or never finishes would leave the storm
    # waiting out its retries: it is interrupted instead, and reports what it saw until then.
    died_at = None
    while any(storm.poll() is None for storm in storms):
        time.sleep(0.1)
        if died_at is None and process.poll() is not None:
            died_at = time.monotonic()
        if (died_at and time.monotonic() - died_at > 2) or time.monotonic() - started > scenario.limit:
            for storm in storms:
                if storm.poll() is None:
                    storm.send_signal(signal.SIGINT)
            break
    for storm in storms:
        storm.wait()
    outputs = []
    for out, err in files:
        out.seek(0)
        err.seek(0)
        outputs.append((out.read(), err.read()))
        out.close()
        err.close()
    wall = time.monotonic() - started
    udp = {key: value - udp0.get(key, 0) for key, value in udp_counters().items()}
    alive = process.poll() is None
    # Let forked children finish and be reaped, so that their CPU is counted.
    deadline = time.time() + 5
    while alive and len(process_tree(process.pid)) > 1 and time.time() < deadline:
        time.sleep(0.05)
    cpu = server_cpu() - cpu0 if alive or group else None
    sampler.stopping.set()
    sampler.join()
    stop(process)
    lost_by_server = server_losses(log, process.pid)
    if group:
        group.remove()
    try:
        result = merge_storms([json.loads(out) for out, _ in outputs])
    except json.JSONDecodeError:
        return {"server": peer.name, "scenario": name, "error": f"storm: {outputs[0][1].strip()[-300:]}"}
    gigabytes = result["bytes"] / 1e9
    row = {
        "server": peer.name, "scenario": name, "ok": result["ok"], "failed": result["failed"],
        "failures": result["failures"], "server_alive": alive,
        "server_cpu_s": round(cpu, 3) if cpu is not None else None,
        "cpu_from": "cgroup cpuacct" if group else "/proc (children not waited for are missed)",
        "cpu_s_per_gb": round(cpu / gigabytes, 3) if cpu is not None and gigabytes > 0 else None,
        "sessions_per_cpu_s": round(result["ok"] / cpu, 1) if cpu else None,
        "mb_per_s": result["mb_per_s"], "sessions_per_s": result["sessions_per_s"],
        "p50_ms": result["p50_ms"], "p99_ms": result["p99_ms"], "max_ms": result["max_ms"],
        "retransmits": result["retransmits"], "duplicates": result["duplicates"],
        "peak_rss_mib": round(sampler.peak_rss, 1), "peak_fds": sampler.peak_fds,
        "peak_processes": sampler.peak_processes, "storm_cpu_s": result["client_cpu_s"], "wall_s": round(wall, 2),
        # Where datagrams were lost: the server's own count (Stampede's exit line), the storm's,
        # and the kernel's UDP counters of the whole host over the scenario (both sides).
        "lost": {"server": lost_by_server,
                 "storm": {key: result.get(key) for key in ("socket_queue_drops", "send_failures", "receive_buffer_exhausted",
                                                            "late_timers")},
                 "kernel_udp": {key: udp.get(key) for key in ("RcvbufErrors", "SndbufErrors", "InErrors", "MemErrors")}},
    }
    if "stages" in result:
        row["stages"] = result["stages"]
    if not alive:
        row["error"] = f"the server died (exit {process.returncode})"
    return row


def udp_counters() -> dict:
    """The kernel's UDP counters (/proc/net/snmp's Udp lines) of this network namespace."""
    lines = [line.split() for line in Path("/proc/net/snmp").read_text().splitlines() if line.startswith("Udp:")]
    return {name: int(value) for name, value in zip(lines[0][1:], lines[1][1:])}


STOP_LINE = re.compile(r"(\d+) timers fired 10 ms or more late; (\d+) datagrams the kernel would not send, "
                       r"(\d+) dropped on their way in \(full socket queues(?:; (\d+) of them at the listeners)?\), "
                       r"(?:(\d+) receives that found no buffer, )?")


def server_losses(log, pid) -> dict:
    """What a Stampede server said it lost, from its exit line in the servers' log (nothing for a peer)."""
    log.flush()
    for line in reversed(Path(log.name).read_text(errors="replace").splitlines()):
        match = STOP_LINE.search(line) if f"[{pid}]" in line else None
        if match:
            return {"late_timers": int(match[1]), "send_failures": int(match[2]), "socket_queue_drops": int(match[3]),
                    "listener_queue_drops": int(match[4]) if match[4] else None,
                    "receive_buffer_exhausted": int(match[5]) if match[5] else None}
    return {}


def merge_storms(results):
    """One report from the storm processes' reports: counts added, boot times pooled."""
    if len(results) == 1:
        return results[0]
    sums = ("ok", "failed", "bytes", "retransmits", "duplicates", "client_cpu_s", "peak_active",
            "socket_queue_drops", "send_failures", "receive_buffer_exhausted", "late_timers")
    merged = {key: 0 for key in sums}
    merged["failures"] = {}
    for r in results:
        for key in sums:
            merged[key] += r.get(key, 0)
        for kind, count in r["failures"].items():
            merged["failures"][kind] = merged["failures"].get(kind, 0) + count
    seconds = max(r["seconds"] for r in results)
    boots = sorted(ms for r in results for ms in r.get("boot_ms", []))
    merged.update(seconds=seconds, mb_per_s=round(merged["bytes"] / 1e6 / seconds, 3),
                  sessions_per_s=round(merged["ok"] / seconds, 3), p50_ms=percentile(boots, 50),
                  p99_ms=percentile(boots, 99), max_ms=percentile(boots, 100))
    stages = []
    for i, stage in enumerate(results[0].get("stages", [])):
        parts = [r["stages"][i] for r in results]
        stages.append({"stage": stage["stage"], "ok": sum(p["ok"] for p in parts), "failed": sum(p["failed"] for p in parts),
                       "not_found": sum(p["not_found"] for p in parts)})
    merged["stages"] = stages
    return merged


def median_rounds(rounds):
    """One row per (server, scenario): the round with the median server CPU per GB, with the
    spread across rounds and every round's failures added up."""
    groups = {}
    for r in rounds:
        groups.setdefault((r["server"], r["scenario"]), []).append(r)
    rows = []
    for (server, scenario), group in groups.items():
        measured = sorted((r for r in group if r.get("cpu_s_per_gb") is not None), key=lambda r: r["cpu_s_per_gb"])
        row = dict(measured[(len(measured) - 1) // 2] if measured else group[0])
        row["rounds"] = len(group)
        if measured:
            row["cpu_s_per_gb_range"] = [measured[0]["cpu_s_per_gb"], measured[-1]["cpu_s_per_gb"]]
        row["failed_all_rounds"] = sum(r.get("failed", 0) for r in group)
        row["server_died_in_rounds"] = sum(1 for r in group if not r.get("server_alive", True) or "error" in r)
        rows.append(row)
    order = {p.name: i for i, p in enumerate(SERVERS)}
    scenario_order = {s.name: i for i, s in enumerate(SCENARIOS)}
    return sorted(rows, key=lambda r: (scenario_order[r["scenario"]], order[r["server"]]))


# The floor figure a scenario compares with: ("lockstep", (pairs, transfer KiB)) of
# Benchmarks/Floor/lockstep.c served by io_uring (0 KiB: the pairs are kept; the storm's: a socket
# per 32 KiB transfer), or (window, mode) of Benchmarks/Floor/floor.c. scale's 10,000 clients at
# once would take 40,000 descriptors in the lockstep floor: it keeps the floor of its sends.
FLOOR_OF = {"rack-boot": ("lockstep", (1000, 0)), "initrd": (16, "gso"), "uefi": (4, "gso"),
            "storm": ("lockstep", (400, 32)), "scale": (1, "sendmmsg")}
# The lockstep floors run, as (pairs, transfer KiB, reuse): the scenarios', and beside the storm's
# transfers its clients on kept pairs and its transfers on sockets kept from one transfer to the
# next (what a socket per transfer costs the kernel, and how much of it is opening and closing it).
LOCKSTEP_RUNS = sorted({(*detail, False) for kind, detail in FLOOR_OF.values() if kind == "lockstep"}
                       | {(400, 0, False), (400, 32, True)}, key=lambda run: (-run[0], run[1], run[2]))


def lockstep_sockets(kib, reuse):
    """How a lockstep floor run holds its sockets, as the report says it."""
    return (f"one per {kib} KiB transfer" + (", kept for the next" if reuse else "")) if kib else "a pair each, kept"


def run_floor_program(program, arguments, what):
    """One floor program's JSON, or None where it is not built or failed."""
    if not program.exists():
        print(f"{program} missing: `make bench` builds it; not in this report")
        return None
    print(f"{what} ...", flush=True)
    r = subprocess.run([str(program), *arguments], capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        print(f"{program.name} failed: {r.stderr.strip()[-300:]}")
        return None
    return json.loads(r.stdout)


def run_floor():
    """The kernel floor: the sends (floor.c) and lockstep (lockstep.c, for each number of pairs a
    scenario needs), or None where the send floor is missing."""
    megabytes = "16" if QUICK else "64"
    floor = run_floor_program(FLOOR, ["--rounds", "5", "--megabytes", megabytes, "--zerocopy"],
                              "kernel floor (sendmmsg vs GSO vs zero-copy GSO, by syscall and by io_uring; no TFTP)")
    if floor is None:
        return None
    floor["lockstep"] = []
    for pairs, kib, reuse in LOCKSTEP_RUNS:
        lockstep = run_floor_program(FLOOR_LOCKSTEP, ["--rounds", "5", "--megabytes", megabytes, "--pairs", str(pairs),
                                                      "--transfer-kib", str(kib), *(["--reuse"] if reuse else [])],
                                     f"kernel floor for lockstep, {pairs} clients, sockets {lockstep_sockets(kib, reuse)} "
                                     "(io_uring vs epoll; no TFTP)")
        if lockstep:
            floor["lockstep"].append(lockstep)
    return floor


def floor_figure(floor, scenario):
    if not floor or scenario not in FLOOR_OF:
        return None
    kind, detail = FLOOR_OF[scenario]
    if kind == "lockstep":
        for run in floor.get("lockstep", []):
            if (run["pairs"], run.get("transfer_kib", 0), run.get("reuse", False)) == (*detail, False):
                return next(f["median"] for f in run["cpu_s_per_gb"] if f["mode"] == "uring")
        return None
    for f in floor["cpu_s_per_gb"]:
        if f["window"] == kind and f["mode"] == detail:
            return f["median"]
    return None


def with_ratios(rows, floor=None):
    """Each row against stampede-uring and dnsmasq in the same scenario: CPU per GB (lower is
    better) and sessions per server CPU-second (higher is better); and against the kernel floor."""
    for name, key in (("stampede-uring", "uring"), ("dnsmasq", "dnsmasq")):
        reference = {r["scenario"]: r for r in rows if r["server"] == name and r.get("cpu_s_per_gb")}
        for r in rows:
            ref = reference.get(r["scenario"])
            if ref and r.get("cpu_s_per_gb"):
                r[f"cpu_per_gb_vs_{key}"] = round(r["cpu_s_per_gb"] / ref["cpu_s_per_gb"], 2)
            if ref and r.get("sessions_per_cpu_s"):
                r[f"sessions_per_cpu_s_vs_{key}"] = round(r["sessions_per_cpu_s"] / ref["sessions_per_cpu_s"], 2)
    for r in rows:
        figure = floor_figure(floor, r["scenario"])
        if figure and r.get("cpu_s_per_gb"):
            r["cpu_per_gb_vs_floor"] = round(r["cpu_s_per_gb"] / figure, 2)
    return rows


def baseline_markdown(rows):
    """With BENCH_BASELINE: each scenario's Stampede on each backend against the older build on the
    same backend, from the same interleaved rounds (server CPU per GB, median and spread; the
    ratio above 1 means this build costs more)."""
    if not BASELINE:
        return ""
    lines = [f"| scenario | backend | this build CPU s/GB (spread) | {BASELINE_LABEL} (spread) | this ÷ {BASELINE_LABEL} |",
             "|---|---|---|---|---|"]
    by = {(r["server"], r["scenario"]): r for r in rows if r.get("cpu_s_per_gb")}

    def cell(r):
        spread = r.get("cpu_s_per_gb_range")
        return fmt(r["cpu_s_per_gb"]) + (f" ({fmt(spread[0])}–{fmt(spread[1])})" if spread and r["rounds"] > 1 else "")
    for scenario in dict.fromkeys(r["scenario"] for r in rows):
        for backend in ("uring", "glibc"):
            now, before = by.get((f"stampede-{backend}", scenario)), by.get((f"stampede-{backend}-{BASELINE_LABEL}", scenario))
            if now and before:
                lines.append(f"| {scenario} | {backend} | {cell(now)} | {cell(before)} "
                             f"| {now['cpu_s_per_gb'] / before['cpu_s_per_gb']:.2f} |")
    return "\n".join(lines)


def floor_markdown(floor):
    if not floor:
        return "No kernel floor in this run (`.build/floor` missing or failed)."
    windows = sorted({f["window"] for f in floor["cpu_s_per_gb"]})
    modes = ["sendmmsg", "gso", "gso-zc", "uring-gso", "uring-gso-zc"]
    cells = {(f["window"], f["mode"]): f for f in floor["cpu_s_per_gb"]}
    lines = ["| datagrams per send | sendmmsg | one GSO send | GSO + MSG_ZEROCOPY | io_uring GSO SENDMSG "
             "| io_uring GSO SENDMSG_ZC | sendmmsg ÷ GSO |", "|---|---|---|---|---|---|---|"]
    for w in windows:
        row = [str(w)]
        for m in modes:
            c = cells.get((w, m))
            row.append(f"{c['median']:.2f} ({c['low']:.2f}–{c['high']:.2f})" if c else "-")
        a, b = cells.get((w, "sendmmsg")), cells.get((w, "gso"))
        row.append(f"{a['median'] / b['median']:.2f}" if a and b else "-")
        lines.append("| " + " | ".join(row) + " |")
    failures = floor["send_failures"]
    return (f"Sender CPU-s per GB of {floor['datagram_bytes']}-byte datagrams (4 + 1,468, two iovecs each), median of "
            f"{floor['rounds']} interleaved rounds of {floor['megabytes_per_measurement']} MB, spread in brackets; "
            f"send failures {failures}; {floor['sent_datagrams']} sent, {floor['received_datagrams']} received.\n\n"
            + "\n".join(lines) + lockstep_markdown(floor.get("lockstep", [])))


def lockstep_markdown(runs):
    if not runs:
        return ""
    lines = ["| clients | sockets | io_uring | epoll | epoll ÷ io_uring |", "|---|---|---|---|---|"]
    for run in runs:
        cells = {f["mode"]: f for f in run["cpu_s_per_gb"]}
        uring, epoll = cells["uring"], cells["epoll"]
        sockets = lockstep_sockets(run.get("transfer_kib", 0), run.get("reuse", False))
        lines.append(f"| {run['pairs']:,} | {sockets} | {uring['median']:.2f} ({uring['low']:.2f}–{uring['high']:.2f}) "
                     f"| {epoll['median']:.2f} ({epoll['low']:.2f}–{epoll['high']:.2f}) "
                     f"| {epoll['median'] / uring['median']:.2f} |")
    first = runs[0]
    failures = {f"{run['pairs']}" + (f" ({lockstep_sockets(run['transfer_kib'], run.get('reuse', False))})"
                                     if run.get("transfer_kib") else ""): run["failures"] for run in runs}
    return ("\n\nLockstep, the kernel's price per block with no TFTP: each pair of connected loopback sockets "
            f"carries a DATA of {first['datagram_bytes']} bytes out and its 4-byte ACK back before the next, a "
            "client thread answering; the serving thread's CPU-s per GB, io_uring (a multishot receive per "
            "socket, a SENDMSG per block, one submit per batch) and epoll (recv and sendmsg per block). With a socket "
            "per transfer, each client asks a listener, and the server opens a socket (a fresh port, connected to the "
            "client), sends a 15-byte OACK, the transfer's blocks on its ACK 0 (the last one short) and closes it on "
            "the last ACK; kept for the next, it is not closed but connected to a later transfer's client, its "
            "receive still armed (what opening, binding and closing a socket per transfer costs is the "
            "difference). Median of "
            f"{first['rounds']} interleaved rounds of {first['megabytes_per_measurement']} MB, spread in brackets; "
            f"ACKs that never came {failures}.\n\n" + "\n".join(lines))


def fmt(value, digits=2):
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def failed_text(r):
    """`3 (2 timed out, 1 server error 0)`: the failures, most first."""
    kinds = sorted(r["failures"].items(), key=lambda kv: -kv[1])
    return str(r["failed"]) + (" (" + ", ".join(f"{v} {k}" for k, v in kinds) + ")" if r["failed"] else "")


def died_text(r):
    return "" if r["server_alive"] else " (died)"


def markdown(rows):
    header = ("| scenario | server | ok / failed | server CPU s/GB (spread) | × uring | × dnsmasq | × floor "
              "| sessions per CPU-s | × uring | MB/s | sessions/s | p99 ms | peak RSS MiB | peak fds | storm CPU s |")
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for r in rows:
        if "ok" not in r:
            lines.append(f"| {r['scenario']} | {r['server']} | {r['error']} |" + " |" * 12)
            continue
        failed, died = failed_text(r), died_text(r)
        spread = r.get("cpu_s_per_gb_range")
        cpu = fmt(r["cpu_s_per_gb"]) + (f" ({fmt(spread[0])}–{fmt(spread[1])})" if spread and r["rounds"] > 1 else "")
        lines.append(
            f"| {r['scenario']} | {r['server']}{died} | {r['ok']} / {failed} | {cpu} "
            f"| {fmt(r.get('cpu_per_gb_vs_uring'))} | {fmt(r.get('cpu_per_gb_vs_dnsmasq'))} "
            f"| {fmt(r.get('cpu_per_gb_vs_floor'))} | {fmt(r['sessions_per_cpu_s'], 0)} "
            f"| {fmt(r.get('sessions_per_cpu_s_vs_uring'))} | {fmt(r['mb_per_s'], 0)} | {fmt(r['sessions_per_s'], 0)} "
            f"| {fmt(r['p99_ms'], 0)} | {fmt(r['peak_rss_mib'], 0)} | {r['peak_fds']} | {fmt(r['storm_cpu_s'])} |")
    return "\n".join(lines)


def rack_markdown(rows):
    """The boot-profile scenarios on their own: did every machine boot, how long it took, and
    what the server held to get there."""
    once = {s.name for s in SCENARIOS if not s.every_round}
    rows = [r for r in rows if r["scenario"] in once]
    if not rows:
        return ""
    header = "| server | round | booted / failed | p50 boot s | p99 boot s | max boot s | wall s | server CPU s | peak RSS MiB | peak fds |"
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for r in rows:
        if "ok" not in r:
            lines.append(f"| {r['server']} | {r.get('round', 1)} | {r['error']} |" + " |" * 7)
            continue
        failed, died = failed_text(r), died_text(r)
        lines.append(f"| {r['server']}{died} | {r.get('round', 1)} | {r['ok']} / {failed} | {fmt(r['p50_ms'] / 1000)} | {fmt(r['p99_ms'] / 1000)} "
                     f"| {fmt(r['max_ms'] / 1000)} | {fmt(r['wall_s'])} | {fmt(r['server_cpu_s'])} "
                     f"| {fmt(r['peak_rss_mib'], 0)} | {r['peak_fds']} |")
    return "\n".join(lines) + "\n\n" + losses_markdown(rows)


def losses_markdown(rows):
    """Where the rack's datagrams were dropped: the server's sockets (its queues full, sends the
    kernel refused, io_uring receives that found no buffer) and its timers that fired 10 ms late
    or more (a busy loop), the storm's the same, and the host's UDP counters over the scenario,
    which hold both sides (RcvbufErrors: a full receive queue)."""
    header = ("| server | round | machines lost | server: queues full (at listeners) / sends refused / no buffer / late timers "
              "| storm: queues full / sends refused / no buffer / late timers | kernel UDP: RcvbufErrors / SndbufErrors / InErrors |")
    lines = ["Where datagrams were dropped, per side:", "", header, "|" + "---|" * (header.count("|") - 1)]

    def three(counts, keys):
        return " / ".join("-" if counts.get(k) is None else str(counts[k]) for k in keys)

    for r in rows:
        lost = r.get("lost")
        if not lost:
            continue
        side = ("socket_queue_drops", "send_failures", "receive_buffer_exhausted", "late_timers")
        server = three(lost["server"], side)
        if lost["server"].get("listener_queue_drops") is not None:
            queues, rest = server.split(" / ", 1)
            server = f"{queues} ({lost['server']['listener_queue_drops']}) / {rest}"
        lines.append(f"| {r['server']} | {r.get('round', 1)} | {r['failed']} | {server} | {three(lost['storm'], side)} "
                     f"| {three(lost['kernel_udp'], ('RcvbufErrors', 'SndbufErrors', 'InErrors'))} |")
    return "\n".join(lines)


def svg(rows):
    """Per scenario, two bar charts: server CPU per GB and sessions per server CPU-second."""
    servers = [p.name for p in SERVERS if any(r["server"] == p.name for r in rows)]
    scenarios = [s.name for s in SCENARIOS if any(r["scenario"] == s.name for r in rows)]
    colors = ["#1f77b4", "#6baed6", "#08306b", "#9ecae1", "#d62728", "#2ca02c", "#ff7f0e"]
    panel_w, panel_h, bar_h = 460, 30 + 22 * len(servers), 16
    width, height = 40 + 2 * panel_w, 60 + len(scenarios) * (panel_h + 30)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           '<text x="20" y="24" font-size="15">Server CPU per GB (lower is better), sessions per server CPU-second '
           '(higher is better)</text>']
    for si, scenario in enumerate(scenarios):
        top = 50 + si * (panel_h + 30)
        for pi, (metric, label) in enumerate([("cpu_s_per_gb", "server CPU s/GB"), ("sessions_per_cpu_s", "sessions per CPU-s")]):
            left = 20 + pi * panel_w
            out.append(f'<text x="{left}" y="{top}" font-weight="bold">{scenario}: {label}</text>')
            values = {r["server"]: r.get(metric) for r in rows if r["scenario"] == scenario}
            peak = max([v for v in values.values() if v] or [1])
            for i, server in enumerate(servers):
                y = top + 10 + i * 22
                v = values.get(server)
                w = 0 if not v else (panel_w - 260) * v / peak
                out.append(f'<text x="{left}" y="{y + 12}">{server}</text>')
                out.append(f'<rect x="{left + 150}" y="{y}" width="{w:.1f}" height="{bar_h}" fill="{colors[i % len(colors)]}"/>')
                out.append(f'<text x="{left + 155 + w:.1f}" y="{y + 12}">{fmt(v) if v else "failed"}</text>')
    out.append("</svg>")
    return "\n".join(out)


def main():
    if not STAMPEDE.exists():
        sys.exit(f"{STAMPEDE} missing: `make bench` builds it first")
    wanted_servers = os.environ.get("BENCH_SERVERS")
    wanted_scenarios = os.environ.get("BENCH_SCENARIOS")
    servers = [p for p in SERVERS if not wanted_servers or p.name in wanted_servers.split(",")]
    scenarios = [s for s in SCENARIOS if not wanted_scenarios or s.name in wanted_scenarios.split(",")]
    missing = [p.name for p in servers if not p.installed]
    servers = [p for p in servers if p.installed]
    if missing:
        print(f"not installed, skipped: {', '.join(missing)} (`make bench-deps` installs them)")
    versions = {p.name: version_of(p) for p in servers if not p.name.startswith("stampede")}
    for name, version in versions.items():
        print(f"{name}: {version}")
    make_root()
    RESULTS.mkdir(exist_ok=True)
    rounds = []
    started = time.monotonic()
    floor = run_floor()
    with open(RESULTS / "bench-servers.log", "w") as log:
        for round_number in range(1, ROUNDS + 1):
            for scenario in scenarios:
                for peer in servers:
                    if round_number > 1 and (peer.name not in REPEATED or (not scenario.every_round and round_number > RACK_ROUNDS)):
                        continue
                    if peer.scenarios is not None and scenario.name not in peer.scenarios:
                        continue
                    print(f"round {round_number}: {scenario.name:>9} on {peer.name:<15}", end=" ", flush=True)
                    row = run_one(peer, scenario, log)
                    row["round"] = round_number
                    rounds.append(row)
                    print(row.get("error") or f"{row['ok']} ok, {row['failed']} failed, {row['wall_s']} s")
    rows = with_ratios(median_rounds(rounds), floor)
    info = {"versions": versions, "quick": QUICK, "rounds": ROUNDS, "seconds": round(time.monotonic() - started, 1),
            "scenarios": {s.name: s.shows for s in scenarios}}
    table = markdown(rows)
    rack = rack_markdown(rounds)
    rack_section = f"### The rack: boot profiles at scale\n\n{rack}\n\n" if rack else ""
    against = baseline_markdown(rows)
    baseline_section = (f"### This build against {BASELINE_LABEL} ({BASELINE})\n\n{against}\n\n" if against else "")
    scenario_lines = "\n".join(f"- {name}: {info['scenarios'][name]}" for name in info["scenarios"])
    write_results(OUTPUT, {"run": info, "floor": floor, "rows": rows, "rounds": rounds},
        f"All on loopback; "
        f"the load is `stampede storm` (io_uring, every byte verified). Median of {ROUNDS} rounds for Stampede and "
        f"dnsmasq (spread of server CPU per GB in brackets), one round for the other peers. "
        f"Peers: {'; '.join(f'{name}: {version}' for name, version in versions.items())}. "
        f"`-nogso`: the same server with --no-gso. × floor: the server's CPU per GB over the kernel floor's for "
        f"its kind of transfer (rack-boot: lockstep's, as many pairs as clients at once; storm: lockstep's with a "
        f"socket per 32 KiB transfer, 400 clients; initrd: GSO sends of 16; uefi: GSO sends of 4; scale: one datagram per send).\n\n"
        f"{scenario_lines}\n\n{table}\n\n{baseline_section}{rack_section}"
        f"### The kernel floor\n\n{floor_markdown(floor)}\n")
    (RESULTS / f"{OUTPUT}.svg").write_text(svg(rows))
    print()
    print(table)
    print()
    if against:
        print(against)
        print()
    print(rack)
    print()
    print(floor_markdown(floor))
    print(f"\n{info['seconds']} s; results in {RESULTS}/{OUTPUT}.json, {OUTPUT}.md, {OUTPUT}.svg")


if __name__ == "__main__":
    main()
