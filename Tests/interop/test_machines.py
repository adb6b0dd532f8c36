"""Machine records (`--machines DIR`): which machines the proxy boots, and what, on the boot link
of test_proxy_dhcp.py. A listed machine gets its record's boot file; one its record or an
Ironic hosts file says to ignore, one that boots from its disk and one nobody listed hear
nothing, each said in the log and counted; bad records are refused at start with file and line,
and while serving a change is read and a bad one refused with the records before kept."""
import json
import os
import pwd
import re
import socket
import subprocess
import sys
import time

import pytest

import dhcpwire
from conftest import BINARY, free_tcp_port, run

NODE07, IGNORED, LOCAL, STRANGER = (dhcpwire.MAC[:5] + bytes([n]) for n in (0x07, 0x08, 0x09, 0x99))


def colons(mac):
    return ":".join(f"{b:02x}" for b in mac)


@pytest.fixture
def records(tmp_path):
    d = tmp_path / "machines"
    d.mkdir()
    (d / "node07").write_text(f"# rack 1, node 7\nmac = {colons(NODE07)}\nboot-file = efi-x64=installers/node07.efi\n")
    # As Ironic's PXE filter writes them: a file per MAC, named by it.
    (d / colons(IGNORED).replace(":", "-")).write_text(f"{colons(IGNORED)},ignore\n")
    (d / "node09").write_text(f"mac = {colons(LOCAL)}\naction = local\n")
    return d


def test_listed_machines_boot_as_their_records_say_and_the_rest_are_left_alone(proxy, machine, records):
    port = free_tcp_port()
    s = proxy("--machines", str(records), "--metrics", f"127.0.0.1:{port}")
    reply = machine.ask(dhcpwire.message(NODE07, arch=7))
    assert reply and reply["file"] == "installers/node07.efi", s.log_text()
    # What its record does not name boots as the network says (past the half second in which
    # one machine is answered once).
    time.sleep(0.6)
    assert machine.ask(dhcpwire.message(NODE07, arch=0, xid=2))["file"] == "undionly.kpxe"
    for mac in (IGNORED, LOCAL, STRANGER):
        assert machine.ask(dhcpwire.message(mac, arch=7), timeout=1) is None, colons(mac)
    assert s.log_lines(f"DHCP DISCOVER {colons(IGNORED)} on veth-s: left alone: its machine record {records}/52-54-00-12-34-08 says ignore")
    assert s.log_lines(f"DHCP DISCOVER {colons(LOCAL)} on veth-s: left alone: its machine record {records}/node09 says local")
    assert s.log_lines(f"DHCP DISCOVER {colons(STRANGER)} on veth-s: left alone: no machine record selects it")
    # Once a minute per machine in the log; every request in the metrics.
    assert machine.ask(dhcpwire.message(STRANGER, arch=7, xid=3), timeout=0.5) is None
    time.sleep(0.5)
    assert len(s.log_lines(f"{colons(STRANGER)} on veth-s: left alone")) == 1, s.log_text()
    text = run([*s.argv[:4], "curl", "-s", f"http://127.0.0.1:{port}/metrics"]).stdout.decode()
    for reason, count in (("machine_ignored", 1), ("machine_local", 1), ("unknown_machine", 2)):
        assert f'stampede_boot_ignored_total{{protocol="dhcp",reason="{reason}"}} {count}' in text, text


def test_unknown_machines_boot_when_the_operator_says_so(proxy, machine, records):
    s = proxy("--machines", str(records), "--unknown-machines", "boot")
    reply = machine.ask(dhcpwire.message(STRANGER, arch=7))
    assert reply and reply["file"] == "ipxe.efi", s.log_text()
    assert machine.ask(dhcpwire.message(IGNORED, arch=7), timeout=1) is None


def test_a_default_record_and_ironics_wildcard_decide_for_the_unlisted(proxy, machine, records):
    (records / "unknown_hosts_filter").write_text("*:*:*:*:*:*\n")
    s = proxy("--machines", str(records))
    assert machine.ask(dhcpwire.message(STRANGER, arch=7))["file"] == "ipxe.efi", s.log_text()
    assert machine.ask(dhcpwire.message(IGNORED, arch=7), timeout=1) is None


