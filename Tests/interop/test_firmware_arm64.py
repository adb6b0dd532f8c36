"""ARM64 UEFI boots from Stampede with no boot file flag: Debian's AAVMF (qemu-efi-aarch64) on QEMU's
emulated virt board, on the lab of test_firmware.py (a tap on a bridge beside the site's DHCP
server, Stampede's proxy), by PXE and by UEFI HTTP Boot, to iPXE 2.0's arm64 build (the
efi-arm64 and http-arm64 selectors' default), its script, and Debian's arm64 kernel, whose
initramfs's init (a static busybox) says its command line on the serial console. A file of its
own: its boots run one at a time beside the x86 ones (conftest.py's SERIAL_GROUPS)."""
import os
import re
import shutil
import time
from pathlib import Path

import pytest

from test_firmware import (HTTP_PORT, MAC, PROXY, SERVER_IP, UNSTABLE_BOOT, boot, ended_lines, lab,  # noqa: F401 (lab: a fixture)
                           newc)

# Debian's AAVMF (qemu-efi-aarch64), for QEMU's virt board.
AAVMF_CODE = Path("/usr/share/AAVMF/AAVMF_CODE.fd")
AAVMF_VARS = Path("/usr/share/AAVMF/AAVMF_VARS.fd")
ARM64_INIT = """#!/bin/busybox sh
/bin/busybox mount -t devtmpfs devtmpfs /dev
/bin/busybox mount -t proc proc /proc
exec >/dev/ttyAMA0 2>&1
echo
echo "stampede-initrd: init runs, cmdline: $(/bin/busybox cat /proc/cmdline)"
echo "stampede-initrd: BOOTED"
/bin/busybox poweroff -f
"""
ARM64_SCRIPT = f"""#!ipxe
echo stampede: boot.ipxe over HTTP on ${{buildarch}}
kernel http://{SERVER_IP}:{HTTP_PORT}/linux-arm64/vmlinuz initrd=initrd.img console=ttyAMA0 panic=-1 quiet || goto failed
initrd http://{SERVER_IP}:{HTTP_PORT}/linux-arm64/initrd.img || goto failed
boot || goto failed
:failed
echo stampede: FAILED
sleep 600
"""

# QEMU's virt board with a Cortex-A57, emulated; Debian's arm64 kernel is a 48 MB Image.
ARM64 = ["qemu-system-aarch64", "-machine", "virt", "-cpu", "cortex-a57", "-m", "512"]

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="firmware boots need root (a network namespace, a tap device): "
                                                          "NOT TESTED — run `make test` as root")


def install_arm64(root):
    """What an ARM64 machine boots with no flag: iPXE 2.0's arm64 build as ipxe-arm64.efi (the
    efi-arm64 selector's default), boot.ipxe, and linux-arm64/{vmlinuz,initrd.img}: Debian's arm64
    kernel and an initramfs whose init (busybox's shell) says its command line on the console."""
    for needed in (UNSTABLE_BOOT / "ipxe-arm64.efi", UNSTABLE_BOOT / "vmlinuz-arm64", UNSTABLE_BOOT / "busybox-arm64",
                   AAVMF_CODE, AAVMF_VARS):
        assert needed.exists(), f"{needed} missing: `make unstable-boot` and `make deps` (prerequisites of `make test`) make it"
    shutil.copy(UNSTABLE_BOOT / "ipxe-arm64.efi", root / "ipxe-arm64.efi")
    (root / "boot.ipxe").write_text(ARM64_SCRIPT)
    linux = root / "linux-arm64"
    linux.mkdir()
    shutil.copy(UNSTABLE_BOOT / "vmlinuz-arm64", linux / "vmlinuz")
    (linux / "initrd.img").write_bytes(newc([("dev", 0o040755, b""), ("proc", 0o040755, b""), ("bin", 0o040755, b""),
                                             ("bin/busybox", 0o100755, (UNSTABLE_BOOT / "busybox-arm64").read_bytes()),
                                             ("init", 0o100755, ARM64_INIT.encode())]))
    for f in (root / "ipxe-arm64.efi", root / "boot.ipxe", linux / "vmlinuz", linux / "initrd.img"):
        f.chmod(0o644)
    linux.chmod(0o755)


def arm64_machine(tmp, *extra):
    """QEMU's arguments for AAVMF, its variable store a copy of its own, on the tap."""
    variables = tmp / "aavmf-vars.fd"
    shutil.copy(AAVMF_VARS, variables)
    return ["-drive", f"if=pflash,format=raw,unit=0,readonly=on,file={AAVMF_CODE}",
            "-drive", f"if=pflash,format=raw,unit=1,file={variables}",
            "-device", f"virtio-net-pci,netdev=n0,mac={MAC},romfile=", *extra]


