"""Real firmware boots over IPv6 through Stampede's DHCPv6 boot responder (`--proxy-dhcp6`), on
an IPv6-only link: QEMU's OVMF on a tap device on a bridge, the site's own servers in a namespace
of their own on the same bridge (Kea 2.2 giving addresses by DHCPv6, radvd advertising the prefix
with the M flag), Stampede answering the firmware's Solicit with a URL and no address, as EDK2 takes
a proxy offer ("ProxyBinl"), and its Request on [server]:4011 with the same URL. No IPv4 on the
link, and OVMF's IPv4 PXE off (fw_cfg): the boot begins at ">>Start PXE over IPv6". UEFI HTTP
Boot over IPv6 the same way. And with no DHCPv6 server at all (--dhcp6-derived): OVMF, then iPXE,
then Linux, over IPv6 alone. Beside it, the peer that does this today: dnsmasq 2.93 (from the
Debian unstable tree) giving the same OVMF its address and boot-file URL, and as the site's
server beside Stampede's responder."""
import json
import os
import re
import shutil
import subprocess
import time

import pytest

from conftest import BINARY
from parity import SID, in_sid
from test_firmware import IPXE_EFI, MAC, OVMF, install_linux, power_on, stop

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="firmware boots need root (a network namespace, a tap device): "
                                                          "NOT TESTED — run `make test` as root")

SERVER6 = "2001:db8:77::1"
SITE6 = "2001:db8:77::2"
PREFIX = "2001:db8:77::/64"


DERIVED = "derived"
# The site's DHCPv6 server is dnsmasq 2.93 (from the unstable tree) instead of Kea: giving
# addresses alone, or addresses and the boot-file URL (the peer's own way of booting).
DNSMASQ = "dnsmasq"
DNSMASQ_BOOT = "dnsmasq-boot"
# Kea as the site's server, and answering iPXE's user class with its script's URL (option 59).
KEA_IPXE = "kea-ipxe"


