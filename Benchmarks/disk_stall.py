#!/usr/bin/env python3
"""`make bench-disk`: how long a slow disk stalls a server's other transfers.

The served directory is a slow disk (Tests/interop/slowdisk.py: a FUSE mirror whose fsync takes
FSYNC seconds). One worker serves a heartbeat (a lockstep download that starts over when it ends,
timing how long each ACK waits for its DATA) and a storm of lockstep downloads, while uploads of
UPLOAD bytes follow one another. The longest wait of the heartbeat is the longest the server's
loop stood still; the storm's p99 what a rack would feel. Each build given with --binary runs
ROUNDS times, interleaved with the others; the table gives the median round and the range.
Needs root (FUSE).

    python3 Benchmarks/disk_stall.py --binary new=.build/release/stampede --binary old=/path/to/older/stampede
"""
import argparse
import json
import os
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import REPO, free_port, write_results  # noqa: E402

SLOW_DISK = REPO / "Tests" / "interop" / "slowdisk.py"


def heartbeat(port, name, stop, gaps):
    """Lockstep reads of `name`, each ACK's wait for the next DATA appended to `gaps`."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.settimeout(30)
    rrq = b"\0\1" + name.encode() + b"\0octet\0"
    while not stop.is_set():
        sock.sendto(rrq, ("127.0.0.1", port))
        packet, tid = sock.recvfrom(4096)
        while not stop.is_set():
            block = struct.unpack("!H", packet[2:4])[0]
            if len(packet) - 4 < 512:
                sock.sendto(struct.pack("!HH", 4, block), tid)
                break
            sent = time.monotonic()
            sock.sendto(struct.pack("!HH", 4, block), tid)
            packet, _ = sock.recvfrom(4096)
            gaps.append(time.monotonic() - sent)
    sock.close()


def one_round(binary, fsync, uploads, upload_size):
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        backing, disk = scratch / "backing", scratch / "disk"
        backing.mkdir()
        disk.mkdir()
        backing.chmod(0o777)
        for name, size in (("heart.bin", 4 << 20), ("boot.bin", 1 << 20)):
            (backing / name).write_bytes(os.urandom(size))
            (backing / name).chmod(0o644)
        upload = scratch / "upload.bin"
        upload.write_bytes(os.urandom(upload_size))
        fuse = subprocess.Popen([sys.executable, str(SLOW_DISK), str(backing), str(disk), "--fsync", str(fsync)])
        while not os.path.ismount(disk):
            time.sleep(0.05)
        port = free_port()
        server = subprocess.Popen([binary, "-l", "-L", "-a", f"127.0.0.1:{port}", "-c", "--workers", "1", str(disk)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(0.5)
            stop, gaps = threading.Event(), []
            beat = threading.Thread(target=heartbeat, args=(port, "heart.bin", stop, gaps))
            beat.start()
            storm = subprocess.Popen([binary, "storm", f"127.0.0.1:{port}", "boot.bin", "--clients", "50",
                                      "--duration", str(uploads * (2 * fsync + 1)), "--json"],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            for i in range(uploads):
                subprocess.run([binary, "put", f"127.0.0.1:{port}", str(upload), f"up{i}.bin", "--blksize", "1468"],
                               check=True, capture_output=True, timeout=300)
            result = json.loads(storm.communicate(timeout=300)[0])
            stop.set()
            beat.join()
        finally:
            server.terminate()
            server.wait(timeout=30)
            subprocess.run(["umount", "-l", str(disk)])
            fuse.wait(timeout=30)
        return {"longest_wait_ms": max(gaps) * 1000, "storm_p99_ms": result["p99_ms"], "storm_ok": result["ok"],
                "storm_failed": result["failed"]}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", action="append", required=True, help="NAME=PATH of a stampede build")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--fsync", type=float, default=1.0, help="seconds each fsync takes on the slow disk")
    parser.add_argument("--uploads", type=int, default=3)
    parser.add_argument("--upload-size", type=int, default=4 << 20)
    options = parser.parse_args()
    builds = dict(spec.split("=", 1) for spec in options.binary)
    rounds = {name: [] for name in builds}
    for r in range(options.rounds):
        for name, binary in builds.items():
            rounds[name].append(one_round(binary, options.fsync, options.uploads, options.upload_size))
            print(f"round {r + 1} {name}: {rounds[name][-1]}", flush=True)
    lines = [f"fsync {options.fsync} s, {options.uploads} uploads of {options.upload_size >> 20} MiB, one worker, "
             f"50 storm clients; median of {options.rounds} interleaved rounds (range):", "",
             "| build | longest wait of another transfer | storm p99 | storm failed |", "|---|---|---|---|"]
    for name, results in rounds.items():
        waits = [r["longest_wait_ms"] for r in results]
        p99s = [r["storm_p99_ms"] for r in results]
        lines.append(f"| {name} | {statistics.median(waits):.0f} ms ({min(waits):.0f}–{max(waits):.0f}) | "
                     f"{statistics.median(p99s):.0f} ms ({min(p99s):.0f}–{max(p99s):.0f}) | "
                     f"{sum(r['storm_failed'] for r in results)} |")
    text = "\n".join(lines)
    write_results("bench-disk", {"builds": builds, "rounds": rounds}, text)
    print()
    print(text)


if __name__ == "__main__":
    main()
