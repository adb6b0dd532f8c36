"""Real firmware boots from Stampede: QEMU (software emulation) on a tap device in a private
network namespace, every file from Stampede.

- A site whose DHCP server names the boot files (dnsmasq, its own TFTP off): SeaBIOS with the
  NIC's iPXE ROM reads boot.ipxe over TFTP and the marker.
- A site whose DHCP server gives addresses and nothing else (dnsmasq in a namespace of its own on
  the same bridge), Stampede answering as a proxyDHCP server (--proxy-dhcp): OVMF's own PXE (EDK2's
  TFTP client: the size probe, then the file; the NIC's iPXE ROM turned off so that EDK2 speaks)
  loads ipxe.efi, iPXE's own DHCP gets the script's URL, and the script, Debian's kernel and an
  initramfs come over HTTP: the kernel runs the initramfs's init, which says so on the serial
  console. The same for SeaBIOS's iPXE ROM, for OVMF's UEFI HTTP Boot (a URL in the offer), and,
  side by side, for OVMF's PXE through dnsmasq 2.93's proxy mode, the peer.
- OVMF with Secure Boot enforced through shim, GRUB and Debian's signed kernel; iPXE 2.0 reading
  autoexec.ipxe beside itself. ARM64 UEFI: test_firmware_arm64.py.

The marker, named after the machine's MAC by iPXE itself, read to its last byte, proves the boot
(and the console, kept in the test's directory, says how far it got when it did not). Needs root
(namespaces, tap devices); skips loudly otherwise."""
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import BINARY, REPO
from tlscerts import Certificates

OVMF = Path("/usr/share/ovmf/OVMF.fd")
IPXE_EFI = Path("/usr/lib/ipxe/ipxe.efi")
MAC = "52:54:00:5e:a7:01"
MARKER = "marker-" + MAC.replace(":", "-") + ".txt"
SERVER_IP = "10.77.0.1"
HTTP_PORT = 8080
HTTPS_PORT = 8443
# `make boot-kernel`: Debian's kernel, and the static init of the initramfs the test packs.
KERNEL = REPO / ".build/boot-kernel/vmlinuz"
INIT = REPO / ".build/boot-kernel/init"
LINUX_SCRIPT = f"""#!ipxe
echo stampede: linux.ipxe over HTTP from ${{next-server}}
kernel http://{SERVER_IP}:{HTTP_PORT}/linux/vmlinuz initrd=initrd.img console=ttyS0 panic=-1 quiet || goto failed
initrd http://{SERVER_IP}:{HTTP_PORT}/linux/initrd.img || goto failed
boot || goto failed
:failed
echo stampede: FAILED
sleep 600
"""
SCRIPT = """#!ipxe
echo stampede: boot.ipxe from ${next-server} on ${net0/mac}
imgfetch marker-${net0/mac:hexhyp}.txt || goto failed
echo stampede: BOOTED
:wait
sleep 60
goto wait
:failed
echo stampede: FAILED
goto wait
"""

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="firmware boots need root (a network namespace, a tap device): "
                                                          "NOT TESTED — run `make test` as root")


PROXY = "proxy"

# Secure Boot's signed chain, from Debian unstable (`make secure-boot`): shim, signed by Microsoft
# and holding Debian's CA, and GRUB's network image signed by Debian, which shim loads as
# grubx64.efi from its own directory. OVMF with Secure Boot on and Microsoft's keys enrolled.
SECURE_BOOT = REPO / ".build/secure-boot"
OVMF_SECURE = Path("/usr/share/OVMF/OVMF_CODE_4M.secboot.fd")
OVMF_MS_VARS = Path("/usr/share/OVMF/OVMF_VARS_4M.ms.fd")

# From Debian unstable (`make unstable-boot`): iPXE 2.0 (ipxe-amd64.efi, ipxe-arm64.efi), Debian's
# arm64 kernel (vmlinuz-arm64) and a static busybox for its initramfs (busybox-arm64).
UNSTABLE_BOOT = REPO / ".build/unstable-boot"