@pytest.fixture
def lab6(tmp_path, request):
    """A namespace with a bridge (br0, SERVER6) holding tap0 and a veth to the site's namespace
    (vsite, SITE6), where Kea hands out addresses from the prefix and radvd advertises it (M and O
    flags: addresses and options by DHCPv6). A root with ipxe.efi. With the parameter DERIVED,
    the site has no DHCPv6 server: radvd alone (Stampede gives the addresses, --dhcp6-derived);
    with DNSMASQ, dnsmasq 2.93 gives the addresses instead of Kea; with DNSMASQ_BOOT, addresses and
    the boot-file URL (tftp://[SERVER6]/ipxe.efi); with KEA_IPXE, Kea answers iPXE's user class
    with the URL of Stampede's boot.ipxe as well."""
    param = getattr(request, "param", None)
    kea = param in (None, KEA_IPXE)
    for needed in (OVMF, IPXE_EFI):
        assert needed.exists(), f"{needed} missing: `make deps` installs ovmf and ipxe"
    name, site = f"stfw6{os.getpid()}", f"stsite6{os.getpid()}"
    for namespace in (name, site):
        subprocess.run(["ip", "netns", "add", namespace], check=True)
        # Addresses usable at once: no duplicate address detection on a link made for the test.
        subprocess.run(["ip", "netns", "exec", namespace, "sh", "-c",
                        "echo 0 > /proc/sys/net/ipv6/conf/default/accept_dad; echo 0 > /proc/sys/net/ipv6/conf/all/accept_dad"], check=True)
    processes = []

    def inside(argv, **kw):
        return subprocess.Popen(["ip", "netns", "exec", name, *map(str, argv)], **kw)

    try:
        for command in (["ip", "link", "set", "lo", "up"], ["ip", "link", "add", "br0", "type", "bridge"],
                        ["ip", "tuntap", "add", "dev", "tap0", "mode", "tap"], ["ip", "link", "set", "tap0", "master", "br0"],
                        ["ip", "link", "add", "vbr", "type", "veth", "peer", "name", "vsite", "netns", site],
                        ["ip", "link", "set", "vbr", "master", "br0"], ["ip", "-6", "addr", "add", f"{SERVER6}/64", "dev", "br0", "nodad"],
                        ["ip", "link", "set", "br0", "up"], ["ip", "link", "set", "tap0", "up"], ["ip", "link", "set", "vbr", "up"]):
            subprocess.run(["ip", "netns", "exec", name, *command], check=True)
        for command in (["ip", "link", "set", "lo", "up"], ["ip", "-6", "addr", "add", f"{SITE6}/64", "dev", "vsite", "nodad"],
                        ["ip", "link", "set", "vsite", "up"], ["sh", "-c", "echo 1 > /proc/sys/net/ipv6/conf/all/forwarding"]):
            subprocess.run(["ip", "netns", "exec", site, *command], check=True)
        (tmp_path / "radvd.conf").write_text(f"""interface vsite {{
    AdvSendAdvert on;
    MinRtrAdvInterval 3;
    MaxRtrAdvInterval 10;
    AdvManagedFlag on;
    AdvOtherConfigFlag on;
    prefix {PREFIX} {{ AdvOnLink on; AdvAutonomous off; }};
}};
""")
        (tmp_path / "kea").mkdir()
        (tmp_path / "kea-dhcp6.json").write_text(json.dumps({"Dhcp6": {
            "interfaces-config": {"interfaces": ["vsite"]},
            "server-id": {"type": "LL", "persist": False},
            "lease-database": {"type": "memfile", "persist": False},
            "preferred-lifetime": 3000, "valid-lifetime": 4000, "renew-timer": 1000, "rebind-timer": 2000,
            "subnet6": [{"subnet": PREFIX, "interface": "vsite", "pools": [{"pool": "2001:db8:77::100-2001:db8:77::1ff"}]}],
            # iPXE's user class (option 15: a 2-byte length, then "iPXE"), as the docs tell a site to.
            **({"client-classes": [{"name": "ipxe", "test": "substring(option[15].hex,2,4) == 'iPXE'", "option-data": [
                {"name": "bootfile-url", "data": f"http://[{SERVER6}]:8080/boot.ipxe", "always-send": True}]}]}
               if param == KEA_IPXE else {}),
            "loggers": [{"name": "kea-dhcp6", "output_options": [{"output": str(tmp_path / "kea.log")}], "severity": "INFO"}],
        }}))
        environment = {**os.environ, "KEA_PIDFILE_DIR": str(tmp_path / "kea"), "KEA_LOCKFILE_DIR": str(tmp_path / "kea")}
        site_log = open(tmp_path / "site.log", "w")
        # dnsmasq as its documentation has it for a range made from the interface's prefix.
        dnsmasq = ["/usr/sbin/dnsmasq", "-k", "--port=0", "--interface=vsite", "--bind-interfaces", "--leasefile-ro",
                   "--dhcp-range=::100,::1ff,constructor:vsite,64,1h", "--log-dhcp", "--user=root", "--pid-file=", "--log-facility=-"]
        if param == DNSMASQ_BOOT:
            dnsmasq.append(f"--dhcp-option=option6:bootfile-url,tftp://[{SERVER6}]/ipxe.efi")
        for argv in [["radvd", "-n", "-C", tmp_path / "radvd.conf", "-p", tmp_path / "radvd.pid", "-m", "stderr"]] \
                + ([["kea-dhcp6", "-c", tmp_path / "kea-dhcp6.json"]] if kea else []) \
                + ([in_sid(dnsmasq, tmp_path)] if param in (DNSMASQ, DNSMASQ_BOOT) else []):
            processes.append(subprocess.Popen(["ip", "netns", "exec", site, *map(str, argv)], stdout=site_log, stderr=subprocess.STDOUT,
                                              env=environment))
        root = tmp_path / "tftp"
        root.mkdir()
        shutil.copy(IPXE_EFI, root / "ipxe.efi")
        for f in root.iterdir():
            f.chmod(0o644)
        root.chmod(0o755)
        yield inside, root, tmp_path, processes
    finally:
        stop(processes)
        for namespace in (name, site):
            subprocess.run(["ip", "netns", "delete", namespace])


NO_IPV4_PXE = ["-fw_cfg", "name=opt/org.tianocore/IPv4PXESupport,string=n"]
NO_PXE = NO_IPV4_PXE + ["-fw_cfg", "name=opt/org.tianocore/IPv6PXESupport,string=n"]


