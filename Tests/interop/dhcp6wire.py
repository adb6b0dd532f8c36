"""DHCPv6 as the tests speak it, written from RFC 8415 and what firmware sends, apart from the
server's code: messages as OVMF's PXE over IPv6, UEFI HTTP Boot and iPXE build them, a reader for
answers, and a firmware's socket on the IPv6 boot link (conftest's link6)."""
import socket
import struct

# The IPv6 boot link of the tests (conftest's link6): the server's end, the machines' end.
SERVER6 = "2001:db8:78::1"
CLIENT6 = "2001:db8:78::57"
UUID = bytes.fromhex("8a3c6b5e112233445566778899aabbcc")
SO_BINDTODEVICE = 25


def option(code, value):
    return struct.pack("!HH", code, len(value)) + value


def vendor_class(text, enterprise=343):
    data = text.encode()
    return option(16, struct.pack("!IH", enterprise, len(data)) + data)


def solicit(xid=0xabcdef, kind=1, vendor="PXEClient:Arch:00007:UNDI:003000", arch=7, extra=b"", client_id=True):
    """OVMF's Solicit (PXE over IPv6): options 1 (DUID-UUID), 3, 6, 8, 16, 61, 62."""
    body = option(1, b"\x00\x04" + UUID) if client_id else b""
    body += option(3, struct.pack("!III", 42, 0, 0)) + option(6, struct.pack("!HH", 59, 60)) + option(8, b"\x00\x00")
    if vendor:
        body += vendor_class(vendor)
    if arch is not None:
        body += option(61, struct.pack("!H", arch)) + option(62, b"\x01\x03\x00")
    return bytes([kind]) + xid.to_bytes(3, "big") + body + extra


def options_of(data, start=4):
    found, at = [], start
    while at + 4 <= len(data):
        code, length = struct.unpack("!HH", data[at:at + 4])
        found.append((code, data[at + 4:at + 4 + length]))
        at += 4 + length
    return found


def first(options, code):
    return next((value for c, value in options if c == code), None)


class Machine6:
    """A firmware's socket in the client namespace: port 546 on veth-c (its Solicits), or 4011."""

    def __init__(self, namespace, port=546):
        with namespace.sockets():
            self.sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, SO_BINDTODEVICE, b"veth-c")
        self.sock.bind(("::", port))

    def ask(self, packet, to, timeout=2.0):
        self.sock.sendto(packet, to)
        return self.receive(timeout)

    def receive(self, timeout=2.0):
        self.sock.settimeout(timeout)
        try:
            data, source = self.sock.recvfrom(65536)
        except socket.timeout:
            return None, None
        return data, source

    def close(self):
        self.sock.close()


def interface_index(namespace, device):
    out = namespace.run_inside(["cat", f"/sys/class/net/{device}/ifindex"]).stdout
    return int(out)


def multicast(namespace):
    return ("ff02::1:2", 547, 0, interface_index(namespace, "veth-c"))
