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
table shows the median round, the spread, and Stampede ÷ nginx. BENCH_BASELINE=PATH adds another
build (an older one) as "stampede-baseline" in the same rounds, and a column of this ÷ it.

Then the rack over HTTPS: BENCH_RACK_MACHINES (default 2,000) machines powering on over 3 s, each
playing `storm --profile uefi-ipxe --https` in two storm processes of half the rack each (ipxe.efi over TFTP, then the script, a 16 MiB kernel
and a 64 MiB initrd over HTTPS, each machine's connection a full TLS 1.2 handshake, every byte
compared) against Stampede alone (TFTP and --https in one process) and against dnsmasq (TFTP)
with nginx (HTTPS) in one cgroup: machines booted and failed, boot time, the handshakes' time,
the servers' CPU and the storm's, BENCH_RACK_ROUNDS (default 1; 0 skips it) interleaved rounds. The certificate is RSA 2048, made
with openssl for the run. Stampede links Debian 12's libssl3 (OpenSSL 3.0), nginx the unstable
tree's: the report says both. Results: results/bench-https.{json,md}.
"""
import json
import os
import re
import resource
import socket
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import (FD_LIMIT, in_group, ROOT, SID, STAMPEDE, CpuGroup, dnsmasq_command, fill_root, free_port, in_sid,  # noqa: E402
                     median_spread, nginx_config, percentile, stop_all, with_spread, wait_for_tcp, wrk, write_results)

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
BASELINE = os.environ.get("BENCH_BASELINE")
SERVERS = ["stampede", "stampede-sid", "nginx"] + (["stampede-baseline"] if BASELINE else [])
RACK = ROOT / "https-rack"
RACK_FILES = {"ipxe.efi": 1 << 20, "vmlinuz": 16 << 20, "initrd.img": 64 << 20}
RACK_MACHINES = int(os.environ.get("BENCH_RACK_MACHINES", "2000"))
RACK_ROUNDS = int(os.environ.get("BENCH_RACK_ROUNDS", "1"))
STORM_SLICES = 2
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
    prepare = in_group(group)
    log = ROOT / f"https-{server}.log"
    if server.startswith("stampede"):
        binary = {"stampede-sid": SID_BINARY, "stampede-baseline": BASELINE}.get(server, STAMPEDE)
        argv = [str(binary), "-L", "-a", "127.0.0.1:0", "--verbosity", "1", "--stderr", "-u", "root",
                "--https", f"127.0.0.1:{port}", "--tls-certificate", str(pair[0]), "--tls-key", str(pair[1]),
                "--http-max-connections", "9000", str(WEB)]
        if server == "stampede-sid":
            argv = in_sid(argv)
    else:
        argv = in_sid(["/usr/sbin/nginx", "-c", str(nginx_config(f"tls-{port}", f"127.0.0.1:{port}", WEB, (*pair, suites, TLS / "dh.pem")))])
    process = subprocess.Popen(argv, preexec_fn=prepare, stdout=open(log, "w"), stderr=subprocess.STDOUT)
    try:
        wait_for_tcp(port, process, server)
    except RuntimeError:
        raise RuntimeError(f"{server} did not start on {port}: {log.read_text()[-2000:]}")
    return process


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
            load = wrk(f"https://127.0.0.1:{port}/{name}", connections, SECONDS)
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


def rack_round(servers, index, pair, suites):
    """One rack boot over HTTPS against `servers` ("stampede", or "dnsmasq+nginx"), in one cpuacct group."""
    group = CpuGroup.make(f"https-rack-{servers.replace('+', '-')}-{index}")

    prepare = in_group(group)
    https_port = free_port(socket.SOCK_STREAM)
    if servers == "stampede":
        tftp_port = free_port(socket.SOCK_STREAM)
        commands = [[str(STAMPEDE), "-L", "-a", f"127.0.0.1:{tftp_port}", "--verbosity", "0", "-u", "root", "--https",
                     f"127.0.0.1:{https_port}", "--tls-certificate", str(pair[0]), "--tls-key", str(pair[1]), str(RACK)]]
    else:
        tftp_port = 69  # dnsmasq has no TFTP port option
        config = nginx_config(f"rack-{https_port}", f"127.0.0.1:{https_port}", RACK, (*pair, suites, TLS / "dh.pem"))
        commands = [in_sid(dnsmasq_command("/usr/sbin/dnsmasq", str(RACK))), in_sid(["/usr/sbin/nginx", "-c", str(config)])]
    processes = [subprocess.Popen(c, preexec_fn=prepare, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for c in commands]
    try:
        wait_for_tcp(https_port, processes[-1], servers)
        time.sleep(0.5)  # dnsmasq's TFTP socket
        before = group.seconds() if group else 0.0
        # Two storm processes, each half the rack (--slice): a storm decrypting and comparing every
        # byte of 2,000 machines' TLS is more than one core, and a machine its storm cannot read for
        # a firmware's patience counts as lost, which is the storm's failure, not the server's.
        storms = [subprocess.Popen([str(STAMPEDE), "storm", f"127.0.0.1:{tftp_port}", "--profile", "uefi-ipxe",
                                    "--https", f"127.0.0.1:{https_port}", "--tls-ca", str(TLS / "ca.pem"),
                                    "--clients", str(RACK_MACHINES), "--slice", f"{index}/{STORM_SLICES}", "--ramp", "3",
                                    "--verify-root", str(RACK), "--json"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                   text=True, preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT)))
                  for index in range(STORM_SLICES)]
        results = [json.loads(storm.communicate(timeout=3600)[0]) for storm in storms]
        cpu = (group.seconds() if group else 0.0) - before
        boot = sorted(ms for result in results for ms in result["boot_ms"])
        failures = {}
        for result in results:
            for kind, count in result["failures"].items():
                failures[kind] = failures.get(kind, 0) + count
        return {"ok": sum(r["ok"] for r in results), "failed": sum(r["failed"] for r in results), "failures": failures,
                "p50_s": round(percentile(boot, 50) / 1000, 2), "p99_s": round(percentile(boot, 99) / 1000, 2),
                # Per slice, the slower one's: the storms report percentiles, not every handshake.
                "handshake_p50_ms": max(float(r["tls_handshake_p50_ms"]) for r in results),
                "handshake_p99_ms": max(float(r["tls_handshake_p99_ms"]) for r in results),
                "server_cpu_s": round(cpu, 2), "storm_cpu_s": round(sum(r["client_cpu_s"] for r in results), 2),
                "seconds": max(r["seconds"] for r in results), "bytes": sum(r["bytes"] for r in results)}
    finally:
        stop_all(processes, group)


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
            row = {server: median_spread([r[key][figure] for r in rounds[server]]) for server in SERVERS}
            rates = {server: median_spread([r[key][rate] for r in rounds[server]])[0] for server in SERVERS}
            n = row["nginx"][0]
            summary[key] = {server: row[server][0] for server in SERVERS}
            summary[key]["ratio"], summary[key]["sid_ratio"] = round(row["stampede"][0] / n, 2), round(row["stampede-sid"][0] / n, 2)
            cells = " | ".join(with_spread(*row[server]) for server in SERVERS)
            against = ""
            if BASELINE:
                summary[key]["baseline_ratio"] = round(row["stampede"][0] / row["stampede-baseline"][0], 2)
                against = f" {summary[key]['baseline_ratio']:.2f} |"
            lines.append(f"| {key} | {cells} | {summary[key]['ratio']:.2f} | {summary[key]['sid_ratio']:.2f} |{against}"
                         f" {', '.join(str(rates[server]) for server in SERVERS)} |")
        return lines

    def header(what):
        baseline = (" baseline (spread) |", " this ÷ baseline |", "---|---|") if BASELINE else ("", "", "")
        return [f"| {what} | Stampede (spread) | Stampede, unstable's OpenSSL | nginx |{baseline[0]} Stampede ÷ nginx "
                f"| same OpenSSL ÷ nginx |{baseline[1]} {'per s' if 'per CPU-s' in what else 'GB/s'} (same order) |",
                "|---|---|---|---|---|---|---|" + baseline[2]]
    table = [*header("bulk, keep-alive (wrk): CPU-s/GB"),
             *rows([f"{name} x{connections}" for name, connections in BULK], "cpu_per_gb", "gb_per_s"),
             "", *header("new connections (openssl s_time -new, 2 clients): per CPU-s"),
             *rows(list(HANDSHAKES), "per_cpu_s", "per_s")]
    rack_rounds = {"stampede": [], "dnsmasq+nginx": []}
    if RACK_ROUNDS:
        fill_root(RACK, RACK_FILES)
        (RACK / "boot.ipxe").write_text("#!ipxe\nkernel vmlinuz\ninitrd initrd.img\nboot\n")
        (RACK / "boot.ipxe").chmod(0o644)
    for index in range(RACK_ROUNDS):
        for servers in ("stampede", "dnsmasq+nginx") if index % 2 == 0 else ("dnsmasq+nginx", "stampede"):
            print(f"rack round {index + 1}/{RACK_ROUNDS}: {servers}", flush=True)
            rack_rounds[servers].append(rack_round(servers, index, pair, suites))
    if RACK_ROUNDS:
        table += ["", f"Rack over HTTPS: {RACK_MACHINES} machines over 3 s, storm --profile uefi-ipxe --https (ipxe.efi over TFTP; "
                  "the script, a 16 MiB kernel and a 64 MiB initrd over HTTPS, a full TLS 1.2 handshake per machine, every byte "
                  f"compared), {RACK_ROUNDS} interleaved round(s), the median by boot p50:", "",
                  "| servers | booted / failed | boot p50 s | boot p99 s | handshake p50 / p99 ms (slower storm) | server CPU s | storm CPU s | wall s |",
                  "|---|---|---|---|---|---|---|---|"]
        for servers, results in rack_rounds.items():
            r = sorted(results, key=lambda r: r["p50_s"])[len(results) // 2]
            table.append(f"| {servers} | {r['ok']} / {r['failed']} | {r['p50_s']} | {r['p99_s']} | {r['handshake_p50_ms']} / "
                         f"{r['handshake_p99_ms']} | {r['server_cpu_s']} | {r['storm_cpu_s']} | {round(r['seconds'], 1)} |")
    start_line = rounds["stampede"][-1].get("start", [""])
    baseline_line = f"; the baseline: {BASELINE}" if BASELINE else ""
    text = "\n".join([f"Stampede --https (Debian 12's {ours}; and from the unstable tree, {sid_openssl}) vs {nginx_line} "
                      f"(sendfile on, the same certificate and TLS 1.2 suites){baseline_line}, "
                      f"{ROUNDS} interleaved rounds of {SECONDS} s, median (spread):", "", *table, "",
                      f"Stampede said at start: {start_line[0].split('with ', 1)[-1] if start_line else '?'}"])
    write_results(os.environ.get("BENCH_OUTPUT", "bench-https"), {"nginx": nginx_line, "openssl": ours, "sid_openssl": sid_openssl, "seconds": SECONDS, "rounds": rounds,
                                  "summary": summary, "rack_rounds": rack_rounds}, text)
    print(text)


if __name__ == "__main__":
    main()
