#!/usr/bin/env python3
"""`make bench-dhcp`: a rack booting from its first DHCP packet, Stampede alone (--proxy-dhcp,
TFTP, --http) beside dnsmasq 2.93 (proxy DHCP and TFTP) with nginx, on a boot network of its own;
over IPv4 and over IPv6.

Two network namespaces joined by a veth pair: the servers in one (10.79.0.1), `stampede storm
--dhcp` in the other (10.79.0.57), every machine broadcasting its DISCOVER from port 68 with its
own MAC and UUID as its firmware does, then fetching from an address of its own (10.80.0.0/20,
routed to the client namespace), as machines do once the site's DHCP server gave them one. Scenarios, in interleaved rounds, the median round and the
spread:

- rack: 2,000 machines powering on over 3 s, `--profile uefi-ipxe` with its DHCP stages (EDK2's
  DISCOVER, and its REQUEST on 4011 where the offer does not bypass it; iPXE's DHCP with its user
  class and its ProxyDHCP REQUEST), ipxe.efi over TFTP, the script, a 16 MiB kernel and a 64 MiB
  initrd over HTTP, every byte compared: boot p50/p99, failed, server CPU, the DHCP stages' p99.
- discover: 20,000 machines' DISCOVERs within 1 s (EDK2's, nothing after): answered, answer
  p50/p99, server CPU, and CPU per answered machine.
- solicit and rack6: the same over IPv6 (2001:db8:79::1, the storm at 2001:db8:79::57, the
  machines' own addresses in 2001:db8:80::/64): EDK2's Solicit, and iPXE's Information-request.
  Both servers give addresses, so that the exchange is the same: Stampede with --proxy-dhcp6 and
  --dhcp6-derived (addresses made from each machine's DUID in the /64, no lease kept), dnsmasq
  with a stateful range, option6:bootfile-url by user class, and its lease file off (its file is
  written whole after each change: 20,000 leases would measure the disk).

The server's CPU is read from a cgroup of its own (dnsmasq and nginx together in one). Root only
(namespaces, cgroups). Results: results/bench-dhcp.{json,md}."""
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import FD_LIMIT, in_group, ROOT, STAMPEDE, CpuGroup, fill_root, in_sid, nginx_config, stop_all, write_results  # noqa: E402

