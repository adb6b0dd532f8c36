#!/usr/bin/env python3
"""`make bench-http`: Stampede's --http beside nginx (Debian unstable's nginx-light, sendfile on,
the same root), side by side in one run.

Each round starts each server fresh on loopback, with a 20,000-descriptor limit and a log file
that gets a line for each 404 and none for an answer served (Stampede at --verbosity 0, nginx with
no access log and its default error log), in a cpuacct cgroup of its own (nginx's master and workers all count), and plays
every scenario with wrk (Debian's): keep-alive GETs of a 1 MiB and a 64 MiB file by 100 and by
2,000 connections, BENCH_HTTP_SECONDS (default 8) each. Server CPU per GB is the cgroup's CPU
over the bytes wrk read. Then the small answers a rack asks for, scripts, configs and 404s for
per-machine files that are not there: a 404, a 4 KiB and a 64 KiB file, by 100 and by 2,000
connections, measured as requests per server CPU-second (and the part of it in user space,
the server's own code, per request). Then 8,000 idle connections are opened to each and its resident memory
(summed over its processes) is read, and one more request must still be answered. Stampede
runs twice: as it ships (files cached as images, sent from the image's memfd) and "streamed"
(--cache-file-limit 0: sendfile from the file's own page cache, as nginx does), which shows what
the image's memory costs sendfile. Rounds (BENCH_ROUNDS, default 3) interleave the servers,
each round starting with the next; the table shows the median round and the spread of CPU per
GB, and each Stampede ÷ nginx.

Then the rack with HTTP: BENCH_RACK_MACHINES (default 2,000) machines powering on over 3 s, each
playing `storm --profile uefi-ipxe` (the UEFI size probe and ipxe.efi of 1 MiB over TFTP,
autoexec.ipxe not found, then the script, a 16 MiB kernel and a 64 MiB initrd over HTTP, each
connection with iPXE's 256 KiB receive window), every byte compared, against Stampede alone
(TFTP and --http in one process) and against dnsmasq (TFTP) with nginx (HTTP) in one cgroup: machines booted and failed, p50/p99 boot time, each stage's p50,
the servers' CPU and the storm's, in BENCH_RACK_ROUNDS (default 3; 0 skips the rack) interleaved
rounds.
BENCH_BASELINE=PATH adds another build (an older one) as "stampede-baseline" in the same rounds,
and the table its ratio; the rack boots against it too. BENCH_SCENARIOS (a comma list) narrows the run: a file's name keeps its
scenarios ("absent.cfg"), a scenario's own name keeps it alone ("absent.cfg x2000"), "idle" the
idle connections and "rack" the rack; BENCH_OUTPUT names the results' files (default bench-http,
results/bench-http.{json,md}), so that a narrowed run does not replace the whole report's.

nginx runs from the unstable tree `make parity-deps` makes (`make bench-deps` installs
nginx-light there), chrooted in a mount namespace where the bench root is bound, as compare.py
runs the TFTP peers.
"""
import json
import os
import resource
import socket
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import (FD_LIMIT, in_group, memory, ROOT, SID, STAMPEDE, CpuGroup, Sampler, TCPMemory, tcp_memory_cell, tcp_pressure_mb, dnsmasq_command, fill_root, free_port, in_sid,  # noqa: E402
                     median_spread, nginx_config, RESULTS, stamp_line, with_spread, stop_all, wait_for_tcp, wrk, write_results)

