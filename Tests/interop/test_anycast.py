"""Several servers behind one anycast address (issue 25), in the namespaces anycast-lab.sh makes:
a rack of storm machines, each from its own address, through a router whose multipath route
spreads them over three Stampede servers. What breaks TFTP behind a fabric that hashes ports and
what does not, a server lost mid-boot, a server drained, a root swapped while machines boot."""
import os
import signal
import time

import pytest

from anycastlab import Lab
from conftest import BINARY, run

MACHINES = 300
MODES = {"default": (), "single-port": ("--single-port",)}


@pytest.fixture
def lab(tmp_path):
    """lab(policy, route="hash-threshold", servers=3) -> a Lab; torn down at the end."""
    if os.geteuid() != 0:
        pytest.skip("LOUD SKIP: network namespaces need root")
    made = []

    def make(policy, route="hash-threshold", servers=3):
        made.append(Lab(f"sa{os.getpid() % 10000}-{len(made)}", servers, policy, route, tmp_path, BINARY))
        return made[-1]

    yield make
    for lab in made:
        lab.down()


@pytest.fixture
def rack(tmp_path):
    """A boot root for uefi-ipxe: ipxe.efi over TFTP, the script, a kernel and an initrd over HTTP."""
    root = tmp_path / "rack"
    root.mkdir()
    for name, size in (("ipxe.efi", 256 << 10), ("vmlinuz", 512 << 10), ("initrd.img", 1 << 20)):
        (root / name).write_bytes(os.urandom(size))
    (root / "boot.ipxe").write_text("#!ipxe\nkernel vmlinuz\ninitrd initrd.img\nboot\n")
    for f in root.iterdir():
        f.chmod(0o644)
    root.chmod(0o755)
    return root


@pytest.mark.parametrize("policy", [0, 1])
@pytest.mark.parametrize("mode", MODES)
def test_what_a_fabric_that_hashes_ports_breaks(lab, rack, policy, mode, report):
    """Policy 0 hashes addresses: all of a machine's packets reach one server. Policy 1 hashes
    ports too: the ACKs to a transfer's fresh port (default mode) reach a server that never heard
    of it, unless the transfer stays on port 69 (--single-port)."""
    net = lab(policy)
    for i in (1, 2, 3):
        net.start(i, rack, *MODES[mode])
    result = net.report(net.storm(rack, MACHINES))
    counts = [machines for machines, _ in net.share().values()]
    report(f"anycast policy {policy} {mode}: {result['ok']} booted, {result['failed']} failed "
           f"{result['failures']}; machines per server {counts}")
    if policy == 1 and mode == "default":
        assert result["failed"] > MACHINES // 2, result
        assert result["stages"][0]["failed"] + result["stages"][1]["failed"] > 0, result
    else:
        assert result["ok"] == MACHINES and result["failed"] == 0, result
        # Every server took part, none took all: the route spreads the rack.
        assert all(c > 0 for c in counts) and max(counts) < MACHINES, counts


def test_a_server_lost_mid_boot_every_machine_still_boots(lab, rack, report):
    """kill -9 one server while the rack boots, its route withdrawn a second later (a routing
    daemon's detection): its machines' transfers fail, their firmware starts over (--reboot), and
    the resilient group sends them to the servers left without moving anyone else."""
    net = lab(1, "resilient")
    for i in (1, 2, 3):
        net.start(i, rack, "--single-port")
    storm = net.storm(rack, MACHINES, "--reboot", ramp=2)
    time.sleep(1.0)
    net.signal(2, signal.SIGKILL)
    time.sleep(1.0)
    net.withdraw(2)
    result = net.report(storm)
    report(f"anycast server lost mid-boot: {result['ok']} booted, {result['failed']} failed, "
           f"{result['reboots']} reboots {result['reboot_causes']}; those machines' boot p50 "
           f"{result['rebooted_p50_ms']} ms p99 {result['rebooted_p99_ms']} ms; every machine's p50 {result['p50_ms']} ms")
    assert result["ok"] == MACHINES and result["failed"] == 0, result
    assert result["reboots"] > 0 and result["rebooted_ok"] > 0, "no machine was on the lost server"


@pytest.mark.parametrize("order", ["sigterm-then-withdraw", "withdraw-then-sigterm"])
def test_draining_a_server(lab, rack, order, report):
    """Maintenance, counted without reboots so that every failed transfer shows. SIGTERM first:
    the server finishes what runs and stays silent to new TFTP requests, which their firmware
    sends again and the route takes elsewhere once the server has exited. Withdrawn first: its
    running transfers go to servers that never heard of them."""
    net = lab(0, "resilient")
    for i in (1, 2, 3):
        net.start(i, rack, "--single-port", "--grace", "10")
    # Each machine holds its first ACK of ipxe.efi for 1.5 s: transfers are running when the drain begins.
    storm = net.storm(rack, MACHINES, "--hold", "1.5", ramp=2)
    time.sleep(1.0)
    if order == "sigterm-then-withdraw":
        net.signal(2, signal.SIGTERM)
        assert net.wait(2) == 0
        net.withdraw(2)
    else:
        net.withdraw(2)
        net.signal(2, signal.SIGTERM)
        assert net.wait(2) == 0
    result = net.report(storm)
    report(f"anycast drain {order}: {result['ok']} booted, {result['failed']} failed {result['failures']}, "
           f"{result['transfers_failed']} transfers failed")
    if order == "sigterm-then-withdraw":
        assert result["failed"] == 0 and result["transfers_failed"] == 0, result
    else:
        assert result["failed"] > 0, result


def test_a_release_swapped_by_one_rename_while_machines_read(serve, root, tmp_path):
    """The servers' roots are kept identical by rsync into a new versioned directory and one
    atomic rename of a symlink inside the root. A transfer that began before the rename ends with
    the old version's bytes, whole; every request after it gets the new one; nothing mixes two
    versions within a file."""
    from tftpwire import RawClient, ack, request

    for version in ("v1", "v2"):
        (root / "releases" / version).mkdir(parents=True)
        (root / "releases" / version / "vmlinuz").write_bytes(os.urandom(300 * 512 + 7))
        (root / "releases" / version / "vmlinuz").chmod(0o644)
        (root / "releases" / version).chmod(0o755)
    (root / "releases").chmod(0o755)
    (root / "current").symlink_to("releases/v1")
    old = (root / "releases/v1/vmlinuz").read_bytes()
    new = (root / "releases/v2/vmlinuz").read_bytes()
    s = serve()
    client = RawClient(s)
    reply, tid = client.exchange(request("current/vmlinuz"))
    out = bytearray()
    block = 0
    while True:
        assert reply is not None and reply[0] == "DATA", reply
        if reply[1][0] == (block + 1) & 0xFFFF:
            out += reply[1][1]
            block += 1
        if block == 100:
            # The swap, as an operator makes it: a new link, renamed over the old in one step.
            (root / "current.new").symlink_to("releases/v2")
            os.rename(root / "current.new", root / "current")
        client.send(ack(block), tid)
        if len(reply[1][1]) < 512:
            break
        reply, _ = client.receive()
    client.close()
    assert bytes(out) == old
    after = tmp_path / "after"
    r = run([str(BINARY), "get", f"127.0.0.1:{s.port}", "current/vmlinuz", str(after)])
    assert r.returncode == 0, r.stderr
    assert after.read_bytes() == new


def test_reboot_needs_a_profile():
    r = run([str(BINARY), "storm", "127.0.0.1:9", "file.bin", "--reboot"])
    assert r.returncode == 64 and b"--reboot needs a profile" in r.stderr, r