SERVER, CLIENT, MACHINES = "10.79.0.1", "10.79.0.57", "10.80.0.0/20"
SERVER6, CLIENT6, MACHINES6, FIRST6 = "2001:db8:79::1", "2001:db8:79::57", "2001:db8:80::/64", "2001:db8:80::1"
SERVER_NS, CLIENT_NS = f"stbench-dhcp-s{os.getpid()}", f"stbench-dhcp-c{os.getpid()}"
HTTP_PORT = 8080
RACK = ROOT / "dhcp-rack"
RACK_FILES = {"ipxe.efi": 1 << 20, "vmlinuz": 16 << 20, "initrd.img": 64 << 20}
RACK_MACHINES = int(os.environ.get("BENCH_RACK_MACHINES", "2000"))
DISCOVER_MACHINES = int(os.environ.get("BENCH_DISCOVER_MACHINES", "20000"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
SERVERS = ["stampede", "dnsmasq+nginx"]
DISCOVER_PROFILE = "profile discover\nfirmware uefi retry=4s tries=4 backoff=8\ndhcp pxe arch=7\n"
IPV6 = {"solicit", "rack6"}
ALL_SCENARIOS = {"discover", "rack", "solicit", "rack6"}


def sh(*argv):
    subprocess.run([str(a) for a in argv], check=True)


def make_lab():
    for name in (SERVER_NS, CLIENT_NS):
        sh("ip", "netns", "add", name)
        sh("ip", "-n", name, "link", "set", "lo", "up")
    sh("ip", "link", "add", "veth-s", "netns", SERVER_NS, "type", "veth", "peer", "name", "veth-c", "netns", CLIENT_NS)
    for name, device, address, address6 in ((SERVER_NS, "veth-s", SERVER, SERVER6), (CLIENT_NS, "veth-c", CLIENT, CLIENT6)):
        sh("ip", "-n", name, "addr", "add", f"{address}/24", "dev", device)
        sh("ip", "-n", name, "-6", "addr", "add", f"{address6}/64", "dev", device, "nodad")
        sh("ip", "-n", name, "link", "set", device, "up")
    # Each machine's own address after its DHCP, as on a real rack (a server limits each client
    # address to 64 transfers by default): the client namespace owns MACHINES, the server routes it.
    sh("ip", "-n", CLIENT_NS, "route", "add", "local", MACHINES, "dev", "lo")
    sh("ip", "-n", SERVER_NS, "route", "add", MACHINES, "via", CLIENT)
    sh("ip", "-n", CLIENT_NS, "-6", "route", "add", "local", MACHINES6, "dev", "lo")
    sh("ip", "netns", "exec", CLIENT_NS, "sh", "-c", "echo 1 > /proc/sys/net/ipv6/ip_nonlocal_bind")
    sh("ip", "-n", SERVER_NS, "-6", "route", "add", MACHINES6, "via", CLIENT6)
    # The link-local addresses (a multicast's source) come a moment after the link is up.
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and b"fe80" not in subprocess.run(
            ["ip", "-n", CLIENT_NS, "-6", "addr", "show", "dev", "veth-c"], capture_output=True).stdout:
        time.sleep(0.05)


def remove_lab():
    for name in (SERVER_NS, CLIENT_NS):
        subprocess.run(["ip", "netns", "del", name], stderr=subprocess.DEVNULL)


def server_commands(servers, ipv6=False):
    inside = ["ip", "netns", "exec", SERVER_NS]
    if ipv6:
        return server_commands6(servers, inside)
    if servers == "stampede":
        return [[*inside, STAMPEDE, "-L", "-a", f"{SERVER}:69", "--verbosity", "0", "-u", "root",
                 "--proxy-dhcp", SERVER, "--http", f"{SERVER}:{HTTP_PORT}", RACK]]
    # The configuration dnsmasq's and iPXE's documentation give for a proxy beside a site's DHCP
    # server: the UEFI PXE gets ipxe.efi, iPXE (option 175) the script's URL.
    dnsmasq = ["/usr/sbin/dnsmasq", "-k", "--port=0", "--enable-tftp", f"--tftp-root={RACK}", "--tftp-max=20000",
               "--interface=veth-s", "--bind-interfaces", f"--dhcp-range={SERVER},proxy", "--dhcp-match=set:ipxe,175",
               "--pxe-service=tag:!ipxe,x86-64_EFI,iPXE,ipxe.efi",
               f"--pxe-service=tag:ipxe,x86-64_EFI,script,http://{SERVER}:{HTTP_PORT}/boot.ipxe",
               "--user=root", "--pid-file=", "--quiet-tftp", "--quiet-dhcp", "--log-facility=-"]
    return [[*inside, *in_sid(dnsmasq, RACK.parent)], [*inside, *in_sid(["/usr/sbin/nginx", "-c", nginx_config("dhcp", f"{SERVER}:{HTTP_PORT}", RACK)], RACK.parent)]]


def server_commands6(servers, inside):
    """The IPv6 forms: both give each machine an address and its boot file URL (EDK2's PXE its
    ipxe.efi over TFTP, iPXE its script over HTTP)."""
    if servers == "stampede":
        return [[*inside, STAMPEDE, "-L", "-a", f"[{SERVER6}]:69", "--verbosity", "0", "-u", "root",
                 "--proxy-dhcp6", SERVER6, "--dhcp6-derived", "--http", f"[{SERVER6}]:{HTTP_PORT}", RACK]]
    dnsmasq = ["/usr/sbin/dnsmasq", "-k", "--port=0", "--enable-tftp", f"--tftp-root={RACK}", "--tftp-max=20000",
               "--interface=veth-s", "--bind-interfaces", "--dhcp-range=2001:db8:79::1000,2001:db8:79::ffff,64,1h",
               "--dhcp-lease-max=100000", "--leasefile-ro", "--dhcp-userclass=set:ipxe,iPXE",
               f"--dhcp-option=tag:!ipxe,option6:bootfile-url,tftp://[{SERVER6}]/ipxe.efi",
               f"--dhcp-option=tag:ipxe,option6:bootfile-url,http://[{SERVER6}]:{HTTP_PORT}/boot.ipxe",
               "--user=root", "--pid-file=", "--quiet-tftp", "--quiet-dhcp6", "--log-facility=-"]
    return [[*inside, *in_sid(dnsmasq, RACK.parent)],
            [*inside, *in_sid(["/usr/sbin/nginx", "-c", nginx_config("dhcp6", f"[{SERVER6}]:{HTTP_PORT}", RACK)], RACK.parent)]]


def storm(args, ipv6=False, timeout=3600):
    server, client = (f"[{SERVER6}]:69", CLIENT6) if ipv6 else (f"{SERVER}:69", CLIENT)
    r = subprocess.run(["ip", "netns", "exec", CLIENT_NS, str(STAMPEDE), "storm", server, "--dhcp", client,
                        *map(str, args), "--json"], capture_output=True, text=True, timeout=timeout,
                       preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT)))
    if not r.stdout.strip():
        raise RuntimeError(f"storm printed nothing: {r.stderr[-2000:]}")
    return json.loads(r.stdout)


