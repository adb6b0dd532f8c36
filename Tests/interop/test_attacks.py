"""Attacks seen on TFTP servers, as tests: every one gets an ERROR or silence, never a crash, a
hang, or a byte from outside the root; spoofed requests cost little and hold nothing for long."""
import select
import socket
import time

import pytest

from tftpwire import ack, decode, request

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
    while time.monotonic() - sent_at < 6:
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
    with namespace.sockets():
        c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    c.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
    c.settimeout(3)
    c.sendto(request("hello.txt"), ("10.9.1.255", s.port))
    packet, sender = c.recvfrom(2048)
    assert sender[0] == "10.9.1.1" and sender[1] != s.port, sender
    assert decode(packet) == ("DATA", (1, b"hello, rack\n"))
    c.sendto(ack(1), sender)
    c.close()
    # A refusal to a broadcast request comes from the interface's address too.
    with namespace.sockets():
        c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    c.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
    c.settimeout(3)
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
    for size in (5000, 60000):
        c.sendto(request(b"\\" * size), ("127.0.0.1", s.port))
        kind, (code, _) = decode(c.recvfrom(2048)[0])
        # io_uring's listener buffers keep a request's first 2 KiB: a cut name lacks its NUL (ERROR 4).
        assert kind == "ERROR" and code in (1, 4), (kind, code)
    assert time.monotonic() - started < 1
    if s.backend == "glibc":
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
