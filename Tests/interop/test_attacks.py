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
