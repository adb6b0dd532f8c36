"""Attacks seen on TFTP servers, as tests: every one gets an ERROR or silence, never a crash, a
hang, or a byte from outside the root; spoofed requests cost little and hold nothing for long."""
import select
import socket
import time

import pytest

from tftpwire import ack, decode, error, request

SPOOF_OPTIONS = (("blksize", 65464), ("windowsize", 64), ("timeout", 255), ("tsize", 0))


def collect(sock, seconds):
    """Every datagram `sock` receives for `seconds`: (arrival, bytes, sender)."""
    got = []
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        ready, _, _ = select.select([sock], [], [], left)
        if ready:
            packet, sender = sock.recvfrom(70000)
            got.append((time.monotonic(), packet, sender))
    return got


def test_a_spoofed_request_sends_the_victim_a_few_hundred_bytes_and_is_given_up_soon(serve, report):
    """A spoofed RRQ asking for blksize 65464, windowsize 64 and timeout 255 that never ACKs: the
    "victim" (our socket here) hears only the OACK and its resends, and the transfer is given up
    after the server's own patience (-T), not after 255 s per try (about 7,900 s in all)."""
    s = serve("-T", "100000")  # 100 ms: the default 1 s gives up after 31 s, this after 3.1 s
    victim = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rrq = request("one-mib.bin", options=SPOOF_OPTIONS)
    sent_at = time.monotonic()
    victim.sendto(rrq, ("127.0.0.1", s.port))
    got, held = [], None
    while time.monotonic() - sent_at < (6 if held is None else held + 0.5):
        got += collect(victim, 0.05)
        if held is None and "timed out" in s.log_text():
            held = time.monotonic() - sent_at
    total = sum(len(p) for _, p, _ in got)
    assert got and all(decode(p)[0] == "OACK" for _, p, _ in got), [decode(p)[0] for _, p, _ in got]
    assert total < 600, total
    assert held is not None and held < 4.5, held
    # At the default -T (1 s) the same patience is ten times as long; 65,536 transfers (the
    # default --max-transfers) are held by that many spoofed requests per that many seconds.
    # Before, the negotiated 255 s applied: 255 s x (1 + 2 + 4 + 8 + 8 + 8) = 7,905 s.
    report(f"spoofed RRQ (blksize 65464, windowsize 64, timeout 255) on {s.backend}: {len(got)} OACKs, "
           f"{total} bytes to the victim for a {len(rrq)}-byte request, nothing else; given up after {held:.1f} s "
           f"at -T 100 ms, so about {10 * held:.0f} s at the default -T: holding all 65,536 transfers takes "
           f"{65536 / (10 * held):,.0f} spoofed requests a second from distinct addresses (before: "
           f"{65536 / 7905:.1f} a second)")


def test_a_client_that_answers_keeps_the_timeout_it_negotiated(serve):
    s = serve("-T", "100000")
    c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    c.sendto(request("one-mib.bin", options=(("timeout", 255),)), ("127.0.0.1", s.port))
    before = collect(c, 0.45)
    assert len(before) >= 3  # the OACK, resent at -T's pace while nobody answers
    tid = before[0][2]
    c.sendto(ack(0), tid)
    after = collect(c, 1.5)
    # DATA 1 once, and no resend: the client's 255 s hold from its first answer on.
    assert [decode(p)[0] for _, p, _ in after] == ["DATA"], [decode(p) for _, p, _ in after]
    # Ended, so that the server's stop does not wait out its grace for it.
    c.sendto(error(0, "done"), tid)


def test_by_default_one_client_machine_runs_at_most_64_transfers(serve, network_namespace):
    """A flood from one address (not loopback, which the default leaves alone) starts 64
    transfers; the rest go unanswered."""
    namespace = network_namespace()
    assert namespace.run_inside(["ip", "addr", "add", "10.9.0.1/32", "dev", "lo"]).returncode == 0
    s = serve(host="10.9.0.1", prefix=namespace.inside)
    with namespace.sockets():
        clients = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(200)]
    for c in clients:
        c.bind(("10.9.0.1", 0))
        c.setblocking(False)
        c.sendto(request("one-mib.bin"), ("10.9.0.1", s.port))
    answered = set()
    end = time.monotonic() + 1.5
    while time.monotonic() < end:
        ready, _, _ = select.select(clients, [], [], 0.1)
        for c in ready:
            packet, _ = c.recvfrom(2048)
            assert decode(packet)[0] == "DATA"
            answered.add(c)
    for c in clients:
        c.close()
    assert len(answered) == 64
    s.stop()
    assert "136 requests unanswered while busy" in s.log_text()
    assert "Too many transfers from your address" in s.log_text()


def broadcaster(namespace):
    with namespace.sockets():
        c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    c.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
    c.settimeout(3)
    return c