@pytest.fixture
def lab(tmp_path, request):
    """A namespace with tap0 at 10.77.0.1/24, dnsmasq answering DHCP on it (TFTP off), and a root
    with ipxe.efi, boot.ipxe and the marker. The fixture's parameter, if a test gives one, is what
    DHCP hands out instead of the default boot files: iPXE gets boot.ipxe, the UEFI PXE ipxe.efi.

    With the parameter PROXY, the link is a site's: the tap is on a bridge at 10.77.0.1 (where
    Stampede answers as a proxyDHCP server, `--proxy-dhcp`), and dnsmasq runs in a namespace of
    its own on the same bridge, at 10.77.0.2, handing out addresses and nothing else."""
    proxy = getattr(request, "param", None) == PROXY
    boot_options = [] if proxy else (getattr(request, "param", None) or [f"--dhcp-boot=tag:ipxe,boot.ipxe,,{SERVER_IP}",
                                                                        f"--dhcp-boot=tag:!ipxe,tag:efi,ipxe.efi,,{SERVER_IP}"])
    for needed in (OVMF, IPXE_EFI):
        assert needed.exists(), f"{needed} missing: `make deps` installs ovmf and ipxe"
    name = f"stfw{os.getpid()}"
    site = f"stsite{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    if proxy:
        subprocess.run(["ip", "netns", "add", site], check=True)
    processes = []

    def inside(argv, **kw):
        return subprocess.Popen(["ip", "netns", "exec", name, *map(str, argv)], **kw)

    try:
        if proxy:
            commands = [["ip", "link", "set", "lo", "up"], ["ip", "link", "add", "br0", "type", "bridge"],
                        ["ip", "tuntap", "add", "dev", "tap0", "mode", "tap"], ["ip", "link", "set", "tap0", "master", "br0"],
                        ["ip", "link", "add", "vbr", "type", "veth", "peer", "name", "vsite", "netns", site],
                        ["ip", "link", "set", "vbr", "master", "br0"], ["ip", "addr", "add", f"{SERVER_IP}/24", "dev", "br0"],
                        ["ip", "link", "set", "br0", "up"], ["ip", "link", "set", "tap0", "up"], ["ip", "link", "set", "vbr", "up"]]
        else:
            commands = [["ip", "link", "set", "lo", "up"], ["ip", "tuntap", "add", "dev", "tap0", "mode", "tap"],
                        ["ip", "addr", "add", f"{SERVER_IP}/24", "dev", "tap0"], ["ip", "link", "set", "tap0", "up"]]
        for command in commands:
            subprocess.run(["ip", "netns", "exec", name, *command], check=True)
        if proxy:
            for command in (["ip", "link", "set", "lo", "up"], ["ip", "addr", "add", "10.77.0.2/24", "dev", "vsite"],
                            ["ip", "link", "set", "vsite", "up"]):
                subprocess.run(["ip", "netns", "exec", site, *command], check=True)
        root = tmp_path / "tftp"
        root.mkdir()
        shutil.copy(IPXE_EFI, root / "ipxe.efi")
        (root / "boot.ipxe").write_text(SCRIPT)
        (root / MARKER).write_bytes(os.urandom(100_000))
        for f in root.iterdir():
            f.chmod(0o644)
        root.chmod(0o755)
        # iPXE says who it is with DHCP option 175: it gets the script; the UEFI PXE (arch 7) gets iPXE.
        dhcp_log = open(tmp_path / "dnsmasq.log", "w")
        where = ["ip", "netns", "exec", site] if proxy else ["ip", "netns", "exec", name]
        interface = "vsite" if proxy else "tap0"
        matches = [] if proxy else ["--dhcp-match=set:ipxe,175", "--dhcp-vendorclass=set:efi,PXEClient:Arch:00007"]
        processes.append(subprocess.Popen([*where, "dnsmasq", "-k", "--port=0", f"--interface={interface}", "--bind-interfaces",
                                           "--dhcp-range=10.77.0.50,10.77.0.99,255.255.255.0,1h", *matches, *boot_options,
                                           f"--dhcp-leasefile={tmp_path / 'leases'}", "--pid-file=", "--log-dhcp",
                                           "--log-facility=-", "--user=root"], stdout=dhcp_log, stderr=subprocess.STDOUT))
        yield inside, root, tmp_path, processes
    finally:
        stop(processes)
        subprocess.run(["ip", "netns", "delete", name])
        if proxy:
            subprocess.run(["ip", "netns", "delete", site])


def stop(processes):
    """Every process a lab started, the last first: asked to end, then killed after 10 s."""
    for p in reversed(processes):
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def start_server(lab, backend, server_args=()):
    """Serves the root on the tap's address; the log's path once it serves."""
    inside, root, tmp, processes = lab
    log_path = tmp / "stampede.log"
    server = inside([BINARY, "-l", "-L", "-a", f"{SERVER_IP}:69", "-v", "--backend", backend, *server_args, root],
                    stdout=open(log_path, "w"), stderr=subprocess.STDOUT)
    processes.append(server)
    started = time.time()
    while "serving" not in log_path.read_text() and time.time() - started < 10:
        time.sleep(0.05)
    return log_path


X86_64 = ["qemu-system-x86_64", "-machine", "q35", "-m", "256"]


def power_on(lab, qemu_args, tap="tap0", console_name="console.log", system=X86_64):
    """The machine (`system`: QEMU's command, board and memory), on the tap; its console is console.log
    (`console_name`) in the test's directory."""
    inside, root, tmp, processes = lab
    console = tmp / console_name
    # Software emulation: the same on every machine (KVM under a hypervisor is not always sound).
    qemu = inside([*system, "-accel", "tcg", "-nodefaults",
                   "-display", "none", "-monitor", "none",
                   "-serial", f"file:{console}", "-no-reboot",
                   "-netdev", f"tap,id=n0,ifname={tap},script=no,downscript=no", *qemu_args],
                  stdout=open(tmp / f"qemu-{tap}.log", "w"), stderr=subprocess.STDOUT)
    processes.append(qemu)
    return qemu, console


def boot(lab, backend, qemu_args, deadline_s=110, server_args=(), booted=None, system=X86_64):
    """Serves the root on the tap's address, powers the machine (`system`) on, and waits for the
    marker to be read to its end (or `booted(server log, console)` to be true); returns the
    server's log."""
    inside, root, tmp, processes = lab
    started = time.time()
    log_path = start_server(lab, backend, server_args)
    qemu, console = power_on(lab, qemu_args, system=system)
    done = f'"{MARKER}" octet'
    while time.time() - started < deadline_s:
        text = log_path.read_text(errors="replace")
        if booted is not None:
            if booted(text, console.read_text(errors="replace") if console.exists() else ""):
                return text
        elif any(done in line and line.endswith(": ok") for line in text.splitlines()):
            return text
        assert qemu.poll() is None, f"qemu exited {qemu.returncode}: {(tmp / 'qemu-tap0.log').read_text()[-2000:]}"
        time.sleep(0.25)
    pytest.fail(f"no boot in {deadline_s} s.\nserver:\n{log_path.read_text()[-3000:]}\n"
                f"console:\n{console.read_text(errors='replace')[-3000:] if console.exists() else ''}\n"
                f"dhcp:\n{(tmp / 'dnsmasq.log').read_text()[-2000:]}")


def ended_lines(log, name):
    return [line for line in log.splitlines() if 'RRQ ' in line and f'"{name}" octet' in line]