def test_bad_records_are_refused_at_start_each_with_its_file_and_line(root, records):
    (records / "node10").write_text("mac = 52:54:00:12:34:0a\narch = arm\n")
    (records / "node11").write_text(f"mac = {colons(NODE07)}\n")
    r = run([str(BINARY), "-L", "-a", "127.0.0.1:0", "--proxy-dhcp", "10.0.0.1", "--machines", str(records), str(root)], timeout=20)
    assert r.returncode == 78, r
    said = r.stderr.decode().splitlines()
    assert f"stampede: --machines: {records}/node10:2: arch arm: not one of bios, efi-x86, efi-x64, efi-arm32, efi-arm64, efi-riscv64, " \
           "efi-loongarch64, uboot-arm32, uboot-arm64, rpi, http-x86, http-x64, http-arm32, http-arm64, http-riscv64, http-loongarch64, " \
           "nor an architecture number (0-65535)" in said, said
    r = run([str(BINARY), "-L", "-a", "127.0.0.1:0", "--proxy-dhcp", "10.0.0.1", "--machines", str(records / "none"), str(root)], timeout=20)
    assert r.returncode == 78 and f"{records}/none: cannot read the directory: No such file or directory" in r.stderr.decode(), r
    (records / "node10").unlink()
    r = run([str(BINARY), "-L", "-a", "127.0.0.1:0", "--proxy-dhcp", "10.0.0.1", "--machines", str(records), str(root)], timeout=20)
    assert r.returncode == 78 and f"{records}/node11:1: mac {colons(NODE07)} is selected by {records}/node07:2 too" in r.stderr.decode(), r
    r = run([str(BINARY), "-L", "-a", "127.0.0.1:0", "--unknown-machines", "boot", str(root)], timeout=20)
    assert r.returncode == 64 and "--unknown-machines is for --machines" in r.stderr.decode(), r


# An HTTP GET read 64 KiB at a time, a fifth of a second apart (curl 7.88's --limit-rate lets a
# few megabytes through at once), its body written to a file: a download that lasts.
SLOW_GET = """
import socket, sys, time
host, port, path, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
s = socket.create_connection((host, port))
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
s.sendall(f"GET {path} HTTP/1.1\\r\\nHost: {host}\\r\\nConnection: close\\r\\n\\r\\n".encode())
data = b""
while chunk := s.recv(65536):
    data += chunk
    time.sleep(0.2)
head, _, body = data.partition(b"\\r\\n\\r\\n")
assert head.startswith(b"HTTP/1.1 200"), head
open(out, "wb").write(body)
"""


def ask_until(machine, mac, answered, timeout=5.0):
    """Asks as `mac` every 0.6 s (past the proxy's half second per machine) until it is answered
    (or, `answered` false, left alone); the last reply."""
    deadline, xid = time.time() + timeout, 100
    while True:
        xid += 1
        reply = machine.ask(dhcpwire.message(mac, arch=7, xid=xid), timeout=0.6)
        if bool(reply) == answered or time.time() > deadline:
            return reply
        time.sleep(0.1)


def test_a_change_is_read_while_serving_and_a_bad_one_refused_with_the_records_before_kept(proxy, machine, records, root, boot_link):
    (root / "big.img").write_bytes(os.urandom(3 << 20))
    # Chrooted away from the directory, and as nobody: it is read through the descriptor held.
    s = proxy("--machines", str(records), "-s", "-u", "nobody")
    # A download that lasts through every change: nothing restarts.
    download = subprocess.Popen([*boot_link[1].inside, sys.executable, "-c", SLOW_GET, dhcpwire.SERVER, "8080", "/big.img",
                                 str(root.parent / "got.img")])
    assert machine.ask(dhcpwire.message(STRANGER, arch=7), timeout=0.5) is None
    (records / "stranger").write_text(f"mac = {colons(STRANGER)}\nboot-file = efi-x64=welcome.efi\n")
    reply = ask_until(machine, STRANGER, answered=True)
    assert reply and reply["file"] == "welcome.efi", s.log_text()
    assert s.log_lines(f"--machines {records}: 4 records read again")

    (records / "typo").write_text(f"mac = {colons(NODE07)}\nacton = boot\n")
    assert s.log_lines(f"--machines: {records}/typo:2: unknown key \"acton\"")
    assert s.log_lines(f"--machines {records}: changed records refused, those before kept")
    time.sleep(0.6)
    assert machine.ask(dhcpwire.message(STRANGER, arch=7, xid=9))["file"] == "welcome.efi"

    (records / "typo").unlink()
    (records / "stranger").unlink()
    assert ask_until(machine, STRANGER, answered=False) is None, s.log_text()
    assert download.poll() is None, "the download did not last through the changes"
    assert download.wait(timeout=30) == 0
    assert (root.parent / "got.img").read_bytes() == (root / "big.img").read_bytes()
    assert s.process.poll() is None


