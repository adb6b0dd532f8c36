"""A rack boot replayed at a tenth of `make bench`'s rack: 2,000 machines powering on over a
second, each the uefi-ipxe-tftp profile's first stages (the UEFI size probe, ipxe.efi of 1 MiB,
autoexec.ipxe not found, boot.ipxe), every byte verified, the storm in two processes, against a
server held to 1,000 descriptors (so that most reads share its transfer sockets)."""
import json
import os
import subprocess
import threading
import time

from conftest import BINARY

MACHINES = 2000


def test_two_thousand_machines_boot_uefi_ipxe_with_fewer_descriptors_than_machines(serve, root, report):
    (root / "ipxe.efi").write_bytes(os.urandom(1 << 20))
    (root / "boot.ipxe").write_text("#!ipxe\nkernel vmlinuz\ninitrd initrd.img\nboot\n")
    for f in ("ipxe.efi", "boot.ipxe"):
        (root / f).chmod(0o644)
    s = serve(prefix=("prlimit", "--nofile=1000:1000"))
    peak = [s.fd_count()]
    done = threading.Event()

    def sample():
        while not done.wait(0.05):
            try:
                peak[0] = max(peak[0], s.fd_count())
            except FileNotFoundError:
                return

    sampler = threading.Thread(target=sample)
    sampler.start()
    started = time.time()
    try:
        storms = [subprocess.Popen([str(BINARY), "storm", f"127.0.0.1:{s.port}", "--profile", "uefi-ipxe-tftp", "--stages", "4",
                                    "--clients", str(MACHINES), "--ramp", "1", "--slice", f"{i}/2",
                                    "--verify-root", str(root), "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                  for i in range(2)]
        results = []
        for storm in storms:
            out, err = storm.communicate(timeout=240)
            assert storm.returncode == 0, err.decode(errors="replace") + out.decode(errors="replace")[:3000]
            results.append(json.loads(out))
    finally:
        done.set()
        sampler.join()
    wall = time.time() - started
    assert sum(r["ok"] for r in results) == MACHINES and sum(r["failed"] for r in results) == 0
    stages = [{key: sum(r["stages"][i][key] for r in results) for key in ("ok", "failed", "not_found", "bytes")}
              for i in range(4)]
    assert [stage["stage"] for stage in results[0]["stages"]] == [
        "uefi probe ipxe.efi", "uefi get ipxe.efi", "ipxe try autoexec.ipxe follow", "ipxe get boot.ipxe"]
    assert stages[0] == {"ok": MACHINES, "failed": 0, "not_found": 0, "bytes": 0}  # the probe
    assert stages[1] == {"ok": MACHINES, "failed": 0, "not_found": 0, "bytes": MACHINES << 20}
    assert stages[2]["ok"] == MACHINES and stages[2]["not_found"] >= MACHINES  # autoexec.ipxe
    assert stages[3]["ok"] == MACHINES and stages[3]["bytes"] == MACHINES * (root / "boot.ipxe").stat().st_size
    assert peak[0] <= 1000
    boots = sorted(ms for r in results for ms in r["boot_ms"])
    assert len(boots) == MACHINES
    report(f"rack of {MACHINES} (uefi-ipxe-tftp, first 4 stages) on {s.backend}, server at most 1,000 fds: "
           f"p50 {boots[len(boots) // 2] / 1000:.1f} s, p99 {boots[int(len(boots) * 0.99) - 1] / 1000:.1f} s, "
           f"peak {peak[0]} fds, RSS {s.rss_kib() // 1024} MiB, {wall:.0f} s")
