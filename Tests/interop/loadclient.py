"""Many concurrent TFTP downloads from one process: epoll, one socket per transfer, lockstep or
windowed, ACK resent on timeout. Every byte is compared with the expected content.

Two ways to wait, as clients do: by default a block out of order is ignored and the last ACK is
resent when `timeout` passes without progress (tftp-hpa, U-Boot, an impatient client at 0.3 s);
with `edk2=True`, as EDK2's MTFTP4 does, a block out of order is answered at once with an ACK of
the block before the one expected, and every ACK sent starts the count of tries over. Either way
the transfer fails when `silent_periods` timeouts pass in a row without progress: by default a
period is silent when no new block came in it (a window that lost a datagram is not silent up to
the gap), with `edk2=True` when no ACK was sent."""
import hashlib
import select
import socket
import struct
import time


class Download:
    __slots__ = ("sock", "tid", "expected", "digest", "size", "blksize", "window", "done", "error",
                 "last_send", "last_packet", "retries", "started", "finished")

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setblocking(False)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        self.tid = None
        self.expected = 1
        self.digest = hashlib.sha256()
        self.size = 0
        self.blksize = 512
        self.window = 1
        self.done = False
        self.error = None
        self.retries = 0
        self.started = time.monotonic()
        self.finished = None


def run(server, name, count, expected: bytes, blksize=1468, windowsize=1, timeout=1.0, deadline=240, silent_periods=9,
        edk2=False):
    """Returns (ok, failures, seconds): every transfer must yield exactly `expected`."""
    want = hashlib.sha256(expected).digest()
    ep = select.epoll()
    downloads = {}
    options = b"blksize\0%d\0" % blksize + (b"windowsize\0%d\0" % windowsize if windowsize > 1 else b"")
    rrq = struct.pack("!H", 1) + name.encode() + b"\0octet\0" + options
    for _ in range(count):
        d = Download()
        downloads[d.sock.fileno()] = d
        ep.register(d.sock.fileno(), select.EPOLLIN)
        d.last_packet = rrq
        d.sock.sendto(rrq, server)
        d.last_send = time.monotonic()
    pending = count
    start = time.monotonic()
    next_check = start + timeout / 4
    while pending and time.monotonic() - start < deadline:
        for fd, _ in ep.poll(timeout / 4):
            d = downloads[fd]
            while not d.done:
                try:
                    packet, sender = d.sock.recvfrom(70000)
                except BlockingIOError:
                    break
                except ConnectionRefusedError:
                    d.error, d.done = "port unreachable", True
                    break
                if d.tid is None:
                    d.tid = sender
                elif sender != d.tid:
                    continue
                op = packet[1]
                if op == 6:  # OACK
                    parts = packet[2:].split(b"\0")
                    opts = {parts[i].decode(): int(parts[i + 1]) for i in range(0, len(parts) - 1, 2)}
                    d.blksize = opts.get("blksize", 512)
                    d.window = opts.get("windowsize", 1)
                    reply = b"\0\4\0\0"
                elif op == 3:
                    block = (packet[2] << 8) | packet[3]
                    if block != d.expected & 0xFFFF:
                        if not edk2:
                            continue  # duplicate or out of order: the timeout logic re-ACKs
                        reply = b"\0\4" + struct.pack("!H", (d.expected - 1) & 0xFFFF)
                        d.sock.sendto(reply, d.tid)
                        d.last_packet = reply
                        d.last_send = time.monotonic()
                        d.retries = 0
                        continue
                    payload = packet[4:]
                    d.digest.update(payload)
                    d.size += len(payload)
                    if not edk2:
                        d.retries = 0  # a new block: not a silent period
                    last = len(payload) < d.blksize
                    d.expected += 1
                    if not last and (d.expected - 1) % d.window:
                        continue
                    reply = b"\0\4" + packet[2:4]
                    if last:
                        d.done = True
                        d.finished = time.monotonic()
                        pending -= 1
                else:
                    message = packet[4:].split(b"\0")[0]
                    d.error, d.done = f"opcode {op}: {message!r}", True
                    pending -= 1
                    break
                d.sock.sendto(reply, d.tid)
                d.last_packet = reply
                d.last_send = time.monotonic()
                d.retries = 0
        now = time.monotonic()
        if now >= next_check:
            next_check = now + timeout / 4
            for d in downloads.values():
                if not d.done and now - d.last_send > timeout:
                    d.retries += 1
                    if d.retries >= silent_periods:
                        d.error, d.done = "timed out", True
                        pending -= 1
                        continue
                    d.sock.sendto(d.last_packet, d.tid or server)
                    d.last_send = now
    seconds = time.monotonic() - start
    failures = []
    ok = 0
    for d in downloads.values():
        if d.done and d.error is None and d.digest.digest() == want and d.size == len(expected):
            ok += 1
        else:
            failures.append(d.error or ("incomplete" if not d.done else f"wrong bytes ({d.size})"))
        d.sock.close()
    ep.close()
    return ok, failures, seconds
