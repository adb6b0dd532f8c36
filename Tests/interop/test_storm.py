"""`stampede storm`, the load generator, against a real server: its verdicts and its JSON."""
import json
import time

from conftest import BINARY, run


def storm(server, *args, timeout=120):
    r = run([str(BINARY), "storm", f"127.0.0.1:{server.port}", *args, "--json"], timeout=timeout)
    return r.returncode, json.loads(r.stdout), r.stderr


def test_a_rack_of_verified_downloads(serve, root, report):
    s = serve()
    code, result, err = storm(s, "one-mib.bin", "--clients", "300", "--blksize", "1468",
                              "--verify", str(root / "one-mib.bin"))
    assert code == 0, err
    assert result["ok"] == 300 and result["failed"] == 0
    assert result["bytes"] == 300 << 20
    assert result["peak_active"] == 300
    assert 0 < result["p50_ms"] <= result["p99_ms"] <= result["max_ms"]
    report(f"storm 300 x 1 MiB on {s.backend}: {result['seconds']:.2f} s, {result['mb_per_s']:.0f} MB/s, "
           f"p99 {result['p99_ms']:.0f} ms, storm CPU {result['client_cpu_s']:.2f} s")


def test_windowed_and_lockstep_transfers_of_many_small_files(serve, root):
    s = serve()
    code, result, err = storm(s, "exact-512.bin", "--clients", "50", "--total", "500", "--windowsize", "4",
                              "--verify", str(root / "exact-512.bin"))
    assert code == 0, err
    assert result["ok"] == 500 and result["peak_active"] == 50


def test_a_wrong_byte_fails_every_transfer_and_the_exit_code(serve, root, tmp_path):
    s = serve()
    wrong = bytearray((root / "one-mib.bin").read_bytes())
    wrong[700_000] ^= 1
    (tmp_path / "wrong").write_bytes(wrong)
    code, result, _ = storm(s, "one-mib.bin", "--clients", "5", "--blksize", "1468", "--verify", str(tmp_path / "wrong"))
    assert code == 1
    assert result["ok"] == 0 and result["failures"] == {"corrupted": 5}
    assert "byte 700000 differs" in result["failure_examples"][0]


def test_a_dead_server_is_reported_as_lost_transfers(tmp_path):
    from conftest import free_udp_port
    port = free_udp_port()
    r = run([str(BINARY), "storm", f"127.0.0.1:{port}", "f", "--clients", "3", "--retransmit", "100",
             "--retries", "2", "--json"], timeout=30)
    result = json.loads(r.stdout)
    assert r.returncode == 1
    assert result["failed"] == 3 and result["ok"] == 0
    # Nobody listens: either our retries run out or the kernel says the port is closed.
    assert set(result["failures"]) <= {"timed out", "socket error ECONNREFUSED"}, result


def test_duration_keeps_the_storm_going_then_lets_transfers_finish(serve):
    s = serve()
    started = time.time()
    code, result, err = storm(s, "hello.txt", "--clients", "20", "--duration", "1.5")
    elapsed = time.time() - started
    assert code == 0, err
    assert 1.4 < elapsed < 10
    assert result["ok"] > 20 and result["failed"] == 0


def test_bad_storm_flags_are_usage_errors():
    for args in (["--clients", "0"], ["--blksize", "7"], ["--backend", "x"], ["--duration", "-1"]):
        r = run([str(BINARY), "storm", "127.0.0.1:69", "f", *args])
        assert r.returncode == 64, (args, r.stderr)


def test_threads_share_the_clients_and_merge_their_reports(serve, root):
    s = serve()
    code, result, err = storm(s, "exact-512.bin", "--clients", "40", "--total", "201", "--threads", "2",
                              "--verify", str(root / "exact-512.bin"))
    assert code == 0, err
    assert result["ok"] == 201 and result["bytes"] == 201 * 2048
    assert result["peak_active"] == 40


def test_sigint_ends_the_storm_and_still_reports(serve):
    import signal
    import subprocess
    s = serve()
    p = subprocess.Popen([str(BINARY), "storm", f"127.0.0.1:{s.port}", "hello.txt", "--clients", "10",
                          "--duration", "60", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1)
    p.send_signal(signal.SIGINT)
    out, _ = p.communicate(timeout=10)
    result = json.loads(out)
    assert result["ok"] > 0
    assert set(result["failures"]) <= {"interrupted"}


def test_over_max_per_client_and_max_transfers_the_clients_retry_until_served(serve, root):
    s = serve("--max-per-client", "4")
    code, result, _ = storm(s, "one-mib.bin", "--clients", "10", "--blksize", "1468", "--verify", str(root / "one-mib.bin"))
    assert code == 0 and result["ok"] == 10 and result["retransmits"] > 0, result
    t = serve("--max-transfers", "3")
    code, result, _ = storm(t, "one-mib.bin", "--clients", "10", "--blksize", "1468", "--verify", str(root / "one-mib.bin"))
    assert code == 0 and result["ok"] == 10 and result["retransmits"] > 0, result
    for server, reason in ((s, "Too many transfers from your address"), (t, "Server busy, try again later")):
        server.stop()
        assert reason in server.log_text() and "requests unanswered" in server.log_text()


def test_max_per_client_and_max_transfers_with_when_busy_error_refuse_the_rest(serve, root):
    s = serve("--max-per-client", "4", "--when-busy", "error")
    code, result, _ = storm(s, "one-mib.bin", "--clients", "10", "--blksize", "1468")
    assert code == 1
    assert result["ok"] == 4 and result["failures"] == {"server error 0": 6}
    assert "Too many transfers from your address" in s.log_text()
    t = serve("--max-transfers", "3", "--when-busy", "error")
    code, result, _ = storm(t, "one-mib.bin", "--clients", "10", "--blksize", "1468")
    assert result["ok"] == 3 and result["failures"] == {"server error 0": 7}
    assert "Server busy" in t.log_text()


def test_the_peak_is_of_all_threads_at_once_not_their_sum(serve, root):
    """Issue 21, defect 7: each thread's peak was added up. Two machines a second apart, each
    done in a few milliseconds, on two threads: never two at once."""
    s = serve()
    code, result, err = storm(s, "hello.txt", "--clients", "2", "--threads", "2", "--ramp", "2")
    assert code == 0, err
    assert result["ok"] == 2 and result["peak_active"] == 1, result


def test_a_size_probe_is_checked_against_the_file(serve, root, tmp_path):
    """Issue 21, defect 7: the UEFI size probe never compared the OACK's tsize with the file, so
    the storm said "booted" where EDK2 would have failed."""
    (root / "bootx64.efi").write_bytes(b"x" * 3000)
    (root / "bootx64.efi").chmod(0o644)
    (tmp_path / "bootx64.efi").write_bytes(b"x" * 4000)
    s = serve()
    code, result, _ = storm(s, "--profile", "uefi", "--stages", "1", "--clients", "2", "--verify-root", str(tmp_path))
    assert code == 1 and result["failed"] == 2, result
    code, result, err = storm(s, "--profile", "uefi", "--stages", "1", "--clients", "2", "--verify-root", str(root))
    assert code == 0 and result["ok"] == 2, err