def test_a_request_sent_to_a_broadcast_address_is_answered_from_the_interfaces(serve, root, network_namespace):
    """The transfer cannot come from a broadcast address: it comes from the address of the
    interface the request arrived on (IP_PKTINFO's ipi_spec_dst), as tftpd-hpa answers."""
    namespace = network_namespace()
    for argv in (["ip", "link", "add", "v0", "type", "veth", "peer", "name", "v1"],
                 ["ip", "addr", "add", "10.9.1.1/24", "brd", "+", "dev", "v0"],
                 ["ip", "link", "set", "v0", "up"], ["ip", "link", "set", "v1", "up"]):
        r = namespace.run_inside(argv)
        assert r.returncode == 0, (argv, r.stderr)
    s = serve(host="0.0.0.0", prefix=namespace.inside)
    c = broadcaster(namespace)
    c.sendto(request("hello.txt"), ("10.9.1.255", s.port))
    packet, sender = c.recvfrom(2048)
    assert sender[0] == "10.9.1.1" and sender[1] != s.port, sender
    assert decode(packet) == ("DATA", (1, b"hello, rack\n"))
    c.sendto(ack(1), sender)
    c.close()
    # A refusal to a broadcast request comes from the interface's address too.
    c = broadcaster(namespace)
    c.sendto(request("no-such-file"), ("10.9.1.255", s.port))
    packet, sender = c.recvfrom(2048)
    assert sender == ("10.9.1.1", s.port) and decode(packet) == ("ERROR", (1, "File not found"))


def test_a_remap_message_cannot_forge_log_lines(serve, root, tmp_path):
    rules = tmp_path / "rules"
    rules.write_text("a ^bad(.*)$ refused:\\ \\1\n")
    s = serve("-m", str(rules))
    c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    c.settimeout(3)
    c.sendto(request(b"bad\n2026-11-23T00:00:00+0000 error stampede: FORGED"), ("127.0.0.1", s.port))
    kind, (code, message) = decode(c.recvfrom(2048)[0])
    assert (kind, code) == ("ERROR", 2) and "FORGED" in message
    time.sleep(0.2)
    lines = s.log_text().splitlines()
    assert not any("FORGED" in line and "refused" not in line for line in lines), lines
    assert any("refused: error 2" in line and "\\x0a" in line for line in lines)


def test_a_name_longer_than_a_path_is_refused_before_any_rule_runs(serve, tmp_path):
    """60,000 backslashes under `rg \\\\ /` ran 4,096 regex steps copying the whole name."""
    rules = tmp_path / "rules"
    rules.write_text("rg \\\\ /\n")
    s = serve("-m", str(rules))
    c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    c.settimeout(3)
    started = time.monotonic()
    # The same answers on every backend: a name longer than a path is not found; a request longer
    # than any listener takes whole is refused as such (issue 21, defect 8).
    for size, answer in ((5000, (1, "File not found")), (60000, (4, "Request too long"))):
        c.sendto(request(b"\\" * size), ("127.0.0.1", s.port))
        assert decode(c.recvfrom(2048)[0]) == ("ERROR", answer)
    assert time.monotonic() - started < 1
    assert "a name of 5000 bytes, more than 4096" in s.log_text()


def test_device_nodes_are_refused_unopened(serve, root):
    import os
    if os.geteuid() != 0:
        pytest.skip("LOUD SKIP: mknod needs root")
    os.mknod(root / "zero", 0o666 | 0o020000, os.makedev(1, 5))
    s = serve("-p")
    c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    c.settimeout(3)
    c.sendto(request("zero"), ("127.0.0.1", s.port))
    assert decode(c.recvfrom(2048)[0]) == ("ERROR", (2, "Not a regular file"))


SECRET = b"the secret outside the root"


@pytest.fixture
def guarded(serve, root, tmp_path):
    """A server whose root has a secret beside it (one level up, and at /tmp), and rules that turn
    backslashes into slashes (Windows clients), so `..\\` becomes `../` before the checks; after
    each case it still serves, every byte right."""
    (root.parent / "secret.txt").write_bytes(SECRET)
    (root.parent / "secret.txt").chmod(0o644)
    rules = tmp_path / "rules"
    rules.write_text("rg \\\\ /\n")
    s = serve("-m", str(rules))
    yield s
    c = RawClientLite(s)
    assert c.fetch("hello.txt") == b"hello, rack\n"
    assert s.alive


class RawClientLite:
    """Sends one packet, gathers every reply for a moment, and can fetch a small file."""

    def __init__(self, server):
        self.server = server
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)

    def replies(self, packet, seconds=0.4):
        self.sock.sendto(packet, ("127.0.0.1", self.server.port))
        return [(decode(p), p, sender) for _, p, sender in collect(self.sock, seconds)]

    def fetch(self, name):
        got = self.replies(request(name), 0.5)
        assert got and got[0][0][0] == "DATA", got
        self.sock.sendto(ack(1), got[0][2])
        return got[0][0][1][1]


def assert_refused_without_the_secret(got):
    """An ERROR or silence; nothing carries the secret."""
    assert all(kind == "ERROR" for (kind, _), _, _ in got), got
    assert not any(SECRET in raw for _, raw, _ in got)


