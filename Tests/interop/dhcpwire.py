"""DHCP as the tests speak it, written from RFC 2131/2132 and what firmware sends, apart from the
server's code: requests as EDK2, iPXE and UEFI HTTP Boot build them, and a reader for replies."""
import socket
import struct

COOKIE = bytes([99, 130, 83, 99])
# The boot link of the tests (conftest's boot_link): the server's end, the machines' end.
SERVER, CLIENT = "10.78.0.1", "10.78.0.57"
MAC = bytes([0x52, 0x54, 0x00, 0x12, 0x34, 0x56])
SO_BINDTODEVICE = 25
DISCOVER, OFFER, REQUEST, ACK = 1, 2, 3, 5
UUID = bytes([0]) + bytes(range(1, 17))


def option(code, value):
    if isinstance(value, str):
        value = value.encode()
    return bytes([code, len(value)]) + value


def message(mac, xid=0x1234ABCD, kind=DISCOVER, arch=7, vendor=None, ciaddr="0.0.0.0", giaddr="0.0.0.0", hops=0,
            broadcast=True, extra=b"", uuid=UUID, end=True):
    """A BOOTREQUEST from `mac` (six bytes) as EDK2's PXE builds it: type, size, parameters, UUID,
    UNDI, architecture, vendor class `PXEClient:Arch:NNNNN:UNDI:003000` unless `vendor` says."""
    header = struct.pack("!BBBBIHH4s4s4s4s16s64s128s", 1, 1, 6, hops, xid, 0, 0x8000 if broadcast else 0,
                         socket.inet_aton(ciaddr), bytes(4), bytes(4), socket.inet_aton(giaddr),
                         mac + bytes(10), bytes(64), bytes(128))
    vendor = vendor if vendor is not None else f"PXEClient:Arch:{arch:05d}:UNDI:003000"
    options = option(53, bytes([kind])) + option(57, struct.pack("!H", 1472)) + option(55, bytes([1, 3, 43, 60, 66, 67, 97]))
    if uuid is not None:
        options += option(97, uuid)
    options += option(94, bytes([1, 3, 0]))
    if arch is not None:
        options += option(93, struct.pack("!H", arch))
    if vendor:
        options += option(60, vendor)
    return header + COOKIE + options + extra + (b"\xff" if end else b"")


def parse(data):
    """A reply as a dict: op, xid, flags, ciaddr, yiaddr, siaddr, giaddr, chaddr, file, and
    options by code (pieces of a repeated option joined)."""
    assert len(data) >= 240 and data[236:240] == COOKIE, data[:64]
    op, _, hlen, _, xid, _, flags, ciaddr, yiaddr, siaddr, giaddr, chaddr, sname, file = \
        struct.unpack("!BBBBIHH4s4s4s4s16s64s128s", data[:236])
    options, i = {}, 240
    while i < len(data) and data[i] != 255:
        if data[i] == 0:
            i += 1
            continue
        code, length = data[i], data[i + 1]
        options[code] = options.get(code, b"") + data[i + 2:i + 2 + length]
        i += 2 + length
    return {"op": op, "xid": xid, "flags": flags, "ciaddr": socket.inet_ntoa(ciaddr), "yiaddr": socket.inet_ntoa(yiaddr),
            "siaddr": socket.inet_ntoa(siaddr), "giaddr": socket.inet_ntoa(giaddr), "chaddr": chaddr[:hlen],
            "file": file.rstrip(b"\0").decode(errors="replace"), "options": options, "size": len(data)}


class Machine:
    """A firmware's socket in the client namespace of the boot link: port 68 on veth-c
    (broadcasts), or the boot server's port 4011 from the client's address."""

    def __init__(self, namespace, port=68, bind=""):
        with namespace.sockets():
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
        self.sock.setsockopt(socket.SOL_SOCKET, SO_BINDTODEVICE, b"veth-c")
        self.sock.bind((bind, port))

    def ask(self, packet, to=("255.255.255.255", 67), timeout=2.0):
        """Sends `packet` and returns the first reply (parsed), or None after `timeout`."""
        self.sock.sendto(packet, to)
        return self.receive(timeout)

    def receive(self, timeout=2.0):
        self.sock.settimeout(timeout)
        try:
            data, _ = self.sock.recvfrom(4096)
        except socket.timeout:
            return None
        return parse(data)

    def close(self):
        self.sock.close()