def test_a_machine_nobody_listed_is_enlisted_for_the_operator_to_boot(proxy, machine, records):
    """--unknown-machines record: the stranger is left alone and its record written once, with
    what its DHCP said; the operator changes `ignore` to `boot` and it boots. The directory is
    the serving user's (nobody, in.tftpd's default -u) to write in."""
    os.chown(records, pwd.getpwnam("nobody").pw_uid, -1)
    s = proxy("--machines", str(records), "--unknown-machines", "record")
    assert machine.ask(dhcpwire.message(STRANGER, arch=7), timeout=1) is None
    written = records / "discovered-52-54-00-12-34-99"
    assert s.log_lines(f"--machines: machine {colons(STRANGER)} discovered: its record, which ignores it, written to {written}"), s.log_text()
    text = written.read_text()
    assert f"mac = {colons(STRANGER)}\nuuid = 01020304-0506-0708-090a-0b0c0d0e0f10\naction = ignore\n" in text, text
    assert "# Its request: DISCOVER on veth-s, vendor class PXEClient:Arch:00007:UNDI:003000, architecture 7 (efi-x64)." in text, text
    assert s.log_lines(f"--machines {records}: 4 records read again")
    # Known now, by the record written: its later requests write nothing more.
    assert ask_until(machine, STRANGER, answered=True, timeout=1.5) is None
    assert s.log_lines(f"DHCP DISCOVER {colons(STRANGER)} on veth-s: left alone: its machine record {written} says ignore")
    assert len(s.log_lines("discovered: its record")) == 1
    written.write_text(text.replace("action = ignore", "action = boot"))
    reply = ask_until(machine, STRANGER, answered=True)
    assert reply and reply["file"] == "ipxe.efi", s.log_text()


RENDERED = {
    "node07": f"mac = {colons(NODE07)}\nvar hostname = node07\nkernel = linux/vmlinuz\ninitrd = linux/initrd.img\n"
              "cmdline = console=ttyS0 hostname=${hostname} BOOTIF=01-${mac:hexhyp}\n",
    "node09": f"mac = {colons(LOCAL)}\naction = local\n",
}


def test_a_machines_loader_files_are_rendered_from_its_record_over_http_and_tftp(proxy, machine, records, boot_link, tmp_path):
    """The address a machine's DHCP REQUEST asks the site's server for is that machine's: its
    iPXE script over HTTP and TFTP, its GRUB and PXELINUX files, rendered from its record; a
    machine whose record says local is told to exit; an address DHCP never bound gets the
    default (here: none, so back to the firmware)."""
    for name, text in RENDERED.items():
        (records / name).write_text(text)
    s = proxy("--machines", str(records))
    client_ns = boot_link[1]

    def http(name):
        r = client_ns.run_inside(["curl", "-sf", f"http://{dhcpwire.SERVER}:8080/{name}"])
        assert r.returncode == 0, (name, r.stderr, s.log_text()[-2000:])
        return r.stdout.decode()

    def tftp(name):
        out = tmp_path / name.replace("/", "_")
        r = client_ns.run_inside(["tftp", "-m", "binary", dhcpwire.SERVER, str(s.port), "-c", "get", name, str(out)])
        assert r.returncode == 0 and out.exists(), (name, r.stdout, r.stderr, s.log_text()[-2000:])
        return out.read_text()

    # Before its DHCP, the client's address is nobody's: told to go back to the firmware.
    assert http("boot.ipxe") == "#!ipxe\n# a_machine_no_record_selects: not booted from the network here\nexit\n"
    # node07's broadcast REQUEST to the site's server (option 50: the address it takes).
    request = dhcpwire.message(NODE07, kind=dhcpwire.REQUEST, extra=dhcpwire.option(50, socket.inet_aton(dhcpwire.CLIENT))
                               + dhcpwire.option(54, socket.inet_aton("10.78.0.2")))
    assert machine.ask(request, timeout=0.5) is None  # the site's server answers that, not the proxy
    script = f"""#!ipxe
# {records}/node07
kernel /linux/vmlinuz initrd=initrd.img console=ttyS0 hostname=node07 BOOTIF=01-52-54-00-12-34-07
initrd /linux/initrd.img
boot
"""
    deadline = time.time() + 5
    while http("boot.ipxe") != script and time.time() < deadline:
        time.sleep(0.1)
    assert http("boot.ipxe") == script
    assert http("efi/autoexec.ipxe") == script
    assert tftp("boot.ipxe") == script
    assert "linux /linux/vmlinuz console=ttyS0 hostname=node07" in tftp("grub/grub.cfg-01-52-54-00-12-34-07")
    assert tftp("pxelinux.cfg/01-52-54-00-12-34-09").endswith("LOCALBOOT 0\n")
    # The root's files are still the root's.
    assert http("hello.txt") == "hello, rack\n"
    # The address is node09's now: it boots from its disk.
    request = dhcpwire.message(LOCAL, kind=dhcpwire.REQUEST, extra=dhcpwire.option(50, socket.inet_aton(dhcpwire.CLIENT)))
    machine.ask(request, timeout=0.5)
    deadline = time.time() + 5
    while not http("boot.ipxe").endswith("exit\n") and time.time() < deadline:
        time.sleep(0.1)
    assert http("boot.ipxe") == f"#!ipxe\n# {records}/node09: not booted from the network here\nexit\n"


