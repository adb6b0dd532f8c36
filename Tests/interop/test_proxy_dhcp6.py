"""The DHCPv6 boot responder (`--proxy-dhcp6`), on an IPv6-only link of its own: a server
namespace and a client namespace joined by a veth pair, the server at 2001:db8:78::1, the machine
at 2001:db8:78::57. A Solicit as OVMF's PXE over IPv6 sends it, multicast to ff02::1:2, gets the
Advertise EDK2 takes for a proxy offer; the Request EDK2 then sends to [server]:4011 gets the URL,
and the file at that URL comes over TFTP on IPv6; UEFI HTTP Boot gets an http:// URL whose file
comes over HTTP; a relay's Relay-forward is answered through it; what is not a boot client's
gets silence, and bad flags a clear refusal. Real firmware boots over IPv6 in test_firmware_ipv6.py."""
import json
import os
import socket
import struct
import subprocess
import time

import pytest

from conftest import BINARY, Server, run
from dhcp6wire import CLIENT6, SERVER6, UUID, Machine6, first, multicast, option, options_of, solicit

@pytest.fixture
def proxy6(link6, root):
    """start(*flags) -> a Server in the server namespace: TFTP on [SERVER6]:69, HTTP on :8080,
    --proxy-dhcp6 SERVER6; the root holds an ipxe.efi."""
    server_ns, _ = link6
    (root / "ipxe.efi").write_bytes(bytes(range(256)) * 1000)
    (root / "ipxe.efi").chmod(0o644)
    started = []

    def start(*flags):
        s = Server(root, ["--proxy-dhcp6", SERVER6, "--http", f"[{SERVER6}]:8080", *flags], host=SERVER6, port=69,
                   prefix=server_ns.inside)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


@pytest.fixture
def machine6(link6):
    m = Machine6(link6[1])
    yield m
    m.close()


def test_ovmfs_solicit_gets_the_proxy_offer_edk2_takes_and_its_boot_server_the_url(proxy6, link6, machine6, root):
    s = proxy6()
    server_ns, client_ns = link6
    data, source = machine6.ask(solicit(), multicast(client_ns))
    assert data is not None, s.log_text()
    assert source[1] == 547
    assert data[0] == 2 and data[1:4] == bytes.fromhex("abcdef")  # Advertise, the same transaction
    options = options_of(data)
    assert first(options, 1) == b"\x00\x04" + UUID
    mac = bytes.fromhex(server_ns.run_inside(["cat", "/sys/class/net/veth-s/address"]).stdout.decode().strip().replace(":", ""))
    assert first(options, 2) == b"\x00\x03\x00\x01" + mac  # DUID-LL of veth-s
    assert first(options, 3) is None  # no address
    vendor = first(options, 16)
    assert vendor[:4] == struct.pack("!I", 343) and vendor[6:15] == b"PXEClient"
    url = first(options, 59).decode()
    assert url == f"tftp://[{SERVER6}]/ipxe.efi"
    # Its DUID-UUID holds no MAC: the machine is known by its link-local address's EUI-64.
    client_mac = client_ns.run_inside(["cat", "/sys/class/net/veth-c/address"]).stdout.decode().strip()
    assert s.log_lines(f"on veth-s: solicit {client_mac} efi-x64 (arch 7): advertised \"{url}\"")

    # EDK2's Request to the boot server: the offer's server identifier, the IA removed, from 4011.
    boot = Machine6(client_ns, port=4011)
    try:
        request = bytes([3]) + bytes.fromhex("abcdef") + b"".join(
            option(code, value) for code, value in options_of(solicit()) if code != 3) + option(2, first(options, 2))
        data, source = boot.ask(request, (SERVER6, 4011))
        # Once more 300 ms later: EDK2 opens the socket it reads the Reply on only after it sent the
        # Request, and never asks again; a Reply that came before that is lost without the second.
        started = time.monotonic()
        again, _ = boot.receive(timeout=2.0)
        assert again == data and 0.2 < time.monotonic() - started < 1.0
    finally:
        boot.close()
    assert data is not None and data[0] == 7, s.log_text()
    assert source[1] == 4011
    assert first(options_of(data), 59).decode() == url
    # The file at the URL, over TFTP on IPv6.
    got = client_ns.run_inside(["curl", "-sS", "-g", "--max-time", "10", url, "-o", "-"])
    assert got.returncode == 0, got.stderr
    assert got.stdout == (root / "ipxe.efi").read_bytes()


