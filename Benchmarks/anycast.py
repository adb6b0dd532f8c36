#!/usr/bin/env python3
"""`make bench-anycast`: three Stampede servers behind one anycast address, in the namespaces
Tests/interop/anycast-lab.sh makes (root), and a rack of BENCH_ANYCAST_MACHINES (default 2,000)
machines powering on over 3 s, each playing `storm --profile uefi-ipxe` (ipxe.efi over TFTP, the
script, a kernel and an initrd over HTTP, every byte compared) from an address of its own.

1. The hash-policy table: fib_multipath_hash_policy 0 (addresses) and 1 (ports too), each with
   the default mode (a fresh port per transfer) and --single-port, firmware not starting over:
   machines booted and failed, why, and each server's share of machines and bytes (max / mean).
2. A server lost mid-boot: kill -9 the first of the three servers 1 s into the ramp, its route
   withdrawn 1 s later, under a hash-threshold route and a resilient next-hop group, with the
   firmware's reboots (`storm --reboot`): failures, reboots, and the boot time of the machines
   that started over.
3. Draining a server: SIGTERM then the route withdrawn once it has exited, and the other order,
   firmware not starting over: every failed transfer counts.

BENCH_ANYCAST_ONLY (a word of the scenario's name: "hash", "lost", "drain") runs those rows only.
Each row is one run (failures are counted, not timed: there is nothing to interleave).
Results: results/bench-anycast.{json,md}.
"""
import os
import signal
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "Tests" / "interop"))
sys.path.insert(0, str(REPO / "Benchmarks"))
from anycastlab import Lab  # noqa: E402
from harness import RESULTS, STAMPEDE, fill_root, write_results  # noqa: E402
from harness import ROOT as BENCH_ROOT  # noqa: E402