def test_bios_ipxe_rom_loads_its_script_and_a_file(lab, report):
    started = time.time()
    log = boot(lab, "glibc", ["-device", f"virtio-net-pci,netdev=n0,mac={MAC}", "-boot", "n"])
    script = ended_lines(log, "boot.ipxe")
    # iPXE asks blksize and tsize, no windowsize.
    assert any(line.endswith(": ok") and "tsize=" in line and "blksize=" in line for line in script), log
    assert "bytes=100000" in ended_lines(log, MARKER)[-1]
    report(f"BIOS iPXE ROM -> boot.ipxe -> marker from Stampede: {time.time() - started:.0f} s")


def newc(entries) -> bytes:
    """A cpio archive in the kernel's initramfs format (newc) of (name, mode, bytes)."""
    out = bytearray()
    for number, (name, mode, data) in enumerate([*entries, ("TRAILER!!!", 0, b"")], start=1):
        encoded = name.encode() + b"\0"
        fields = (number, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(encoded), 0)
        out += b"070701" + b"".join(b"%08X" % field for field in fields) + encoded
        out += b"\0" * (-len(out) % 4)
        out += data
        out += b"\0" * (-len(out) % 4)
    return bytes(out)


def install_linux(root, ballast=4 << 20):
    """linux/vmlinuz and linux/initrd.img in the root: Debian's kernel, and an initramfs of the
    test's init (which says its command line on the console) and `ballast` bytes the kernel
    unpacks too (an initrd is mostly payload)."""
    for needed in (KERNEL, INIT):
        assert needed.exists(), f"{needed} missing: `make boot-kernel` (a prerequisite of `make test`) makes it"
    (root / "linux").mkdir()
    shutil.copy(KERNEL, root / "linux" / "vmlinuz")
    (root / "linux" / "initrd.img").write_bytes(newc([("dev", 0o040755, b""), ("init", 0o100755, INIT.read_bytes()),
                                                      ("ballast", 0o100644, os.urandom(ballast))]))
    for f in (root / "linux").iterdir():
        f.chmod(0o644)
    (root / "linux").chmod(0o755)


def served_over_http(name):
    """booted(): the server's log says `name` was sent whole over HTTP."""
    return lambda server, console: any(f'"{name}" http 200 ' in line and line.endswith(": served") for line in server.splitlines())


@pytest.mark.parametrize("lab", [PROXY], indirect=True)
def test_uefi_pxe_boots_linux_through_stampedes_proxy_dhcp_beside_a_site_dhcp_server(lab, report):
    """The whole boot from one server: the site's DHCP server gives the address and nothing else;
    Stampede's proxy offer names ipxe.efi without option 43 (as dnsmasq answers UEFI), so OVMF
    asks the boot server on port 4011 and boots what its ACK names, reading it over TFTP as EDK2
    does; iPXE's own DHCP gets the script's URL, and the script, the kernel and the initrd come
    over HTTP: the initrd's init runs with the command line iPXE gave the kernel."""
    inside, root, tmp, processes = lab
    (root / "boot.ipxe").write_text(LINUX_SCRIPT)
    (root / "boot.ipxe").chmod(0o644)
    install_linux(root)
    started = time.time()
    log = boot(lab, "uring", ["-bios", OVMF, "-device", f"virtio-net-pci,netdev=n0,mac={MAC},romfile=", "-boot", "n"],
               deadline_s=150, server_args=("--http", f"{SERVER_IP}:{HTTP_PORT}", "--proxy-dhcp", SERVER_IP),
               booted=lambda server, console: "stampede-initrd: BOOTED" in console)
    # The UEFI PXE was offered ipxe.efi, iPXE its script; the site's server gave the address.
    assert f"DHCP DISCOVER {MAC} on br0: efi-x64 (arch 7" in log and '"ipxe.efi"' in log, log
    assert re.search(rf'DHCP REQUEST {MAC} on br0: efi-x64 \(arch 7.*\): acknowledged "ipxe.efi" to 10\.77\.0\.\d+:4011', log), log
    assert re.search(rf"DHCP (DISCOVER|REQUEST) {MAC} on br0: ipxe .*boot\.ipxe", log), log
    assert "DHCPACK(vsite) 10.77.0." in (tmp / "dnsmasq.log").read_text()
    efi = ended_lines(log, "ipxe.efi")
    # EDK2: the size probe (tsize, ended with ERROR 8 after our OACK), then the file without tsize.
    assert any("tsize=" in line and "ended by client after OACK (error 8)" in line for line in efi), log
    whole = [line for line in efi if line.endswith(": ok")]
    assert whole and f"bytes={IPXE_EFI.stat().st_size}" in whole[-1], log
    # What the uefi storm profile plays: blksize 1468 (MTU 1500 - 32) and windowsize 4, no tsize.
    assert '"ipxe.efi" octet blksize=1468 windowsize=4 ' in whole[-1], whole[-1]
    console = (tmp / "console.log").read_text(errors="replace")
    assert re.search(r"stampede-initrd: init runs, cmdline: .*initrd=initrd.img console=ttyS0", console), console[-2000:]
    for name, path in (("boot.ipxe", root / "boot.ipxe"), ("linux/vmlinuz", root / "linux" / "vmlinuz"),
                       ("linux/initrd.img", root / "linux" / "initrd.img")):
        served = [line for line in log.splitlines() if 'GET ' in line and f'"{name}" http 200 ' in line]
        assert served and f"bytes={path.stat().st_size} " in served[-1], (name, log)
    report(f"UEFI (OVMF) PXE via Stampede's proxyDHCP -> ipxe.efi (TFTP) -> boot.ipxe, kernel, initrd (HTTP) -> Linux init: "
           f"{time.time() - started:.0f} s")