def test_uefi_http_boot_gets_a_url_on_http_and_its_file(proxy6, link6, machine6, root):
    s = proxy6()
    _, client_ns = link6
    data, _ = machine6.ask(solicit(vendor="HTTPClient:Arch:00016:UNDI:003000", arch=16), multicast(client_ns))
    assert data is not None, s.log_text()
    options = options_of(data)
    assert first(options, 16)[6:] == b"HTTPClient"
    url = first(options, 59).decode()
    assert url == f"http://[{SERVER6}]:8080/ipxe.efi"
    got = client_ns.run_inside(["curl", "-sS", "-g", "--max-time", "10", url, "-o", "-"])
    assert got.returncode == 0 and got.stdout == (root / "ipxe.efi").read_bytes()


def test_ipxe_gets_its_script_and_a_relayed_solicit_is_answered_through_the_relay(proxy6, link6, root):
    s = proxy6()
    _, client_ns = link6
    relay = Machine6(client_ns, port=547)
    try:
        inner = solicit(extra=option(15, b"\x00\x04iPXE"))
        link = socket.inet_pton(socket.AF_INET6, "2001:db8:79::1")
        peer = socket.inet_pton(socket.AF_INET6, "fe80::5054:ff:fe12:3456")
        forward = bytes([12, 0]) + link + peer + option(18, b"eth3") + option(79, b"\x00\x01" + bytes.fromhex("525400123456")) \
            + option(9, inner)
        data, source = relay.ask(forward, (SERVER6, 547))
    finally:
        relay.close()
    assert data is not None, s.log_text()
    assert source[1] == 547 and data[0] == 13  # Relay-reply, to the relay's port
    assert data[1] == 0 and data[2:18] == link and data[18:34] == peer
    options = options_of(data, start=34)
    assert first(options, 18) == b"eth3"
    reply = first(options, 9)
    assert reply[0] == 2
    assert first(options_of(reply), 59).decode() == f"http://[{SERVER6}]:8080/boot.ipxe"
    assert s.log_lines("52:54:00:12:34:56 ipxe (arch 7): advertised")


def test_a_relays_unicast_is_answered_for_the_network_whose_address_it_was_sent_to(proxy6, link6, machine6):
    """Two boot networks on one link (two prefixes, one interface: ff02::1:2 joined once): a
    relay's Relay-forward is answered for the network whose address the relay sends to, its URL
    naming that address (as the IPv4 proxy takes a relay's request sent to ADDR); a multicast
    Solicit for the first network of the interface it came in on."""
    server_ns, client_ns = link6
    second = "2001:db8:7a::1"
    for namespace, argv in ((server_ns, ["ip", "-6", "addr", "add", f"{second}/64", "dev", "veth-s", "nodad"]),
                            (client_ns, ["ip", "-6", "route", "add", "2001:db8:7a::/64", "dev", "veth-c"])):
        r = namespace.run_inside(argv)
        assert r.returncode == 0, r.stderr
    s = proxy6("--proxy-dhcp6", second)
    relay = Machine6(client_ns, port=547)
    try:
        for n, server in enumerate((second, SERVER6)):
            link = socket.inet_pton(socket.AF_INET6, "2001:db8:79::1")
            peer = socket.inet_pton(socket.AF_INET6, f"fe80::5054:ff:fe12:345{n}")
            duid = b"\x00\x03\x00\x01" + bytes.fromhex(f"5254001234{n:02x}")  # a machine each (one answer per machine)
            inner = solicit(xid=0x100 + n).replace(option(1, b"\x00\x04" + UUID), option(1, duid))
            forward = bytes([12, 0]) + link + peer + option(9, inner)
            data, _ = relay.ask(forward, (server, 547))
            assert data is not None and data[0] == 13, s.log_text()
            reply = first(options_of(data, start=34), 9)
            assert first(options_of(reply), 59).decode() == f"tftp://[{server}]/ipxe.efi", (server, s.log_text())
    finally:
        relay.close()
    data, _ = machine6.ask(solicit(xid=0x200), multicast(client_ns))
    assert data is not None and first(options_of(data), 59).decode() == f"tftp://[{SERVER6}]/ipxe.efi", s.log_text()