def serve6(lab6, *flags, responder=True):
    """Stampede on [SERVER6]:69 with --proxy-dhcp6 SERVER6 (unless not `responder`: TFTP alone)
    and `flags`, once it answers: (its process, its log's path)."""
    inside, root, tmp, processes = lab6
    log_path = tmp / "stampede.log"
    server = inside([BINARY, "-l", "-L", "-a", f"[{SERVER6}]:69", "-v", *(["--proxy-dhcp6", SERVER6] if responder else []), *flags, root],
                    stdout=open(log_path, "w"), stderr=subprocess.STDOUT)
    processes.append(server)
    ready = "answering network-boot DHCPv6" if responder else "serving"
    deadline = time.time() + 10
    while ready not in log_path.read_text() and time.time() < deadline:
        time.sleep(0.05)
    assert ready in log_path.read_text(), log_path.read_text()
    return server, log_path


def boot_ovmf(lab6, server, log_path, fw_cfg, booted, seconds):
    """OVMF powered on with `fw_cfg`, until `booted(server log, console)`: (the log, the console)."""
    inside, root, tmp, processes = lab6
    qemu, console = power_on(lab6, ["-bios", OVMF, "-device", f"virtio-net-pci,netdev=n0,mac={MAC},romfile=", "-boot", "n", *fw_cfg])
    started = time.time()
    while time.time() - started < seconds:
        text = log_path.read_text(errors="replace")
        screen = console.read_text(errors="replace") if console.exists() else ""
        if booted(text, screen):
            return text, screen
        assert server.poll() is None, text
        assert qemu.poll() is None, (tmp / "qemu-tap0.log").read_text()[-2000:]
        time.sleep(0.5)
    kea = tmp / "kea.log"
    pytest.fail(f"no boot over IPv6 in {seconds} s.\nserver:\n{text[-4000:]}\nconsole:\n{screen[-3000:]}\n"
                f"site:\n{(tmp / 'site.log').read_text()[-2000:]}\nkea:\n{kea.read_text()[-2000:] if kea.exists() else ''}")


def test_ovmfs_pxe_over_ipv6_loads_its_boot_file_through_the_dhcpv6_responder(lab6):
    """OVMF takes Kea's address and Stampede's URL-only Advertise (a proxy offer), asks
    [server]:4011, and loads ipxe.efi over TFTP on IPv6 (EDK2's size probe, then the file, with
    blksize 1228: the IPv6 minimum MTU less the headers): iPXE starts (its banner on the console)."""
    server, log_path = serve6(lab6)
    text, screen = boot_ovmf(lab6, server, log_path, NO_IPV4_PXE, seconds=120, booted=lambda text, screen: "iPXE" in screen and any(
        '"ipxe.efi" octet' in line and line.endswith(": ok") for line in text.splitlines()))
    assert ">>Start PXE over IPv6" in screen
    # The Advertise to the Solicit, then the boot server's Reply to the Request on 4011.
    assert "solicit" in text and "efi-x64 (arch 7): advertised \"tftp://[2001:db8:77::1]/ipxe.efi\"" in text, text
    assert "request" in text and "replied \"tftp://[2001:db8:77::1]/ipxe.efi\"" in text, text
    # Over TFTP from an address Kea gave (its pool: ::100 to ::1ff).
    whole = rf'RRQ \[2001:db8:77::1[0-9a-f]{{2}}\]:\d+ "ipxe\.efi" octet .*bytes={IPXE_EFI.stat().st_size} .*: ok$'
    assert any(re.search(whole, line) for line in text.splitlines()), text


def test_ovmfs_http_boot_over_ipv6_loads_its_image_from_the_url_the_responder_gives(lab6):
    """UEFI HTTP Boot over IPv6 (PXE off): its Solicit says HTTPClient, the Advertise holds
    --http's URL, and OVMF loads ipxe.efi from it: iPXE starts."""
    server, log_path = serve6(lab6, "--http", f"[{SERVER6}]:8080")
    size = IPXE_EFI.stat().st_size
    text, screen = boot_ovmf(lab6, server, log_path, NO_PXE, seconds=150, booted=lambda text, screen: "iPXE" in screen and any(
        '"ipxe.efi" http 200' in line and f"bytes={size}" in line for line in text.splitlines()))
    assert ">>Start HTTP Boot over IPv6" in screen
    assert f'http-x64 (arch 16): advertised "http://[{SERVER6}]:8080/ipxe.efi"' in text, text


