"""Clients as the network presents them (issue 21, defects 1, 10 and 11): an IPv6 rack shares
one /64; a wildcard `-a [::]` means every client, IPv4 too; an IPv4 client on a dual-stack
socket is an IPv4 client to the remap rules."""
import json
import re
import socket
import subprocess
import time

from conftest import BINARY

RACK_PREFIX = "2001:db8:1"
SERVER_ADDRESS = f"{RACK_PREFIX}::1"


def ipv6_rack_namespace(make):
    """A namespace whose host takes every address of 2001:db8:1::/64 (a local route, non-local
    binds): the server on 2001:db8:1::1, each machine of a storm on an address of its own."""
    namespace = make()
    for argv in (["ip", "-6", "addr", "add", f"{SERVER_ADDRESS}/128", "dev", "lo", "nodad"],
                 ["ip", "-6", "route", "add", "local", f"{RACK_PREFIX}::/64", "dev", "lo"]):
        r = namespace.run_inside(argv)
        assert r.returncode == 0, r.stderr
    namespace.write_sysctl("net.ipv6.ip_nonlocal_bind", 1)
    return namespace


def test_an_ipv6_rack_in_one_slash_64_boots_in_full(serve, root, network_namespace, report):
    namespace = ipv6_rack_namespace(network_namespace)
    s = serve(host=SERVER_ADDRESS, prefix=namespace.inside)
    machines = 300
    # Every machine holds its transfer open for 2 s and gives up after one resend: all of them
    # must be answered at once, as a rack powering on needs.
    r = namespace.run_inside([str(BINARY), "storm", f"[{SERVER_ADDRESS}]:{s.port}", "one-mib.bin",
                              "--clients", str(machines), "--blksize", "1428", "--hold", "2",
                              "--retransmit", "500", "--retries", "1", "--source-range", f"{RACK_PREFIX}::1:0",
                              "--verify", str(root / "one-mib.bin"), "--json"], timeout=120)
    result = json.loads(r.stdout)
    assert r.returncode == 0 and result["ok"] == machines and result["peak_active"] == machines, \
        (result, s.log_text()[-2000:])
    sources = {re.search(r"RRQ \[([0-9a-f:]+)\]:\d+ ", line).group(1) for line in s.log_lines('RRQ [', count=machines)}
    assert len(sources) == machines, f"{len(sources)} distinct client addresses"
    report(f"IPv6 rack of {machines} machines in one /64 ({s.backend}): all {machines} served at once")


def curl_get(port, name, host):
    url_host = f"[{host}]" if ":" in host else host
    r = subprocess.run(["curl", "-sS", "--max-time", "10", f"tftp://{url_host}:{port}/{name}"], capture_output=True)
    return r.returncode, r.stdout


def test_an_explicit_ipv6_wildcard_serves_ipv4_clients_too(serve, root):
    """Issue 21, defect 10: `-a [::]:PORT` listened on IPv6 only, where in.tftpd given the same
    address serves both: a site whose TFTP_ADDRESS is [::]:69 booted no PXE ROM."""
    s = serve(host="::")
    assert curl_get(s.port, "hello.txt", "127.0.0.1") == (0, b"hello, rack\n")
    assert curl_get(s.port, "hello.txt", "::1") == (0, b"hello, rack\n")
    # Each family on a listener of its own: the IPv4 client is logged, and remapped, as IPv4.
    assert s.log_lines('RRQ 127.0.0.1:') and s.log_lines('RRQ [::1]:')
    assert f"0.0.0.0:{s.port}" in s.log_lines("serving")[0]


def test_an_ipv4_client_on_a_dual_stack_socket_is_an_ipv4_client_to_the_remap_rules(binary, root, tmp_path):
    """Issue 21, defect 11: on a dual-stack socket (inetd's udp6, the shipped socket unit) `\\i`
    and `\\x` made ::ffff:127.0.0.1 and 32 hex digits of an IPv4 client; tftpd-hpa makes
    127.0.0.1 and 7F000001, so per-host files (pxelinux.cfg/\\x) were missed."""
    rules = tmp_path / "rules"
    rules.write_text("r ^by-ip$ hosts/\\i\nr ^by-hex$ pxelinux.cfg/\\x\n")
    for name in ("hosts/127.0.0.1", "pxelinux.cfg/7F000001"):
        (root / name).parent.mkdir(exist_ok=True)
        (root / name).write_text(name + "\n")
        (root / name).chmod(0o644)
    sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    sock.bind(("::", 0))
    port = sock.getsockname()[1]
    p = subprocess.Popen([str(binary), "-t", "1", "-u", "root", "-m", str(rules), str(root)],
                         stdin=sock.fileno(), stdout=sock.fileno(), stderr=sock.fileno())
    sock.close()
    try:
        assert curl_get(port, "by-ip", "127.0.0.1") == (0, b"hosts/127.0.0.1\n")
        assert curl_get(port, "by-hex", "127.0.0.1") == (0, b"pxelinux.cfg/7F000001\n")
    finally:
        assert p.wait(timeout=10) == 0


def held_connections(namespace, port, sources):
    """A connection to [SERVER_ADDRESS]:port from each of `sources` (addresses, one per
    connection), held open; then a GET on each: the 200s, the connections the server closed."""
    sockets, answered, closed = [], 0, 0
    with namespace.sockets():
        for source in sources:
            s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
            s.settimeout(10)
            s.bind((source, 0))
            s.connect((SERVER_ADDRESS, port))
            sockets.append(s)
    # Every request out, every answer read, and only then any connection closed: a close before
    # the server has accepted them all would free a place for one it has not yet counted.
    sent = []
    for s in sockets:
        try:
            s.sendall(b"GET /hello.txt HTTP/1.1\r\nHost: rack\r\n\r\n")
            sent.append(True)
        except (ConnectionResetError, BrokenPipeError):
            sent.append(False)
    for s, ok in zip(sockets, sent):
        try:
            head = s.recv(65536) if ok else b""
            answered += head.startswith(b"HTTP/1.1 200")
            closed += head == b""
        except ConnectionResetError:
            closed += 1
    for s in sockets:
        s.close()
    return answered, closed


def test_an_ipv6_racks_machines_each_hold_their_http_connections(serve, root, network_namespace):
    """An IPv6-only rack shares one /64: each machine (an address) holds its own share of
    connections (--http-max-per-client), and the /64 all of theirs up to --http-max-per-prefix.
    Counted per /64, 64 of a rack's machines could fetch at once and the rest were closed."""
    namespace = ipv6_rack_namespace(network_namespace)
    s = serve("--http", f"[{SERVER_ADDRESS}]:8080", "--http-max-per-client", "4", "--http-max-per-prefix", "300",
              host=SERVER_ADDRESS, prefix=namespace.inside)
    machines = [f"{RACK_PREFIX}::2:{n:x}" for n in range(1, 201)]
    assert held_connections(namespace, 8080, machines) == (200, 0), s.log_text()[-2000:]
    # One machine holds 4, no more.
    assert held_connections(namespace, 8080, [machines[0]] * 6) == (4, 2), s.log_text()[-2000:]
    # One host rotating its address through the /64 meets the /64's cap (a second later: refusals
    # are logged a line a second at most).
    time.sleep(1.1)
    rotating = [f"{RACK_PREFIX}::3:{n:x}" for n in range(1, 311)]
    assert held_connections(namespace, 8080, rotating) == (300, 10), s.log_text()[-2000:]
    assert s.log_lines("connections open from this client's /64 (--http-max-per-prefix)")