def one_round(servers, scenario, index):
    group = CpuGroup.make(f"dhcp-{scenario}-{servers.replace('+', '-')}-{index}")

    prepare = in_group(group)
    log = open(RACK.parent / f"bench-dhcp-{servers.replace('+', '-')}.log", "w")
    ipv6 = scenario in IPV6
    processes = [subprocess.Popen([str(a) for a in c], preexec_fn=prepare, stdout=log, stderr=subprocess.STDOUT)
                 for c in server_commands(servers, ipv6)]
    try:
        time.sleep(1.5)
        for p in processes:
            if p.poll() is not None:
                raise RuntimeError(f"{servers} exited with {p.returncode}: see {log.name}")
        before = group.seconds() if group else 0.0
        if scenario in ("rack", "rack6"):
            http = f"[{SERVER6}]:{HTTP_PORT}" if ipv6 else f"{SERVER}:{HTTP_PORT}"
            result = storm(["--profile", "uefi-ipxe", "--http", http, "--clients", RACK_MACHINES,
                            "--ramp", "3", "--verify-root", RACK, "--source-range", FIRST6 if ipv6 else "10.80.0.1"], ipv6)
        else:
            profile = RACK.parent / "discover.profile"
            profile.write_text(DISCOVER_PROFILE)
            result = storm(["--profile-file", profile, "--clients", DISCOVER_MACHINES, "--ramp", "1"], ipv6)
        cpu = (group.seconds() if group else 0.0) - before
    finally:
        stop_all(processes, group)
    stages = {stage["stage"]: stage for stage in result["stages"]}
    dhcp = [stage for name, stage in stages.items() if " dhcp " in name]
    return {"ok": result["ok"], "failed": result["failed"], "failures": result["failures"],
            "stage_failures": {stage["stage"]: stage["failures"] for stage in result["stages"] if stage["failed"]},
            "p50_s": round(result["p50_ms"] / 1000, 3), "p99_s": round(result["p99_ms"] / 1000, 3),
            "dhcp_p99_s": {stage["stage"]: round(stage["p99_ms"] / 1000, 3) for stage in dhcp},
            "dhcp_retransmits": sum(stage["retransmits"] for stage in dhcp),
            "server_cpu_s": round(cpu, 3), "storm_cpu_s": result["client_cpu_s"], "seconds": result["seconds"]}


def lost_rounds(scenario, rounds):
    """A sentence for every round, not only the median, in which a server lost machines."""
    lost = [f"{servers} lost {r['failed']} in round {index + 1} ({', '.join(f'{n} {why}' for why, n in r['failures'].items())})"
            for servers in SERVERS for index, r in enumerate(rounds[(scenario, servers)]) if r["failed"]]
    return ["", "Rounds that lost machines: " + "; ".join(lost) + "."] if lost else []