LINUX_SCRIPT6 = f"""#!ipxe
echo stampede: boot.ipxe over IPv6 at ${{net0/ip6}}
kernel http://[{SERVER6}]:8080/linux/vmlinuz initrd=initrd.img console=ttyS0 panic=-1 quiet || goto failed
initrd http://[{SERVER6}]:8080/linux/initrd.img || goto failed
boot || goto failed
:failed
echo stampede: FAILED
sleep 600
"""


@pytest.mark.parametrize("lab6", [DERIVED], indirect=True)
def test_with_derived_addresses_ovmf_and_then_ipxe_boot_linux_over_ipv6_with_no_dhcpv6_server(lab6):
    """No DHCPv6 server on the link (radvd alone, M flag): --dhcp6-derived gives OVMF an address
    in the same Advertise as the URL (EDK2's "DhcpBinl" offer), its boot server Request on 4011
    gets the URL, ipxe.efi comes over TFTP from the derived address; iPXE's own DHCPv6 (user
    class iPXE) gets an address and its script's URL, and the script's kernel and initrd come over
    HTTP on IPv6: the initrd's init runs."""
    inside, root, tmp, processes = lab6
    (root / "boot.ipxe").write_text(LINUX_SCRIPT6)
    (root / "boot.ipxe").chmod(0o644)
    install_linux(root)
    server, log_path = serve6(lab6, "--dhcp6-derived", "--http", f"[{SERVER6}]:8080")
    text, screen = boot_ovmf(lab6, server, log_path, NO_IPV4_PXE, seconds=180,
                             booted=lambda text, screen: "stampede-initrd: BOOTED" in screen)
    assert re.search(r"stampede-initrd: init runs, cmdline: .*initrd=initrd.img console=ttyS0", screen), screen[-2000:]
    assert "stampede: boot.ipxe over IPv6 at 2001:db8:77:" in screen, screen[-3000:]
    # The UEFI PXE: the Advertise, the boot server's Reply; then the file over TFTP from the
    # address derived for it (in the /64, not Kea's: there is none).
    assert 'efi-x64 (arch 7): advertised "tftp://[2001:db8:77::1]/ipxe.efi"' in text, text
    assert re.search(r'request 52:54:00:5e:a7:01 efi-x64 \(arch 7\): replied "tftp://\[2001:db8:77::1\]/ipxe\.efi" to \[[0-9a-f:]+\]:4011', text), text
    assert re.search(rf'RRQ \[2001:db8:77:[0-9a-f:]+\]:\d+ "ipxe\.efi" octet .*bytes={IPXE_EFI.stat().st_size} .*: ok$', text, re.M), text
    # iPXE: its Solicit and Request answered with the script's URL, the files over HTTP.
    # iPXE names itself by a nil DUID-UUID here: the machine is known by its link-local address's EUI-64.
    assert f'solicit {MAC} ipxe (arch 7): advertised "http://[2001:db8:77::1]:8080/boot.ipxe"' in text, text
    for name in ("boot.ipxe", "linux/vmlinuz", "linux/initrd.img"):
        assert any(f'"{name}" http 200' in line and f"bytes={(root / name).stat().st_size}" in line for line in text.splitlines()), (name, text)


@pytest.mark.parametrize("lab6", [DNSMASQ_BOOT], indirect=True)
def test_the_peer_dnsmasq_boots_the_same_ovmf_over_ipv6_with_an_address_and_its_url(lab6):
    """The peer as it does this today: dnsmasq 2.93 gives OVMF's PXE over IPv6 an address from
    its range (constructor:) and the boot-file URL in one Advertise; OVMF loads ipxe.efi over
    TFTP from Stampede (serving files only): iPXE starts. The same firmware, the same lab."""
    inside, root, tmp, processes = lab6
    server, log_path = serve6(lab6, responder=False)
    text, screen = boot_ovmf(lab6, server, log_path, NO_IPV4_PXE, seconds=120, booted=lambda text, screen: "iPXE" in screen and any(
        '"ipxe.efi" octet' in line and line.endswith(": ok") for line in text.splitlines()))
    assert ">>Start PXE over IPv6" in screen
    whole = rf'RRQ \[2001:db8:77::1[0-9a-f]{{2}}\]:\d+ "ipxe\.efi" octet .*bytes={IPXE_EFI.stat().st_size} .*: ok$'
    assert any(re.search(whole, line) for line in text.splitlines()), text
    site = (tmp / "site.log").read_text()
    assert re.search(r"DHCPREPLY\(vsite\) 2001:db8:77::1[0-9a-f]{2} ", site), site[-3000:]