def test_what_is_not_a_boot_clients_gets_silence_and_the_responder_answers_on(proxy6, link6, machine6):
    s = proxy6("--metrics", f"[{SERVER6}]:9100")
    _, client_ns = link6
    # The UEFI network stack's own Solicit (no vendor class), an unknown type, bytes that are not
    # a message, a Solicit without a client identifier, a Confirm.
    for packet in (solicit(vendor=None, arch=None), bytes([14, 0, 0, 1]), b"\x01\x00", solicit(client_id=False), solicit(kind=4)):
        data, _ = machine6.ask(packet, multicast(client_ns), timeout=0.5)
        assert data is None
    data, _ = machine6.ask(solicit(xid=0x010203), multicast(client_ns))
    assert data is not None and data[1:4] == b"\x01\x02\x03"
    metrics = client_ns.run_inside(["curl", "-sS", "-g", f"http://[{SERVER6}]:9100/metrics"]).stdout.decode()
    for reason, count in (("not_boot_client", 1), ("malformed", 3), ("not_for_proxy", 1)):
        assert f'stampede_boot_ignored_total{{protocol="dhcp6",reason="{reason}"}} {count}' in metrics, metrics
    assert 'stampede_boot_answers_total{protocol="dhcp6",selector="efi-x64",answer="offer"} 1' in metrics


@pytest.mark.parametrize("address,status,said", [
    ("fe80::1", 64, "not this server's global"),
    ("ff02::1:2", 64, "not this server's global"),
    ("10.0.0.1", 64, "not this server's global"),
    ("2001:db8:99::1", 65, "no interface of this host has this address"),
])
def test_bad_proxy_dhcp6_addresses_are_refused(root, address, status, said):
    r = run([str(BINARY), "-l", "-L", "-a", "127.0.0.1:0", "--proxy-dhcp6", address, str(root)], timeout=20)
    assert r.returncode == status, r.stderr
    assert said in r.stderr.decode()


HTTP_BOOT6 = """profile http6
# EDK2's UEFI HTTP Boot over IPv6: its Solicit with HTTPClient, the URL of the Advertise.
firmware uefi retry=4s tries=4 backoff=8
dhcp  http arch=16
http  GET ipxe.efi
"""


@pytest.mark.parametrize("derived", [False, True], ids=["proxy", "derived"])
def test_a_storm_boots_over_ipv6_from_its_first_dhcpv6_packet(proxy6, link6, root, tmp_path, derived):
    """`storm --dhcp` with an IPv6 address plays each firmware's DHCPv6 with its own DUID: EDK2's
    PXE Solicit, then its Request on [server]:4011 for the proxy offer (with --dhcp6-derived, its
    Request for the address on 547); iPXE's Information-request; EDK2's HTTP Boot Solicit; and the
    chain after it over TFTP and HTTP on IPv6, every byte compared."""
    for name, size in (("ipxe.efi", 300_000), ("boot.ipxe", 200), ("vmlinuz", 400_000), ("initrd.img", 600_000)):
        (root / name).write_bytes(os.urandom(size))
        (root / name).chmod(0o644)
    s = proxy6(*(["--dhcp6-derived"] if derived else []))
    _, client_ns = link6
    r = client_ns.run_inside([str(BINARY), "storm", f"[{SERVER6}]:69", "--profile", "uefi-ipxe", "--dhcp", CLIENT6,
                              "--http", f"[{SERVER6}]:8080", "--clients", "60", "--verify-root", str(root), "--json"], timeout=120)
    assert r.returncode == 0, (r.stderr, s.log_text()[-3000:])
    result = json.loads(r.stdout)
    assert result["ok"] == 60 and result["failed"] == 0, result
    stages = {stage["stage"]: stage for stage in result["stages"]}
    assert stages["uefi dhcp pxe arch=7"]["ok"] == 60 and stages["ipxe dhcp ipxe arch=7"]["ok"] == 60, stages
    assert 0 < stages["uefi dhcp pxe arch=7"]["p99_ms"] < 4000, stages
    # Each machine's Solicit advertised, then its Request answered (4011, or 547 for the address).
    assert s.log_lines(": solicit ", count=60) and s.log_lines(": request ", count=60), s.log_text()[-3000:]
    assert s.log_lines(": informationRequest ", count=60), s.log_text()[-3000:]

    profile = tmp_path / "http6.profile"
    profile.write_text(HTTP_BOOT6)
    r = client_ns.run_inside([str(BINARY), "storm", f"[{SERVER6}]:69", "--profile-file", str(profile), "--dhcp", CLIENT6,
                              "--http", f"[{SERVER6}]:8080", "--clients", "30", "--verify-root", str(root), "--json"], timeout=120)
    assert r.returncode == 0, (json.loads(r.stdout)["failure_examples"] if r.stdout else r.stderr, s.log_text()[-3000:])
    result = json.loads(r.stdout)
    assert result["ok"] == 30 and result["failed"] == 0, result
    assert s.log_lines(f'http-x64 (arch 16): advertised "http://[{SERVER6}]:8080/ipxe.efi"', count=30), s.log_text()[-3000:]


