#!/usr/bin/env python3
"""io_uring vs Glibc backend, side by side in one run, on loopback.

A stand-in until `stampede storm` (issue "A rack in a box"): the load comes from the Python
epoll client of the interop tests, which is itself the bottleneck, so the figures that compare
the backends are the server's CPU per GB and per session under the same offered load; the rates
are the client's. Results go to results/backends.json and the table to stdout.
"""
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "Tests" / "interop"))

import loadclient  # noqa: E402
from conftest import Server  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    utime, stime, cutime, cstime = (int(fields[i]) for i in (11, 12, 13, 14))
    return (utime + stime + cutime + cstime) / TICKS


def client_cpu() -> float:
    t = os.times()
    return t.user + t.system


SCENARIOS = [
    # name, file, size, concurrent, total, blksize, windowsize
    ("rack-boot", "one-mib.bin", 1 << 20, 1000, 1000, 1468, 1),
    ("initrd", "sixteen-mib.bin", 16 << 20, 16, 16, 1468, 16),
    ("storm", "small.bin", 32 << 10, 400, 4000, 1468, 1),
]


def run_scenario(root, backend, scenario):
    name, file, size, concurrent, total, blksize, window = scenario
    expected = (root / file).read_bytes()
    server = Server(root, ("--verbosity", "0"), backend=backend)
    try:
        loadclient.run((server.host, server.port), file, 4, expected, blksize=blksize, windowsize=window)
        cpu0, client0, t0 = cpu_seconds(server.process.pid), client_cpu(), time.monotonic()
        ok = failed = 0
        while ok + failed < total:
            batch = min(concurrent, total - ok - failed)
            good, failures, _ = loadclient.run((server.host, server.port), file, batch, expected,
                                               blksize=blksize, windowsize=window)
            ok += good
            failed += len(failures)
        seconds = time.monotonic() - t0
        cpu = cpu_seconds(server.process.pid) - cpu0
        gigabytes = ok * size / 1e9
        return {
            "scenario": name, "backend": backend, "sessions_ok": ok, "sessions_failed": failed,
            "seconds": round(seconds, 3), "server_cpu_s": round(cpu, 3),
            "server_cpu_s_per_gb": round(cpu / gigabytes, 3) if gigabytes else None,
            "server_cpu_ms_per_session": round(cpu * 1000 / ok, 4) if ok else None,
            "sessions_per_server_cpu_s": round(ok / cpu, 1) if cpu else None,
            "client_cpu_s": round(client_cpu() - client0, 3),
            "mb_per_s": round(ok * size / 1e6 / seconds, 1), "sessions_per_s": round(ok / seconds, 1),
            "peak_rss_mib": round(server.rss_kib() / 1024, 1),
        }
    finally:
        server.stop()


def main():
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "root"
        root.mkdir()
        for _, file, size, *_ in SCENARIOS:
            (root / file).write_bytes(os.urandom(size))
            (root / file).chmod(0o644)
        results = []
        for scenario in SCENARIOS:
            for backend in ("uring", "glibc"):
                results.append(run_scenario(root, backend, scenario))
    out = REPO / "results"
    out.mkdir(exist_ok=True)
    (out / "backends.json").write_text(json.dumps(results, indent=2))
    print(f"{'scenario':<10} {'backend':<6} {'ok':>5} {'fail':>4} {'srv cpu s':>9} {'cpu s/GB':>9} "
          f"{'sess/cpu-s':>10} {'ratio':>6} {'MB/s':>7} {'sess/s':>7} {'RSS MiB':>7} {'client cpu':>10}")
    for r in results:
        base = next(x for x in results if x["scenario"] == r["scenario"] and x["backend"] == "uring")
        ratio = (r["sessions_per_server_cpu_s"] / base["sessions_per_server_cpu_s"]) if base["sessions_per_server_cpu_s"] else 0
        print(f"{r['scenario']:<10} {r['backend']:<6} {r['sessions_ok']:>5} {r['sessions_failed']:>4} "
              f"{r['server_cpu_s']:>9.2f} {r['server_cpu_s_per_gb'] or 0:>9.3f} {r['sessions_per_server_cpu_s'] or 0:>10.1f} "
              f"{ratio:>6.2f} {r['mb_per_s']:>7.1f} {r['sessions_per_s']:>7.1f} {r['peak_rss_mib']:>7.1f} {r['client_cpu_s']:>10.2f}")
    print("ratio = sessions per server CPU-second relative to uring (higher is better).")
    print(f"Written: {out / 'backends.json'}")


if __name__ == "__main__":
    main()
