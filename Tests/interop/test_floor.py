"""The lockstep floor (Benchmarks/Floor/lockstep.c) is what the storm's × floor divides by: it
must carry what it says it carries, on kept pairs, with a socket per transfer and with sockets kept for
the next transfer, in both modes."""
import json
import subprocess

from conftest import REPO, run

FLOOR = REPO / ".build" / "floor-lockstep"


def floor(*arguments):
    assert FLOOR.exists(), "make test builds .build/floor-lockstep"
    r = run([str(FLOOR), "--rounds", "1", "--megabytes", "2", *arguments], timeout=60)  # a later --rounds wins
    assert r.returncode == 0, r.stderr.decode()
    return json.loads(r.stdout)


def test_kept_pairs_carry_every_block_and_no_ack_is_lost():
    result = floor("--pairs", "8")
    assert result["failures"] == {"uring": 0, "epoll": 0}
    assert result["transfer_kib"] == 0 and result["blocks_per_measurement"] == (2 << 20) // 1468
    assert {f["mode"] for f in result["cpu_s_per_gb"]} == {"uring", "epoll"}
    assert all(f["median"] > 0 for f in result["cpu_s_per_gb"])


def test_a_socket_per_transfer_runs_every_transfer_and_closes_each_socket():
    # 64 transfers of 32 KiB per mode, 8 clients: under a limit of 64 descriptors (8 clients and
    # at most 16 transfer sockets per mode, the listeners, epolls and the ring) every transfer ends,
    # so the sockets are closed as the transfers end, not kept.
    r = subprocess.run(["prlimit", "--nofile=64:64", str(FLOOR), "--rounds", "2", "--megabytes", "2", "--pairs", "8",
                        "--transfer-kib", "32"], capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr.decode()
    result = json.loads(r.stdout)
    assert result["failures"] == {"uring": 0, "epoll": 0}
    assert result["transfer_kib"] == 32 and result["transfers_per_measurement"] == 64
    assert all(f["median"] > 0 for f in result["cpu_s_per_gb"])


def test_a_transfer_that_is_a_whole_number_of_blocks_ends_with_an_empty_one():
    # 1468 KiB is 1,024 blocks of 1,468 bytes exactly: each transfer ends on an empty block, as
    # TFTP's do; were it not sent, the clients would never ask again and the floor would stall.
    result = floor("--pairs", "2", "--transfer-kib", "1468")
    assert result["failures"] == {"uring": 0, "epoll": 0} and result["transfers_per_measurement"] == 1


def test_a_bad_flag_is_exit_64():
    assert run([str(FLOOR), "--transfer-kib", "-1"]).returncode == 64
    assert run([str(FLOOR), "--what"]).returncode == 64


def test_sockets_kept_for_the_next_transfer_run_every_transfer_on_fewer_sockets():
    # --reuse: the same 64 transfers a mode, but a socket is opened only for a slot that never had
    # one (at most two per client: a client's next request may come before its last ACK) and
    # connected again for each later transfer; without it, one is opened per transfer.
    fresh = floor("--rounds", "2", "--pairs", "8", "--transfer-kib", "32")
    kept = floor("--rounds", "2", "--pairs", "8", "--transfer-kib", "32", "--reuse")
    assert fresh["failures"] == kept["failures"] == {"uring": 0, "epoll": 0}
    assert not fresh["reuse"] and kept["reuse"] and kept["transfers_per_measurement"] == 64
    assert fresh["sockets_opened"] == {"uring": 128, "epoll": 128}
    assert all(0 < opened <= 16 for opened in kept["sockets_opened"].values()), kept["sockets_opened"]
    assert run([str(FLOOR), "--reuse"]).returncode == 64  # kept sockets need transfers