FLOOD6 = "profile solicit\nfirmware uefi retry=4s tries=4 backoff=8\ndhcp pxe arch=7\n"


def test_twenty_thousand_machines_solicits_within_a_second_are_all_answered_and_tftp_serves_on(proxy6, link6, root, tmp_path):
    """20,000 machines' Solicits within 1 s, each machine's Request on 4011 after its Advertise:
    every machine gets its boot file URL, and TFTP on IPv6 serves beside it."""
    s = proxy6()
    _, client_ns = link6
    profile = tmp_path / "solicit.profile"
    profile.write_text(FLOOD6)
    storm = subprocess.Popen([*client_ns.inside, str(BINARY), "storm", f"[{SERVER6}]:69", "--profile-file", str(profile), "--dhcp",
                              CLIENT6, "--clients", "20000", "--ramp", "1", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    got = client_ns.run_inside(["curl", "-sS", "-g", "--max-time", "10", f"tftp://[{SERVER6}]/ipxe.efi", "-o", "-"])
    out, err = storm.communicate(timeout=120)
    assert storm.returncode == 0, err
    result = json.loads(out)
    assert result["ok"] == 20000 and result["failed"] == 0, result
    assert got.returncode == 0 and got.stdout == (root / "ipxe.efi").read_bytes()
    assert s.process.poll() is None


def test_a_machines_ipv6_address_is_bound_to_it_so_its_script_is_its_records(proxy6, link6, machine6, tmp_path):
    """With --machines, the address a boot server Request comes from (OVMF's, a DUID-UUID: its
    record by UUID) and the derived address a Reply gives (a DUID-LL: its record by MAC) are that
    machine's: its iPXE script, fetched from that address over HTTP on IPv6, is its record's."""
    records = tmp_path / "machines"
    records.mkdir()
    (records / "by-uuid").write_text("uuid = 8a3c6b5e-1122-3344-5566-778899aabbcc\nkernel = linux/a\ncmdline = role=uuid\n")
    (records / "by-mac").write_text("mac = 52:54:00:aa:bb:07\nkernel = linux/b\ncmdline = role=mac\n")
    s = proxy6("--machines", str(records), "--unknown-machines", "boot", "--dhcp6-derived", "--metrics", f"[{SERVER6}]:9100")
    server_ns, client_ns = link6

    def script(source):
        r = client_ns.run_inside(["curl", "-sS", "-g", "--interface", source, f"http://[{SERVER6}]:8080/boot.ipxe"])
        assert r.returncode == 0, r.stderr
        return r.stdout.decode()

    assert "role=" not in script(CLIENT6)  # nobody's yet: the default
    # OVMF: its Solicit, then its Request to 4011 from its global address (CLIENT6).
    data, _ = machine6.ask(solicit(), multicast(client_ns))
    assert data is not None, s.log_text()
    boot = Machine6(client_ns, port=4011)
    try:
        request = bytes([3]) + bytes.fromhex("abcdef") + b"".join(
            option(code, value) for code, value in options_of(solicit()) if code != 3) + option(2, first(options_of(data), 2))
        reply, _ = boot.ask(request, (SERVER6, 4011))
        assert reply is not None and reply[0] == 7
    finally:
        boot.close()
    assert "kernel /linux/a role=uuid" in script(CLIENT6), script(CLIENT6)

    # A machine named by its DUID-LL: the address its Reply gives is its own.
    duid = b"\x00\x03\x00\x01" + bytes.fromhex("525400aabb07")
    asked = solicit(xid=0x070707, extra=b"").replace(option(1, b"\x00\x04" + UUID), option(1, duid))
    data, _ = machine6.ask(asked, multicast(client_ns))
    assert data is not None and data[0] == 2, s.log_text()
    server_id, ia = first(options_of(data), 2), first(options_of(data), 3)
    request = bytes([3]) + bytes.fromhex("070708") + b"".join(
        option(code, value) for code, value in options_of(asked) if code != 3) + option(2, server_id) + option(3, ia)
    reply, _ = machine6.ask(request, multicast(client_ns))
    assert reply is not None and reply[0] == 7, s.log_text()
    given = socket.inet_ntop(socket.AF_INET6, first(options_of(first(options_of(reply), 3), start=12), 5)[:16])
    assert given.startswith("2001:db8:78:"), given
    r = client_ns.run_inside(["ip", "-6", "addr", "add", f"{given}/128", "dev", "veth-c", "nodad"])
    assert r.returncode == 0, r.stderr
    assert "role=mac" in script(given), script(given)
    assert "role=uuid" in script(CLIENT6)
    # The rack's progress names the machine's IPv6 address (a request's source, without its port).
    view = client_ns.run_inside(["curl", "-sS", "-g", f"http://[{SERVER6}]:9100/machines"])
    rows = {row["mac"]: row for row in json.loads(view.stdout)["machines"]}
    assert rows["52:54:00:aa:bb:07"]["stage"] == "script" and rows["52:54:00:aa:bb:07"]["address"] == given, rows


def test_a_solicit_waits_for_the_machine_apis_answer_and_is_answered_when_it_comes(proxy6, link6, machine6, machine_api, tmp_path):
    """--machines-api over DHCPv6: a machine's first Solicit (named by its DUID-LL) waits for the
    API's answer, however slow (here half a second), and is answered when it comes; the API's
    404 leaves a machine to the directory (here: left alone)."""
    server_ns, client_ns = link6
    (tmp_path / "machines").mkdir()
    url, asked = machine_api(server_ns, {"52:54:00:aa:bb:07": {"kernel": "/assets/vmlinuz", "cmdline": "role=worker"}}, delay=0.5)
    s = proxy6("--machines", str(tmp_path / "machines"), "--machines-api", url, "--metrics", f"[{SERVER6}]:9100")

    def solicit_of(mac, xid):
        duid = b"\x00\x03\x00\x01" + bytes.fromhex(mac.replace(":", ""))
        return solicit(xid=xid).replace(option(1, b"\x00\x04" + UUID), option(1, duid))

    started = time.time()
    data, _ = machine6.ask(solicit_of("52:54:00:aa:bb:07", 0x070707), multicast(client_ns), timeout=3)
    assert data is not None and data[0] == 2, s.log_text()
    assert 0.4 < time.time() - started < 2.5, "answered before the API did, or not at its answer"
    assert first(options_of(data), 59) == f"tftp://[{SERVER6}]/ipxe.efi".encode()
    assert "GET /pixiecore/v1/boot/52:54:00:aa:bb:07?arch=7&stage=dhcp" in asked(), asked()  # a DUID-LL names no UUID
    data, _ = machine6.ask(solicit_of("52:54:00:aa:bb:08", 0x080808), multicast(client_ns), timeout=1.5)
    assert data is None
    assert s.log_lines("on veth-s: left alone: no machine record selects it"), s.log_text()
    metrics = client_ns.run_inside(["curl", "-sS", "-g", f"http://[{SERVER6}]:9100/metrics"]).stdout.decode()
    assert 'stampede_boot_ignored_total{protocol="dhcp6",reason="machine_api_asking"} 2' in metrics, metrics