@pytest.mark.parametrize("lab6", [DNSMASQ], indirect=True)
def test_beside_dnsmasq_as_the_sites_server_ovmf_takes_its_address_and_the_responders_url(lab6):
    """dnsmasq 2.93 as the site's DHCPv6 server (addresses alone, a range made from the prefix)
    instead of Kea: OVMF takes dnsmasq's address and Stampede's URL-only Advertise, asks 4011,
    and its PXE driver's own IA gets a second address from dnsmasq (a second IAID, answered);
    ipxe.efi comes over TFTP from that address: iPXE starts."""
    inside, root, tmp, processes = lab6
    server, log_path = serve6(lab6)
    text, screen = boot_ovmf(lab6, server, log_path, NO_IPV4_PXE, seconds=120, booted=lambda text, screen: "iPXE" in screen and any(
        '"ipxe.efi" octet' in line and line.endswith(": ok") for line in text.splitlines()))
    assert ">>Start PXE over IPv6" in screen
    assert "efi-x64 (arch 7): advertised \"tftp://[2001:db8:77::1]/ipxe.efi\"" in text, text
    assert re.search(r'replied "tftp://\[2001:db8:77::1\]/ipxe\.efi" to \[2001:db8:77::1[0-9a-f]{2}\]:4011', text), text
    whole = rf'RRQ \[2001:db8:77::1[0-9a-f]{{2}}\]:\d+ "ipxe\.efi" octet .*bytes={IPXE_EFI.stat().st_size} .*: ok$'
    assert any(re.search(whole, line) for line in text.splitlines()), text
    site = (tmp / "site.log").read_text()
    assert len(set(re.findall(r"DHCPREPLY\(vsite\) (2001:db8:77::1[0-9a-f]{2}) ", site))) >= 1, site[-3000:]
    assert "bootfile-url" not in re.sub(r"requested options:.*", "", site), "dnsmasq gave no URL: Stampede's is the one"


@pytest.mark.parametrize("lab6", [KEA_IPXE], indirect=True)
def test_behind_the_sites_kea_ipxe_takes_its_scripts_url_from_kea_and_boots_linux_over_ipv6(lab6):
    """The M flag and a site server giving addresses: iPXE passes over Stampede's address-less
    Advertise and takes its options from the server it asked for its address, so the site's Kea
    answers iPXE's user class with the URL of Stampede's script (as docs/proxy-dhcp.md says to):
    OVMF boots ipxe.efi through --proxy-dhcp6, iPXE gets Kea's address and URL, and the script's
    kernel and initrd come over HTTP on IPv6 from Stampede: the initrd's init runs."""
    inside, root, tmp, processes = lab6
    (root / "boot.ipxe").write_text(LINUX_SCRIPT6)
    (root / "boot.ipxe").chmod(0o644)
    install_linux(root)
    server, log_path = serve6(lab6, "--http", f"[{SERVER6}]:8080")
    text, screen = boot_ovmf(lab6, server, log_path, NO_IPV4_PXE, seconds=180,
                             booted=lambda text, screen: "stampede-initrd: BOOTED" in screen)
    assert re.search(r"stampede-initrd: init runs, cmdline: .*initrd=initrd.img console=ttyS0", screen), screen[-2000:]
    assert "stampede: boot.ipxe over IPv6 at 2001:db8:77::1" in screen, screen[-3000:]
    assert 'efi-x64 (arch 7): advertised "tftp://[2001:db8:77::1]/ipxe.efi"' in text, text
    for name in ("boot.ipxe", "linux/vmlinuz", "linux/initrd.img"):
        assert any(f'"{name}" http 200' in line and f"bytes={(root / name).stat().st_size}" in line for line in text.splitlines()), (name, text)