def test_a_machine_whose_shims_grub_asks_for_nothing_more_is_said_with_the_hint(proxy, machine, records, boot_link, root, tmp_path):
    """A machine offered shim loads it and the GRUB beside it, then asks for nothing (as Debian
    12's GRUB 2.06 does behind a proxy: it takes its server from the site's ACK and stops at its
    prompt): after 15 s the log says so once, with what to do. Another whose GRUB goes on to its
    grub.cfg is not said."""
    (records / "node07").write_text(f"mac = {colons(NODE07)}\n")
    (records / "node09").write_text(f"mac = {colons(LOCAL)}\n")
    s = proxy("--machines", str(records), "--boot-file", "efi-x64=efi/shimx64.efi")
    for name in ("efi/shimx64.efi", "efi/grubx64.efi", "grub/grub.cfg"):
        path = root / name
        path.parent.mkdir(exist_ok=True)
        path.parent.chmod(0o755)
        path.write_bytes(b"x" * 3000)
        path.chmod(0o644)
    client_ns = boot_link[1]

    def boots(mac, names):
        assert ask_until(machine, mac, answered=True)["file"] == "efi/shimx64.efi", s.log_text()[-2000:]
        bind = dhcpwire.message(mac, kind=dhcpwire.REQUEST, extra=dhcpwire.option(50, socket.inet_aton(dhcpwire.CLIENT)))
        assert machine.ask(bind, timeout=0.3) is None
        for name in names:
            out = tmp_path / name.replace("/", "_")
            r = client_ns.run_inside(["tftp", "-m", "binary", dhcpwire.SERVER, str(s.port), "-c", "get", name, str(out)])
            assert r.returncode == 0 and out.stat().st_size == 3000, (name, r.stderr, s.log_text()[-2000:])

    boots(LOCAL, ["efi/shimx64.efi", "efi/grubx64.efi", "grub/grub.cfg"])
    boots(NODE07, ["efi/shimx64.efi", "efi/grubx64.efi"])
    said = s.log_lines(f"machine {colons(NODE07)} at {dhcpwire.CLIENT}: loaded the GRUB beside its shim (efi/shimx64.efi) "
                       "and has asked for nothing in 15 s: a GRUB before 2.14 takes its boot server from the site's DHCP ACK", timeout=25)
    assert said and "let the site's DHCP server name this server (next-server)" in said[0], s.log_text()[-2000:]
    time.sleep(1.5)
    assert len(s.log_lines("loaded the GRUB beside its shim", timeout=0)) == 1, s.log_text()[-2000:]


