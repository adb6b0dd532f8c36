"""The proxyDHCP responder (`--proxy-dhcp`), on a link of its own: a server namespace and a
client namespace joined by a veth pair, the server at 10.78.0.1, the machines sending from
10.78.0.57 (broadcasts to 67 from port 68, as firmware does). What each firmware is answered,
the boot server on 4011, a relay, silence where silence is due, bad packets, a flood, and a site
DHCP server on the same host. Firmware itself boots through it in test_firmware.py."""
import json
import os
import socket
import subprocess
import sys
import time

import pytest

import dhcpwire
import tftpwire
from conftest import BACKENDS, BINARY, REPO, SERVER_BINARY, Server, free_tcp_port, run

from dhcpwire import CLIENT, MAC, SERVER, Machine


def test_uefi_pxe_is_offered_ipxe_without_option_43(proxy, machine):
    s = proxy()
    reply = machine.ask(dhcpwire.message(MAC, arch=7))
    assert reply, s.log_text()
    o = reply["options"]
    assert reply["op"] == 2 and reply["xid"] == 0x1234ABCD and reply["chaddr"] == MAC
    assert o[53] == bytes([dhcpwire.OFFER]) and reply["yiaddr"] == "0.0.0.0", reply
    assert reply["siaddr"] == SERVER and o[54] == socket.inet_aton(SERVER)
    assert o[60] == b"PXEClient" and o[97] == dhcpwire.UUID
    # No option 43 for UEFI, as dnsmasq: EDK2 asks the boot server on 4011 (an EDK2 of before
    # 2019 took a menu-less offer with option 43 for "local boot").
    assert 43 not in o, o
    assert reply["file"] == "ipxe.efi" and reply["size"] >= 300
    assert s.log_lines("DHCP DISCOVER 52:54:00:12:34:56 on veth-s: efi-x64 (arch 7")
    # A BIOS PXE ROM gets the bypass: PXE discovery control 8, boot the file named here.
    reply = machine.ask(dhcpwire.message(MAC[:5] + b"\x01", arch=0))
    assert reply and reply["options"][43] == bytes([6, 1, 8, 255]) and reply["file"] == "undionly.kpxe", reply


@pytest.mark.parametrize("arch, vendor, extra, expected", [
    (0, None, b"", "undionly.kpxe"),
    (7, None, dhcpwire.option(77, "iPXE") + dhcpwire.option(175, bytes([0x13, 1, 1])), f"http://{SERVER}:8080/boot.ipxe"),
    (0, None, dhcpwire.option(77, "iPXE"), f"http://{SERVER}:8080/boot.ipxe"),
    (16, "HTTPClient:Arch:00016:UNDI:003001", b"", f"http://{SERVER}:8080/ipxe.efi"),
    (None, "PXEClient:Arch:00011:UNDI:003000", b"", "arm/ipxe.efi"),
    (19, "HTTPClient:Arch:00019:UNDI:003001", b"", f"http://{SERVER}:8080/ipxe-arm64.efi"),
    (27, None, b"", "ipxe-riscv64.efi"),
    (9, None, b"", "ebc.efi"),
    (12, None, b"", "powerpc/core.elf"),
    (22, "U-Boot.armv8", b"", "uboot/pxelinux.0"),
])
def test_each_firmware_gets_its_boot_file(proxy, machine, arch, vendor, extra, expected):
    """Named selectors, their defaults (iPXE per architecture), `arch:N` (before efi-x64 for
    code 9, alone for PowerPC's 12) and U-Boot's own vendor class through --pxe-vendor."""
    s = proxy("--boot-file", "efi-arm64=arm/ipxe.efi", "--boot-file", "arch:9=ebc.efi", "--boot-file", "arch:12=powerpc/core.elf",
              "--boot-file", "uboot-arm64=uboot/pxelinux.0", "--pxe-vendor", "U-Boot")
    # The start line lists what each is offered, the codes after the named selectors.
    assert s.log_lines(f"efi-arm64 arm/ipxe.efi, efi-riscv64 ipxe-riscv64.efi, efi-loongarch64 ipxe-loong64.efi, "
                       f"uboot-arm64 uboot/pxelinux.0, rpi start4.elf, http-x86 http://{SERVER}:8080/ipxe-i386.efi"), s.log_text()
    assert s.log_lines(f"ipxe http://{SERVER}:8080/boot.ipxe, arch:9 ebc.efi, arch:12 powerpc/core.elf"), s.log_text()
    reply = machine.ask(dhcpwire.message(MAC, arch=arch, vendor=vendor, extra=extra))
    assert reply, s.log_text()
    # Option 67 with its NUL, as dnsmasq writes it (ROMs that read it as a C string).
    assert reply["file"] == expected and reply["options"][67] == expected.encode() + b"\0"
    if vendor and vendor.startswith("HTTPClient"):
        assert reply["options"][60] == b"HTTPClient" and 43 not in reply["options"]


@pytest.mark.parametrize("arch, vendor, expected", [
    (7, None, "shimx64.efi"),
    (11, None, "shimaa64.efi"),
    (16, "HTTPClient:Arch:00016:UNDI:003001", f"http://{SERVER}:8080/shimx64.efi"),
    (19, "HTTPClient:Arch:00019:UNDI:003001", f"http://{SERVER}:8080/shimaa64.efi"),
    (6, None, "ipxe-i386.efi"),
    (0, None, "undionly.kpxe"),
])
def test_the_secure_boot_chain_offers_shim_where_there_is_one(proxy, machine, arch, vendor, expected):
    """--boot-chain secure-boot: shim for x64 and ARM64 UEFI, by PXE and HTTP Boot; the rest as
    the iPXE chain."""
    s = proxy("--boot-chain", "secure-boot")
    assert s.log_lines(f"efi-x64 shimx64.efi, efi-arm32 ipxe-arm32.efi, efi-arm64 shimaa64.efi"), s.log_text()
    reply = machine.ask(dhcpwire.message(MAC, arch=arch, vendor=vendor))
    assert reply and reply["file"] == expected, s.log_text()