def boot_arm64(lab, qemu_args, deadline_s):
    """Serves the root (TFTP, HTTP, the proxy) with no boot file flag, powers the ARM64 machine
    on and waits for its init's command line; the server's log and the console."""
    inside, root, tmp, processes = lab
    install_arm64(root)
    log = boot(lab, "uring", qemu_args, deadline_s=deadline_s, system=ARM64,
               server_args=("--http", f"{SERVER_IP}:{HTTP_PORT}", "--proxy-dhcp", SERVER_IP),
               booted=lambda server, console: re.search(r"stampede-initrd: init runs, cmdline: .*\n", console))
    said = (tmp / "console.log").read_text(errors="replace")
    assert re.search(r"stampede-initrd: init runs, cmdline: .*initrd=initrd.img console=ttyAMA0", said), said[-3000:]
    for name, path in (("boot.ipxe", root / "boot.ipxe"), ("linux-arm64/vmlinuz", root / "linux-arm64" / "vmlinuz"),
                       ("linux-arm64/initrd.img", root / "linux-arm64" / "initrd.img")):
        served = [line for line in log.splitlines() if 'GET ' in line and f'"{name}" http 200 ' in line]
        assert served and f"bytes={path.stat().st_size} " in served[-1], (name, log[-3000:])
    return log, said


@pytest.mark.parametrize("lab", [PROXY], indirect=True)
def test_arm64_uefi_pxe_boots_linux_through_the_proxy_with_no_boot_file_flag(lab, report):
    """AAVMF (ARM64 UEFI, architecture 11) beside the site's DHCP server, Stampede given no boot
    file: the efi-arm64 selector's default, ipxe-arm64.efi (iPXE 2.0's arm64 build), is offered
    and read over TFTP; iPXE looks for autoexec.ipxe beside itself, then its own DHCP gets the
    script's URL, and the script, Debian's arm64 kernel and the initrd come over HTTP: the init
    runs with the command line iPXE gave the kernel."""
    inside, root, tmp, processes = lab
    started = time.time()
    log, console = boot_arm64(lab, arm64_machine(tmp), deadline_s=400)
    assert f"DHCP DISCOVER {MAC} on br0: efi-arm64 (arch 11" in log, log[-3000:]
    whole = [line for line in ended_lines(log, "ipxe-arm64.efi") if line.endswith(": ok")]
    assert whole and f"bytes={(root / 'ipxe-arm64.efi').stat().st_size}" in whole[-1], log[-3000:]
    # iPXE 2.0 with no embedded script: autoexec.ipxe from where it was loaded, before its DHCP.
    assert ended_lines(log, "autoexec.ipxe"), log[-3000:]
    assert re.search(rf"DHCP (DISCOVER|REQUEST) {MAC} on br0: ipxe .*boot\.ipxe", log), log[-3000:]
    report(f"ARM64 UEFI (AAVMF) PXE via Stampede's proxyDHCP, no flag -> ipxe-arm64.efi (TFTP) -> boot.ipxe, arm64 kernel, "
           f"initrd (HTTP) -> Linux init: {time.time() - started:.0f} s")


@pytest.mark.parametrize("lab", [PROXY], indirect=True)
def test_arm64_uefi_http_boot_gets_ipxe_by_url_and_boots_linux(lab, report):
    """AAVMF's UEFI HTTP Boot (architecture 19, vendor class HTTPClient), PXE turned off: the
    offer's URL is the http-arm64 selector's default, ipxe-arm64.efi on Stampede's HTTP, and the
    chain goes on as over PXE, to the arm64 kernel's init."""
    inside, root, tmp, processes = lab
    no_pxe = ["-fw_cfg", "name=opt/org.tianocore/IPv4PXESupport,string=n",
              "-fw_cfg", "name=opt/org.tianocore/IPv6PXESupport,string=n"]
    started = time.time()
    log, console = boot_arm64(lab, arm64_machine(tmp, *no_pxe), deadline_s=400)
    assert f"DHCP DISCOVER {MAC} on br0: http-arm64 (arch 19" in log, log[-3000:]
    served = [line for line in log.splitlines() if 'GET ' in line and '"ipxe-arm64.efi" http 200 ' in line]
    assert served and f"bytes={(root / 'ipxe-arm64.efi').stat().st_size} " in served[-1], log[-3000:]
    report(f"ARM64 UEFI (AAVMF) HTTP Boot via Stampede's proxyDHCP, no flag -> ipxe-arm64.efi (HTTP) -> boot.ipxe, "
           f"arm64 kernel, initrd -> Linux init: {time.time() - started:.0f} s")