def test_a_once_machine_that_says_it_is_done_is_left_alone_after_and_after_a_restart(proxy, machine, records, boot_link):
    """once = yes: its command line carries its done URL; a POST there (as its installer's last
    command would) is taken, a wrong token refused; from then on its DHCP is left alone and its
    iPXE told to exit, after a restart too; `stampede machines done` does the same by hand."""
    (records / "node07").write_text(f"mac = {colons(NODE07)}\nonce = yes\nkernel = vmlinuz\ncmdline = stampede.done=${{done-url}}\n")
    (records / "node09").write_text(f"mac = {colons(LOCAL)}\nonce = yes\nkernel = vmlinuz\n")
    os.chown(records, pwd.getpwnam("nobody").pw_uid, -1)
    s = proxy("--machines", str(records))
    client_ns = boot_link[1]
    request = dhcpwire.message(NODE07, kind=dhcpwire.REQUEST, extra=dhcpwire.option(50, socket.inet_aton(dhcpwire.CLIENT)))
    machine.ask(request, timeout=0.3)
    script = ""
    for _ in range(50):
        script = client_ns.run_inside(["curl", "-sf", f"http://{dhcpwire.SERVER}:8080/boot.ipxe"]).stdout.decode()
        if "stampede.done=" in script:
            break
        time.sleep(0.1)
    url = re.search(r"stampede\.done=(\S+)", script).group(1)
    assert re.fullmatch(rf"http://{dhcpwire.SERVER}:8080/\.stampede/done/52-54-00-12-34-07/[0-9a-f]{{32}}", url), script

    def post(target):
        return client_ns.run_inside(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST", target]).stdout.decode()

    assert post(url[:-1] + ("0" if url[-1] != "0" else "1")) == "403"
    assert machine.ask(dhcpwire.message(NODE07, arch=7, xid=5), timeout=1)["file"] == "ipxe.efi"
    assert post(url) == "200"
    assert s.log_lines(f"--machines: machine {colons(NODE07)} done: its next boot is from its disk ({records}/.done-52-54-00-12-34-07)")
    time.sleep(0.6)
    assert machine.ask(dhcpwire.message(NODE07, arch=7, xid=6), timeout=1) is None
    assert s.log_lines(f"left alone: its machine record {records}/node07 says once, and its boot is done")
    assert client_ns.run_inside(["curl", "-sf", f"http://{dhcpwire.SERVER}:8080/boot.ipxe"]).stdout.decode().endswith("exit\n")

    # By hand, while serving: the server reads it at once.
    r = run([str(BINARY), "machines", "done", colons(LOCAL), "--machines", str(records)])
    assert r.returncode == 0 and f"({records}/.done-52-54-00-12-34-09)" in r.stdout.decode(), r
    assert ask_until(machine, LOCAL, answered=False) is None
    r = run([str(BINARY), "machines", "done", colons(STRANGER), "--machines", str(records)])
    assert r.returncode == 65 and "no record in" in r.stderr.decode(), r
    r = run([str(BINARY), "machines", "done", "52:54", "--machines", str(records)])
    assert r.returncode == 64, r

    # A restart keeps it; removing the file boots the machine again.
    s.stop()
    s = proxy("--machines", str(records))
    assert machine.ask(dhcpwire.message(NODE07, arch=7, xid=7), timeout=1) is None
    (records / ".done-52-54-00-12-34-07").unlink()
    assert ask_until(machine, NODE07, answered=True)["file"] == "ipxe.efi"


def test_the_racks_progress_machine_by_machine_in_events_metrics_the_view_and_the_table(proxy, machine, records, boot_link, root):
    """Each machine's stage as JSON events, machines per stage in the metrics, /machines on the
    metrics listener, and `stampede machines` printing it: node07 answered, bound, its script and
    kernel asked for; the stranger left alone, and why."""
    (records / "node07").write_text(f"mac = {colons(NODE07)}\nkernel = linux/vmlinuz\ncmdline = quiet\n")
    (root / "linux").mkdir()
    (root / "linux" / "vmlinuz").write_bytes(b"a kernel" * 1000)
    port = free_tcp_port()
    s = proxy("--machines", str(records), "--metrics", f"127.0.0.1:{port}", "--log-format", "json")
    assert machine.ask(dhcpwire.message(NODE07, arch=7))["file"] == "ipxe.efi"
    machine.ask(dhcpwire.message(NODE07, kind=dhcpwire.REQUEST, extra=dhcpwire.option(50, socket.inet_aton(dhcpwire.CLIENT))), timeout=0.3)
    assert machine.ask(dhcpwire.message(STRANGER, arch=7), timeout=0.5) is None
    client_ns = boot_link[1]
    for name in ("boot.ipxe", "linux/vmlinuz"):
        assert client_ns.run_inside(["curl", "-sf", "-o", "/dev/null", f"http://{dhcpwire.SERVER}:8080/{name}"]).returncode == 0
    inside = s.argv[:4]
    # What it took: its script and its kernel, each whole (counted as each answer ends, just after
    # the client has it all).
    script_bytes = len(f"#!ipxe\n# {records}/node07\nkernel /linux/vmlinuz quiet\nboot\n")
    deadline = time.time() + 5
    while True:
        view = json.loads(run([*inside, "curl", "-sf", f"http://127.0.0.1:{port}/machines"]).stdout)
        by_mac = {m["mac"]: m for m in view["machines"]}
        if by_mac[colons(NODE07)]["bytes"] == script_bytes + 8000 or time.time() > deadline:
            break
        time.sleep(0.1)
    assert by_mac[colons(NODE07)]["bytes"] == script_bytes + 8000, view
    assert by_mac[colons(NODE07)]["stage"] == "kernel" and by_mac[colons(NODE07)]["address"] == dhcpwire.CLIENT, view
    assert by_mac[colons(NODE07)]["record"] == f"{records}/node07"
    # Its transfers' log lines carry its MAC.
    transfers = [json.loads(line[line.index("{"):]) for line in s.log_text().splitlines() if '"event":"transfer"' in line]
    assert {t["file"]: t.get("machine") for t in transfers} == {"boot.ipxe": colons(NODE07), "linux/vmlinuz": colons(NODE07)}, transfers
    assert by_mac[colons(STRANGER)]["stage"] == "left_alone", view
    assert by_mac[colons(STRANGER)]["why"] == "no machine record selects it (--unknown-machines ignore)"
    text = run([*inside, "curl", "-sf", f"http://127.0.0.1:{port}/metrics"]).stdout.decode()
    for stage, count in (("kernel", 1), ("left_alone", 1), ("dhcp", 0), ("done", 0)):
        assert f'stampede_machines{{stage="{stage}"}} {count}' in text, text
    events = [json.loads(line[line.index("{"):]) for line in s.log_text().splitlines() if '"event":"machine"' in line]
    stages = [e["stage"] for e in events if e["client"] == colons(NODE07)]
    assert stages == ["dhcp", "script", "kernel"], events
    table = run([*inside, str(BINARY), "machines", "--metrics", f"127.0.0.1:{port}"])
    assert table.returncode == 0, table
    lines = table.stdout.decode().splitlines()
    assert lines[0].split() == ["MAC", "RECORD", "STAGE", "ADDRESS", "LAST", "SEEN", "BYTES", "WHY"], lines
    assert lines[1].split()[:4] == [colons(NODE07), "node07", "kernel", dhcpwire.CLIENT], lines
    assert lines[-1] == "2 machines: 1 left_alone, 1 kernel", lines
    only = run([*inside, str(BINARY), "machines", "list", "--metrics", f"127.0.0.1:{port}", "--stage", "left_alone"]).stdout.decode()
    assert colons(STRANGER) in only and colons(NODE07) not in only.splitlines()[1], only
    bad = run([str(BINARY), "machines", "--stage", "booted"])
    assert bad.returncode == 64 and "--stage booted: one of left_alone, dhcp" in bad.stderr.decode(), bad
    down = run([str(BINARY), "machines", "--metrics", f"127.0.0.1:{free_tcp_port()}"])
    assert down.returncode == 69 and "cannot connect" in down.stderr.decode(), down


def test_a_records_own_script_is_served_as_its_machines_ipxe_script(proxy, machine, records, root, boot_link, tmp_path):
    (records / "node07").write_text(f"mac = {colons(NODE07)}\nscript = scripts/node07.ipxe\n")
    (root / "scripts").mkdir()
    (root / "scripts" / "node07.ipxe").write_text("#!ipxe\necho the operator's own\n")
    (root / "boot.ipxe").write_text("#!ipxe\necho everyone's\n")
    s = proxy("--machines", str(records))
    machine.ask(dhcpwire.message(NODE07, kind=dhcpwire.REQUEST, extra=dhcpwire.option(50, socket.inet_aton(dhcpwire.CLIENT))), timeout=0.3)
    out = tmp_path / "got.ipxe"
    for _ in range(50):
        r = boot_link[1].run_inside(["tftp", "-m", "binary", dhcpwire.SERVER, str(s.port), "-c", "get", "boot.ipxe", str(out)])
        if r.returncode == 0 and "own" in out.read_text():
            break
        time.sleep(0.1)
    assert out.read_text() == "#!ipxe\necho the operator's own\n", s.log_text()[-2000:]
    got = boot_link[1].run_inside(["curl", "-sf", f"http://{dhcpwire.SERVER}:8080/boot.ipxe"]).stdout.decode()
    assert got == "#!ipxe\necho the operator's own\n"


def test_the_machine_api_decides_what_a_machine_boots_as_pixiecores_api_says(proxy, machine, machine_api, boot_link, tmp_path):
    """--machines-api: a machine the API answers 200 for is offered its boot when the API answers
    (its first DISCOVER, however slow the API: the request waits for the answer), and its iPXE
    script is rendered from the answer; one it answers 404 for is the directory's (here: left
    alone); an answer that would be code in the script is refused and its machine left alone; the
    calls are counted."""
    empty = tmp_path / "machines"
    empty.mkdir()
    url, asked = machine_api(boot_link[0], {
        colons(NODE07): {"kernel": "/assets/vmlinuz", "initrd": ["/assets/initrd.img"], "cmdline": "role=worker", "message": "Booting node07"},
        colons(IGNORED): {"kernel": "/assets/vmlinuz", "cmdline": "quiet\nshell"},
    }, delay=0.5)
    port = free_tcp_port()
    s = proxy("--machines", str(empty), "--machines-api", url, "--metrics", f"127.0.0.1:{port}")
    started = time.time()
    reply = machine.ask(dhcpwire.message(NODE07, arch=7), timeout=3)
    assert reply and reply["file"] == "ipxe.efi", s.log_text()
    assert 0.4 < time.time() - started < 2.5, "answered before the API did, or not at its answer"
    assert [line for line in asked() if line.startswith(f"GET /pixiecore/v1/boot/{colons(NODE07)}?arch=7&uuid=")
            and line.endswith("&stage=dhcp")], asked()
    assert machine.ask(dhcpwire.message(STRANGER, arch=7), timeout=1.5) is None
    assert s.log_lines(f"DHCP DISCOVER {colons(STRANGER)} on veth-s: left alone: no machine record selects it")
    assert machine.ask(dhcpwire.message(IGNORED, arch=7), timeout=1.5) is None
    assert s.log_lines(f"machine {colons(IGNORED)}: the answer of {url} is refused, the machine left alone: cmdline")
    # Bound by its REQUEST to the site's server: its script is the API's boot.
    machine.ask(dhcpwire.message(NODE07, kind=dhcpwire.REQUEST, extra=dhcpwire.option(50, socket.inet_aton(dhcpwire.CLIENT))), timeout=0.3)
    client_ns = boot_link[1]
    script = (f"#!ipxe\n# machines-api\necho Booting node07\nkernel {url.rsplit('/', 1)[0]}/assets/vmlinuz initrd=initrd.img role=worker\n"
              f"initrd {url.rsplit('/', 1)[0]}/assets/initrd.img\nboot\n")
    deadline = time.time() + 5
    while (got := client_ns.run_inside(["curl", "-sf", f"http://{dhcpwire.SERVER}:8080/boot.ipxe"]).stdout.decode()) != script and time.time() < deadline:
        time.sleep(0.1)
    assert got == script
    text = run([*s.argv[:4], "curl", "-s", f"http://127.0.0.1:{port}/metrics"]).stdout.decode()
    for outcome, count in (("listed", 1), ("not_listed", 1), ("refused", 1)):
        assert f'stampede_machines_api_calls_total{{outcome="{outcome}"}} {count}' in text, text
    assert 'stampede_boot_ignored_total{protocol="dhcp",reason="machine_api_asking"}' in text
    # Each call timed as the server saw it: the API's half second, in the histogram's buckets.
    timed = {line.split()[0]: float(line.split()[1]) for line in text.splitlines() if line.startswith("stampede_machines_api_call_seconds")}
    assert timed["stampede_machines_api_call_seconds_count"] == 3, timed
    assert timed['stampede_machines_api_call_seconds_bucket{le="0.25"}'] == 0, timed
    assert timed['stampede_machines_api_call_seconds_bucket{le="1.0"}'] == 3, timed
    assert 1.5 <= timed["stampede_machines_api_call_seconds_sum"] < 6, timed
    # And what each machine waited: the call, and none for a free caller here.
    waited = {line.split()[0]: float(line.split()[1]) for line in text.splitlines() if line.startswith("stampede_machines_api_wait_seconds")}
    assert waited["stampede_machines_api_wait_seconds_count"] == 3, waited
    assert timed["stampede_machines_api_call_seconds_sum"] <= waited["stampede_machines_api_wait_seconds_sum"] < 6, waited


def test_a_boot_going_on_renews_no_api_answer_and_a_firmware_starting_one_does(proxy, machine, machine_api, boot_link, tmp_path):
    """Past half of --machines-api-cache, iPXE's DHCP and its script (a boot going on) are answered
    from the kept answer and call nothing; the firmware's next DHCP (a boot starting) is answered
    from it too and has the API asked again behind it."""
    empty = tmp_path / "machines"
    empty.mkdir()
    url, asked = machine_api(boot_link[0], {colons(NODE07): {"kernel": "/assets/vmlinuz", "cmdline": "role=worker"}})
    # Kept 6 s (the inventory's clock counts whole seconds): renewable from 2 to 3 s after the
    # answer, expired from 5 to 6 s after it; the loaders ask at about 3.5 s, the firmware at 4.3.
    s = proxy("--machines", str(empty), "--machines-api", url, "--machines-api-cache", "6")

    def calls():
        return [line for line in asked() if line.startswith(f"GET /pixiecore/v1/boot/{colons(NODE07)}?")]
    reply = machine.ask(dhcpwire.message(NODE07, arch=7), timeout=3)
    assert reply and reply["file"] == "ipxe.efi", s.log_text()
    machine.ask(dhcpwire.message(NODE07, kind=dhcpwire.REQUEST, extra=dhcpwire.option(50, socket.inet_aton(dhcpwire.CLIENT))), timeout=0.3)
    assert len(calls()) == 1, calls()
    time.sleep(3.2)
    ipxe = machine.ask(dhcpwire.message(NODE07, arch=7, xid=0x5151, extra=dhcpwire.option(77, b"iPXE")), timeout=2)
    assert ipxe, s.log_text()
    got = boot_link[1].run_inside(["curl", "-sf", f"http://{dhcpwire.SERVER}:8080/boot.ipxe"]).stdout.decode()
    assert "role=worker" in got, got
    time.sleep(0.5)
    assert len(calls()) == 1, calls()
    reply = machine.ask(dhcpwire.message(NODE07, arch=7, xid=0x6161), timeout=2)
    assert reply and reply["file"] == "ipxe.efi", s.log_text()
    deadline = time.time() + 3
    while len(calls()) < 2 and time.time() < deadline:
        time.sleep(0.05)
    assert len(calls()) == 2 and calls()[1].endswith("&stage=dhcp"), calls()


def test_when_the_machine_api_is_down_a_machine_gets_the_directory_and_it_is_said(proxy, machine, tmp_path):
    (tmp_path / "machines").mkdir()
    (tmp_path / "machines" / "default").write_text("default = yes\nboot-file = efi-x64=rescue.efi\n")
    url = f"http://127.0.0.1:{free_tcp_port()}/pixiecore"
    s = proxy("--machines", str(tmp_path / "machines"), "--machines-api", url)
    # Its first request waits for the call, which fails at once: the directory's default.
    reply = machine.ask(dhcpwire.message(NODE07, arch=7), timeout=3)
    assert reply and reply["file"] == "rescue.efi", s.log_text()
    said = s.log_lines(f"the machine API cannot be asked about {colons(NODE07)}: {url}/v1/boot/{colons(NODE07)}?arch=7&uuid=")
    assert said and "stage=dhcp: cannot connect: Connection refused; a machine keeps its last answer until it expires" in said[0], said


def test_machines_api_flags_are_checked(root, tmp_path):
    for flags, message in ((["--machines-api", "http://127.0.0.1:1/"], "--machines-api needs --machines DIR"),
                           (["--machines", str(tmp_path), "--machines-api", "https://matchbox/"], "an http:// URL"),
                           (["--machines", str(tmp_path), "--machines-api", "http://a/", "--machines-api-cache", "0"], "--machines-api-cache")):
        r = run([str(BINARY), "serve", "-L", *flags, str(root)])
        assert r.returncode == 64 and message in r.stderr.decode(), (flags, r)


def test_the_storm_follows_each_machines_own_chain_from_its_record(proxy, boot_link, root, tmp_path):
    """storm --machines DIR: each of twelve machines has a record's MAC, sends from an address of
    its own (its 4011 REQUEST's ciaddr, which the proxy binds to it), and runs the autoexec.ipxe
    the server writes for it as iPXE 2.0 does, before and instead of its own DHCP and the
    DHCP-named boot.ipxe: its own kernel and the shared initrd, named from the root and so read
    over TFTP as the script was, every byte compared with the root, and its script's names with
    its record."""
    records = tmp_path / "rack"
    records.mkdir()
    (root / "kernels").mkdir()
    for name, size in (("ipxe.efi", 200_000), ("initrd.img", 300_001)):
        (root / name).write_bytes(os.urandom(size))
    sizes = {}
    for n in range(12):
        mac = f"52:54:00:7a:00:{n:02x}"
        (records / f"node-{n:02d}").write_text(f"mac = {mac}\nkernel = kernels/node-{n:02d}\ninitrd = initrd.img\ncmdline = hostname=node-{n:02d}\n")
        sizes[n] = 100_000 + 997 * n
        (root / "kernels" / f"node-{n:02d}").write_bytes(os.urandom(sizes[n]))
    for path in root.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    s = proxy("--machines", str(records))
    _, client_ns = boot_link
    assert client_ns.run_inside(["ip", "route", "add", "local", "10.78.0.96/27", "dev", "lo"]).returncode == 0
    r = client_ns.run_inside([str(BINARY), "storm", f"{dhcpwire.SERVER}:{s.port}", "--profile", "uefi-ipxe-follow", "--dhcp", dhcpwire.CLIENT,
                              "--source-range", "10.78.0.100", "--http", f"{dhcpwire.SERVER}:8080", "--machines", str(records),
                              "--clients", "12", "--verify-root", str(root), "--json"], timeout=120)
    assert r.returncode == 0, (r.stderr, s.log_text()[-3000:])
    result = json.loads(r.stdout)
    assert result["ok"] == 12 and result["failed"] == 0, result
    stages = {stage["stage"]: stage for stage in result["stages"]}
    follow = stages["ipxe try autoexec.ipxe follow"]
    scripts = sum(len(f"#!ipxe\n# {records}/node-{n:02d}\nkernel /kernels/node-{n:02d} initrd=initrd.img hostname=node-{n:02d}\n"
                      "initrd /initrd.img\nboot\n") for n in range(12))
    assert follow["ok"] == 12 and follow["bytes"] == scripts + sum(sizes.values()) + 12 * 300_001, follow
    assert stages["ipxe dhcp ipxe arch=7"]["ok"] == 0 and stages["ipxe http GET boot.ipxe follow"]["ok"] == 0, stages
    # The server saw each machine at its own address, its own MAC on its transfers.
    for n in range(12):
        assert s.log_lines(f"[52:54:00:7a:00:{n:02x}]"), n
