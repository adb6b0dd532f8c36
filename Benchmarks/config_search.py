"""PXELINUX's config search at rack scale (`make bench-config-search`): every machine asks for ten
per-machine names that are not there (its UUID, its MAC, its IP in hex shortened a digit at a
time) before pxelinux.cfg/default, as PXELINUX 6 does, so a rack's TFTP server spends most of its
requests refusing. The storm plays 10,000 machines powering on over a second against each server
in interleaved rounds; the figure is the server's CPU per request (user and system, and user
alone), from a cgroup of its own. Stampede logs every refusal at --verbosity 0 (a "File not
found" line to its log file, a write each), as in.tftpd does; dnsmasq 2.93, as every bench runs
it (--quiet-tftp), logs only the files it sent (to a file here).

BENCH_ROUNDS (5), BENCH_MACHINES (10,000), BENCH_SERVERS (a comma list) narrow the run;
BENCH_BASELINE names another stampede binary to run beside this one (as make bench's does).
Results: results/bench-config-search.{json,md}."""
import json
import os
import subprocess
import sys
import time

from harness import (ROOT, SID, STAMPEDE, CpuGroup, dnsmasq_command, free_port, in_sid, median_spread, raise_fd_limit, start,
                     stop, with_spread, write_results)

SEARCH = "pxelinux.cfg/${uuid} pxelinux.cfg/01-${mac:hexhyp} pxelinux.cfg/${ip:hex} " + " ".join(
    f"pxelinux.cfg/${{ip:hex:{n}}}" for n in range(7, 0, -1)) + " pxelinux.cfg/default"
PROFILE = f"""profile config-search
firmware pxelinux retry=125ms tries=12 backoff=16
first {SEARCH} tsize blksize=1408
"""
REQUESTS_PER_MACHINE = 11
DIRECTORY = ROOT / "config-search"
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "5"))
MACHINES = int(os.environ.get("BENCH_MACHINES", "10000"))
BASELINE = os.environ.get("BENCH_BASELINE")


def stampede(backend, binary=STAMPEDE):
    return lambda port, log: [binary, "-l", "-L", "-a", f"127.0.0.1:{port}", "-u", "root", "--verbosity", "0",
                              "--backend", backend, "--logfile", log, DIRECTORY / "root"]


SERVERS = {
    "stampede-uring": stampede("uring"),
    "stampede-glibc": stampede("glibc"),
    **({"stampede-uring-baseline": stampede("uring", BASELINE), "stampede-glibc-baseline": stampede("glibc", BASELINE)}
       if BASELINE else {}),
    # No TFTP port option: port 69.
    "dnsmasq": lambda port, log: in_sid(dnsmasq_command("/usr/sbin/dnsmasq", DIRECTORY / "root")),
}


def play(name, command, round_):
    """One storm against one server: (CPU µs per request, user µs per request, the storm's report)."""
    port = 69 if name == "dnsmasq" else free_port()
    log = DIRECTORY / f"{name}.log"
    log.unlink(missing_ok=True)
    group = CpuGroup.make(f"config-search-{name}-{round_}")
    if group is None:
        sys.exit("config_search.py: needs a cpuacct cgroup of its own for each server (run as root)")
    with open(log, "a") as output:
        server = start(name, command(port, log), port, output, group)
        try:
            before = group.seconds(), group.user_seconds()
            storm = subprocess.run([STAMPEDE, "storm", f"127.0.0.1:{port}", "--profile-file", DIRECTORY / "search.profile",
                                    "--clients", str(MACHINES), "--ramp", "1", "--json"], capture_output=True, text=True,
                                   timeout=300)
            after = group.seconds(), group.user_seconds()
        finally:
            stop(server)
            group.remove()
    report = json.loads(storm.stdout)
    requests = MACHINES * REQUESTS_PER_MACHINE
    print(f"round {round_} {name}: {report['ok']} ok, {report['failed']} failed, "
          f"{(after[0] - before[0]) / requests * 1e6:.2f} µs per request", file=sys.stderr)
    return (after[0] - before[0]) / requests * 1e6, (after[1] - before[1]) / requests * 1e6, report


def main():
    raise_fd_limit()
    (DIRECTORY / "root" / "pxelinux.cfg").mkdir(parents=True, exist_ok=True)
    (DIRECTORY / "root" / "pxelinux.cfg" / "default").write_text("default linux\n")
    (DIRECTORY / "search.profile").write_text(PROFILE)
    wanted = os.environ.get("BENCH_SERVERS")
    servers = {name: command for name, command in SERVERS.items() if not wanted or name in wanted.split(",")}
    if "dnsmasq" in servers and not (SID / "usr/sbin/dnsmasq").exists():
        del servers["dnsmasq"]
    runs = {name: [] for name in servers}
    for round_ in range(ROUNDS):
        for name in (list(servers) if round_ % 2 == 0 else list(servers)[::-1]):
            runs[name].append(play(name, servers[name], round_))
            time.sleep(1)
    rows = []
    for name, results in runs.items():
        cpu, user = median_spread([r[0] for r in results]), median_spread([r[1] for r in results])
        rows.append({"server": name, "cpu_us": cpu, "user_us": user, "ok": [r[2]["ok"] for r in results],
                     "failed": [r[2]["failed"] for r in results]})
    reference = next((row for row in rows if row["server"] == "dnsmasq"), None)
    lines = [f"PXELINUX's config search: {MACHINES:,} machines over 1 s, each 10 names not there and "
             f"pxelinux.cfg/default ({REQUESTS_PER_MACHINE} requests), {ROUNDS} interleaved rounds; "
             "server CPU per request, median (lowest–highest).", "",
             "| server | CPU µs per request | user µs per request | ÷ dnsmasq | machines ok | failed |",
             "|---|---|---|---|---|---|"]
    for row in rows:
        ratio = f"{row['cpu_us'][0] / reference['cpu_us'][0]:.2f}" if reference else "–"
        lines.append(f"| {row['server']} | {with_spread(*(f'{v:.2f}' for v in row['cpu_us']))} | "
                     f"{with_spread(*(f'{v:.2f}' for v in row['user_us']))} | {ratio} | "
                     f"{min(row['ok'])}–{max(row['ok'])} | {max(row['failed'])} |")
    write_results("bench-config-search", {"machines": MACHINES, "rounds": ROUNDS, "rows": rows}, "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