@pytest.mark.parametrize("lab", [PROXY], indirect=True)
def test_two_uefi_machines_boot_their_own_records_and_one_nobody_listed_gets_no_offer(lab, report):
    """--machines: two OVMF machines with different MACs power on at once beside the site's DHCP
    server; each is offered iPXE, and the boot.ipxe its iPXE fetches is written from its own
    record (its kernel, initrd and command line): each init says its own command line. Then alpha,
    a `once` machine, is said done at the done URL its command line carries, and powered on again
    beside a third MAC nobody listed: both are left alone, and their firmware hears no offer and
    never loads iPXE (it moves on to its next boot entry)."""
    inside, root, tmp, processes = lab
    install_linux(root, ballast=1 << 20)
    machines = tmp / "machines"
    machines.mkdir()
    own = {"alpha": "52:54:00:5e:a7:0a", "beta": "52:54:00:5e:a7:0b"}
    for name, mac in own.items():
        (machines / name).write_text(f"mac = {mac}\nvar hostname = {name}\nkernel = linux/vmlinuz\ninitrd = linux/initrd.img\n"
                                     "cmdline = console=ttyS0 panic=-1 quiet hostname=${hostname} BOOTIF=01-${mac:hexhyp}"
                                     + (" stampede.done=${done-url}\nonce = yes\n" if name == "alpha" else "\n"))
    for command in (["ip", "tuntap", "add", "dev", "tap1", "mode", "tap"], ["ip", "link", "set", "tap1", "master", "br0"],
                    ["ip", "link", "set", "tap1", "up"]):
        assert inside(command).wait() == 0
    started = time.time()
    log_path = start_server(lab, "uring", ("--http", f"{SERVER_IP}:{HTTP_PORT}", "--proxy-dhcp", SERVER_IP, "--machines", machines))
    consoles = {}
    for (name, mac), tap in zip(own.items(), ("tap0", "tap1")):
        qemu, consoles[name] = power_on(lab, ["-bios", OVMF, "-device", f"virtio-net-pci,netdev=n0,mac={mac},romfile=", "-boot", "n"],
                                        tap=tap, console_name=f"console-{name}.log")
    said = {}
    while time.time() - started < 240 and len(said) < 2:
        for name, console in consoles.items():
            text = console.read_text(errors="replace") if console.exists() else ""
            found = re.search(r"stampede-initrd: init runs, cmdline: (.*)\n", text)
            if found:
                said[name] = found.group(1)
        time.sleep(0.5)
    log = log_path.read_text()
    assert len(said) == 2, f"booted: {said}\nserver:\n{log[-3000:]}"
    for name, mac in own.items():
        assert f"hostname={name} BOOTIF=01-{mac.replace(':', '-')}" in said[name], said
        assert "initrd=initrd.img console=ttyS0 panic=-1" in said[name], said
    report(f"two UEFI machines, each its own record's kernel command line through --machines: {time.time() - started:.0f} s")

    for process in processes[-2:]:
        process.terminate()
        process.wait()
    # What alpha's installer would do last: post to its done URL.
    done_url = re.search(r"stampede\.done=(\S+)", said["alpha"]).group(1)
    posted = inside(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST", done_url], stdout=subprocess.PIPE)
    assert posted.communicate(timeout=20)[0] == b"200", log_path.read_text()[-2000:]
    stranger = "52:54:00:5e:a7:0c"
    requests_before = log_path.read_text().count("ipxe.efi")
    again = {}
    for (name, mac), tap in zip((("alpha", own["alpha"]), ("stranger", stranger)), ("tap0", "tap1")):
        qemu, again[name] = power_on(lab, ["-bios", OVMF, "-device", f"virtio-net-pci,netdev=n0,mac={mac},romfile=", "-boot", "n"],
                                     tap=tap, console_name=f"console-{name}-again.log")
    deadline = time.time() + 150
    gave_up = lambda console: re.search(r"PXE-E16: No valid offer received", console.read_text(errors="replace") if console.exists() else "")
    while time.time() < deadline and not all(map(gave_up, again.values())):
        time.sleep(0.5)
    log = log_path.read_text()
    assert f"DHCP DISCOVER {stranger} on br0: left alone: no machine record selects it" in log, log[-3000:]
    assert f"DHCP DISCOVER {own['alpha']} on br0: left alone: its machine record {machines}/alpha says once, and its boot is done" in log, log[-3000:]
    for name, console in again.items():
        assert gave_up(console), (name, console.read_text(errors="replace")[-2000:])
        assert "iPXE" not in console.read_text(errors="replace"), name
    assert log.count("ipxe.efi") == requests_before, log[-2000:]
    report(f"a done once machine and a stranger powered on: both left alone, PXE-E16: {time.time() - started:.0f} s in all")


@pytest.mark.parametrize("lab", [PROXY], indirect=True)
def test_a_uefi_machine_boots_what_the_pixiecore_api_says_and_one_it_answers_404_for_gets_no_offer(lab, report):
    """--machines-api: pixieapi.py, a server of pixiecore's documented API, answers for one OVMF
    machine a kernel, initrd and command line (on Stampede's HTTP) and 404 for another, which
    power on at once beside the site's DHCP server: the first is offered iPXE and its boot.ipxe is
    the API's boot (its init says the API's command line); the second hears no offer while the
    first boots."""
    inside, root, tmp, processes = lab
    install_linux(root, ballast=1 << 20)
    (tmp / "machines").mkdir()
    listed, unlisted = "52:54:00:5e:a7:1a", "52:54:00:5e:a7:1b"
    base = f"http://{SERVER_IP}:{HTTP_PORT}"
    (tmp / "answers.json").write_text(json.dumps({listed: {
        "kernel": f"{base}/linux/vmlinuz", "initrd": [f"{base}/linux/initrd.img"], "message": "Booting from the API",
        "cmdline": "console=ttyS0 panic=-1 quiet hostname=from-the-api BOOTIF=01-${mac:hexhyp}"}}))
    api_log = open(tmp / "api.log", "w")
    processes.append(inside([sys.executable, str(Path(__file__).parent / "pixieapi.py"), "--port", "8081", "--prefix", "/pixiecore",
                             "--answers", str(tmp / "answers.json"), "--delay", "0.02"], stdout=api_log, stderr=subprocess.STDOUT))
    for command in (["ip", "tuntap", "add", "dev", "tap1", "mode", "tap"], ["ip", "link", "set", "tap1", "master", "br0"],
                    ["ip", "link", "set", "tap1", "up"]):
        assert inside(command).wait() == 0
    started = time.time()
    log_path = start_server(lab, "glibc", ("--http", f"{SERVER_IP}:{HTTP_PORT}", "--proxy-dhcp", SERVER_IP, "--machines", tmp / "machines",
                                           "--machines-api", "http://127.0.0.1:8081/pixiecore"))
    consoles = {}
    for (name, mac), tap in zip((("listed", listed), ("unlisted", unlisted)), ("tap0", "tap1")):
        qemu, consoles[name] = power_on(lab, ["-bios", OVMF, "-device", f"virtio-net-pci,netdev=n0,mac={mac},romfile=", "-boot", "n"],
                                        tap=tap, console_name=f"console-{name}.log")
    text = lambda name: consoles[name].read_text(errors="replace") if consoles[name].exists() else ""
    said = None
    while time.time() - started < 240 and not said:
        said = re.search(r"stampede-initrd: init runs, cmdline: (.*)\n", text("listed"))
        time.sleep(0.5)
    log = log_path.read_text()
    assert said, f"listed:\n{text('listed')[-2000:]}\nserver:\n{log[-3000:]}\napi:\n{(tmp / 'api.log').read_text()[-2000:]}"
    assert f"hostname=from-the-api BOOTIF=01-{listed.replace(':', '-')}" in said.group(1), said.group(1)
    assert "Booting from the API" in text("listed")
    # The unlisted one's DISCOVERs, the whole time the listed one booted, got no offer: it never
    # asked on 4011 nor loaded iPXE (that its firmware then gives up, PXE-E16, the records test shows).
    assert f"DHCP DISCOVER {unlisted} on br0: left alone: no machine record selects it" in log, log[-3000:]
    assert f"DHCP REQUEST {unlisted}" not in log and "iPXE" not in text("unlisted"), (log[-3000:], text("unlisted")[-2000:])
    asked = (tmp / "api.log").read_text()
    assert f"GET /pixiecore/v1/boot/{listed}?arch=7" in asked and f"GET /pixiecore/v1/boot/{unlisted}?arch=7" in asked, asked
    report(f"through the pixiecore API: a listed UEFI machine boots the API's kernel, a 404 one hears no offer: {time.time() - started:.0f} s")


@pytest.mark.parametrize("lab", [PROXY], indirect=True)
def test_bios_ipxe_rom_gets_its_script_from_stampedes_proxy_dhcp(lab, report):
    started = time.time()
    log = boot(lab, "glibc", ["-device", f"virtio-net-pci,netdev=n0,mac={MAC}", "-boot", "n"],
               server_args=("--http", f"{SERVER_IP}:{HTTP_PORT}", "--proxy-dhcp", SERVER_IP),
               booted=served_over_http(MARKER))
    assert re.search(rf"DHCP (DISCOVER|REQUEST) {MAC} on br0: ipxe .*boot\.ipxe", log), log
    report(f"BIOS iPXE ROM via Stampede's proxyDHCP -> boot.ipxe -> marker (HTTP): {time.time() - started:.0f} s")


def secure_machine(tmp, name):
    """QEMU's arguments for OVMF with Secure Boot enforced (SMM, a secure flash, Microsoft's keys
    in a copy of the variable store of its own)."""
    variables = tmp / f"{name}-vars.fd"
    shutil.copy(OVMF_MS_VARS, variables)
    return ["-machine", "smm=on", "-global", "driver=cfi.pflash01,property=secure,value=on",
            "-drive", f"if=pflash,format=raw,unit=0,readonly=on,file={OVMF_SECURE}",
            "-drive", f"if=pflash,format=raw,unit=1,file={variables}",
            "-device", f"virtio-net-pci,netdev=n0,mac={MAC},romfile=", "-boot", "n"]


@pytest.mark.parametrize("lab", [PROXY], indirect=True)
def test_secure_boot_runs_shim_grub_and_debians_signed_kernel_through_stampede_and_refuses_unsigned_ipxe(lab, report):
    """Secure Boot enforced: the proxy offers shimx64.efi (--boot-chain secure-boot), which OVMF verifies against Microsoft's
    keys; shim loads GRUB's signed network image (grubx64.efi, beside it over TFTP), GRUB reads
    grub/grub.cfg from Stampede (GRUB 2.14 reads the proxy's offer), then Debian's signed kernel,
    which says Secure Boot is on and locks itself down, and the initrd's init runs with the
    command line of the machine's record (GRUB asks grub/grub.cfg alone: the record's is written
    for the address DHCP bound to the machine). Then the
    same machine offered the unsigned ipxe.efi: the firmware refuses it ("Access Denied") and
    asks for nothing more."""
    inside, root, tmp, processes = lab
    for needed in (SECURE_BOOT / "shimx64.efi", SECURE_BOOT / "grubx64.efi", OVMF_SECURE, OVMF_MS_VARS):
        assert needed.exists(), f"{needed} missing: `make secure-boot` (a prerequisite of `make test`) fetches it"
    install_linux(root, ballast=64 << 10)
    for name in ("shimx64.efi", "grubx64.efi"):
        shutil.copy(SECURE_BOOT / name, root / name)
        (root / name).chmod(0o644)
    # The root's grub.cfg boots the machine as nobody in particular; its record says otherwise,
    # and GRUB, which asks the root's name alone, gets the record's (the machine DHCP bound).
    (root / "grub").mkdir()
    (root / "grub" / "grub.cfg").write_text("set timeout=0\nmenuentry root {\n"
                                              "  linux /linux/vmlinuz console=ttyS0 panic=-1 stampede.from=root\n  initrd /linux/initrd.img\n}\n")
    (root / "grub").chmod(0o755)
    (root / "grub" / "grub.cfg").chmod(0o644)
    records = tmp / "machines"
    records.mkdir()
    (records / "node07").write_text(f"mac = {MAC}\nvar hostname = node07\nkernel = linux/vmlinuz\ninitrd = linux/initrd.img\n"
                                    "cmdline = console=ttyS0 panic=-1 stampede.from=${hostname}\n")
    started = time.time()
    log_path = start_server(lab, "uring", ("--proxy-dhcp", SERVER_IP, "--boot-chain", "secure-boot", "--machines", records))
    qemu, console = power_on(lab, secure_machine(tmp, "signed"), console_name="signed.log")
    deadline = time.time() + 240
    def said():
        return console.read_text(errors="replace") if console.exists() else ""

    # The init's whole line: read as the console is written, it came once as far as "cmdline: ".
    while time.time() < deadline and not re.search(r"stampede-initrd: init runs, cmdline: .*\n", said()):
        assert qemu.poll() is None, (tmp / "qemu-tap0.log").read_text()[-2000:]
        time.sleep(0.5)
    text, log = said(), log_path.read_text(errors="replace")
    assert "stampede-initrd: init runs" in text, f"console:\n{text[-3000:]}\nserver:\n{log[-3000:]}"
    assert "EFI stub: UEFI Secure Boot is enabled." in text and "secureboot: Secure boot enabled" in text, text[-3000:]
    assert "Kernel is locked down from EFI Secure Boot" in text, text[-3000:]
    assert re.search(r"stampede-initrd: init runs, cmdline: .*stampede.from=node07", text), text[-3000:]
    # GRUB asks for its files by absolute path, as its prefix (/grub) and grub.cfg name them.
    for name in ("shimx64.efi", "grubx64.efi", "/grub/grub.cfg", "/linux/vmlinuz", "/linux/initrd.img"):
        assert any(line.endswith(": ok") for line in ended_lines(log, name)), (name, log[-3000:])
    signed = time.time() - started
    qemu.terminate()
    qemu.wait()

    processes[-2].terminate()  # the server: the next one offers ipxe.efi
    processes[-2].wait()
    log_path.rename(tmp / "signed-stampede.log")
    log_path = start_server(lab, "uring", ("--proxy-dhcp", SERVER_IP))
    qemu, console = power_on(lab, secure_machine(tmp, "unsigned"), console_name="unsigned.log")
    deadline = time.time() + 120
    while time.time() < deadline and "Access Denied" not in said():
        time.sleep(0.5)
    text, log = said(), log_path.read_text(errors="replace")
    assert "Access Denied" in text, text[-3000:]
    assert any(line.endswith(": ok") for line in ended_lines(log, "ipxe.efi")), log[-3000:]
    assert not ended_lines(log, "boot.ipxe"), log[-3000:]
    report(f"Secure Boot (OVMF, Microsoft's keys): shim -> GRUB 2.14 -> grub.cfg -> Debian's signed kernel -> init via "
           f"Stampede alone: {signed:.0f} s; unsigned ipxe.efi refused")


@pytest.mark.parametrize("lab", [PROXY], indirect=True)
def test_a_grub_that_cannot_read_the_proxys_offer_stops_and_the_server_says_why(lab, report):
    """Debian 12's signed GRUB (2.06) behind the proxy (--boot-chain secure-boot, Secure Boot off
    for speed: shim loads it all the same): it takes its server from the site's DHCP ACK, which
    names none, and asks for nothing more (its console says "Welcome to GRUB!", then its prompt);
    the server, following the machine (--machines), says so 15 s later with what to do."""
    inside, root, tmp, processes = lab
    old = SECURE_BOOT / "grubx64-bookworm.efi"
    for needed in (SECURE_BOOT / "shimx64.efi", old):
        assert needed.exists(), f"{needed} missing: `make secure-boot` (a prerequisite of `make test`) fetches it"
    shutil.copy(SECURE_BOOT / "shimx64.efi", root / "shimx64.efi")
    shutil.copy(old, root / "grubx64.efi")
    for name in ("shimx64.efi", "grubx64.efi"):
        (root / name).chmod(0o644)
    records = tmp / "machines"
    records.mkdir()
    (records / "node07").write_text(f"mac = {MAC}\n")
    started = time.time()
    log = boot(lab, "uring", ["-bios", OVMF, "-device", f"virtio-net-pci,netdev=n0,mac={MAC},romfile=", "-boot", "n"],
               deadline_s=150, server_args=("--proxy-dhcp", SERVER_IP, "--boot-chain", "secure-boot", "--machines", records),
               # Both, however they come: on a loaded host GRUB's console has lagged the server's
               # hint, which comes 15 s after GRUB was served.
               booted=lambda server, console: "loaded the GRUB beside its shim" in server and "Welcome to GRUB!" in console)
    console = (tmp / "console.log").read_text(errors="replace")
    assert any(line.endswith(": ok") for line in ended_lines(log, "grubx64.efi")), log[-3000:]
    hint = [line for line in log.splitlines() if "loaded the GRUB beside its shim" in line]
    assert f"machine {MAC} at 10.77.0." in hint[0] and "(shimx64.efi) and has asked for nothing in 15 s: a GRUB before 2.14" in hint[0], hint
    assert "grub.cfg" not in log, log[-3000:]
    assert "Welcome to GRUB!" in console, console[-2000:]
    report(f"Debian 12's GRUB 2.06 behind the proxy runs and asks for nothing; the server says why: {time.time() - started:.0f} s")


@pytest.mark.parametrize("lab", [PROXY], indirect=True)
def test_ipxe_2_reads_autoexec_beside_itself_written_from_the_machines_record(lab, report):
    """iPXE 2.0 as Debian unstable builds it, with no embedded script (as iPXE's signed builds
    are): the proxy offers ipxe2/ipxe.efi; before any DHCP of its own, iPXE asks autoexec.ipxe
    beside itself (ipxe2/autoexec.ipxe, over TFTP from the server it came from) and gets the boot
    the machine's record writes for it, whose kernel and initrd are named from the root: the init
    says the record's command line, and iPXE never needed the proxy's second answer."""
    inside, root, tmp, processes = lab
    assert (UNSTABLE_BOOT / "ipxe-amd64.efi").exists(), "`make unstable-boot` (a prerequisite of `make test`) fetches iPXE 2.0"
    install_linux(root, ballast=256 << 10)
    (root / "ipxe2").mkdir()
    shutil.copy(UNSTABLE_BOOT / "ipxe-amd64.efi", root / "ipxe2" / "ipxe.efi")
    (root / "ipxe2" / "ipxe.efi").chmod(0o644)
    (root / "ipxe2").chmod(0o755)
    records = tmp / "machines"
    records.mkdir()
    (records / "node07").write_text(f"mac = {MAC}\nvar hostname = node07\nkernel = linux/vmlinuz\ninitrd = linux/initrd.img\n"
                                    "cmdline = console=ttyS0 panic=-1 quiet stampede.from=${hostname}\n")
    started = time.time()
    log = boot(lab, "uring", ["-bios", OVMF, "-device", f"virtio-net-pci,netdev=n0,mac={MAC},romfile=", "-boot", "n"],
               deadline_s=200, server_args=("--proxy-dhcp", SERVER_IP, "--boot-file", "efi-x64=ipxe2/ipxe.efi", "--machines", records),
               booted=lambda server, console: re.search(r"stampede-initrd: init runs, cmdline: .*\n", console))
    console = (tmp / "console.log").read_text(errors="replace")
    assert re.search(r"iPXE 2\.\d", console), console[-2000:]
    assert re.search(r"stampede-initrd: init runs, cmdline: .*initrd=initrd.img console=ttyS0 panic=-1 quiet stampede.from=node07", console), \
        console[-2000:]
    autoexec = [line for line in ended_lines(log, "ipxe2/autoexec.ipxe") if line.endswith(": ok")]
    assert autoexec, log[-3000:]
    for name in ("linux/vmlinuz", "linux/initrd.img"):
        assert any(line.endswith(": ok") for line in ended_lines(log, name)), (name, log[-3000:])
    assert not re.search(rf"DHCP \w+ {MAC} on br0: ipxe", log), log[-3000:]
    report(f"iPXE 2.0 (Debian unstable, no embedded script) via the proxy -> ipxe2/autoexec.ipxe beside it, the record's boot "
           f"(TFTP) -> Linux init, no second DHCP: {time.time() - started:.0f} s")


@pytest.mark.parametrize("lab", [PROXY], indirect=True)
def test_a_bios_ipxe_rom_without_https_gets_its_script_over_tftp_where_only_https_serves(lab, report):
    """QEMU's iPXE ROM has no HTTPS (its option 175 names HTTP and not HTTPS): with --https alone
    serving the address, the proxy hands it boot.ipxe over TFTP, not an https:// URL it could not
    fetch, and the script's marker comes over TFTP too."""
    inside, root, tmp, processes = lab
    certs = Certificates(tmp / "certs", server_names=f"IP:{SERVER_IP}")
    started = time.time()
    log = boot(lab, "glibc", ["-device", f"virtio-net-pci,netdev=n0,mac={MAC}", "-boot", "n"],
               server_args=("--https", f"{SERVER_IP}:{HTTPS_PORT}", "--tls-certificate", certs.chain, "--tls-key", certs.key,
                            "--proxy-dhcp", SERVER_IP))
    assert re.search(rf'DHCP (DISCOVER|REQUEST) {MAC} on br0: ipxe .*"boot\.ipxe"', log), log
    assert any(line.endswith(": ok") for line in ended_lines(log, "boot.ipxe")), log
    report(f"BIOS iPXE ROM without HTTPS, --https alone: boot.ipxe and the marker over TFTP: {time.time() - started:.0f} s")


@pytest.mark.parametrize("lab", [PROXY], indirect=True)
def test_uefi_http_boot_gets_a_url_from_stampedes_proxy_dhcp(lab, report):
    started = time.time()
    no_pxe = ["-fw_cfg", "name=opt/org.tianocore/IPv4PXESupport,string=n",
              "-fw_cfg", "name=opt/org.tianocore/IPv6PXESupport,string=n"]
    log = boot(lab, "uring", ["-bios", OVMF, "-device", f"virtio-net-pci,netdev=n0,mac={MAC},romfile=", "-boot", "n", *no_pxe],
               deadline_s=150, server_args=("--http", f"{SERVER_IP}:{HTTP_PORT}", "--proxy-dhcp", SERVER_IP),
               booted=served_over_http(MARKER))
    assert f"DHCP DISCOVER {MAC} on br0: http-x64 (arch 16" in log, log
    served = [line for line in log.splitlines() if 'GET ' in line and '"ipxe.efi" http 200 ' in line]
    assert served and f"bytes={IPXE_EFI.stat().st_size} " in served[-1], log
    report(f"UEFI (OVMF) HTTP Boot via Stampede's proxyDHCP -> ipxe.efi (HTTP) -> boot.ipxe -> marker: {time.time() - started:.0f} s")


@pytest.mark.parametrize("lab", [PROXY], indirect=True)
def test_uefi_https_boot_trusts_the_ca_that_tls_ca_enrolls_and_no_other(lab, report):
    """OVMF's UEFI HTTPS Boot: the offer's URL is https:// (--https alone serves the address),
    the CA list comes from `stampede tls-ca` through fw_cfg. First with a CA that did not sign the
    server's certificate: the firmware refuses the handshake and loads nothing. Then with the
    right one: ipxe.efi, whole, over TLS."""
    inside, root, tmp, processes = lab
    certs = Certificates(tmp / "certs", server_names=f"IP:{SERVER_IP}")
    lists = {}
    for name, ca in (("right", certs.ca), ("wrong", certs.other_ca)):
        lists[name] = tmp / f"{name}.esl"
        made = subprocess.run([BINARY, "tls-ca", ca, "--output", lists[name]], capture_output=True, text=True)
        assert made.returncode == 0, made.stderr
    log_path = start_server(lab, "uring", ("--https", f"{SERVER_IP}:{HTTPS_PORT}", "--tls-certificate", certs.chain,
                                           "--tls-key", certs.key, "--proxy-dhcp", SERVER_IP))
    no_pxe = ["-fw_cfg", "name=opt/org.tianocore/IPv4PXESupport,string=n",
              "-fw_cfg", "name=opt/org.tianocore/IPv6PXESupport,string=n"]
    machine = ["-bios", OVMF, "-device", f"virtio-net-pci,netdev=n0,mac={MAC},romfile=", "-boot", "n", *no_pxe]
    served = f'"ipxe.efi" https 200 bytes={IPXE_EFI.stat().st_size} '

    def wait(condition, seconds):
        deadline = time.time() + seconds
        while time.time() < deadline:
            if condition(log_path.read_text(errors="replace")):
                return True
            time.sleep(0.25)
        return False

    started = time.time()
    qemu, console = power_on(lab, [*machine, "-fw_cfg", f"name=etc/edk2/https/cacerts,file={lists['wrong']}"])
    refused = wait(lambda log: "TLS handshake failed" in log, 120)
    log = log_path.read_text(errors="replace")
    assert refused, f"no handshake refused.\nserver:\n{log[-3000:]}\nconsole:\n{console.read_text(errors='replace')[-2000:]}"
    assert f"https://{SERVER_IP}:{HTTPS_PORT}/ipxe.efi" in log and served not in log, log
    qemu.kill()
    qemu.wait()
    refused_after = time.time() - started

    started = time.time()
    power_on(lab, [*machine, "-fw_cfg", f"name=etc/edk2/https/cacerts,file={lists['right']}"])
    loaded = wait(lambda log: served in log, 150)
    log = log_path.read_text(errors="replace")
    assert loaded, f"ipxe.efi not loaded over HTTPS.\nserver:\n{log[-3000:]}"
    report(f"UEFI (OVMF) HTTPS Boot: a CA that did not sign the certificate refused in {refused_after:.0f} s; "
           f"with tls-ca's list, ipxe.efi over TLS in {time.time() - started:.0f} s")


@pytest.mark.parametrize("lab", [PROXY], indirect=True)
def test_the_same_uefi_pxe_boots_through_the_peers_proxy_dhcp(lab, report):
    """The peer side by side: the firmware of the first proxy test through dnsmasq 2.93's proxy
    mode instead (`dhcp-range=…,proxy` and the pxe-service lines its documentation gives for
    iPXE), its TFTP off and Stampede serving the files. Where the two differ, the firmware shows
    it: dnsmasq's offer names no file, so OVMF asks again on port 4011 (Stampede's offer bypasses
    that); both end at the same script."""
    sys.path.insert(0, str(REPO / "Benchmarks"))
    from harness import SID, in_sid
    assert (SID / "usr/sbin/dnsmasq").exists(), f"no Debian unstable tree in {SID}: `make parity-deps` makes it"
    inside, root, tmp, processes = lab
    proxy_log = tmp / "dnsmasq-proxy.log"
    processes.append(inside(in_sid(["/usr/sbin/dnsmasq", "-k", "--port=0", "--interface=br0", "--bind-interfaces",
                                    f"--dhcp-range={SERVER_IP},proxy", "--dhcp-match=set:ipxe,175",
                                    "--pxe-service=tag:!ipxe,x86-64_EFI,iPXE,ipxe.efi",
                                    f"--pxe-service=tag:ipxe,x86-64_EFI,script,http://{SERVER_IP}:{HTTP_PORT}/boot.ipxe",
                                    "--log-dhcp", "--log-facility=-", "--user=root", "--pid-file="], share=tmp),
                            stdout=open(proxy_log, "w"), stderr=subprocess.STDOUT))
    started = time.time()
    log = boot(lab, "uring", ["-bios", OVMF, "-device", f"virtio-net-pci,netdev=n0,mac={MAC},romfile=", "-boot", "n"],
               deadline_s=150, server_args=("--http", f"{SERVER_IP}:{HTTP_PORT}"), booted=served_over_http(MARKER))
    proxied = proxy_log.read_text()
    # Its offers name no file (they ask for boot server discovery); the ACKs on 4011 do: ipxe.efi
    # for OVMF, the script's URL for iPXE.
    assert f"PXE(br0) {MAC} proxy" in proxied, proxied[-3000:]
    assert "bootfile name: ipxe.efi" in proxied, proxied[-3000:]
    assert f"bootfile name: http://{SERVER_IP}:{HTTP_PORT}/boot.ipxe" in proxied, proxied[-3000:]
    assert "DHCP DISCOVER" not in log, log
    assert any(line.endswith(": ok") for line in ended_lines(log, "ipxe.efi")), log
    assert served_over_http("boot.ipxe")(log, ""), log
    report(f"UEFI (OVMF) PXE via dnsmasq 2.93's proxyDHCP (4011) -> ipxe.efi -> boot.ipxe -> marker (HTTP) from Stampede: "
           f"{time.time() - started:.0f} s")
