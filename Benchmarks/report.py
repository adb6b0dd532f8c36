#!/usr/bin/env python3
"""`make bench-report`: docs/BENCHMARKS.md, assembled from the results the benches write.

Every bench writes results/NAME.md through `harness.write_results`: a line saying when, at which
commit and on what machine it was measured, then its tables. This script puts them in one page,
one section per bench, in the order below, each with what it measures and how to rerun it.
results/ is kept in the repository (a few kilobytes of text per bench), so the page is made from
a clone alone, and running one bench changes its section alone. Nothing here is typed by hand
but the titles and the paragraphs that say what each bench does. `--check`: exit 1 when the page
is not what the results make (the suite runs it).
"""
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import REPO, RESULTS  # noqa: E402

PAGE = REPO / "docs" / "BENCHMARKS.md"


@dataclass(frozen=True)
class Section:
    result: str
    title: str
    rerun: str
    about: str


SECTIONS = [
    Section("bench", "TFTP: Stampede on both backends beside the peers", "make bench",
            "Each server fresh on loopback, each scenario played by `stampede storm` with every byte compared; the "
            "server's CPU from a cgroup of its own, its peak memory and descriptors from /proc. Stampede (io_uring and "
            "Glibc, with and without GSO) and dnsmasq run in interleaved rounds: the median round and the spread. The "
            "peers are tftp-hpa 7.3's in.tftpd and dnsmasq 2.93 from a Debian unstable tree, and Debian 12's 5.2 and "
            "2.90. The floor is the kernel's price for the same datagrams with no TFTP at all."),
    Section("bench-rack", "The rack: 20,000 machines on both backends, and where datagrams were lost", "make bench-rack",
            "The rack scenario of `make bench` alone (20,000 machines powering on over 3 s, the uefi-ipxe-tftp profile, "
            "the storm in 4 processes, every byte compared), Stampede on io_uring and on Glibc in three interleaved "
            "rounds, each round a row; then, per round, where datagrams were dropped on each side: full socket queues "
            "(the server's at its listeners in brackets), sends the kernel refused, io_uring receives that found no "
            "buffer, timers 10 ms or more late, and the host's UDP counters."),
    Section("bench-lockstep", "Lockstep: both backends beside dnsmasq and the kernel's price", "make bench-lockstep",
            "The lockstep scenarios of `make bench` alone (rack-boot: 1,000 clients at once x 1 MiB; storm: 10,000 "
            "transfers of 32 KiB, 400 at a time), Stampede on io_uring and on Glibc beside dnsmasq 2.93 in five "
            "interleaved rounds, and before them the kernel's price for lockstep with no TFTP at all: a minimal C loop "
            "that sends a DATA and waits for its ACK on as many socket pairs as the scenario has clients at once, and for "
            "the storm, as its transfers are, a socket of its own opened for each 32 KiB transfer with its request and "
            "OACK (× floor is over its io_uring figure; the table under it has both, and the same transfers on sockets "
            "kept from one transfer to the next: how much of that price is opening and closing them)."),
    Section("bench-config-search", "PXELINUX's config search: a rack's refusals", "make bench-config-search",
            "10,000 machines powering on over 1 s, each asking for the ten per-machine names PXELINUX 6 looks for "
            "(not there) and then pxelinux.cfg/default, played by `stampede storm` against Stampede on io_uring and "
            "on Glibc and dnsmasq 2.93 in interleaved rounds: the server's CPU per request from a cgroup of its own, and "
            "its user-space part. "
            "Stampede logs every refusal at --verbosity 0; dnsmasq, run as every bench runs it (--quiet-tftp), does not."),
    Section("bench-dhcp", "The first DHCP packet: Stampede's proxyDHCP beside dnsmasq's", "make bench-dhcp",
            "A boot network of its own (two network namespaces and a veth pair): `stampede storm --dhcp` plays each "
            "machine's DHCP as its firmware sends it, with its own MAC and UUID, against Stampede (--proxy-dhcp, TFTP, "
            "--http) and against dnsmasq 2.93 (proxy DHCP and TFTP) with nginx, each in a cgroup of its own, in "
            "interleaved rounds; then the same over IPv6 (`storm --dhcp` with an IPv6 address: EDK2's Solicit, iPXE's "
            "Information-request, each machine with its own DUID), Stampede with --proxy-dhcp6 --dhcp6-derived beside "
            "dnsmasq's stateful DHCPv6 with option6:bootfile-url, both giving addresses. `make bench` runs it too."),
    Section("bench-machines", "Knowing each machine: records and the machine API", "make bench-machines",
            "The lab of bench-dhcp: a rack powering on over 3 s, each machine following the iPXE script the server "
            "writes for it (storm --profile uefi-ipxe-follow: DHCP, ipxe.efi over TFTP, the script, and the kernel and "
            "initrd it names over HTTP, every byte compared), without records, with a record per machine (--machines; "
            "the storm plays the same directory and checks each script against its record) and with pixiecore's API "
            "answering in 20 ms (--machines-api), on both backends, in interleaved rounds: the server's CPU per machine "
            "from a cgroup of its own, the part of it in user space, and their ratios to the rack without records. "
            "`make bench` runs it too."),
    Section("bench-static", "The static binary beside the dynamic one", "make bench-static",
            "The shipped binary (Swift runtime linked statically) against the same code linked dynamically, both "
            "backends, interleaved."),
    Section("bench-previous", "This build beside an earlier one", "make bench-previous",
            "Every scenario of `make bench` against this build and an earlier one (PREVIOUS, a commit, built once), on "
            "both backends, no peers, in interleaved rounds: each scenario's server CPU per GB on each backend as a "
            "ratio of the earlier build's, so that a regression shows."),
    Section("bench-http", "HTTP: Stampede beside nginx", "make bench-http",
            "Keep-alive GETs by wrk against Stampede's --http (files as images, and streamed with "
            "--cache-file-limit 0) and nginx-light (sendfile on) on the same root, each in a cgroup of its own: server "
            "CPU per GB, interleaved rounds. Then 8,000 idle connections, and a rack booting over TFTP and HTTP "
            "against Stampede alone and against dnsmasq with nginx."),
    Section("bench-https", "HTTPS: Stampede beside nginx", "make bench-https",
            "Keep-alive GETs by wrk and full handshakes by openssl s_time against Stampede's --https (on Debian 12's "
            "OpenSSL, and on the unstable tree's, the one nginx links) and nginx-light (ssl, sendfile on) with the same "
            "certificate and suites, each in a cgroup of its own: server CPU per GB and new connections per server "
            "CPU-second, interleaved rounds. `make bench` runs it too."),
    Section("bench-anycast", "Several servers behind one anycast address", "make bench-anycast",
            "Three servers in network namespaces behind one ECMP route and a rack of machines: the hash policies, a "
            "server lost mid-boot under hash-threshold and resilient groups, a drain in either order."),
    Section("busy", "When the server is full", "make bench-busy",
            "A server full by --max-transfers or by its descriptor limit, answering ERROR 0 (`--when-busy error`) or "
            "nothing (`silence`): how many of a rack's machines boot."),
    Section("bench-disk", "A slow disk and the other transfers", "make bench-disk",
            "A FUSE mirror whose fsync takes a second under a server receiving uploads: the longest another "
            "transfer waited, and a storm's p99."),
    Section("bench-metrics", "What the metrics cost", "make bench-metrics",
            "Server CPU per GB of a storm without --metrics and with the endpoint scraped every second."),
    Section("soak", "Soak", "make soak",
            "A continuous storm against one server: every transfer must succeed, descriptors return to idle and "
            "memory stops growing after warm-up."),
]

