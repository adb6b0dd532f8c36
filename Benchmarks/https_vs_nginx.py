#!/usr/bin/env python3
"""`make bench-https`: Stampede's --https beside nginx (Debian unstable's nginx-light, `ssl_protocols
TLSv1.2 TLSv1.3`, sendfile on, the same certificate and the same ciphers in the same order), side
by side in one run.

Each round starts each server fresh on loopback, in a cpuacct cgroup of its own (nginx's master and
workers all count), and plays:

- bulk: wrk (Debian's, over its libssl) keep-alive GETs of a 1 MiB and a 64 MiB file by 100 and by
  2,000 connections, BENCH_HTTP_SECONDS (default 8) each: server CPU-s per GB read (the handshakes
  of the connections included, spread over the run);
- handshakes: `openssl s_time -new` (a full handshake per connection, no resumption: a rack's
  machines each start cold), two clients at once for BENCH_HTTP_SECONDS, with TLS 1.3, TLS 1.2
  ECDHE-RSA-AES128-GCM-SHA256, and TLS 1.2 DHE-RSA-AES128-GCM-SHA256 (what EDK2 without elliptic
  curves negotiates): new connections per server CPU-second.

Rounds (BENCH_ROUNDS, default 3) interleave the servers, each round starting with the next; the
table shows the median round, the spread, and Stampede ÷ nginx. The certificate is RSA 2048, made
with openssl for the run. Stampede links Debian 12's libssl3 (OpenSSL 3.0), nginx the unstable
tree's: the report says both. Results: results/bench-https.{json,md}.
"""
import os
import re
import resource
import socket
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import (FD_LIMIT, ROOT, SID, STAMPEDE, CpuGroup, fill_root, free_port, in_sid, nginx_config, stop_all,  # noqa: E402
                     write_results)

SECONDS = int(os.environ.get("BENCH_HTTP_SECONDS", "8"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
WEB = ROOT / "https"
TLS = ROOT / "tls"
FILES = {"1mib.bin": 1 << 20, "64mib.bin": 64 << 20}
BULK = [(name, connections) for name in FILES for connections in (100, 2000)]
HANDSHAKES = {"TLS 1.3": ["-tls1_3"], "TLS 1.2 ECDHE-RSA-AES128-GCM": ["-tls1_2", "-cipher", "ECDHE-RSA-AES128-GCM-SHA256"],
              "TLS 1.2 DHE-RSA-AES128-GCM": ["-tls1_2", "-cipher", "DHE-RSA-AES128-GCM-SHA256"]}
# "stampede-sid" is the same binary run from the unstable tree nginx runs from, so that it links
# the same OpenSSL as nginx: the two Stampede rows apart show what the library's version does.
SERVERS = ["stampede", "stampede-sid", "nginx"]
SID_BINARY = ROOT / "bin" / "stampede"
# Stampede's firmware profile's TLS 1.2 suites, in its order (`TLSProfile.firmware.suites`, from
# CSources/CStampedeTLS/tls.c): nginx is given the same. RSA certificate: the ECDSA ones go unused.
SUITES = ("ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
          "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305:DHE-RSA-AES128-GCM-SHA256:DHE-RSA-AES256-GCM-SHA384:"
          "DHE-RSA-AES128-SHA256:DHE-RSA-AES256-SHA256:AES128-GCM-SHA256:AES256-GCM-SHA384:AES128-SHA256:AES256-SHA256")


def certificate():
    """A CA and a server certificate it signs for 127.0.0.1 (RSA 2048), made once per run."""
    TLS.mkdir(parents=True, exist_ok=True)

    def openssl(*args):
        subprocess.run(["openssl", *args], cwd=TLS, check=True, capture_output=True)
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "30",
            "-subj", "/CN=bench CA")
    openssl("genrsa", "-out", "server.key", "2048")
    openssl("req", "-new", "-key", "server.key", "-subj", "/CN=bench", "-out", "server.csr")
    (TLS / "server.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-days", "30",
            "-extfile", "server.ext", "-out", "server.pem")
    (TLS / "server.key").chmod(0o600)
    openssl("genpkey", "-genparam", "-algorithm", "DH", "-pkeyopt", "group:ffdhe2048", "-out", "dh.pem")
    return TLS / "server.pem", TLS / "server.key"


def start(server, port, group, pair, suites):
    def prepare():
        resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))
        if group:
            group.join()
    log = ROOT / f"https-{server}.log"
    if server.startswith("stampede"):
        argv = [str(SID_BINARY if server == "stampede-sid" else STAMPEDE), "-L", "-a", "127.0.0.1:0", "--verbosity", "1", "--stderr", "-u", "root",
                "--https", f"127.0.0.1:{port}", "--tls-certificate", str(pair[0]), "--tls-key", str(pair[1]),
                "--http-max-connections", "9000", str(WEB)]
        if server == "stampede-sid":
            argv = in_sid(argv)
    else:
        argv = in_sid(["/usr/sbin/nginx", "-c", str(nginx_config(f"tls-{port}", f"127.0.0.1:{port}", WEB, (*pair, suites, TLS / "dh.pem")))])
    process = subprocess.Popen(argv, preexec_fn=prepare, stdout=open(log, "w"), stderr=subprocess.STDOUT)
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return process
        except OSError:
            time.sleep(0.05)
    process.kill()
    raise RuntimeError(f"{server} did not start on {port}: {log.read_text()[-2000:]}")