SECONDS = int(os.environ.get("BENCH_HTTP_SECONDS", "8"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
OUTPUT = os.environ.get("BENCH_OUTPUT", "bench-http")
# BENCH_SCENARIOS: the words that narrow the run (None: all of it).
WANTED = {word.strip() for word in os.environ["BENCH_SCENARIOS"].split(",")} if os.environ.get("BENCH_SCENARIOS") else None


def wanted(name, connections=None):
    """Whether the run keeps a scenario (a file by a count of connections), "idle" or "rack"."""
    return WANTED is None or name in WANTED or f"{name} x{connections}" in WANTED


WEB = ROOT / "http"
FILES = {"1mib.bin": 1 << 20, "64mib.bin": 64 << 20}
ALL_SCENARIOS = [(name, connections) for name in FILES for connections in (100, 2000)]
SCENARIOS = [(name, connections) for name, connections in ALL_SCENARIOS if wanted(name, connections)]
# Small answers, by requests per CPU-second: "absent.cfg" is not there (a 404).
SMALL_FILES = {"4kib.bin": 4 << 10, "64kib.bin": 64 << 10}
ALL_SMALL_SCENARIOS = [(name, connections) for name in ("absent.cfg", *SMALL_FILES) for connections in (100, 2000)]
SMALL_SCENARIOS = [(name, connections) for name, connections in ALL_SMALL_SCENARIOS if wanted(name, connections)]
# Stampede counts two descriptors per connection (its socket and a streamed file): FD_LIMIT
# (20,000, the hard limit here) holds 8,302 besides its reserve and images.
IDLE_CONNECTIONS = 8000
RACK = ROOT / "http-rack"
RACK_FILES = {"ipxe.efi": 1 << 20, "vmlinuz": 16 << 20, "initrd.img": 64 << 20}
RACK_MACHINES = int(os.environ.get("BENCH_RACK_MACHINES", "2000"))
RACK_ROUNDS = int(os.environ.get("BENCH_RACK_ROUNDS", str(ROUNDS))) if wanted("rack") else 0
# Another build (an older one) as a fourth server, "stampede-baseline", in the same rounds.
BASELINE = os.environ.get("BENCH_BASELINE")


def start(server, port, group):
    prepare = in_group(group)
    if server.startswith("stampede"):
        binary = BASELINE if server == "stampede-baseline" else STAMPEDE
        # Its log in a file, as nginx's error log is: a line for each 404 on both sides.
        argv = [str(binary), "-L", "-a", "127.0.0.1:0", "--verbosity", "0", "--logfile", str(ROOT / f"{server}-http.log"),
                "-u", "root", "--http", f"127.0.0.1:{port}",
                "--http-max-connections", str(IDLE_CONNECTIONS + 100),
                *(["--cache-file-limit", "0"] if server == "stampede-streamed" else []), str(WEB)]
    else:
        argv = in_sid(["/usr/sbin/nginx", "-c", str(nginx_config(str(port), f"127.0.0.1:{port}", WEB))])
    process = subprocess.Popen(argv, preexec_fn=prepare, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for_tcp(port, process, server)
    return process


def idle_connections(port, pid):
    """Opens IDLE_CONNECTIONS connections and holds them: the server's memory just before and with
    them (what they add is what a connection holds, apart from what the rounds before left: the
    file images Stampede caches, a heap grown under load), and whether a request on one more
    connection is still answered."""
    held = []
    try:
        before = memory(pid)
        for _ in range(IDLE_CONNECTIONS):
            held.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        time.sleep(1)
        after = memory(pid)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as probe:
            probe.sendall(b"GET /1mib.bin HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")
            got = b""
            while chunk := probe.recv(1 << 20):
                got += chunk
        added = after["rss"] - before["rss"]
        return {"connections": len(held), "rss_mib": after["rss"], "anon_mib": after["anon"], "shmem_mib": after["shmem"],
                "added_mib": round(added, 1), "per_connection_kib": round(added * 1024 / len(held), 2),
                "still_serves": got.startswith(b"HTTP/1.1 200")}
    finally:
        for s in held:
            s.close()


def one_round(server, index):
    port = free_port(socket.SOCK_STREAM)
    group = CpuGroup.make(f"http-{server}-{index}")
    process = start(server, port, group)
    sampler = Sampler(process.pid)
    sampler.start()
    results = {}
    try:
        for name, connections in SCENARIOS:
            before = group.seconds() if group else 0.0
            tcp = TCPMemory()
            tcp.start()
            load = wrk(f"http://127.0.0.1:{port}/{name}", connections, SECONDS)
            cpu = (group.seconds() if group else 0.0) - before
            load["tcp_memory"] = tcp.stop()
            load["cpu_s"] = round(cpu, 3)
            load["cpu_per_gb"] = round(cpu / (load["bytes"] / 1e9), 3) if load["bytes"] else None
            load["gb_per_s"] = round(load["bytes"] / 1e9 / SECONDS, 3)
            results[f"{name} x{connections}"] = load
        for name, connections in SMALL_SCENARIOS:
            before = (group.seconds(), group.user_seconds()) if group else (0.0, 0.0)
            load = wrk(f"http://127.0.0.1:{port}/{name}", connections, SECONDS)
            cpu = (group.seconds() if group else 0.0) - before[0]
            user = (group.user_seconds() if group else 0.0) - before[1]
            load["cpu_s"] = round(cpu, 3)
            load["requests_per_cpu_s"] = round(load["requests"] / cpu) if cpu > 0 else None
            # The server's own code, apart from the kernel's work for it (the same socket calls
            # on both sides): what a change in user space moves.
            load["user_us_per_request"] = round(user / load["requests"] * 1e6, 2) if load["requests"] else None
            load["requests_per_s"] = round(load["requests"] / SECONDS)
            results[f"{name} x{connections}"] = load
        if server not in ("stampede-streamed", "stampede-baseline") and wanted("idle"):  # "stampede"'s process when idle
            results["idle"] = idle_connections(port, process.pid)
    finally:
        sampler.stopping.set()
        stop_all([process], group)
        # A line per 404: hundreds of MB a round.
        for log in (ROOT / f"{server}-http.log", ROOT / f"nginx-{port}.error.log"):
            log.unlink(missing_ok=True)
    return results


def rack_round(servers, index):
    """One rack boot against `servers` ("stampede", "stampede-baseline" or "dnsmasq+nginx"), in one
    cpuacct group, the host's TCP memory sampled while it lasts."""
    group = CpuGroup.make(f"rack-{servers.replace('+', '-')}-{index}")

    prepare = in_group(group)
    http_port = free_port(socket.SOCK_STREAM)
    if servers.startswith("stampede"):
        tftp_port = free_port(socket.SOCK_STREAM)
        commands = [[str(BASELINE if servers == "stampede-baseline" else STAMPEDE), "-L", "-a", f"127.0.0.1:{tftp_port}", "--verbosity", "0", "-u", "root",
                     "--http", f"127.0.0.1:{http_port}", str(RACK)]]
    else:
        tftp_port = 69  # dnsmasq has no TFTP port option
        commands = [in_sid(dnsmasq_command("/usr/sbin/dnsmasq", str(RACK))), in_sid(["/usr/sbin/nginx", "-c", str(nginx_config(str(http_port), f"127.0.0.1:{http_port}", RACK))])]
    processes = [subprocess.Popen(c, preexec_fn=prepare, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for c in commands]
    try:
        wait_for_tcp(http_port, processes[-1], servers)
        time.sleep(0.5)  # dnsmasq's TFTP socket
        before = group.seconds() if group else 0.0
        tcp = TCPMemory()
        tcp.start()
        storm = subprocess.run([str(STAMPEDE), "storm", f"127.0.0.1:{tftp_port}", "--profile", "uefi-ipxe",
                                "--http", f"127.0.0.1:{http_port}", "--clients", str(RACK_MACHINES), "--ramp", "3",
                                "--verify-root", str(RACK), "--json"], capture_output=True, text=True, timeout=3600,
                               preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT)))
        cpu = (group.seconds() if group else 0.0) - before
        tcp_memory = tcp.stop()
        result = json.loads(storm.stdout)
        return {"ok": result["ok"], "failed": result["failed"], "failures": result["failures"],
                "p50_s": round(result["p50_ms"] / 1000, 2), "p99_s": round(result["p99_ms"] / 1000, 2),
                "max_s": round(result["max_ms"] / 1000, 2),
                "stages": [{k: v for k, v in stage.items() if k != "failures"} for stage in result["stages"]],
                "stages_p50_s": {stage["stage"]: round(stage["p50_ms"] / 1000, 3) for stage in result["stages"]},
                "retransmits": result["retransmits"], "server_cpu_s": round(cpu, 2),
                "storm_cpu_s": result["client_cpu_s"], "seconds": result["seconds"], "bytes": result["bytes"],
                "tcp_memory": tcp_memory}
    finally:
        stop_all(processes, group)


def rack_table(rounds):
    """The median round of each (by p50 boot time) and the spread."""
    lines = [f"Rack with HTTP: {RACK_MACHINES} machines powering on over 3 s, storm --profile uefi-ipxe (ipxe.efi 1 MiB over TFTP, "
             f"a 16 MiB kernel and a 64 MiB initrd over HTTP, every byte compared), {RACK_ROUNDS} interleaved rounds, median round:", "",
             "| servers | booted / failed | boot p50 s (spread) | boot p99 s | boot max s | ipxe.efi p50 s | vmlinuz p50 s "
             "| initrd p50 s | retransmissions | server CPU s | storm CPU s | wall s | host TCP memory peak MB (s at the pressure mark) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    summary = {}
    for servers, results in rounds.items():
        ordered = sorted(results, key=lambda r: r["p50_s"])
        r = ordered[len(ordered) // 2]
        summary[servers] = r
        stages = r["stages_p50_s"]
        lines.append(f"| {servers} | {r['ok']} / {r['failed']} | {r['p50_s']} ({ordered[0]['p50_s']}–{ordered[-1]['p50_s']}) "
                     f"| {r['p99_s']} | {r['max_s']} | {stages.get('uefi get ipxe.efi')} | {stages.get('ipxe http GET vmlinuz')} "
                     f"| {stages.get('ipxe http GET initrd.img')} | {r['retransmits']} | {r['server_cpu_s']} | {r['storm_cpu_s']} "
                     f"| {round(r['seconds'], 1)} | {tcp_memory_cell(results)} |")
    return lines, summary


def tcp_peak(results, key):
    """The largest host TCP memory peak (MB) of a server's rounds in a scenario, or — where the
    rounds were run before it was sampled."""
    peaks = [r[key]["tcp_memory"]["peak_mb"] for r in results if r[key].get("tcp_memory")]
    return str(max(peaks)) if peaks else "—"


def figure(results, key, per_cpu, rate):
    """One server's figure over the rounds: its median and spread, and the median rate beside it."""
    median, low, high = median_spread([r[key][per_cpu] for r in results])
    return {"median": median, "spread": [low, high], rate: median_spread([r[key][rate] for r in results])[0]}


def cell(figure):
    return with_spread(figure["median"], *figure["spread"])


def baseline_cells(row, summary):
    """A row's baseline columns (its figure, Stampede's over it), its ratio put in `summary`."""
    s, b = row["stampede"], row["stampede-baseline"]
    summary["baseline_ratio"] = round(s["median"] / b["median"], 2)
    return f" {cell(b)} | {s['median'] / b['median']:.2f} |"


def report(rounds, rack_rounds, nginx_version, seconds):
    """The tables of the rounds (and the rack's): the text, the summary, the idle figures and the
    rack's summary."""
    baseline = "stampede-baseline" in rounds
    # A table for each kind of scenario the rounds played (BENCH_SCENARIOS may have left one out),
    # read from the rounds themselves, so that rewrite() keeps what a narrowed run played.
    played = rounds["stampede"][0].keys()
    big = [(name, connections) for name, connections in ALL_SCENARIOS if f"{name} x{connections}" in played]
    small = [(name, connections) for name, connections in ALL_SMALL_SCENARIOS if f"{name} x{connections}" in played]
    table = ["| scenario | Stampede CPU-s/GB (spread) | streamed (spread) | nginx CPU-s/GB (spread) | Stampede ÷ nginx "
             "| streamed ÷ nginx | GB/s Stampede, streamed, nginx | host TCP memory peak MB, Stampede, streamed, nginx |"
             + (" baseline (spread) | Stampede ÷ baseline |" if baseline else ""),
             "|---|---|---|---|---|---|---|---|" + ("---|---|" if baseline else "")] if big else []
    summary = {}
    for name, connections in big:
        key = f"{name} x{connections}"
        row = {server: figure(rounds[server], key, "cpu_per_gb", "gb_per_s") for server in rounds}
        ratio = row["stampede"]["median"] / row["nginx"]["median"]
        streamed_ratio = row["stampede-streamed"]["median"] / row["nginx"]["median"]
        summary[key] = {**row, "ratio": round(ratio, 2), "streamed_ratio": round(streamed_ratio, 2)}
        s, t, n = row["stampede"], row["stampede-streamed"], row["nginx"]
        line = (f"| {key} | {cell(s)} | {cell(t)} | {cell(n)} | {ratio:.2f} | {streamed_ratio:.2f} "
                f"| {s['gb_per_s']}, {t['gb_per_s']}, {n['gb_per_s']} "
                f"| {', '.join(tcp_peak(rounds[server], key) for server in ('stampede', 'stampede-streamed', 'nginx'))} |")
        table.append(line + (baseline_cells(row, summary[key]) if baseline else ""))
    table += ["", "Small answers: requests per server CPU-second (median, spread; higher is better), a 404 for a file "
              "not there and small files:", "",
              "| scenario | Stampede req/CPU-s (spread) | streamed (spread) | nginx req/CPU-s (spread) | Stampede ÷ nginx "
              "| answers not 404/2xx (Stampede, nginx) | req/s Stampede, streamed, nginx | user-space µs/request Stampede, nginx |"
              + (" baseline (spread) | Stampede ÷ baseline | user-space µs/request baseline |" if baseline else ""),
              "|---|---|---|---|---|---|---|---|" + ("---|---|---|" if baseline else "")] if small else []
    for name, connections in small:
        key = f"{name} x{connections}"
        row = {}
        for server in rounds:
            wrong = sum(r[key]["non_2xx"] for r in rounds[server]) if name in SMALL_FILES else \
                sum(r[key]["requests"] - r[key]["non_2xx"] for r in rounds[server])
            user = [r[key]["user_us_per_request"] for r in rounds[server] if r[key].get("user_us_per_request") is not None]
            row[server] = {**figure(rounds[server], key, "requests_per_cpu_s", "requests_per_s"), "wrong_answers": wrong,
                           "user_us_per_request": median_spread(user)[0] if user else None}
        ratio = row["stampede"]["median"] / row["nginx"]["median"]
        summary[key] = {**row, "ratio": round(ratio, 2)}
        s, t, n = row["stampede"], row["stampede-streamed"], row["nginx"]
        line = (f"| {key} | {cell(s)} | {cell(t)} | {cell(n)} | {ratio:.2f} | {s['wrong_answers']}, {n['wrong_answers']} "
                f"| {s['requests_per_s']}, {t['requests_per_s']}, {n['requests_per_s']} "
                f"| {s['user_us_per_request']}, {n['user_us_per_request']} |")
        # The baseline's own code beside Stampede's, from the same rounds: what a user-space change moved.
        table.append(line + (baseline_cells(row, summary[key]) + f" {row['stampede-baseline']['user_us_per_request']} |"
                             if baseline else ""))
    pressure = tcp_pressure_mb([r[f"{name} x{connections}"] for rs in rounds.values() for r in rs for name, connections in big])
    if pressure and big:
        table += ["", f"Host TCP memory: the largest of the rounds' peaks (/proc/net/sockstat every 100 ms, the server's sockets "
                  f"and wrk's), against the pressure mark, {pressure} MB (tcp_mem), past which the kernel prunes receive queues "
                  "and shrinks send buffers. Stampede caps what each connection holds unsent at its share of 256 MiB (at 2,000 "
                  "connections, 128 KiB each), which keeps a rack's boots out of that pressure, at the price of a wakeup per "
                  "64 KiB sent; nginx leaves the send buffers to autotuning."]
    idle = {server: rounds[server][-1]["idle"] for server in ("stampede", "nginx") if "idle" in rounds[server][-1]}
    if idle:
        table.append("")
        table.append(idle_line(idle))
    rack_lines, rack_summary = rack_table(rack_rounds) if rack_rounds["stampede"] else ([], {})
    text = "\n".join([f"Stampede --http vs {nginx_version} (sendfile on), wrk keep-alive, {len(rounds['stampede'])} interleaved rounds "
                      f"of {seconds} s, "
                      "server CPU-s per GB read (median, spread):", "", *table, "", *rack_lines])
    return text, summary, idle, rack_summary


def idle_line(idle):
    """The idle connections' figures: what they add to each server's memory, each connection's
    share, and the whole process's memory then (Stampede's with its file images apart)."""
    s, n = idle["stampede"], idle["nginx"]
    if "added_mib" not in s:  # a run before the figures were split
        return (f"{IDLE_CONNECTIONS} idle connections (descriptor limit {FD_LIMIT}): Stampede RSS {s['rss_mib']} MiB "
                f"(serves still: {s['still_serves']}), nginx {n['rss_mib']} MiB (serves still: {n['still_serves']})")
    return (f"{s['connections']} idle connections (descriptor limit {FD_LIMIT}) add to the server's memory: Stampede "
            f"{s['added_mib']} MiB ({s['per_connection_kib']} KiB each), nginx {n['added_mib']} MiB ({n['per_connection_kib']} KiB "
            f"each; nginx's connections may be made at its start). The processes' resident memory then: Stampede "
            f"{s['rss_mib']} MiB, of which {s['shmem_mib']} MiB the cache's file images and {s['anon_mib']} MiB its heaps, "
            f"{round(s['rss_mib'] - s['shmem_mib'], 1)} MiB apart from the images; nginx {n['rss_mib']} MiB (its files are in the "
            f"page cache). "
            f"Both serve still: {s['still_serves'] and n['still_serves']}.")


def rewrite(output=OUTPUT):
    """results/<output>.{md,json}'s tables and summary again from the JSON's rounds (after a
    change of the tables, not of the figures): `python3 -c 'import http_vs_nginx; http_vs_nginx.rewrite()'`
    in Benchmarks/ (BENCH_OUTPUT, or the argument, names a narrowed run's results)."""
    path = RESULTS / f"{output}.json"
    data = json.loads(path.read_text())
    text, data["summary"], data["idle"], data["rack"] = report(data["rounds"], data["rack_rounds"], data["nginx"], data["seconds"])
    path.write_text(json.dumps(data, indent=2))
    (RESULTS / f"{output}.md").write_text(f"{stamp_line(data['stamp'])}\n\n{text.strip()}\n")


def main():
    # The idle clients' own descriptors: 8,000 and more.
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, FD_LIMIT * 2), hard))
    fill_root(WEB, {**FILES, **SMALL_FILES})
    fill_root(RACK, RACK_FILES)
    (RACK / "boot.ipxe").write_text("#!ipxe\nkernel vmlinuz\ninitrd initrd.img\nboot\n")
    (RACK / "boot.ipxe").chmod(0o644)
    nginx_version = subprocess.run(["chroot", str(SID), "/usr/sbin/nginx", "-v"], capture_output=True, text=True).stderr.strip()
    # "stampede-streamed" serves the same files with --cache-file-limit 0: no image, sendfile
    # from the file's own page cache, as nginx does; beside the cached images it shows what the
    # image's memory (a memfd) costs sendfile.
    servers = ["stampede", "stampede-streamed", "nginx"] + (["stampede-baseline"] if BASELINE else [])
    rounds = {server: [] for server in servers}
    for index in range(ROUNDS):
        for server in servers[index % len(servers):] + servers[:index % len(servers)]:
            print(f"round {index + 1}/{ROUNDS}: {server}", flush=True)
            rounds[server].append(one_round(server, index))
    racks = ["stampede", "dnsmasq+nginx"] + (["stampede-baseline"] if BASELINE else [])
    rack_rounds = {servers: [] for servers in racks}
    for index in range(RACK_ROUNDS):
        for servers in racks[index % len(racks):] + racks[:index % len(racks)]:
            print(f"rack round {index + 1}/{RACK_ROUNDS}: {servers}", flush=True)
            rack_rounds[servers].append(rack_round(servers, index))
    text, summary, idle, rack_summary = report(rounds, rack_rounds, nginx_version, SECONDS)
    write_results(OUTPUT, {"nginx": nginx_version, "seconds": SECONDS, "rounds": rounds, "summary": summary, "idle": idle,
                                 "rack_rounds": rack_rounds, "rack": rack_summary}, text)
    print(text)


if __name__ == "__main__":
    main()