def test_a_boot_chain_that_is_not_one_is_refused(root):
    r = run([str(BINARY), "-L", "-a", "127.0.0.1:0", "--proxy-dhcp", "10.0.0.1", "--boot-chain", "shim", str(root)], timeout=20)
    assert r.returncode == 64 and "Please provide one of 'ipxe' and 'secure-boot'" in r.stderr.decode(), r


def test_an_ipxe_without_http_is_chained_to_the_full_ipxe_once(proxy, machine):
    """A NIC's iPXE ROM whose option 175 names no HTTP, offered the script's http:// URL: the
    proxy offers the full iPXE its firmware boots (undionly.kpxe for a BIOS) instead, the same
    in the same DHCP exchange; its next exchange, still without HTTP, gets the script over TFTP
    (no chain loop); an iPXE with HTTP gets the URL."""
    s = proxy()
    small = dhcpwire.option(77, "iPXE") + dhcpwire.option(175, bytes([0x10, 1, 1, 0x15, 1, 1]))  # PXE, DNS: no HTTP (0x13)
    first = machine.ask(dhcpwire.message(MAC, arch=0, vendor="PXEClient:Arch:00000:UNDI:002001", extra=small, xid=0x1001))
    assert first and first["file"] == "undionly.kpxe", s.log_text()[-2000:]
    assert s.log_lines("DHCP DISCOVER 52:54:00:12:34:56 on veth-s: ipxe (arch 0, uuid ") and \
        s.log_lines('offered "undionly.kpxe" to 255.255.255.255:68 (its iPXE has no HTTP: chained to the full iPXE, which asks again)')
    time.sleep(0.6)  # past the proxy's half second per machine and request
    again = machine.ask(dhcpwire.message(MAC, arch=0, vendor="PXEClient:Arch:00000:UNDI:002001", extra=small, xid=0x1001))
    assert again and again["file"] == "undionly.kpxe", s.log_text()[-2000:]
    time.sleep(0.6)
    later = machine.ask(dhcpwire.message(MAC, arch=0, vendor="PXEClient:Arch:00000:UNDI:002001", extra=small, xid=0x1002))
    assert later and later["file"] == "boot.ipxe", s.log_text()[-2000:]
    full = dhcpwire.option(77, "iPXE") + dhcpwire.option(175, bytes([0x13, 1, 1]))
    other = MAC[:5] + b"\x42"
    reply = machine.ask(dhcpwire.message(other, arch=0, vendor="PXEClient:Arch:00000:UNDI:002001", extra=full))
    assert reply and reply["file"] == f"http://{SERVER}:8080/boot.ipxe", s.log_text()[-2000:]


PI_OPTION_43 = bytes([0x06, 0x01, 0x03, 0x0A, 0x04, 0x00, 0x50, 0x58, 0x45, 0x09, 0x14, 0x00, 0x00, 0x11]) + b"Raspberry Pi Boot\xff"


def test_a_raspberry_pi_is_answered_as_its_boot_rom_requires_and_reads_its_files_by_its_own_rule(proxy, machine, boot_link, root):
    """A Pi 4's boot ROM as its documentation and logs describe it: a DISCOVER with architecture 0
    and a BIOS ROM's vendor class from a Pi's hardware address, which takes only an offer whose
    option 43 holds "Raspberry Pi Boot" (dnsmasq's bytes) and reads its TFTP server from option 54;
    then SERIAL/start4.elf, and with none there every file from the root, each request sent twice
    from two ports of which one is dropped. Another Pi has a directory of its own."""
    start4 = os.urandom(300_000)
    (root / "start4.elf").write_bytes(start4)
    (root / "config.txt").write_text("[pi4]\narm_64bit=1\n")
    (root / "ab5a4158").mkdir()
    (root / "ab5a4158" / "start4.elf").write_bytes(b"its own " * 1000)
    for path in (root / "start4.elf", root / "config.txt", root / "ab5a4158" / "start4.elf"):
        path.chmod(0o644)
    (root / "ab5a4158").chmod(0o755)
    s = proxy()
    pi = b"\xdc\xa6\x32\x0a\xef\x79"
    reply = machine.ask(dhcpwire.message(pi, arch=0, vendor="PXEClient:Arch:00000:UNDI:002001"))
    assert reply, s.log_text()
    assert reply["options"][43] == PI_OPTION_43 and reply["options"][54] == socket.inet_aton(SERVER), reply
    assert reply["options"][60] == b"PXEClient" and reply["siaddr"] == SERVER, reply
    assert s.log_lines("DHCP DISCOVER dc:a6:32:0a:ef:79 on veth-s: rpi (arch 0"), s.log_text()
    # A PC's BIOS ROM sending the same bytes is a BIOS, with the bypass.
    pc = machine.ask(dhcpwire.message(MAC, arch=0, vendor="PXEClient:Arch:00000:UNDI:002001"))
    assert pc and pc["options"][43] == bytes([6, 1, 8, 255]) and pc["file"] == "undionly.kpxe", pc

    with boot_link[1].sockets():
        first, second, own = (tftpwire.RawClient(s) for _ in range(3))
    try:
        # No directory of its own: ERROR 1 at once, and the ROM drops the prefix.
        reply, _ = first.exchange(tftpwire.request("1234abcd/start4.elf"))
        assert reply == ("ERROR", (1, "File not found")), reply
        # The same RRQ from two ports within milliseconds; the ROM keeps the first.
        first.send(tftpwire.request("start4.elf"))
        second.send(tftpwire.request("start4.elf"))
        dropped, _ = second.receive()
        assert dropped and dropped[0] == "DATA" and dropped[1][0] == 1, dropped
        second.close()
        body, expected, reply = bytearray(), 1, first.receive()
        while True:
            (kind, (block, payload)), tid = reply
            assert kind == "DATA", reply
            if block == expected & 0xFFFF:
                body += payload
                expected += 1
                first.send(tftpwire.ack(block), tid)
                if len(payload) < 512:
                    break
            reply = first.receive()
        assert bytes(body) == start4
        assert first.download("config.txt") == (root / "config.txt").read_bytes()
        # A Pi with a directory of its own reads from it.
        assert own.download("ab5a4158/start4.elf") == b"its own " * 1000
    finally:
        for client in (first, second, own):
            client.close()
    ended = s.log_lines('"start4.elf"', count=2, timeout=15)
    # The one it kept completed; the one it dropped ended without an ERROR to a closed port.
    assert len(ended) == 2 and sum(line.endswith(": ok") for line in ended) == 1, s.log_text()[-3000:]