UNITS = {"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}


def wrk(port, name, connections):
    command = ["wrk", "-t", "2", "-c", str(connections), "-d", f"{SECONDS}s", "--timeout", "30s", f"https://127.0.0.1:{port}/{name}"]
    out = subprocess.run(command, capture_output=True, text=True, timeout=SECONDS + 120,
                         preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))).stdout
    match = re.search(r"(\d+) requests in [\d.]+\w+, ([\d.]+)(\w+) read", out)
    if not match:
        raise RuntimeError(f"wrk said: {out}")
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    socket_errors = re.search(r"Socket errors: (.*)", out)
    return {"requests": int(match.group(1)), "bytes": float(match.group(2)) * UNITS[match.group(3)],
            "non_2xx": int(errors.group(1)) if errors else 0, "socket_errors": socket_errors.group(1) if socket_errors else ""}


def s_time(port, args, ca):
    """Two `openssl s_time -new` clients at once: the full handshakes they made."""
    command = ["openssl", "s_time", "-connect", f"127.0.0.1:{port}", "-new", "-time", str(SECONDS), "-CAfile", str(ca), *args]
    clients = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for _ in range(2)]
    total = 0
    for client in clients:
        out = client.communicate(timeout=SECONDS + 60)[0]
        match = re.search(r"(\d+) connections in [\d.]+s", out)
        if not match:
            raise RuntimeError(f"s_time said: {out[-1500:]}")
        total += int(match.group(1))
    return total


def one_round(server, index, pair, suites):
    port = free_port(socket.SOCK_STREAM)
    group = CpuGroup.make(f"https-{server}-{index}")
    process = start(server, port, group, pair, suites)
    results = {}
    try:
        for name, connections in BULK:
            before = group.seconds() if group else 0.0
            load = wrk(port, name, connections)
            cpu = (group.seconds() if group else 0.0) - before
            load["cpu_s"] = round(cpu, 3)
            load["cpu_per_gb"] = round(cpu / (load["bytes"] / 1e9), 3) if load["bytes"] else None
            load["gb_per_s"] = round(load["bytes"] / 1e9 / SECONDS, 3)
            results[f"{name} x{connections}"] = load
        for label, args in HANDSHAKES.items():
            before = group.seconds() if group else 0.0
            made = s_time(port, args, TLS / "ca.pem")
            cpu = (group.seconds() if group else 0.0) - before
            results[label] = {"handshakes": made, "cpu_s": round(cpu, 3),
                              "per_cpu_s": round(made / cpu, 1) if cpu else None, "per_s": round(made / SECONDS, 1)}
    finally:
        stop_all([process], group)
    if server.startswith("stampede"):
        results["start"] = [line for line in (ROOT / f"https-{server}.log").read_text().splitlines() if "over HTTPS" in line]
    return results


