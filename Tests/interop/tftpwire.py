"""Raw TFTP packets for tests that need to send what no well-behaved client sends."""
import socket
import struct

OPCODES = {1: "RRQ", 2: "WRQ", 3: "DATA", 4: "ACK", 5: "ERROR", 6: "OACK"}


def request(name, mode="octet", options=(), write=False) -> bytes:
    if isinstance(name, str):
        name = name.encode()
    body = name + b"\0" + mode.encode() + b"\0"
    for key, value in options:
        body += key.encode() + b"\0" + (value if isinstance(value, bytes) else str(value).encode()) + b"\0"
    return struct.pack("!H", 2 if write else 1) + body


def ack(block: int) -> bytes:
    return struct.pack("!HH", 4, block & 0xFFFF)


def data(block: int, payload: bytes) -> bytes:
    return struct.pack("!HH", 3, block & 0xFFFF) + payload


def error(code: int, message: str = "") -> bytes:
    return struct.pack("!HH", 5, code) + message.encode() + b"\0"


def decode(packet: bytes):
    """(name, fields): ("ERROR", (code, message)), ("DATA", (block, payload)), ("OACK", {k: v}), ..."""
    if len(packet) < 2:
        return ("SHORT", packet)
    op = struct.unpack("!H", packet[:2])[0]
    name = OPCODES.get(op, f"OP{op}")
    if name == "ERROR":
        code = struct.unpack("!H", packet[2:4])[0]
        return name, (code, packet[4:].split(b"\0")[0].decode(errors="replace"))
    if name in ("DATA", "ACK"):
        block = struct.unpack("!H", packet[2:4])[0]
        return name, (block, packet[4:])
    if name == "OACK":
        parts = packet[2:].split(b"\0")
        # Values as bytes would be, whatever their encoding (a cookie is echoed byte for byte).
        return name, {parts[i].decode(errors="surrogateescape"): parts[i + 1].decode(errors="surrogateescape")
                      for i in range(0, len(parts) - 1, 2)}
    return name, packet[2:]


class RawClient:
    """A UDP socket that sends raw bytes to the server and reads the replies."""

    def __init__(self, server, timeout=2.0):
        family = socket.AF_INET6 if ":" in server.host else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_DGRAM)
        self.sock.settimeout(timeout)
        self.server = (server.host, server.port)

    def send(self, packet: bytes, to=None):
        self.sock.sendto(packet, to or self.server)

    def receive(self):
        """(decoded packet, sender) or (None, None) on timeout."""
        try:
            packet, sender = self.sock.recvfrom(70000)
        except (socket.timeout, ConnectionRefusedError):
            return None, None
        return decode(packet), sender

    def exchange(self, packet: bytes):
        self.send(packet)
        return self.receive()

    def download(self, name, options=(), mode="octet") -> bytes:
        """A minimal lockstep/windowed reader (used to check the server is still serving)."""
        reply, tid = self.exchange(request(name, mode, options))
        out = bytearray()
        blksize = 512
        expected = 1
        while True:
            assert reply is not None, "no reply"
            kind, fields = reply
            if kind == "OACK":
                blksize = int(fields.get("blksize", 512))
                self.send(ack(0), tid)
            elif kind == "DATA":
                block, payload = fields
                if block == expected & 0xFFFF:
                    out += payload
                    expected += 1
                    self.send(ack(block), tid)
                    if len(payload) < blksize:
                        return bytes(out)
            else:
                raise AssertionError(f"unexpected {reply}")
            reply, sender = self.receive()
            assert sender is None or sender == tid

    def close(self):
        self.sock.close()