def test_firmware_that_ignores_the_bypass_is_acknowledged_on_4011(proxy, boot_link):
    s = proxy()
    boot_server = Machine(boot_link[1], port=4011, bind=CLIENT)
    try:
        request = dhcpwire.message(MAC, kind=dhcpwire.REQUEST, ciaddr=CLIENT, broadcast=False)
        reply = boot_server.ask(request, to=(SERVER, 4011))
    finally:
        boot_server.close()
    assert reply, s.log_text()
    assert reply["options"][53] == bytes([dhcpwire.ACK]) and reply["yiaddr"] == CLIENT
    assert reply["file"] == "ipxe.efi" and reply["options"][97] == dhcpwire.UUID


def test_an_address_request_and_a_laptop_get_silence(proxy, machine):
    s = proxy("-v", "-v")
    laptop = dhcpwire.message(MAC, arch=None, vendor="MSFT 5.0")
    assert machine.ask(laptop, timeout=1) is None
    selecting = dhcpwire.message(MAC, kind=dhcpwire.REQUEST, extra=dhcpwire.option(54, socket.inet_aton("10.78.0.2")))
    assert machine.ask(selecting, timeout=1) is None
    # And then a firmware is still answered.
    assert machine.ask(dhcpwire.message(MAC, xid=7))["xid"] == 7
    assert s.log_lines("not answered: not a network-boot client")


def test_a_relayed_request_goes_back_through_the_relay_by_broadcast_with_its_option_82(proxy, boot_link):
    """A relay forwards by the broadcast flag: the answer asks for broadcast, though the relay's
    DISCOVER had it clear (the client has no address to unicast to); option 82 comes back whole
    (RFC 3046: relays that check it drop answers without it)."""
    s = proxy()
    relay = Machine(boot_link[1], port=67, bind=CLIENT)
    agent = dhcpwire.option(82, bytes([1, 4, 0, 1, 0, 2, 2, 2, 0xAB, 0xCD]))
    try:
        reply = relay.ask(dhcpwire.message(MAC, giaddr=CLIENT, hops=1, broadcast=False, extra=agent), to=(SERVER, 67))
    finally:
        relay.close()
    assert reply and reply["giaddr"] == CLIENT and reply["file"] == "ipxe.efi", s.log_text()
    assert reply["flags"] & 0x8000 and reply["yiaddr"] == "0.0.0.0", reply
    assert reply["options"][82] == agent[2:], reply


def test_an_architecture_nobody_boots_is_said_and_not_answered(proxy, machine):
    s = proxy()
    assert machine.ask(dhcpwire.message(MAC, arch=12), timeout=1) is None
    assert s.log_lines("architecture 12: no --boot-file selector names it (arch:12=NAME would)")
    assert machine.ask(dhcpwire.message(MAC, arch=22), timeout=1) is None
    assert s.log_lines("no boot file for uboot-arm64 (--boot-file uboot-arm64=NAME)")
    # U-Boot's own vendor class is nobody's network boot until --pxe-vendor names it.
    assert machine.ask(dhcpwire.message(MAC[:5] + b"\x42", arch=22, vendor="U-Boot.armv8"), timeout=1) is None
    assert not [line for line in s.log_lines("52:54:00:12:34:42", count=0) if "offered" in line], s.log_text()


def test_bad_packets_are_ignored_and_the_proxy_still_answers(proxy, machine):
    s = proxy()
    good = dhcpwire.message(MAC)
    bad = [
        b"\x01" * 64,                                         # shorter than the header
        good[:239],                                           # no whole cookie
        good[:240] + b"\x35\x01",                             # an option cut short
        good[:240] + b"\x34\x01\x09" + good[240:],            # overload naming no field
        good[:240] + dhcpwire.option(97, bytes(3)) + good[240:],  # option 97 of a wrong length
        good[:240] + b"\x00" * 1200 + good[240:],             # 1,500 bytes, pads
        bytes([2]) + good[1:],                                # a reply, not a request
        good[:2] + bytes([17]) + good[3:],                    # hlen 17
    ]
    for packet in bad:
        machine.sock.sendto(packet, ("255.255.255.255", 67))
    time.sleep(0.5)
    while machine.receive(timeout=0.2):
        pass
    reply = machine.ask(dhcpwire.message(MAC, xid=99))
    assert reply and reply["xid"] == 99, s.log_text()
    # No END where the options reach the end of the packet: taken as the end, as ROMs that pad
    # with nothing need (another machine: this one was just answered).
    reply = machine.ask(dhcpwire.message(MAC[:5] + b"\x77", xid=98, end=False))
    assert reply and reply["xid"] == 98, s.log_text()
    assert s.process.poll() is None


def test_a_machine_nobody_boots_is_said_once_a_minute_and_each_of_its_requests_counted(proxy, machine):
    """A U-Boot machine before `--boot-file uboot-arm64=` is set: its 2,000 DISCOVERs are one
    warning (they were 2,002 lines), each counted; another such machine is said at once."""
    port = free_tcp_port()
    s = proxy("--metrics", f"127.0.0.1:{port}")
    packet = dhcpwire.message(MAC, arch=22)
    for _ in range(2000):
        machine.sock.sendto(packet, ("255.255.255.255", 67))
    machine.sock.sendto(dhcpwire.message(MAC[:5] + b"\x99", arch=22), ("255.255.255.255", 67))
    deadline, text = time.time() + 10, ""
    while 'stampede_boot_ignored_total{protocol="dhcp",reason="no_boot_file"} 2001' not in text and time.time() < deadline:
        time.sleep(0.3)
        text = run([*s.argv[:4], "curl", "-s", f"http://127.0.0.1:{port}/metrics"]).stdout.decode()
    assert 'stampede_boot_ignored_total{protocol="dhcp",reason="no_boot_file"} 2001' in text, text
    said = s.log_lines("not answered: no boot file for uboot-arm64", count=2)
    assert len(said) == 2, s.log_text()[-3000:]
    assert "52:54:00:12:34:56" in said[0] and "52:54:00:12:34:99" in said[1], said