ROOT = BENCH_ROOT / "anycast"
MACHINES = int(os.environ.get("BENCH_ANYCAST_MACHINES", "2000"))
# iPXE's real size; a kernel and an initrd smaller than a distribution's (BENCH_ANYCAST_MIB sets
# the initrd's MiB, the kernel's is a quarter of it): what fails here does not depend on them.
INITRD_MIB = int(os.environ.get("BENCH_ANYCAST_MIB", "8"))
ONLY = os.environ.get("BENCH_ANYCAST_ONLY", "")
FILES = {"ipxe.efi": 1 << 20, "vmlinuz": max(1, INITRD_MIB // 4) << 20, "initrd.img": INITRD_MIB << 20}


def make_root():
    fill_root(ROOT, FILES)
    (ROOT / "boot.ipxe").write_text("#!ipxe\nkernel vmlinuz\ninitrd initrd.img\nboot\n")
    (ROOT / "boot.ipxe").chmod(0o644)
    ROOT.parent.chmod(0o755)


def balance(share):
    machines = [m for m, _ in share.values()]
    sent = [b for _, b in share.values()]

    def ratio(values):
        mean = statistics.mean(values)
        return round(max(values) / mean, 2) if mean else None

    return {"machines": machines, "bytes": sent, "machines_max_over_mean": ratio(machines), "bytes_max_over_mean": ratio(sent)}


def scenario(name, policy, route, mode_args, action=None, storm_args=()):
    """One lab, three servers, one storm; `action(lab)` runs while the rack boots (None: a
    scenario BENCH_ANYCAST_ONLY leaves out)."""
    if ONLY not in name:
        return None
    print(f"{name} ...", flush=True)
    lab = Lab(f"bench-any{os.getpid() % 1000}", 3, policy, route, RESULTS, STAMPEDE)
    try:
        for i in (1, 2, 3):
            lab.start(i, ROOT, *mode_args, "--grace", "30")
        storm = lab.storm(ROOT, MACHINES, *storm_args, ramp=3)
        if action:
            action(lab)
        started = time.time()
        result = lab.report(storm, timeout=1800)
        result["wall_s"] = round(time.time() - started, 1)
        share = balance(lab.share())
    finally:
        lab.down()
    row = {"scenario": name, "policy": policy, "route": route, "mode": "single-port" if mode_args else "default",
           "ok": result["ok"], "failed": result["failed"], "failures": result["failures"],
           "transfers_failed": result["transfers_failed"], "reboots": result["reboots"],
           "reboot_causes": result["reboot_causes"], "rebooted_ok": result["rebooted_ok"],
           "rebooted_p50_ms": result["rebooted_p50_ms"], "rebooted_p99_ms": result["rebooted_p99_ms"],
           "p50_ms": result["p50_ms"], "p99_ms": result["p99_ms"], "share": share,
           "stage_failures": {s["stage"]: s["failures"] for s in result["stages"] if s["failed"]},
           "failure_examples": result["failure_examples"], "wall_s": result["wall_s"]}
    print(f"  {row['ok']} booted, {row['failed']} failed {row['failures']}, {row['transfers_failed']} transfers failed, "
          f"{row['reboots']} reboots; machines per server {share['machines']}", flush=True)
    return row


def lose(lab):
    # The first server, not the middle one: a hash-threshold route splits the hash space among
    # its next hops in order, so losing the middle one of three hands its share to the other two
    # and moves none of theirs, where losing an end one also moves a sixth of all flows between
    # the two survivors (a resilient group moves only the lost one's, either way).
    time.sleep(1)
    lab.signal(1, signal.SIGKILL)
    time.sleep(1)
    lab.withdraw(1)


def drain(first):
    def act(lab):
        time.sleep(1)
        if first == "sigterm":
            lab.signal(2, signal.SIGTERM)
            lab.wait(2, timeout=60)
            lab.withdraw(2)
        else:
            lab.withdraw(2)
            lab.signal(2, signal.SIGTERM)
            lab.wait(2, timeout=60)
    return act


def main():
    if os.geteuid() != 0:
        sys.exit("bench-anycast needs root (network namespaces)")
    make_root()
    RESULTS.mkdir(exist_ok=True)
    rows = []
    for policy in (0, 1):
        for mode in ((), ("--single-port",)):
            rows.append(scenario("hash policy", policy, "hash-threshold", mode))
    for route in ("hash-threshold", "resilient"):
        for policy in (0, 1):
            rows.append(scenario("server lost", policy, route, ("--single-port",), lose, ("--reboot",)))
    for first in ("sigterm", "withdraw"):
        for mode in ((), ("--single-port",)):
            rows.append(scenario(f"drain: {first} first", 0, "resilient", mode, drain(first)))
    rows = [row for row in rows if row]
    lines = [f"{MACHINES} machines, uefi-ipxe (ipxe.efi {FILES['ipxe.efi'] >> 20} MiB over TFTP; "
             f"kernel {FILES['vmlinuz'] >> 20} MiB and initrd {FILES['initrd.img'] >> 20} MiB over HTTP), three servers:", "",
             "| scenario | hash policy | route | mode | booted | failed (why) | transfers failed | reboots | rebooted p50 / p99 s | machines per server (max/mean) | bytes max/mean |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        why = ", ".join(f"{n} {k}" for k, n in sorted(r["failures"].items())) or "–"
        rebooted = f"{float(r['rebooted_p50_ms']) / 1000:.1f} / {float(r['rebooted_p99_ms']) / 1000:.1f}" if r["rebooted_ok"] else "–"
        lines.append(f"| {r['scenario']} | {r['policy']} | {r['route']} | {r['mode']} | {r['ok']} | {r['failed']} ({why}) "
                     f"| {r['transfers_failed']} | {r['reboots']} | {rebooted} | {r['share']['machines']} "
                     f"({r['share']['machines_max_over_mean']}) | {r['share']['bytes_max_over_mean']} |")
    text = "\n".join(lines)
    write_results("bench-anycast", {"machines": MACHINES, "files": FILES, "rows": rows}, text)
    print(text)


if __name__ == "__main__":
    main()
