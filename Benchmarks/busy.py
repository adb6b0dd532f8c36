#!/usr/bin/env python3
"""`make bench-busy`: what a rack gets from a server that is full, answering ERROR 0 at once
(`--when-busy error`) or nothing (`--when-busy silence`, the client sends its request again).

A firmware that gets ERROR 0 gives up its boot; one whose request goes unanswered retries it a
few seconds later. Two ways of being full, each with both answers, in interleaved rounds
(BUSY_ROUNDS, default 3; the median round is shown with the spread of machines booted):

- limit: `--max-transfers 100`, and 1,000 machines ask at once for 1 MiB (lockstep, blksize 1468)
- descriptors: the server may hold 128 descriptors (prlimit), the same 1,000 machines

The machines are `stampede storm` clients, every byte verified, retrying their request after
1, 2, 4, 8 and 8 s (`--retransmit 1000 --retries 5`; EDK2 waits 4 s six times, iPXE backs off
from 0.25 s to 10 s). Results: results/busy.json and busy.md.
"""
import json
import os
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import RESULTS, ROOT, STAMPEDE, fill_root, free_port, raise_fd_limit, start, stop, write_results  # noqa: E402

ROUNDS = int(os.environ.get("BUSY_ROUNDS", "3"))
MACHINES = int(os.environ.get("BUSY_MACHINES", "1000"))


@dataclass(frozen=True)
class Cause:
    """A way of being full: what runs the server (`prefix`), its flags, and how the table says it."""
    name: str
    prefix: tuple
    flags: tuple
    said: str


CAUSES = [
    Cause("limit", (), ("--max-transfers", "100"), "--max-transfers 100"),
    Cause("descriptors", ("prlimit", "--nofile=128:128"), (), "128 descriptors (prlimit)"),
]
POLICIES = ["error", "silence"]


def run_one(cause, policy, log):
    port = free_port()
    command = [*cause.prefix, STAMPEDE, "-l", "-L", "-a", f"127.0.0.1:{port}", "-u", "root", "--verbosity", "0",
               "--when-busy", policy, *cause.flags, ROOT]
    process = start(f"stampede-{policy}", command, port, log)
    try:
        storm = subprocess.run([str(STAMPEDE), "storm", f"127.0.0.1:{port}", "1mib.bin", "--clients", str(MACHINES),
                                "--blksize", "1468", "--retransmit", "1000", "--retries", "5",
                                "--verify", str(ROOT / "1mib.bin"), "--json"],
                               capture_output=True, text=True, preexec_fn=raise_fd_limit, timeout=300)
        result = json.loads(storm.stdout)
    finally:
        alive = process.poll() is None
        stop(process)
    return {"cause": cause.name, "policy": policy, "booted": result["ok"], "failed": result["failed"],
            "failures": result["failures"], "p50_ms": result["p50_ms"], "p99_ms": result["p99_ms"],
            "max_ms": result["max_ms"], "seconds": result["seconds"], "server_alive": alive}


def main():
    if not STAMPEDE.exists():
        sys.exit(f"{STAMPEDE} missing: `make bench-busy` builds it first")
    fill_root(ROOT, {"1mib.bin": 1 << 20})
    RESULTS.mkdir(exist_ok=True)
    rounds = []
    with open(RESULTS / "busy-servers.log", "w") as log:
        for number in range(1, ROUNDS + 1):
            for cause in CAUSES:
                for policy in POLICIES:
                    row = run_one(cause, policy, log)
                    row["round"] = number
                    rounds.append(row)
                    print(f"round {number}: {cause.name:>11} --when-busy {policy:<7} {row['booted']} booted, "
                          f"{row['failed']} failed {row['failures'] or ''}, p99 {row['p99_ms']:.0f} ms", flush=True)
    lines = ["| server full by | --when-busy | machines booted (spread) | failed to boot | p50 ms | p99 ms | max ms |",
             "|---|---|---|---|---|---|---|"]
    for cause in CAUSES:
        for policy in POLICIES:
            group = sorted((r for r in rounds if r["cause"] == cause.name and r["policy"] == policy),
                           key=lambda r: r["booted"])
            median = group[(len(group) - 1) // 2]
            failures = ", ".join(f"{v} {k}" for k, v in median["failures"].items()) or "-"
            lines.append(f"| {cause.said} | {policy} | {median['booted']} of {MACHINES} "
                         f"({group[0]['booted']}–{group[-1]['booted']}) | {failures} | {median['p50_ms']:.0f} "
                         f"| {median['p99_ms']:.0f} | {median['max_ms']:.0f} |")
    table = "\n".join(lines)
    info = {"rounds": ROUNDS, "machines": MACHINES, "median_booted": {
                f"{c.name}/{p}": statistics.median(r["booted"] for r in rounds if r["cause"] == c.name and r["policy"] == p)
                for c in CAUSES for p in POLICIES}}
    write_results("busy", {"run": info, "rounds": rounds}, f"Median of {ROUNDS} interleaved rounds.\n\n{table}")
    print()
    print(table)


if __name__ == "__main__":
    main()
