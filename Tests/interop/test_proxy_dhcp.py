"""The proxyDHCP responder (`--proxy-dhcp`), on a link of its own: a server namespace and a
client namespace joined by a veth pair, the server at 10.78.0.1, the machines sending from
10.78.0.57 (broadcasts to 67 from port 68, as firmware does). What each firmware is answered,
the boot server on 4011, a relay, silence where silence is due, bad packets, a flood, and a site
DHCP server on the same host. Firmware itself boots through it in test_firmware.py."""
import json
import os
import socket
import subprocess
import time

import pytest

import dhcpwire
from conftest import BACKENDS, BINARY, SERVER_BINARY, Server, free_tcp_port, run

from dhcpwire import CLIENT, MAC, SERVER, Machine


@pytest.fixture(params=BACKENDS)
def proxy(request, boot_link, root):
    """start(*flags) -> a Server on the server namespace, TFTP on 10.78.0.1 and --proxy-dhcp there."""
    server_ns, _ = boot_link
    started = []

    def start(*flags, http=True):
        extra = ["--http", f"{SERVER}:8080"] if http else []
        s = Server(root, ["--proxy-dhcp", SERVER, *extra, *flags], host=SERVER, backend=request.param, prefix=server_ns.inside)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


@pytest.fixture
def machine(boot_link):
    m = Machine(boot_link[1])
    yield m
    m.close()


def test_uefi_pxe_is_offered_ipxe_with_the_bypass(proxy, machine):
    s = proxy()
    reply = machine.ask(dhcpwire.message(MAC, arch=7))
    assert reply, s.log_text()
    o = reply["options"]
    assert reply["op"] == 2 and reply["xid"] == 0x1234ABCD and reply["chaddr"] == MAC
    assert o[53] == bytes([dhcpwire.OFFER]) and reply["yiaddr"] == "0.0.0.0", reply
    assert reply["siaddr"] == SERVER and o[54] == socket.inet_aton(SERVER)
    assert o[60] == b"PXEClient" and o[97] == dhcpwire.UUID
    # PXE discovery control 8: boot the file named here (the bypass).
    assert o[43] == bytes([6, 1, 8, 255])
    assert reply["file"] == "ipxe.efi" and reply["size"] >= 300
    assert s.log_lines("DHCP DISCOVER 52:54:00:12:34:56 on veth-s: efi-x64 (arch 7")


@pytest.mark.parametrize("arch, vendor, extra, expected", [
    (0, None, b"", "undionly.kpxe"),
    (7, None, dhcpwire.option(77, "iPXE") + dhcpwire.option(175, bytes([1, 1, 1])), f"http://{SERVER}:8080/boot.ipxe"),
    (0, None, dhcpwire.option(77, "iPXE"), f"http://{SERVER}:8080/boot.ipxe"),
    (16, "HTTPClient:Arch:00016:UNDI:003001", b"", f"http://{SERVER}:8080/ipxe.efi"),
    (None, "PXEClient:Arch:00011:UNDI:003000", b"", "arm/ipxe.efi"),
])
def test_each_firmware_gets_its_boot_file(proxy, machine, arch, vendor, extra, expected):
    s = proxy("--boot-file", "efi-arm64=arm/ipxe.efi")
    reply = machine.ask(dhcpwire.message(MAC, arch=arch, vendor=vendor, extra=extra))
    assert reply, s.log_text()
    assert reply["file"] == expected and reply["options"][67] == expected.encode()
    if vendor and vendor.startswith("HTTPClient"):
        assert reply["options"][60] == b"HTTPClient" and 43 not in reply["options"]


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


def test_a_relayed_request_goes_back_through_the_relay(proxy, boot_link):
    s = proxy()
    relay = Machine(boot_link[1], port=67, bind=CLIENT)
    try:
        reply = relay.ask(dhcpwire.message(MAC, giaddr=CLIENT, hops=1), to=(SERVER, 67))
    finally:
        relay.close()
    assert reply and reply["giaddr"] == CLIENT and reply["file"] == "ipxe.efi", s.log_text()


def test_an_architecture_nobody_boots_is_said_and_not_answered(proxy, machine):
    s = proxy()
    assert machine.ask(dhcpwire.message(MAC, arch=10), timeout=1) is None
    assert s.log_lines("architecture 10: no --boot-file selector names it")
    assert machine.ask(dhcpwire.message(MAC, arch=11), timeout=1) is None
    assert s.log_lines("no boot file for efi-arm64 (--boot-file efi-arm64=NAME)")