def median(values):
    ordered = sorted(values)
    return ordered[len(ordered) // 2], ordered[0], ordered[-1]


def main():
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, FD_LIMIT * 2), hard))
    fill_root(WEB, FILES)
    pair = certificate()
    SID_BINARY.parent.mkdir(parents=True, exist_ok=True)
    SID_BINARY.write_bytes(STAMPEDE.read_bytes())
    SID_BINARY.chmod(0o755)
    sid_openssl = subprocess.run(["chroot", str(SID), "dpkg-query", "-W", "-f", "${Package} ${Version}", "libssl3t64"],
                                 capture_output=True, text=True).stdout.strip()
    suites = SUITES
    nginx_version = subprocess.run(["chroot", str(SID), "/usr/sbin/nginx", "-V"], capture_output=True, text=True).stderr
    nginx_ssl = re.search(r"built with (OpenSSL [^\s]+)", nginx_version)
    nginx_line = nginx_version.splitlines()[0] + (f", {nginx_ssl.group(1)}" if nginx_ssl else "")
    ours = subprocess.run(["openssl", "version"], capture_output=True, text=True).stdout.strip()
    rounds = {server: [] for server in SERVERS}
    for index in range(ROUNDS):
        for server in SERVERS[index % len(SERVERS):] + SERVERS[:index % len(SERVERS)]:
            print(f"round {index + 1}/{ROUNDS}: {server}", flush=True)
            rounds[server].append(one_round(server, index, pair, suites))
    summary = {}

    def rows(keys, figure, rate):
        lines = []
        for key in keys:
            row = {server: median([r[key][figure] for r in rounds[server]]) for server in SERVERS}
            rates = {server: median([r[key][rate] for r in rounds[server]])[0] for server in SERVERS}
            n = row["nginx"][0]
            summary[key] = {server: row[server][0] for server in SERVERS}
            summary[key]["ratio"], summary[key]["sid_ratio"] = round(row["stampede"][0] / n, 2), round(row["stampede-sid"][0] / n, 2)
            cells = " | ".join(f"{row[server][0]} ({row[server][1]}–{row[server][2]})" for server in SERVERS)
            lines.append(f"| {key} | {cells} | {summary[key]['ratio']:.2f} | {summary[key]['sid_ratio']:.2f} "
                         f"| {', '.join(str(rates[server]) for server in SERVERS)} |")
        return lines
    table = ["| bulk, keep-alive (wrk): CPU-s/GB | Stampede (spread) | Stampede, unstable's OpenSSL | nginx | Stampede ÷ nginx "
             "| same OpenSSL ÷ nginx | GB/s (same order) |", "|---|---|---|---|---|---|---|",
             *rows([f"{name} x{connections}" for name, connections in BULK], "cpu_per_gb", "gb_per_s"),
             "", "| new connections (openssl s_time -new, 2 clients): per CPU-s | Stampede (spread) | Stampede, unstable's OpenSSL "
             "| nginx | Stampede ÷ nginx | same OpenSSL ÷ nginx | per s (same order) |", "|---|---|---|---|---|---|---|",
             *rows(list(HANDSHAKES), "per_cpu_s", "per_s")]
    start_line = rounds["stampede"][-1].get("start", [""])
    text = "\n".join([f"Stampede --https (Debian 12's {ours}; and from the unstable tree, {sid_openssl}) vs {nginx_line} "
                      "(sendfile on, the same certificate and TLS 1.2 suites), "
                      f"{ROUNDS} interleaved rounds of {SECONDS} s, median (spread):", "", *table, "",
                      f"Stampede said at start: {start_line[0].split('with ', 1)[-1] if start_line else '?'}"])
    write_results("bench-https", {"nginx": nginx_line, "openssl": ours, "sid_openssl": sid_openssl, "seconds": SECONDS, "rounds": rounds, "summary": summary}, text)
    print(text)


if __name__ == "__main__":
    main()