HEADER = """# Benchmarks

What the benches measured, each section as its bench last wrote it (results/NAME.md), with the date,
the commit and the machine. This page is generated by `make bench-report`; edit the benches, not
the page. How the benches work and how to run them: [testing.md](testing.md#benchmarks).
"""
MARK = "<!-- result: {} -->"


def render(section: Section, results: str) -> str:
    return f"## {section.title}\n\n{section.about} Rerun: `{section.rerun}`.\n\n{results.strip()}\n"


def page() -> tuple:
    """The page the results make, and the sections not measured yet."""
    out, missing = [HEADER], []
    for section in SECTIONS:
        source = RESULTS / f"{section.result}.md"
        if source.exists():
            body = render(section, source.read_text())
        else:
            body = render(section, f"Not measured yet: run `{section.rerun}`.")
            missing.append(section.result)
        out.append(f"{MARK.format(section.result)}\n{body}")
    return "\n".join(out), missing


def main():
    made, missing = page()
    if sys.argv[1:] == ["--check"]:
        if not PAGE.exists() or PAGE.read_text() != made:
            print(f"{PAGE.relative_to(REPO)} is not what results/ makes: run `make bench-report`", file=sys.stderr)
            sys.exit(1)
        return
    PAGE.write_text(made)
    print(f"{PAGE.relative_to(REPO)}: made from results/; not measured: {', '.join(missing) or 'nothing'}")


if __name__ == "__main__":
    main()
