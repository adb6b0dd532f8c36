"""Parity of the option negotiation with tftp-hpa 7.3 (issue 22): a corpus of requests, each
with its options, played against Debian unstable's in.tftpd and Stampede with the same flags;
the OACK (names as spelled, values), the bytes served and the files written must match. It
covers every option 7.3 negotiates (blksize, blksize2, cookie, rollover, timeout, tsize,
utimeout, windowsize), their ranges, repeats and precedence, a transfer past block 65535 under
both rollover values, and the flags that bound them (-B, -W, --window-bytes, -r)."""
import os
import socket
import subprocess

import pytest

from conftest import BINARY, Server
from parity import REQUIRES_PEER, TftpdHpa, compared, make_root, outcome, run_both
from tftpwire import decode, error, request

pytestmark = REQUIRES_PEER

# 70,000 blocks of 16 bytes: a transfer that passes block 65535.
WRAP = bytes(range(251)) * (70_000 * 16 // 251 + 1)
WRAP_UPLOAD = os.urandom(70_000 * 16 + 5)

ONE = "one-mib.bin"
# name: (file, write, mode, options)
CORPUS = {
    "blksize2 1000": (ONE, False, "octet", [("blksize2", "1000")]),
    "blksize2 5000": (ONE, False, "octet", [("blksize2", "5000")]),
    "blksize2 65464": (ONE, False, "octet", [("blksize2", "65464")]),
    "blksize2 8": ("hello.txt", False, "octet", [("blksize2", "8")]),
    "blksize2 7": (ONE, False, "octet", [("blksize2", "7")]),
    "blksize2 0600": (ONE, False, "octet", [("blksize2", "0600")]),
    "blksize wins over blksize2": (ONE, False, "octet", [("blksize2", "600"), ("blksize", "1000")]),
    "blksize wins, either order": (ONE, False, "octet", [("blksize", "1000"), ("blksize2", "600")]),
    "blksize2 when blksize is bad": (ONE, False, "octet", [("blksize", "5"), ("blksize2", "600")]),
    "blksize2 twice": (ONE, False, "octet", [("blksize2", "600"), ("blksize2", "2000")]),
    "utimeout 9999": (ONE, False, "octet", [("utimeout", "9999")]),
    "utimeout 10000": (ONE, False, "octet", [("utimeout", "10000")]),
    "utimeout 255000000": (ONE, False, "octet", [("utimeout", "255000000")]),
    "utimeout 255000001": (ONE, False, "octet", [("utimeout", "255000001")]),
    "utimeout wins over timeout": (ONE, False, "octet", [("timeout", "3"), ("utimeout", "20000")]),
    "timeout when utimeout is bad": (ONE, False, "octet", [("utimeout", "5"), ("timeout", "3")]),
    "timeout 0": (ONE, False, "octet", [("timeout", "0")]),
    "timeout 256": (ONE, False, "octet", [("timeout", "256")]),
    "rollover 0": (ONE, False, "octet", [("rollover", "0")]),
    "rollover 1": (ONE, False, "octet", [("rollover", "1")]),
    "rollover 01": (ONE, False, "octet", [("rollover", "01")]),
    "rollover 2": (ONE, False, "octet", [("rollover", "2")]),
    "rollover 65535": (ONE, False, "octet", [("rollover", "65535")]),
    "cookie": (ONE, False, "octet", [("cookie", "rack-7/slot-12")]),
    "cookie with spaces": ("hello.txt", False, "octet", [("cookie", "a b ~")]),
    "cookie, not UTF-8": ("hello.txt", False, "octet", [("cookie", b"\xe9t\xe9\xff")]),
    "cookie of 255 bytes": ("hello.txt", False, "octet", [("cookie", "x" * 255)]),
    "cookie of 256 bytes": ("hello.txt", False, "octet", [("cookie", "x" * 256)]),
    "cookie empty": ("hello.txt", False, "octet", [("cookie", "")]),
    "cookie twice": ("hello.txt", False, "octet", [("cookie", "a"), ("cookie", "b")]),
    "windowsize 1": (ONE, False, "octet", [("windowsize", "1")]),
    "windowsize 1 with blksize": (ONE, False, "octet", [("windowsize", "1"), ("blksize", "1000")]),
    "windowsize 0": (ONE, False, "octet", [("windowsize", "0")]),
    "windowsize 16": (ONE, False, "octet", [("windowsize", "16")]),
    "windowsize 300, -W's 256": (ONE, False, "octet", [("windowsize", "300")]),
    "windowsize within 4 MiB": (ONE, False, "octet", [("windowsize", "300"), ("blksize", "65464")]),
    "windowsize 64 at 65000": (ONE, False, "octet", [("windowsize", "64"), ("blksize", "65000")]),
    "names as spelled": (ONE, False, "octet", [("BLKSIZE", "1000"), ("Cookie", "Q"), ("TSize", "0")]),
    "blksize twice": (ONE, False, "octet", [("blksize", "1000"), ("blksize", "600")]),
    "blksize twice around tsize": (ONE, False, "octet", [("blksize", "1000"), ("tsize", "0"), ("blksize", "600")]),
    "blksize 0100": (ONE, False, "octet", [("blksize", "0100")]),
    "blksize with a space": (ONE, False, "octet", [("blksize", " 100")]),
    "blksize past 64 bits": (ONE, False, "octet", [("blksize", "99999999999999999999999")]),
    "tsize 5 on a read": (ONE, False, "octet", [("tsize", "5")]),
    "tsize twice": (ONE, False, "octet", [("tsize", "0"), ("tsize", "0")]),
    "an unknown option": (ONE, False, "octet", [("multicast", "1"), ("blksize", "1024")]),
    "an empty value ends the list": (ONE, False, "octet", [("multicast", ""), ("blksize", "1024")]),
    "an empty value after options": (ONE, False, "octet", [("tsize", "0"), ("blksize", ""), ("windowsize", "4")]),
    "all of them": (ONE, False, "octet", [("windowsize", "16"), ("tsize", "0"), ("blksize", "1024"), ("cookie", "c"),
                                          ("rollover", "0"), ("utimeout", "50000")]),
    "blksize2 and windowsize": (ONE, False, "octet", [("blksize2", "1000"), ("windowsize", "8")]),
    "past 65535, rollover 0": ("wrap.bin", False, "octet", [("blksize", "16"), ("windowsize", "64"), ("rollover", "0")]),
    "past 65535, rollover 1": ("wrap.bin", False, "octet", [("blksize", "16"), ("windowsize", "64"), ("rollover", "1")]),
    "past 65535, no rollover": ("wrap.bin", False, "octet", [("blksize", "16"), ("windowsize", "64")]),
    "write, blksize2 and tsize": ("upload/blksize2.bin", True, "octet", [("blksize2", "1000"), ("tsize", "70000")]),
    "write, windowsize": ("upload/window.bin", True, "octet", [("blksize", "1024"), ("windowsize", "8")]),
    "write, cookie and utimeout": ("upload/cookie.bin", True, "octet", [("cookie", "up"), ("utimeout", "500000")]),
    "write, past 65535, rollover 1": ("upload/wrap1.bin", True, "octet",
                                      [("blksize", "16"), ("windowsize", "64"), ("rollover", "1")]),
    "write, past 65535, rollover 0": ("upload/wrap0.bin", True, "octet",
                                      [("blksize", "16"), ("windowsize", "64"), ("rollover", "0")]),
}


def options_root(path):
    root = make_root(path)
    (root / "wrap.bin").write_bytes(WRAP)
    (root / "wrap.bin").chmod(0o644)
    return root


def start_pair(base, args):
    base.mkdir(exist_ok=True)
    theirs = TftpdHpa(options_root(base / "tftpd-hpa"), args)
    ours = Server(options_root(base / "stampede"), args)
    return theirs, ours


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    base = tmp_path_factory.mktemp("options")
    rules = base / "rules"  # beside the roots: in.tftpd sees only what is shared with its tree
    rules.write_text("rP ^upload/ incoming/\n")
    # No -W: both grant 7.3's default, 256 (test_the_default_window_is_7_3s_256 for that alone).
    theirs, ours = start_pair(base, ["-s", "-c", "-u", "root", "-m", str(rules)])
    yield theirs, ours
    theirs.stop()
    ours.stop()


def play(server, name, write, mode, options):
    upload = WRAP_UPLOAD if "wrap" in name else None
    return compared(outcome(server.port, name, write, mode, options, upload=upload))


@pytest.mark.parametrize("case", CORPUS)
def test_each_request_is_negotiated_as_7_3_negotiates_it(pair, case):
    theirs, ours = pair
    name, write, mode, options = CORPUS[case]
    expected = play(theirs, name, write, mode, options)
    got = play(ours, name, write, mode, options)
    assert expected[0] in ("DATA", "WROTE"), expected
    assert got == expected, f"{case}: tftpd-hpa {expected[:1] + expected[2:]!r:.400}, stampede {got[:1] + got[2:]!r:.400}"
    if write:
        target = name.replace("upload/", "incoming/")
        assert (ours.root / target).read_bytes() == (theirs.root / target).read_bytes()


# The flags that bound the negotiation: -B (blksize2 within it), -W and --window-bytes, -r.
BOUNDED = [
    (["-B", "1000"], [("blksize2", "5000")]),
    (["-B", "1000"], [("blksize", "5000"), ("windowsize", "4")]),
    # -B mtu[-SLACK]: loopback's MTU (65,536; an IP datagram is at most 65,535) less the headers and SLACK.
    (["-B", "mtu"], [("blksize", "65464")]),
    (["-B", "mtu-100"], [("blksize", "65464")]),
    (["-B", "MTU-30000"], [("blksize", "65464")]),
    (["-B", "mtu-30000"], [("blksize2", "65464")]),
    (["-B", "mtu-70000"], [("blksize", "1000")]),
    (["-W", "8"], [("windowsize", "300")]),
    (["-W", "0"], [("windowsize", "300")]),
    (["--window-bytes", "20000"], [("blksize", "1024"), ("windowsize", "300")]),
    (["--window-bytes", "1500"], [("blksize", "1024"), ("windowsize", "300")]),
    (["-r", "blksize2"], [("blksize2", "1000"), ("tsize", "0")]),
    (["-r", "cookie"], [("cookie", "c"), ("tsize", "0")]),
    (["-r", "utimeout"], [("utimeout", "20000"), ("timeout", "2")]),
    (["-r", "rollover", "--reject", "BLKSIZE"], [("rollover", "1"), ("blksize", "1000"), ("blksize2", "1000")]),
]


@pytest.mark.parametrize("flags, options", BOUNDED, ids=lambda v: " ".join(v) if isinstance(v[0], str) else None)
def test_the_flags_bound_the_negotiation_as_in_7_3(tmp_path, flags, options):
    theirs, ours = start_pair(tmp_path / "servers", ["-s", "-u", "root", *flags])
    try:
        expected = compared(outcome(theirs.port, ONE, False, "octet", options))
        got = compared(outcome(ours.port, ONE, False, "octet", options))
        assert expected[0] == "DATA" and got == expected, (expected[:1] + expected[2:], got[:1] + got[2:])
    finally:
        theirs.stop()
        ours.stop()


@pytest.mark.parametrize("flags, options, granted", [
    (["--window-bytes", "0", "-W", "100"], [("blksize", "1024"), ("windowsize", "300")], "100"),
    (["--window-bytes", "0", "-W", "512"], [("blksize", "65464"), ("windowsize", "2")], "2")], ids=["1024", "65464"])
def test_window_bytes_0_is_no_limit_as_7_3s_manual_says_not_lockstep_as_its_binary_does(tmp_path, flags, options, granted):
    """A deliberate difference: 7.3's manual says --window-bytes 0 "disables this limit"; its
    binary then grants no window at all (lockstep). Stampede does what the manual says."""
    theirs, ours = start_pair(tmp_path / "servers", ["-s", "-u", "root", *flags])
    try:
        blksize = options[0]
        assert compared(outcome(theirs.port, ONE, False, "octet", options))[2] == (blksize,)
        assert compared(outcome(ours.port, ONE, False, "octet", options))[2] == (blksize, ("windowsize", granted))
    finally:
        theirs.stop()
        ours.stop()


def test_the_default_window_is_7_3s_256(tmp_path):
    """Without -W both grant 256 blocks, and a window of them arrives whole: the file matches."""
    theirs, ours = start_pair(tmp_path / "servers", ["-s", "-u", "root"])
    try:
        asked = [("blksize", "1024"), ("windowsize", "300")]
        theirs_got, ours_got = (compared(outcome(server.port, ONE, False, "octet", asked)) for server in (theirs, ours))
        assert ours_got == theirs_got
        assert ours_got[0] == "DATA" and ours_got[2] == (("blksize", "1024"), ("windowsize", "256"))
    finally:
        theirs.stop()
        ours.stop()


@pytest.mark.parametrize("argv, status", [(["-r", "multicast"], 64), (["-W", "-1"], 64), (["-W", "x"], 64),
                                          (["--window-bytes", "-1"], 64), (["--window-bytes", "x"], 64)],
                         ids=lambda v: " ".join(v) if isinstance(v, list) else str(v))
def test_bad_bounds_are_usage_errors_in_both(tmp_path, argv, status):
    theirs, ours = run_both(["-L", "-a", "127.0.0.1:0", "-u", "root", *argv, make_root(tmp_path / "root")], tmp_path)
    assert theirs.returncode == ours.returncode == status, (theirs, ours)


def test_a_resent_request_with_its_cookie_is_the_same_transfer(tmp_path):
    """7.2: the cookie tells a resent request from a new transfer. The same request again from
    the same port, even after the client has answered and gone quiet, is a resend: dropped while
    the transfer runs, which then completes; a new cookie from that port is a new transfer."""
    ours = Server(options_root(tmp_path / "root"), ["-T", "300000", "-vvv"])
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.settimeout(2)
    try:
        asked = request("hello.txt", "octet", [("cookie", "boot-1"), ("blksize", "8")])
        sock.sendto(asked, ("127.0.0.1", ours.port))
        (kind, fields), tid = decode(sock.recvfrom(100)[0]), None
        assert (kind, fields) == ("OACK", {"cookie": "boot-1", "blksize": "8"})
        packet, tid = sock.recvfrom(100)  # the OACK again, after -T's 0.3 s: the client is quiet
        sock.sendto(b"\0\4\0\0", tid)
        packet, _ = sock.recvfrom(100)
        assert decode(packet) == ("DATA", (1, b"hello, r"))
        # Quiet for longer than a retransmit interval, then the same request: without a cookie
        # it would be the client starting over; with it, it is a resend and nothing answers it.
        packet, _ = sock.recvfrom(100)
        assert decode(packet) == ("DATA", (1, b"hello, r"))
        sock.sendto(asked, ("127.0.0.1", ours.port))
        replies = []
        try:
            while True:
                packet, sender = sock.recvfrom(100)
                replies.append((sender == tid, decode(packet)))
                if len(replies) > 3:
                    break
        except socket.timeout:
            pass
        assert replies and all(same and reply == ("DATA", (1, b"hello, r")) for same, reply in replies), replies
        assert "ignored, a duplicate of the running transfer's request" in ours.log_text()
        sock.sendto(error(0, "done"), tid)
        # A new cookie from the same port: a transfer of its own, on a new port.
        sock.sendto(request("hello.txt", "octet", [("cookie", "boot-2")]), ("127.0.0.1", ours.port))
        packet, fresh = sock.recvfrom(100)
        assert fresh != tid and decode(packet) == ("OACK", {"cookie": "boot-2"})
    finally:
        sock.close()
        ours.stop()


@pytest.mark.parametrize("words, granted", [
    (["blksize2=1000", "utimeout=200000", "rollover=1", "cookie=get-1"], "blksize2=512 cookie=get-1 rollover=1 tsize=SIZE utimeout=200000"),
    (["blksize=16", "windowsize=64", "rollover=1"], "blksize=16 rollover=1 tsize=SIZE windowsize=64")], ids=["7.3's own", "a wrap to 1"])
def test_get_asks_for_7_3s_options_and_reads_both_servers_alike(pair, tmp_path, words, granted):
    """`stampede get --option` speaks the options to 7.3 and to Stampede; the file comes back whole
    from each, and Stampede's log line says they were granted (the corpus above shows 7.3 grants
    the same)."""
    got = []
    for server in pair:
        out = tmp_path / f"{server.port}.bin"
        argv = [str(BINARY), "get", *[a for w in words for a in ("--option", w)], f"127.0.0.1:{server.port}", "wrap.bin", str(out)]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        got.append(out.read_bytes())
    assert got == [WRAP, WRAP]
    granted = granted.replace("SIZE", str(len(WRAP)))  # get asks for tsize unless --no-tsize
    assert f'"wrap.bin" octet {granted} bytes={len(WRAP)}' in pair[1].log_text()
