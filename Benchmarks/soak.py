#!/usr/bin/env python3
"""`make soak`: a continuous storm against one server for SOAK_SECONDS (default 600), with the
server's RSS and open fds sampled every 10 s. Passes when every transfer succeeded, the fds are
back to idle at the end, and RSS after the first minute grew by less than 10 % (no leak).
SOAK_BACKEND picks the backend (default auto); the samples go to results/soak.{json,md}."""
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import REPO, STAMPEDE, free_port, write_results  # noqa: E402

ROOT = REPO / ".build" / "soak-root"
SECONDS = int(os.environ.get("SOAK_SECONDS", "600"))
BACKEND = os.environ.get("SOAK_BACKEND", "auto")


def rss_mib(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def main():
    ROOT.mkdir(parents=True, exist_ok=True)
    image = ROOT / "boot.img"
    if not image.exists():
        image.write_bytes(os.urandom(256 << 10))
    ROOT.chmod(0o755)
    image.chmod(0o644)
    port = free_port()
    server = subprocess.Popen([str(STAMPEDE), "-l", "-L", "-a", f"127.0.0.1:{port}", "-u", "root", "--verbosity", "0",
                               "--backend", BACKEND, str(ROOT)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    time.sleep(1)
    idle_fds = fds(server.pid)
    # The report goes to a file: ten minutes of transfers (each one's time is in it) are more than
    # a pipe holds, and a storm that cannot write it would wait for a reader that waits for it.
    report = tempfile.TemporaryFile("w+")
    storm = subprocess.Popen([str(STAMPEDE), "storm", f"127.0.0.1:{port}", "boot.img", "--clients", "200",
                              "--blksize", "1468", "--duration", str(SECONDS), "--verify", str(image), "--json"],
                             stdout=report, text=True)
    samples = []
    started = time.time()
    while storm.poll() is None:
        time.sleep(min(10, max(1, SECONDS / 30)))
        samples.append({"t": round(time.time() - started), "rss_mib": round(rss_mib(server.pid), 1),
                        "fds": fds(server.pid)})
        print(f"{samples[-1]['t']:>5} s  RSS {samples[-1]['rss_mib']:7.1f} MiB  fds {samples[-1]['fds']}", flush=True)
    report.seek(0)
    result = json.loads(report.read())
    time.sleep(1)
    end_fds = fds(server.pid)
    server.terminate()
    server.wait(timeout=20)
    warm = [s for s in samples if s["t"] >= min(60, SECONDS / 3)] or samples
    growth = (warm[-1]["rss_mib"] - warm[0]["rss_mib"]) / max(warm[0]["rss_mib"], 1)
    verdict = {"transfers_ok": result["ok"], "transfers_failed": result["failed"], "idle_fds": idle_fds,
               "fds_at_end": end_fds, "rss_growth_after_warmup": round(growth, 3), "samples": samples}
    summary = (f"Soak, {SECONDS} s of 200 clients (backend {BACKEND}): {result['ok']} transfers ok, {result['failed']} failed; "
               f"fds {idle_fds} idle, {end_fds} at the end; RSS {warm[0]['rss_mib']} → {warm[-1]['rss_mib']} MiB after warm-up "
               f"({growth:+.1%}).")
    write_results("soak", verdict, summary)
    print(summary)
    if result["failed"] or end_fds != idle_fds or growth > 0.10:
        sys.exit("soak failed")


if __name__ == "__main__":
    main()