def test_answers_leave_with_dont_fragment_clear(proxy, machine, boot_link):
    """As dnsmasq sends DHCP, for ROMs that mishandle the bit: the broadcast offer from port 67
    and the boot server's ACK from 4011 both leave with DF clear (Linux sets it on UDP by default)."""
    s = proxy()
    with boot_link[1].sockets():
        raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_UDP)
    raw.settimeout(3)
    boot_server = Machine(boot_link[1], port=4011, bind=CLIENT)
    try:
        assert machine.ask(dhcpwire.message(MAC)), s.log_text()
        assert boot_server.ask(dhcpwire.message(MAC, kind=dhcpwire.REQUEST, ciaddr=CLIENT, broadcast=False), to=(SERVER, 4011))
        flags = {}
        while len(flags) < 2:
            packet = raw.recv(65535)
            header = (packet[0] & 15) * 4
            source_port = int.from_bytes(packet[header:header + 2], "big")
            if socket.inet_ntoa(packet[12:16]) == SERVER and source_port in (67, 4011):
                flags[source_port] = int.from_bytes(packet[6:8], "big") & 0xE000
        assert flags == {67: 0, 4011: 0}, flags
    finally:
        raw.close()
        boot_server.close()


def test_another_servers_menu_item_or_choice_is_left_to_it(proxy, boot_link):
    """WDS (type 1), dnsmasq's menu (its pxe-services are numbered from 0x8000), a BIS request,
    a REQUEST that chose another server: silence, counted; the bootstrap server's type is ours."""
    port = free_tcp_port()
    s = proxy("--metrics", f"127.0.0.1:{port}")
    boot_server = Machine(boot_link[1], port=4011, bind=CLIENT)

    def item(type_, layer=0):
        return dhcpwire.option(43, bytes([71, 4]) + type_.to_bytes(2, "big") + layer.to_bytes(2, "big") + b"\xff")
    try:
        for xid, extra in enumerate([item(1), item(0x8000), item(0, 0x8000),
                                     item(0) + dhcpwire.option(54, socket.inet_aton("10.78.0.9"))], start=1):
            request = dhcpwire.message(MAC[:5] + bytes([xid]), xid=xid, kind=dhcpwire.REQUEST, ciaddr=CLIENT, broadcast=False, extra=extra)
            assert boot_server.ask(request, to=(SERVER, 4011), timeout=0.5) is None, xid
        ours = dhcpwire.message(MAC, xid=9, kind=dhcpwire.REQUEST, ciaddr=CLIENT, broadcast=False, extra=item(0))
        reply = boot_server.ask(ours, to=(SERVER, 4011))
        assert reply and reply["xid"] == 9 and reply["file"] == "ipxe.efi", s.log_text()
    finally:
        boot_server.close()
    text = run([*s.argv[:4], "curl", "-s", f"http://127.0.0.1:{port}/metrics"]).stdout.decode()
    for reason, count in (("other_boot_server_type", 2), ("boot_integrity_services", 1), ("other_server", 1)):
        assert f'stampede_boot_ignored_total{{protocol="dhcp",reason="{reason}"}} {count}' in text, (reason, text)


def test_machines_without_a_hardware_address_are_told_apart_by_their_client_identifier(proxy, machine):
    """IPoIB sends hlen 0: two such machines (option 61 tells them apart) are each answered; one
    of them asking again within the half second is not. Before, they all shared one limit."""
    s = proxy()

    def ipoib(identifier, xid):
        packet = bytearray(dhcpwire.message(bytes(6), xid=xid, extra=dhcpwire.option(61, identifier)))
        packet[2] = 0
        return bytes(packet)
    assert machine.ask(ipoib(b"\xff\x00\x01", 1)), s.log_text()
    assert machine.ask(ipoib(b"\xff\x00\x02", 2)), s.log_text()
    assert machine.ask(ipoib(b"\xff\x00\x01", 3), timeout=0.3) is None


def test_a_flood_from_one_machine_costs_one_answer_a_half_second_and_tftp_serves_on(proxy, machine, boot_link, root):
    s = proxy()
    packet = dhcpwire.message(MAC)
    started = time.time()
    for _ in range(20000):
        machine.sock.sendto(packet, ("255.255.255.255", 67))
    answers = 0
    while machine.receive(timeout=0.3):
        answers += 1
    elapsed = time.time() - started
    assert 1 <= answers <= 2 * (elapsed / 0.5 + 1), answers
    # TFTP on the same worker answers as ever.
    r = boot_link[1].run_inside([str(BINARY), "get", f"{SERVER}:{s.port}", "one-mib.bin", str(root.parent / "got.bin")], timeout=30)
    assert r.returncode == 0, r.stderr
    assert (root.parent / "got.bin").read_bytes() == (root / "one-mib.bin").read_bytes()


