#!/usr/bin/env python3
"""What the metrics cost the server: server CPU per GB of a storm, in interleaved rounds, for
several configurations side by side; the median of each, its spread, and its ratio to the first.

    make bench-metrics     # this build without --metrics, with --metrics scraped every second
    Benchmarks/metrics_cost.py --config before=/tmp/old/stampede --config after=.build/release/stampede

A configuration is LABEL=BINARY[,FLAG...]: `--config scraped=.build/release/stampede,--metrics` adds
`--metrics 127.0.0.1:PORT` and scrapes it every second while the storm runs."""
import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import STAMPEDE, cpu_seconds, free_port, write_results  # noqa: E402


def one_round(binary, flags, root, storm, args):
    port = free_port()
    argv = [binary, "-l", "-L", "-a", f"127.0.0.1:{port}", "--backend", args.backend]
    scrape_url = None
    if "--metrics" in flags:
        metrics_port = free_port(socket.SOCK_STREAM)
        argv += ["--metrics", f"127.0.0.1:{metrics_port}"]
        scrape_url = f"http://127.0.0.1:{metrics_port}/metrics"
    server = subprocess.Popen(argv + [str(root)], stderr=subprocess.PIPE, text=True)
    while "serving" not in server.stderr.readline():
        if server.poll() is not None:
            sys.exit(f"{binary} did not start")
    done = threading.Event()

    def scraper():
        while not done.wait(1.0):
            with urllib.request.urlopen(scrape_url, timeout=5) as answer:
                answer.read()
    thread = threading.Thread(target=scraper) if scrape_url else None
    if thread:
        thread.start()
    before = cpu_seconds(server.pid)
    result = subprocess.run([storm, "storm", f"127.0.0.1:{port}", "big.bin", "--clients", str(args.clients),
                             "--total", str(args.clients * args.waves), "--blksize", "1468", "--windowsize", "4",
                             "--json"], capture_output=True, text=True)
    used = cpu_seconds(server.pid) - before
    done.set()
    if thread:
        thread.join()
    server.terminate()
    server.wait()
    if result.returncode != 0:
        sys.exit(f"storm failed against {binary}: {result.stdout[-500:]} {result.stderr[-500:]}")
    gigabytes = args.clients * args.waves * args.size_mib / 1024
    return used / gigabytes


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", action="append", required=True, help="LABEL=BINARY[,FLAG...]")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--waves", type=int, default=5)
    parser.add_argument("--size-mib", type=int, default=4)
    parser.add_argument("--backend", default="auto")
    parser.add_argument("--storm", default=str(STAMPEDE))
    args = parser.parse_args()
    configs = []
    for spec in args.config:
        label, rest = spec.split("=", 1)
        binary, *flags = rest.split(",")
        configs.append((label, binary, flags))
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        (root / "big.bin").write_bytes(os.urandom(args.size_mib << 20))
        (root / "big.bin").chmod(0o644)
        root.chmod(0o755)
        results = {label: [] for label, _, _ in configs}
        for n in range(args.rounds):
            for label, binary, flags in configs if n % 2 == 0 else reversed(configs):
                results[label].append(one_round(binary, flags, root, args.storm, args))
    first = statistics.median(results[configs[0][0]])
    lines = [f"Server CPU-s per GB, {args.rounds} interleaved rounds of {args.clients} × {args.waves} × "
             f"{args.size_mib} MiB (blksize 1468, windowsize 4), backend {args.backend}:", "",
             f"| configuration | CPU-s/GB median (spread) | ÷ {configs[0][0]} |", "|---|---|---|"]
    for label, _, _ in configs:
        values = results[label]
        median = statistics.median(values)
        lines.append(f"| {label} | {median:.3f} ({min(values):.3f}–{max(values):.3f}) | {median / first:.2f} |")
    text = "\n".join(lines)
    write_results("bench-metrics", {"configs": [{"label": label, "binary": binary, "flags": flags} for label, binary, flags in configs],
                                    "rounds": results}, text)
    print(text)


if __name__ == "__main__":
    main()