def test_bad_packets_are_ignored_and_the_proxy_still_answers(proxy, machine):
    s = proxy()
    good = dhcpwire.message(MAC)
    bad = [
        b"\x01" * 64,                                         # shorter than the header
        good[:239],                                           # no whole cookie
        good[:240] + b"\x35\x01",                             # an option cut short
        good[:240] + b"\x34\x01\x09" + good[240:],            # overload naming no field
        good[:-1],                                            # no END: taken, and answered
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
    assert s.process.poll() is None


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
    reply = machine.ask(dhcpwire.message(MAC, arch=7, extra=dhcpwire.option(77, "iPXE") + dhcpwire.option(175, bytes([1, 1, 1]))))
    assert reply and reply["file"] == f"http://{SERVER}:8080/machines/52-54-00-12-34-56.ipxe", reply
    client = boot_link[1]
    for name, said in (("machines/52-54-00-12-34-56.ipxe", "own"), ("machines/52-54-00-99-99-99.ipxe", "default")):
        for url in (f"http://{SERVER}:8080/{name}", f"tftp://{SERVER}:{s.port}/{name}"):
            r = client.run_inside(["curl", "-s", url], timeout=30)
            assert r.returncode == 0 and f"echo {said}" in r.stdout.decode(), (url, r.stdout, r.stderr)


def test_a_dhcp_server_that_shares_the_port_hears_the_broadcasts_too(proxy, machine, boot_link):
    with boot_link[0].sockets():
        site = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    site.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    site.bind(("0.0.0.0", 67))
    try:
        s = proxy()
        reply = machine.ask(dhcpwire.message(MAC, xid=5))
        assert reply and reply["xid"] == 5, s.log_text()
        site.settimeout(2)
        data, _ = site.recvfrom(4096)
        assert dhcpwire.parse(data)["xid"] == 5
    finally:
        site.close()


def test_a_dhcp_server_that_keeps_the_port_is_named_at_start(boot_link, root):
    server_ns, _ = boot_link
    dnsmasq = subprocess.Popen([*server_ns.inside, "dnsmasq", "-k", "--port=0", "--dhcp-range=10.78.0.100,10.78.0.150,1h",
                                "--pid-file=", "--user=root", "--log-facility=-", f"--dhcp-leasefile={root.parent / 'leases'}"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 10
        while ":0043 " not in server_ns.run_inside(["cat", "/proc/net/udp"]).stdout.decode() and time.time() < deadline:
            time.sleep(0.05)
        r = server_ns.run_inside([str(SERVER_BINARY), "-L", "-a", f"{SERVER}:0", "--proxy-dhcp", SERVER, str(root)], timeout=20)
        assert r.returncode == 1, r
        assert b"UDP port 67 on veth-s is held by dnsmasq (pid" in r.stderr, r.stderr
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
    assert 'stampede_boot_answers_total{selector="bios",answer="offer"} 1' in text, text
    assert 'stampede_boot_ignored_total{reason="not_boot_client"} 1' in text


@pytest.mark.parametrize("flags, status, said", [
    (["--proxy-dhcp", "eth0"], 64, "--proxy-dhcp eth0: not this server's IPv4 address"),
    (["--proxy-dhcp", "10.0.0.1", "--boot-file", "http-x64=ipxe.efi"], 64, "UEFI HTTP Boot loads a URL"),
    (["--proxy-dhcp", "10.0.0.1", "--boot-file", "bios=http://10.0.0.1/x"], 64, "a PXE firmware loads a file over TFTP"),
    (["--proxy-dhcp", "10.0.0.1", "--boot-file", "arm=ipxe.efi"], 64, "not SELECTOR=NAME"),
    (["--proxy-dhcp", "192.0.2.77"], 65, "--proxy-dhcp 192.0.2.77: no interface of this host has this address"),
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


def test_storm_refuses_dhcp_without_a_profile_that_has_it(root):
    for args, said in ((["f", "--dhcp", "10.0.0.5"], "--dhcp needs a profile"),
                       (["--profile", "grub", "--dhcp", "10.0.0.5"], "has no dhcp stage"),
                       (["--profile", "uefi", "--dhcp", "fe80::1"], "IPv4 address")):
        r = run([str(BINARY), "storm", "127.0.0.1:69", *args])
        assert r.returncode == 64 and said in r.stderr.decode(errors="replace"), (args, r.stderr)
