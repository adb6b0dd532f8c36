"""Windows sent as one segmented send (UDP GSO): the client sees exactly the datagrams it saw
one by one; --no-gso turns it off; a path that refuses it (a blksize above its MTU) gets the
window again one datagram at a time, and the operator hears of it."""
import os
import re
import socket

from conftest import BINARY, run
from tftpwire import RawClient, ack, decode, request


def windowed_datagrams(server, name, blksize, windowsize):
    """Every datagram of a download, raw, as a client acknowledging each window's last block
    receives them (a window ends with its count of blocks or with the short block)."""
    client = RawClient(server)
    # Room for a whole window of 8 KiB blocks: a drop here would show up as a resend.
    client.sock.setsockopt(socket.SOL_SOCKET, getattr(socket, "SO_RCVBUFFORCE", 33), 8 << 20)
    try:
        client.send(request(name, options=(("blksize", str(blksize)), ("windowsize", str(windowsize)))))
        packet, tid = client.sock.recvfrom(70000)
        assert decode(packet)[0] == "OACK", packet
        client.send(ack(0), tid)
        seen = []
        while True:
            in_window = 0
            while in_window < windowsize:
                packet, sender = client.sock.recvfrom(70000)
                assert sender == tid
                seen.append(packet)
                in_window += 1
                if len(packet) - 4 < blksize:
                    client.send(ack(int.from_bytes(packet[2:4], "big")), tid)
                    return seen
            client.send(ack(int.from_bytes(seen[-1][2:4], "big")), tid)
    finally:
        client.close()


def summary(server):
    server.stop()
    text = server.log_text()
    sends = re.search(r"(\d+) segmented sends", text)
    assert sends, text[-2000:]
    return text, int(sends.group(1))


def test_a_window_reaches_the_client_as_the_same_datagrams_with_and_without_gso(serve, root):
    (root / "odd.bin").write_bytes(os.urandom(1468 * 100 + 77))
    (root / "whole.bin").write_bytes(os.urandom(1024 * 64))
    (root / "big-blocks.bin").write_bytes(os.urandom(8192 * 20 + 5))
    for f in root.iterdir():
        f.chmod(0o644)
    cases = [("odd.bin", 1468, 4), ("odd.bin", 1468, 64), ("whole.bin", 1024, 16), ("big-blocks.bin", 8192, 16)]
    results = {}
    for args in ((), ("--no-gso",)):
        s = serve(*args)
        results[args] = [windowed_datagrams(s, *case) for case in cases]
        text, sends = summary(s)
        if args:
            assert "no UDP GSO (--no-gso)" in text and sends == 0
        else:
            assert "windows sent with UDP GSO" in text, text
            assert sends > 0
    for case, with_gso, without in zip(cases, results[()], results[("--no-gso",)]):
        name, blksize, _ = case
        data = (root / name).read_bytes()
        expected = [bytes([0, 3]) + (i + 1).to_bytes(2, "big") + data[i * blksize:(i + 1) * blksize]
                    for i in range(len(data) // blksize + 1)]
        assert with_gso == expected, case
        assert without == expected, case


def test_every_windowed_client_gets_the_file(serve, root, tmp_path):
    """Our own client asks for windows of 4 (the UEFI default) and 32; atftp for 8."""
    s = serve()
    data = (root / "one-mib.bin").read_bytes()
    for window in (4, 32):
        out = tmp_path / f"w{window}.bin"
        r = run([str(BINARY), "get", f"127.0.0.1:{s.port}", "one-mib.bin", str(out), "--blksize", "1468",
                 "--windowsize", str(window)])
        assert r.returncode == 0, r.stderr
        assert out.read_bytes() == data
    out = tmp_path / "atftp.bin"
    r = run(["atftp", "--option", "blksize 1468", "--option", "windowsize 8", "-g", "-r", "one-mib.bin",
             "-l", str(out), "127.0.0.1", str(s.port)])
    assert r.returncode == 0, r.stderr
    assert out.read_bytes() == data
    _, sends = summary(s)
    assert sends > 0


def test_a_path_that_refuses_gso_gets_the_window_one_datagram_at_a_time(serve, root, tmp_path, network_namespace):
    """A route to the client with an MTU of 1,300 (the interface's is larger, so the server grants
    the blksize): a segment of 8,196 bytes does not fit it (the kernel says EINVAL), while each
    datagram alone goes out in IP fragments. Blocks of 1,200 still fit one segment."""
    namespace = network_namespace()
    for route in ("127.0.0.0/8", "127.0.0.1"):
        r = namespace.run_inside(["ip", "route", "replace", "local", route, "dev", "lo", "table", "local", "mtu", "1300",
                                  "proto", "kernel", "scope", "host", "src", "127.0.0.1"])
        assert r.returncode == 0, r.stderr
    (root / "boot.img").write_bytes(os.urandom(300_000))
    (root / "boot.img").chmod(0o644)
    s = serve(prefix=namespace.inside)
    for blksize in (8192, 1200):
        out = tmp_path / f"b{blksize}.bin"
        r = namespace.run_inside([str(BINARY), "get", f"127.0.0.1:{s.port}", "boot.img", str(out), "--blksize",
                                  str(blksize), "--windowsize", "8"])
        assert r.returncode == 0, r.stderr
        assert out.read_bytes() == (root / "boot.img").read_bytes()
    text, sends = summary(s)
    assert "refused a window sent as one segmented send" in text, text
    refused = re.search(r"(\d+) sent again one datagram at a time where the path refused GSO", text)
    assert refused and int(refused.group(1)) >= 1, text
    assert sends > 0, text  # the 1,200-byte blocks, on another socket
    # The window went again at once, in order: no client waited for a timeout.
    assert text.count("retransmits=0: ok") == 2, text