def median_round(results):
    ordered = sorted(results, key=lambda r: r["p50_s"])
    return ordered[len(ordered) // 2], ordered[0]["p50_s"], ordered[-1]["p50_s"]


def main():
    if os.geteuid() != 0:
        sys.exit("bench-dhcp needs root: network namespaces and cgroups")
    fill_root(RACK, RACK_FILES)
    (RACK / "boot.ipxe").write_text("#!ipxe\nkernel vmlinuz\ninitrd initrd.img\nboot\n")
    (RACK / "boot.ipxe").chmod(0o644)
    scenarios = os.environ.get("BENCH_SCENARIOS", "discover,rack,solicit,rack6").split(",")
    rounds = {(s, v): [] for s in scenarios for v in SERVERS}
    remove_lab()
    make_lab()
    try:
        for index in range(ROUNDS):
            for scenario in scenarios:
                order = SERVERS if index % 2 == 0 else list(reversed(SERVERS))
                for servers in order:
                    r = one_round(servers, scenario, index)
                    rounds[(scenario, servers)].append(r)
                    print(f"round {index + 1} {scenario} {servers}: {r['ok']} ok, {r['failed']} failed, "
                          f"p50 {r['p50_s']} s, p99 {r['p99_s']} s, server CPU {r['server_cpu_s']} s", flush=True)
    finally:
        remove_lab()
    summary, lines = {}, []
    for flood, rack, family in (("discover", "rack", "IPv4"), ("solicit", "rack6", "IPv6")):
        if flood in scenarios:
            lines += flood_table(flood, family, rounds, summary)
        if rack in scenarios:
            lines += rack_table(rack, family, rounds, summary)
    markdown = "\n".join(lines)
    if set(scenarios) == ALL_SCENARIOS:
        write_results("bench-dhcp", {"rounds": {f"{s} {v}": rs for (s, v), rs in rounds.items()}, "summary": summary}, markdown)
    else:
        print("(some scenarios only: results/bench-dhcp left as it was)")
    print(markdown)


def flood_table(scenario, family, rounds, summary):
    asked = ("DISCOVERs (each answered by an offer; neither server's offer to UEFI bypasses boot server discovery, so every "
             "machine also asks on 4011, as EDK2 does)") if family == "IPv4" else \
        "Solicits (each answered by an Advertise with an address and the URL, then its Request by a Reply)"
    lines = ["", f"A {family} storm of first packets: {DISCOVER_MACHINES} machines' EDK2 {asked} within 1 s, "
             f"{ROUNDS} interleaved rounds, median round:", "",
             "| servers | answered / lost | answer p50 s (spread) | answer p99 s | DHCP retransmissions | server CPU s "
             "| server CPU µs per machine | storm CPU s |", "|---|---|---|---|---|---|---|---|"]
    for servers in SERVERS:
        r, low, high = median_round(rounds[(scenario, servers)])
        summary[f"{scenario} {servers}"] = r
        per = r["server_cpu_s"] / max(1, r["ok"]) * 1e6
        lines.append(f"| {servers} | {r['ok']} / {r['failed']} | {r['p50_s']} ({low}–{high}) | {r['p99_s']} "
                     f"| {r['dhcp_retransmits']} | {r['server_cpu_s']} | {per:.1f} | {r['storm_cpu_s']} |")
    return lines + lost_rounds(scenario, rounds)


def rack_table(scenario, family, rounds, summary):
    dhcp = "DHCP" if family == "IPv4" else "DHCPv6"
    lines = ["", f"A rack booting from its first {dhcp} packet over {family}: {RACK_MACHINES} machines powering on over 3 s, "
             f"storm --profile uefi-ipxe --dhcp (EDK2's {dhcp}, ipxe.efi 1 MiB over TFTP, iPXE's {dhcp}, the script, a 16 MiB "
             f"kernel and a 64 MiB initrd over HTTP, every byte compared), {ROUNDS} interleaved rounds, median round:", "",
             f"| servers | booted / failed | boot p50 s (spread) | boot p99 s | EDK2 {dhcp} p99 s | iPXE {dhcp} p99 s "
             f"| {dhcp} retransmissions | server CPU s | storm CPU s |", "|---|---|---|---|---|---|---|---|---|"]
    for servers in SERVERS:
        r, low, high = median_round(rounds[(scenario, servers)])
        summary[f"{scenario} {servers}"] = r
        stages = r["dhcp_p99_s"]
        lines.append(f"| {servers} | {r['ok']} / {r['failed']} | {r['p50_s']} ({low}–{high}) | {r['p99_s']} "
                     f"| {stages.get('uefi dhcp pxe arch=7')} | {stages.get('ipxe dhcp ipxe arch=7')} | {r['dhcp_retransmits']} "
                     f"| {r['server_cpu_s']} | {r['storm_cpu_s']} |")
    return lines + lost_rounds(scenario, rounds)


if __name__ == "__main__":
    main()