def test_a_flood_from_twenty_thousand_machines_leaves_tftp_and_http_serving(proxy, machine, boot_link, root):
    """Every DISCOVER of a different MAC is answered, none is cached past its machine's limit, and
    TFTP and HTTP, on the same worker, serve on through the flood."""
    s = proxy()
    client = boot_link[1]
    machine.sock.setsockopt(socket.SOL_SOCKET, 33, 64 << 20)  # SO_RCVBUFFORCE: room for every offer
    fetches = [subprocess.Popen([*client.inside, "curl", "-s", "-o", str(root.parent / f"got-{n}"), url])
               for n, url in enumerate((f"tftp://{SERVER}:{s.port}/one-mib.bin", f"http://{SERVER}:8080/one-mib.bin"))]
    for n in range(20000):
        packet = dhcpwire.message(MAC[:3] + n.to_bytes(3, "big"), xid=n)
        machine.sock.sendto(packet, ("255.255.255.255", 67))
    assert [f.wait(timeout=30) for f in fetches] == [0, 0]
    for n in range(2):
        assert (root.parent / f"got-{n}").read_bytes() == (root / "one-mib.bin").read_bytes()
    answered = 0
    while machine.receive(timeout=1.0):
        answered += 1
    assert answered >= 10000, answered
    r = client.run_inside(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", f"http://{SERVER}:8080/hello.txt"], timeout=30)
    assert r.stdout == b"200", r


def test_the_documented_per_machine_boot_gets_a_machines_own_script_or_the_default(proxy, machine, boot_link, root):
    """docs/proxy-dhcp.md's example: the offer names a per-machine URL, and -m's E rule serves the
    machine's own script where there is one and boot.ipxe otherwise, over HTTP and TFTP alike."""
    rules = root.parent / "rules"
    rules.write_text("rE ^machines/(.*)\\.ipxe$   machines/\\1.ipxe\nr  ^machines/.*\\.ipxe$     boot.ipxe\n")
    (root / "machines").mkdir()
    (root / "machines" / "52-54-00-12-34-56.ipxe").write_text("#!ipxe\necho own\n")
    (root / "boot.ipxe").write_text("#!ipxe\necho default\n")
    for f in (root / "machines", root / "machines" / "52-54-00-12-34-56.ipxe", root / "boot.ipxe"):
        f.chmod(0o755 if f.is_dir() else 0o644)
    s = proxy("--boot-file", f"ipxe=http://{SERVER}:8080/machines/${{mac:hexhyp}}.ipxe", "-m", str(rules))
    reply = machine.ask(dhcpwire.message(MAC, arch=7, extra=dhcpwire.option(77, "iPXE") + dhcpwire.option(175, bytes([0x13, 1, 1]))))
    assert reply and reply["file"] == f"http://{SERVER}:8080/machines/52-54-00-12-34-56.ipxe", reply
    client = boot_link[1]
    for name, said in (("machines/52-54-00-12-34-56.ipxe", "own"), ("machines/52-54-00-99-99-99.ipxe", "default")):
        for url in (f"http://{SERVER}:8080/{name}", f"tftp://{SERVER}:{s.port}/{name}"):
            r = client.run_inside(["curl", "-s", url], timeout=30)
            assert r.returncode == 0 and f"echo {said}" in r.stdout.decode(), (url, r.stdout, r.stderr)


def test_a_dhcp_server_that_shares_the_port_keeps_its_unicasts_and_hears_the_broadcasts(proxy, machine, boot_link):
    """The proxy binds no UDP socket to port 67: a server there gets every broadcast and every
    unicast (a lease's renewal, a relay's request) the kernel owes it. Before, a socket of the
    proxy's bound to the device took the unicasts, and the server never heard the renewals."""
    with boot_link[0].sockets():
        site = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    site.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    site.bind(("0.0.0.0", 67))
    site.settimeout(2)
    try:
        s = proxy()
        reply = machine.ask(dhcpwire.message(MAC, xid=5))
        assert reply and reply["xid"] == 5, s.log_text()
        assert dhcpwire.parse(site.recvfrom(4096)[0])["xid"] == 5
        renewal = dhcpwire.message(MAC, xid=6, kind=dhcpwire.REQUEST, ciaddr=CLIENT, broadcast=False, arch=None, vendor="")
        machine.sock.sendto(renewal, (SERVER, 67))
        assert dhcpwire.parse(site.recvfrom(4096)[0])["xid"] == 6
    finally:
        site.close()


def test_a_boot_server_port_held_by_another_proxy_is_named_at_start(boot_link, root):
    """dnsmasq in proxy mode holds port 4011 (and 67, without sharing it): port 67 no longer
    stands in the way, 4011 does, and the start says who holds it."""
    server_ns, _ = boot_link
    dnsmasq = subprocess.Popen([*server_ns.inside, "dnsmasq", "-k", "--port=0", f"--dhcp-range={SERVER},proxy",
                                "--pxe-service=x86-64_EFI,iPXE,ipxe.efi", "--pid-file=", "--user=root", "--log-facility=-"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 10
        while ":0FAB " not in server_ns.run_inside(["cat", "/proc/net/udp"]).stdout.decode() and time.time() < deadline:
            time.sleep(0.05)
        r = server_ns.run_inside([str(SERVER_BINARY), "-L", "-a", f"{SERVER}:0", "--proxy-dhcp", SERVER, str(root)], timeout=20)
        assert r.returncode == 1, r
        assert f"{SERVER}:4011 (the PXE boot server's port) is held by dnsmasq (pid".encode() in r.stderr, r.stderr
    finally:
        dnsmasq.terminate()
        dnsmasq.wait()


def test_answers_are_counted_by_selector_and_silences_by_reason(proxy, machine):
    port = free_tcp_port()
    s = proxy("--metrics", f"127.0.0.1:{port}")
    assert machine.ask(dhcpwire.message(MAC, arch=0))
    assert machine.ask(dhcpwire.message(MAC, arch=None, vendor="MSFT 5.0"), timeout=0.5) is None
    time.sleep(1)
    r = s.argv[:4]  # ip netns exec NAME
    text = run([*r, "curl", "-s", f"http://127.0.0.1:{port}/metrics"]).stdout.decode()
    assert 'stampede_boot_answers_total{protocol="dhcp",selector="bios",answer="offer"} 1' in text, text
    assert 'stampede_boot_ignored_total{protocol="dhcp",reason="not_boot_client"} 1' in text


@pytest.mark.parametrize("flags, status, said", [
    (["--proxy-dhcp", "eth0"], 64, "--proxy-dhcp eth0: not this server's IPv4 address"),
    (["--proxy-dhcp", "10.0.0.1", "--boot-file", "http-x64=ipxe.efi"], 64, "UEFI HTTP Boot loads a URL"),
    (["--proxy-dhcp", "10.0.0.1", "--boot-file", "bios=http://10.0.0.1/x"], 64, "a PXE firmware loads a file over TFTP"),
    (["--proxy-dhcp", "10.0.0.1", "--boot-file", "arm=ipxe.efi"], 64, "not SELECTOR=NAME"),
    (["--proxy-dhcp", "192.0.2.77"], 65, "--proxy-dhcp 192.0.2.77: no interface of this host has this address"),
    (["--proxy-dhcp", "10.0.0.1", "--boot-file", "efi-x64=" + "a" * 110 + "/${mac}"], 64,
     "128 bytes for a machine, more than a reply's file field holds (127)"),
    (["--proxy-dhcp", "10.0.0.1", "--boot-file", "ipxe=http://10.0.0.1/" + "u" * 240], 64,
     "256 bytes for a machine, more than option 67 holds (254)"),
])
def test_bad_proxy_flags_are_refused(root, flags, status, said):
    r = run([str(BINARY), "-L", "-a", "127.0.0.1:0", *flags, str(root)], timeout=20)
    assert r.returncode == status, r
    assert said in r.stderr.decode(), r.stderr


def test_a_storm_of_uefi_machines_boots_from_its_first_dhcp_packet(proxy, boot_link, root):
    """`storm --dhcp` plays each machine's DHCP as EDK2 and iPXE send it, with its own MAC and
    UUID, then the chain over TFTP and HTTP: every machine gets its offers and every byte."""
    for name, size in (("ipxe.efi", 300_000), ("boot.ipxe", 200), ("vmlinuz", 400_000), ("initrd.img", 600_000)):
        (root / name).write_bytes(os.urandom(size))
        (root / name).chmod(0o644)
    s = proxy()
    _, client = boot_link
    r = client.run_inside([str(BINARY), "storm", f"{SERVER}:{s.port}", "--profile", "uefi-ipxe", "--dhcp", CLIENT,
                           "--http", f"{SERVER}:8080", "--clients", "60", "--verify-root", str(root), "--json"], timeout=120)
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    assert result["ok"] == 60 and result["failed"] == 0, result
    stages = {stage["stage"]: stage for stage in result["stages"]}
    assert stages["uefi dhcp pxe arch=7"]["ok"] == 60 and stages["ipxe dhcp ipxe arch=7"]["ok"] == 60, stages
    assert 0 < stages["uefi dhcp pxe arch=7"]["p99_ms"] < 4000, stages


def test_storms_in_slices_share_one_rack_each_from_its_own_address(proxy, boot_link, root):
    """Two storms at once (`--slice 0/2` and `1/2`), each its DHCP from an address of its own on
    the boot link, powering their machines on over the same 2 s: both hear every broadcast offer
    and take their own machines', and each gets the boot server's unicast ACKs on its own address
    (were both only on the wildcard port 68, the storm bound last would take every ACK while both
    run, and the other's machines would ask again a second later, as iPXE does, until it ended)."""
    for name, size in (("ipxe.efi", 100_000), ("boot.ipxe", 200), ("vmlinuz", 100_000), ("initrd.img", 100_000)):
        (root / name).write_bytes(os.urandom(size))
        (root / name).chmod(0o644)
    s = proxy()
    _, client = boot_link
    second = CLIENT.rsplit(".", 1)[0] + ".58"
    r = client.run_inside(["ip", "addr", "add", f"{second}/24", "dev", "veth-c"])
    assert r.returncode == 0, r.stderr
    storms = [subprocess.Popen([*client.inside, str(BINARY), "storm", f"{SERVER}:{s.port}", "--profile", "uefi-ipxe",
                                "--dhcp", address, "--slice", f"{i}/2", "--http", f"{SERVER}:8080", "--clients", "40", "--ramp", "2",
                                "--verify-root", str(root), "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
              for i, address in enumerate((CLIENT, second))]
    results = []
    for storm in storms:
        out, err = storm.communicate(timeout=120)
        assert storm.returncode == 0, err
        results.append(json.loads(out))
    for result in results:
        assert result["ok"] == 20 and result["failed"] == 0, result
        stages = {stage["stage"]: stage for stage in result["stages"]}
        assert stages["uefi dhcp pxe arch=7"]["ok"] == 20 and stages["ipxe dhcp ipxe arch=7"]["ok"] == 20, stages
        # Each machine's iPXE DISCOVER, a moment after its EDK2 one, is asked again once (the proxy
        # answers a machine's DISCOVERs once in half a second); an ACK lost to the other storm would
        # be asked for again and again while that storm runs (51 times for 20 machines, p99 4 s).
        ipxe = stages["ipxe dhcp ipxe arch=7"]
        assert ipxe["retransmits"] <= 25 and ipxe["p99_ms"] < 3000, ipxe
    assert s.log_lines("on veth-s: efi-x64 (arch 7", count=40), s.log_text()[-2000:]


def test_a_storm_of_raspberry_pis_boots_by_their_roms_rule(proxy, boot_link, root):
    """`storm --profile rpi4 --dhcp`: each Pi's DHCP from a Pi's hardware address, taken only
    for the "Raspberry Pi Boot" option 43, then SERIAL/start4.elf, not found, and every file from
    the shared root, every byte compared; a proxy that answers a Pi as a BIOS is not followed."""
    for name, size in (("start4.elf", 400_000), ("fixup4.dat", 5_000), ("config.txt", 40), ("bcm2711-rpi-4-b.dtb", 50_000),
                       ("cmdline.txt", 100), ("kernel8.img", 700_000)):
        (root / name).write_bytes(os.urandom(size))
        (root / name).chmod(0o644)
    s = proxy()
    _, client = boot_link
    r = client.run_inside([str(BINARY), "storm", f"{SERVER}:{s.port}", "--profile", "rpi4", "--dhcp", CLIENT,
                           "--clients", "40", "--verify-root", str(root), "--json"], timeout=120)
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    assert result["ok"] == 40 and result["failed"] == 0, result
    stages = {stage["stage"]: stage for stage in result["stages"]}
    assert stages["rpi4 dhcp rpi arch=0"]["ok"] == 40, stages
    searched = next(stage for name, stage in stages.items() if "start4.elf" in name)
    assert searched["not_found"] == 40, stages
    assert stages["rpi4 get ${dir}kernel8.img"]["ok"] == 40, stages
    assert s.log_lines("on veth-s: rpi (arch 0", count=40), s.log_text()[-2000:]
    assert s.log_lines('"kernel8.img" octet', count=40), s.log_text()[-2000:]


@pytest.mark.parametrize("profile, boot_file, files, said", [
    ("uefi-secure-boot", "efi-x64=shimx64.efi", ["shimx64.efi", "grubx64.efi", "/grub/grub.cfg", "/vmlinuz", "/initrd.img"],
     'on veth-s: efi-x64 (arch 7'),
    ("ipxe2-signed", "efi-x64=shimx64.efi", ["shimx64.efi", "ipxe.efi", "boot.ipxe", "vmlinuz", "initrd.img"], 'on veth-s: ipxe (arch 7'),
    ("arm64", None, ["ipxe-arm64.efi", "boot.ipxe", "vmlinuz", "initrd.img"], 'on veth-s: efi-arm64 (arch 11'),
])
def test_the_signed_and_arm64_chains_play_through_the_proxy(proxy, boot_link, root, profile, boot_file, files, said):
    """storm --profile uefi-secure-boot, ipxe2-signed and arm64 with --dhcp: each chain's DHCP
    and every request as its firmware makes it (shim's optional files and GRUB's module lists
    not found, iPXE 2.0's autoexec.ipxe beside itself and at the root, then its DHCP), every
    byte compared with the root; the ARM64 machines are offered ipxe-arm64.efi with no flag."""
    for name in files:  # as the firmware asks for them (GRUB from the root)
        (root / name.lstrip("/")).parent.mkdir(exist_ok=True)
        (root / name.lstrip("/")).write_bytes(os.urandom(200 if name.endswith((".cfg", ".ipxe")) else 150_000))
    for path in root.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    s = proxy(*(["--boot-file", boot_file] if boot_file else []))
    _, client = boot_link
    r = client.run_inside([str(BINARY), "storm", f"{SERVER}:{s.port}", "--profile", profile, "--dhcp", CLIENT,
                           "--http", f"{SERVER}:8080", "--clients", "20", "--verify-root", str(root), "--json"], timeout=120)
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    assert result["ok"] == 20 and result["failed"] == 0, result
    for stage in result["stages"]:
        if " try " in stage["stage"]:
            assert stage["not_found"] == 20, stage
        else:
            assert stage["ok"] == 20 and stage["not_found"] == 0, stage
    assert s.log_lines(said, count=20), s.log_text()[-2000:]
    for name in files:
        assert s.log_lines(f'"{name}" ', count=20), (name, s.log_text()[-2000:])


def test_storm_refuses_dhcp_without_a_profile_that_has_it(root):
    for args, said in ((["f", "--dhcp", "10.0.0.5"], "--dhcp needs a profile"),
                       (["--profile", "grub", "--dhcp", "10.0.0.5"], "has no dhcp stage"),
                       (["--profile", "uefi", "--dhcp", "fe80::1"], "two address families"),
                       (["--profile", "uefi", "--dhcp", "[fe80::1]:546"], "this host's address"),
                       (["--profile", "uefi", "--dhcp", "10.0.0.5", "--threads", "2"], "several storms with --slice")):
        r = run([str(BINARY), "storm", "127.0.0.1:69", *args])
        assert r.returncode == 64 and said in r.stderr.decode(errors="replace"), (args, r.stderr)


@pytest.fixture
def site_with_a_relay(boot_link, network_namespace, tmp_path):
    """The boot link, and a second link from the server namespace to a relay's namespace
    (veth-r 10.79.0.1, veth-q 10.79.0.2), behind which the relay serves a segment of its own
    (10.80.0.1, its giaddr, on its loopback: the kernel here has no dummy device); the site's DHCP server, dnsmasq 2.93 from the Debian unstable tree,
    on the server namespace's two interfaces (the wildcard port 67, not shared), with a range
    for each link and for the relay's segment, and no ping check (it blocks dnsmasq up to 3 s per
    offer: sixty machines would wait minutes). Yields (server ns, client ns, relay ns, dnsmasq's log)."""
    sys.path.insert(0, str(REPO / "Benchmarks"))
    from harness import SID, in_sid
    assert (SID / "usr/sbin/dnsmasq").exists(), f"no Debian unstable tree in {SID}: `make parity-deps` makes it"
    server_ns, client_ns = boot_link
    relay_ns = network_namespace()
    r = run(["ip", "link", "add", "veth-r", "netns", server_ns.name, "type", "veth", "peer", "name", "veth-q", "netns", relay_ns.name])
    assert r.returncode == 0, r.stderr
    for namespace, commands in ((server_ns, [["ip", "addr", "add", "10.79.0.1/24", "dev", "veth-r"], ["ip", "link", "set", "veth-r", "up"],
                                             ["ip", "route", "add", "10.80.0.0/24", "via", "10.79.0.2"]]),
                                (relay_ns, [["ip", "addr", "add", "10.79.0.2/24", "dev", "veth-q"], ["ip", "link", "set", "veth-q", "up"],
                                            ["ip", "addr", "add", "10.80.0.1/24", "dev", "lo"],
                                            ["ip", "route", "add", "10.78.0.0/24", "via", "10.79.0.1"]])):
        for command in commands:
            r = namespace.run_inside(command)
            assert r.returncode == 0, (command, r.stderr)
    log = tmp_path / "dnsmasq.log"
    dnsmasq = subprocess.Popen([*server_ns.inside, *in_sid(["/usr/sbin/dnsmasq", "-k", "--port=0",
                                                            "--dhcp-range=10.78.0.100,10.78.0.150,1h",
                                                            "--dhcp-range=10.79.0.100,10.79.0.150,1h",
                                                            "--dhcp-range=10.80.0.100,10.80.0.150,1h",
                                                            f"--dhcp-leasefile={tmp_path / 'leases'}", "--no-ping", "--log-dhcp",
                                                            "--log-facility=-", "--user=root", "--pid-file="], share=tmp_path)],
                               stdout=open(log, "w"), stderr=subprocess.STDOUT)
    try:
        # Port 67 bound, and its start said (dnsmasq writes its log lines after it binds).
        deadline = time.time() + 20
        while ":0043 " not in server_ns.run_inside(["cat", "/proc/net/udp"]).stdout.decode() or "dnsmasq-dhcp" not in log.read_text():
            assert dnsmasq.poll() is None and time.time() < deadline, log.read_text()
            time.sleep(0.05)
        assert "version 2.93" in log.read_text(), log.read_text()
        yield server_ns, client_ns, relay_ns, log
    finally:
        dnsmasq.terminate()
        dnsmasq.wait()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_site_dhcp_server_on_the_same_host_keeps_its_renewals_while_a_rack_boots_through_the_proxy(site_with_a_relay, root, backend):
    """dnsmasq 2.93 serves addresses on two interfaces of the host that runs the proxy, holding
    port 67 for itself. A laptop takes a lease and renews it by unicast, again and again, while
    sixty machines boot through the proxy (storm --dhcp): every renewal is acknowledged by
    dnsmasq, every machine boots. Before, the proxy's socket took every unicast to port 67 and
    dropped it as "an address request": not one renewal reached the site's server."""
    server_ns, client_ns, _, dnsmasq_log = site_with_a_relay
    for name, size in (("ipxe.efi", 300_000), ("boot.ipxe", 200), ("vmlinuz", 400_000), ("initrd.img", 600_000)):
        (root / name).write_bytes(os.urandom(size))
        (root / name).chmod(0o644)
    s = Server(root, ["--proxy-dhcp", SERVER, "--http", f"{SERVER}:8080"], host=SERVER, backend=backend, prefix=server_ns.inside)
    laptop = Machine(client_ns)
    renewer = None
    try:
        offer = laptop.ask(dhcpwire.message(MAC, xid=1, arch=None, vendor="MSFT 5.0"), timeout=5)
        assert offer and offer["options"][53] == bytes([dhcpwire.OFFER]) and offer["yiaddr"].startswith("10.78.0."), offer
        leased = offer["yiaddr"]
        selecting = dhcpwire.message(MAC, xid=2, kind=dhcpwire.REQUEST, arch=None, vendor="MSFT 5.0",
                                     extra=dhcpwire.option(54, socket.inet_aton(SERVER)) + dhcpwire.option(50, socket.inet_aton(leased)))
        ack = laptop.ask(selecting, timeout=5)
        assert ack and ack["options"][53] == bytes([dhcpwire.ACK]) and ack["yiaddr"] == leased, ack
        assert client_ns.run_inside(["ip", "addr", "add", f"{leased}/24", "dev", "veth-c"]).returncode == 0
        renewer = Machine(client_ns, bind=leased)
        storm = subprocess.Popen([*client_ns.inside, str(BINARY), "storm", f"{SERVER}:{s.port}", "--profile", "uefi-ipxe",
                                  "--dhcp", CLIENT, "--http", f"{SERVER}:8080", "--clients", "60", "--verify-root", str(root),
                                  "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        renewed = []
        while storm.poll() is None or len(renewed) < 5:
            xid = 100 + len(renewed)
            renewal = dhcpwire.message(MAC, xid=xid, kind=dhcpwire.REQUEST, ciaddr=leased, broadcast=False, arch=None, vendor="MSFT 5.0")
            reply = renewer.ask(renewal, to=(SERVER, 67), timeout=3)
            assert reply and reply["xid"] == xid and reply["options"][53] == bytes([dhcpwire.ACK]), (len(renewed), reply,
                                                                                                     dnsmasq_log.read_text()[-2000:])
            renewed.append(xid)
            time.sleep(0.1)
        out, err = storm.communicate(timeout=120)
        assert storm.returncode == 0, err
        result = json.loads(out)
        assert result["ok"] == 60 and result["failed"] == 0, result
        assert dnsmasq_log.read_text().count(f"DHCPACK(veth-s) {leased}") >= len(renewed) + 1
    finally:
        laptop.close()
        if renewer:
            renewer.close()
        s.stop()


def test_a_relayed_request_through_another_interface_is_answered_beside_the_site_server(site_with_a_relay, root):
    """A relay behind another interface of the host forwards a machine's DISCOVER to the proxy's
    address: the proxy (fixed to no interface for what is sent to its address) answers through the
    relay, by broadcast with option 82, and so does the site's dnsmasq on the same host, with an
    address of the relay's segment."""
    server_ns, _, relay_ns, _ = site_with_a_relay
    s = Server(root, ["--proxy-dhcp", SERVER], host=SERVER, prefix=server_ns.inside)
    with relay_ns.sockets():
        relay = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    relay.bind(("10.80.0.1", 67))
    relay.settimeout(3)
    try:
        agent = dhcpwire.option(82, bytes([1, 3, 0x65, 0x74, 0x30]))
        relay.sendto(dhcpwire.message(MAC, giaddr="10.80.0.1", hops=1, broadcast=False, extra=agent), (SERVER, 67))
        replies = []
        with pytest.raises(socket.timeout):
            while len(replies) < 3:
                data, sender = relay.recvfrom(4096)
                replies.append((dhcpwire.parse(data), sender))
        proxied = [r for r, sender in replies if r["yiaddr"] == "0.0.0.0"]
        leased = [r for r, sender in replies if r["yiaddr"].startswith("10.80.0.")]
        assert len(proxied) == 1 and len(leased) == 1, (replies, s.log_text())
        answer = proxied[0]
        assert answer["file"] == "ipxe.efi" and answer["flags"] & 0x8000 and answer["options"][82] == agent[2:], answer
        assert [sender for r, sender in replies if r is answer] == [(SERVER, 67)]
        assert s.log_lines(f"offered \"ipxe.efi\" to 10.80.0.1:67 (relay)")
    finally:
        relay.close()
        s.stop()
