"""Machine records (`--machines DIR`): which machines the proxy boots, and what, on the boot link
of test_proxy_dhcp.py. A listed machine gets its record's boot file; one its record or an
Ironic hosts file says to ignore, one that boots from its disk and one nobody listed hear
nothing, each said in the log and counted; bad records are refused at start with file and line."""
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
        assert f'stampede_boot_ignored_total{{reason="{reason}"}} {count}' in text, text


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
    assert f"stampede: --machines: {records}/node10:2: arch arm: not one of bios, efi-x86, efi-x64, efi-arm64, http-x64, http-arm64, " \
           "nor an architecture number (0-65535)" in said, said
    r = run([str(BINARY), "-L", "-a", "127.0.0.1:0", "--proxy-dhcp", "10.0.0.1", "--machines", str(records / "none"), str(root)], timeout=20)
    assert r.returncode == 78 and f"{records}/none: cannot read the directory: No such file or directory" in r.stderr.decode(), r
    (records / "node10").unlink()
    r = run([str(BINARY), "-L", "-a", "127.0.0.1:0", "--proxy-dhcp", "10.0.0.1", "--machines", str(records), str(root)], timeout=20)
    assert r.returncode == 78 and f"{records}/node11:1: mac {colons(NODE07)} is selected by {records}/node07:2 too" in r.stderr.decode(), r
    r = run([str(BINARY), "-L", "-a", "127.0.0.1:0", "--unknown-machines", "boot", str(root)], timeout=20)
    assert r.returncode == 64 and "--unknown-machines is for --machines" in r.stderr.decode(), r