TRAVERSALS = [
    b"....//secret.txt", b"..\\secret.txt", b"...\\secret.txt", b".../secret.txt", b"/../secret.txt",
    b"subdir/..\\..\\secret.txt", b"%2e%2e%2fsecret.txt", b"..%2fsecret.txt", b"%2e%2e/secret.txt",
    b"\xc0\xae\xc0\xae/secret.txt", b"\xc0\xae\xc0\xae\xc0\xafsecret.txt", b"..\\..\\..\\..\\tmp\\secret.txt",
    b"/" + b"../" * 40 + b"secret.txt", b"./../secret.txt", b"hello.txt/../../secret.txt",
]


def test_traversal_spellings_never_leave_the_root(guarded, root):
    (root / "subdir").mkdir(exist_ok=True)
    for name in TRAVERSALS:
        got = RawClientLite(guarded).replies(request(name), 0.2)
        assert got, f"silence for {name!r}: expected an ERROR"
        assert_refused_without_the_secret(got)
        assert got[0][0][1][0] in (1, 2), (name, got)


def test_an_absolute_path_means_the_root(guarded, root):
    """PXE configurations write /pxelinux.0: the root, never the filesystem's."""
    assert RawClientLite(guarded).fetch("/hello.txt") == b"hello, rack\n"
    got = RawClientLite(guarded).replies(request(str(root.parent / "secret.txt")))
    assert_refused_without_the_secret(got)


def test_short_datagrams_to_a_transfer_port_end_it_or_are_ignored(serve, root):
    """0 to 3 bytes (atftpd's CVE-2019-11365 was an ERROR of 3 bytes) on a running transfer."""
    s = serve()
    for packet in (b"", b"\x00", b"\x00\x03", b"\x00\x04\x00", b"\x00\x05\x00", b"\x05"):
        c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        c.sendto(request("one-mib.bin"), ("127.0.0.1", s.port))
        tid = collect(c, 0.2)[0][2]
        c.sendto(packet, tid)
        got = collect(c, 0.3)
        assert all(decode(p)[0] in ("ERROR", "DATA") for _, p, _ in got), (packet, got)
        c.close()
    assert s.alive
    assert RawClientLite(s).fetch("hello.txt") == b"hello, rack\n"


def test_options_without_their_nul_are_tolerated_or_refused(serve):
    s = serve()
    for packet in (b"\x00\x01hello.txt\x00octet\x00blksize",            # an option without its value
                   b"\x00\x01hello.txt\x00octet\x00blksize\x001468",    # a value without its NUL
                   b"\x00\x01hello.txt\x00octet\x00\x00\x00",           # empty names and values
                   b"\x00\x01hello.txt\x00octet\x00" + b"\x00" * 2000):  # a run of NULs
        got = RawClientLite(s).replies(packet, 0.2)
        assert got and got[0][0][0] in ("DATA", "OACK", "ERROR"), (packet, got)
        if got[0][0][0] == "OACK":
            assert set(got[0][0][1]) <= {"blksize"}
    assert s.alive


def test_256_real_options_get_an_oack_of_what_was_asked_once(serve):
    """More options than a byte counts (EDK2 issue 9797), all of them real: the OACK answers each
    option once, from the first 32 the server reads, and stays small."""
    s = serve()
    names = ["blksize", "tsize", "timeout", "windowsize"]
    options = [(names[i % 4], ("1468", "0", "3", "8")[i % 4]) for i in range(256)]
    got = RawClientLite(s).replies(request("one-mib.bin", options=options))
    (kind, fields), raw, _ = got[0]
    assert kind == "OACK" and set(fields) == set(names) and len(raw) < 100, got[0]


def test_a_request_as_large_as_the_listener_takes(serve):
    """A request of 60 KB (the size of the largest OACK or DATA): one ERROR, nothing amplified."""
    s = serve()
    options = [(f"x{i:05}", "y" * 20) for i in range(2000)]
    packet = request("hello.txt", options=options)
    assert len(packet) > 55000
    got = RawClientLite(s).replies(packet)
    assert sum(len(raw) for _, raw, _ in got) < 1000
    assert got and got[0][0] == ("ERROR", (4, "Request too long")), got


def test_an_inverted_rule_with_a_message_refuses_sanely(serve, tmp_path):
    """tftp-hpa 2026: an inverted `a~` rule with a custom abort message passed bad offsets (an
    out-of-bounds write). Here the message comes out whole, with no match to substitute."""
    rules = tmp_path / "rules"
    rules.write_text("a~ ^allowed/(.*)$ Denied:\\ \\1\\ \\0\\ \\9\\ \\i\\ \\x\n")
    s = serve("-m", str(rules))
    for name in (b"x", b"", b"a" * 3000, b"\\0\\1", b"allowed", b"%s%n%x"):
        got = RawClientLite(s).replies(request(name))
        assert got and got[0][0][0] == "ERROR" and got[0][0][1][0] in (1, 2, 4), (name, got)
        assert len(got[0][1]) <= 516
    got = RawClientLite(s).replies(request("x"))
    assert got[0][0] == ("ERROR", (2, "Denied:    127.0.0.1 7F000001"))
    assert s.alive
