"""A slow disk never stalls a worker's loop (issue 21, defect 9): an upload's commit (fsync, the
rename, the directory's fsync) runs on the disk thread, a reservation the file system cannot make
is skipped rather than written block by block, and the start's sweep of stale temporaries runs
after the server says it serves. The disk: slowdisk.py, a FUSE mirror that takes its time."""
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import BACKENDS, BINARY, Server, run
from tftpwire import RawClient, ack, data, error, request

HERE = Path(__file__).parent


@pytest.fixture
def slow_disk(tmp_path):
    """slow_disk(fsync=seconds, readdir=seconds, lookup=seconds, read=seconds, open=seconds,
    write=seconds) -> a mounted directory whose files live in a backing directory of the test's (`lookup`, `read`,
    `open`: names beginning with "slow")."""
    if os.geteuid() != 0:
        pytest.skip("LOUD SKIP: mounting a FUSE file system needs root")
    mounted = []

    def make(fsync=0.0, readdir=0.0, lookup=0.0, read=0.0, open=0.0, write=0.0):
        backing, mount = tmp_path / f"backing{len(mounted)}", tmp_path / f"disk{len(mounted)}"
        backing.mkdir()
        mount.mkdir()
        backing.chmod(0o777)
        process = subprocess.Popen([sys.executable, str(HERE / "slowdisk.py"), str(backing), str(mount),
                                    "--fsync", str(fsync), "--readdir", str(readdir), "--lookup", str(lookup),
                                    "--read", str(read), "--open", str(open), "--write", str(write)],
                                   stderr=subprocess.PIPE)
        deadline = time.time() + 10
        while not os.path.ismount(mount):
            assert process.poll() is None and time.time() < deadline, process.stderr.read().decode(errors="replace")
            time.sleep(0.05)
        mounted.append((mount, process))
        return backing, mount

    yield make
    for mount, process in mounted:
        run(["umount", "-l", str(mount)])
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            # Detached already: a read it was still sleeping on holds it; nothing is left to lose.
            process.kill()
            process.wait(timeout=10)


class Heartbeat:
    """A lockstep download that keeps going while something else happens, noting how long the
    server took to answer each ACK: the longest wait is the loop's longest stall."""

    def __init__(self, server, name):
        self.client = RawClient(server, timeout=10)
        self.name = name
        self.gaps = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run)
        self.thread.start()

    def run(self):
        reply, tid = self.client.exchange(request(self.name))
        block = 0
        while not self.stop.is_set() and reply is not None and reply[0] == "DATA":
            block = reply[1][0]
            if len(reply[1][1]) < 512:
                reply, tid = self.client.exchange(request(self.name))  # start over, same socket
                continue
            sent = time.monotonic()
            self.client.send(ack(block), tid)
            reply, _ = self.client.receive()
            self.gaps.append((sent, time.monotonic() - sent))
        if reply is not None and tid:
            self.client.send(error(0, "done"), tid)

    def finish(self):
        self.stop.set()
        self.thread.join()
        self.client.close()
        return self.gaps


def serve_on(directory, backend, *args):
    # One worker: the heartbeat and the upload share its loop, as a busy server's transfers do.
    return Server(directory, ("--workers", "1", *args), backend=backend)


def beating_server(slow_disk, backend, fsync=0.0, write=0.0):
    """A server taking uploads on a slow disk, and a heartbeat already reading from it."""
    backing, disk = slow_disk(fsync=fsync, write=write)
    (backing / "big.bin").write_bytes(os.urandom(8 << 20))
    (backing / "big.bin").chmod(0o644)
    s = serve_on(disk, backend, "-c")
    beat = Heartbeat(s, "big.bin")
    time.sleep(0.3)
    return backing, s, beat


def put_beside_a_heartbeat(slow_disk, backend, tmp_path, **delays):
    """A 1 MiB upload (blksize 1468) to a server on a slow disk (`delays`, slow_disk's) while its
    heartbeat reads: how long the put took, and the heartbeat's waits while it ran. The file
    arrived whole."""
    backing, s, beat = beating_server(slow_disk, backend, **delays)
    try:
        upload = tmp_path / "up.bin"
        upload.write_bytes(os.urandom(1 << 20))
        started = time.monotonic()
        r = run([str(BINARY), "put", f"127.0.0.1:{s.port}", str(upload), "up.bin", "--blksize", "1468"], timeout=60)
        took = time.monotonic() - started
        gaps = beat.finish()
    finally:
        s.stop()
    assert r.returncode == 0, r.stderr
    assert (backing / "up.bin").read_bytes() == upload.read_bytes()
    during = [gap for at, gap in gaps if started <= at <= started + took]
    assert len(during) > 100, f"{len(during)} blocks read during the upload"
    return took, during


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_slow_commit_never_stalls_the_other_transfers(slow_disk, backend, tmp_path, report):
    took, during = put_beside_a_heartbeat(slow_disk, backend, tmp_path, fsync=2.0)
    assert took >= 2.0, f"the put took {took:.2f} s: the disk was not slow"
    assert max(during) < 0.5, f"a transfer waited {max(during):.2f} s for the server while it committed"
    report(f"a 2 s fsync during an upload ({backend}): the other transfer's longest wait {max(during) * 1000:.0f} ms")


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_upload_onto_a_slow_disk_slows_that_upload_alone(slow_disk, backend, tmp_path, report):
    """Every write takes 0.2 s: the upload's blocks are written on the disk thread, 64 KiB at a
    time, while its ACKs wait for the disk; the other transfer on the same loop never does."""
    took, during = put_beside_a_heartbeat(slow_disk, backend, tmp_path, write=0.2)
    # 16 writes of 64 KiB at 0.2 s each, and the commit's: the upload waited for the disk.
    assert took >= 2.0, f"the put took {took:.2f} s: the disk was not slow"
    assert max(during) < 0.5, f"a transfer waited {max(during):.2f} s for the server while it wrote an upload"
    report(f"0.2 s per write during a 1 MiB upload ({backend}): it took {took:.1f} s, "
           f"the other transfer's longest wait {max(during) * 1000:.0f} ms")


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_reservation_the_disk_cannot_make_costs_no_stall(slow_disk, backend):
    backing, s, beat = beating_server(slow_disk, backend)
    try:
        writer = RawClient(s)
        started = time.monotonic()
        reply, tid = writer.exchange(request("huge.bin", write=True, options=(("tsize", str(256 << 20)),)))
        assert reply[0] == "OACK", reply
        # DATA 1 is when the server reserves the announced size: this file system cannot.
        writer.send(data(1, b"x" * 512), tid)
        assert writer.receive()[0] == ("ACK", (1, b""))
        answered = time.monotonic() - started
        writer.send(error(0, "enough"), tid)
        writer.close()
        time.sleep(0.2)
        gaps = beat.finish()
    finally:
        s.stop()
    assert answered < 0.5, f"DATA 1 answered after {answered:.2f} s"
    assert max(gap for _, gap in gaps) < 0.5
    assert [p.name for p in backing.iterdir() if p.name.startswith(".stampede-upload")] == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_start_does_not_wait_for_the_sweep_of_stale_uploads(slow_disk, backend):
    backing, disk = slow_disk(readdir=1.0)
    for name in ("a", "b", "c", "d"):
        (backing / name).mkdir()
        (backing / name).chmod(0o777)  # the sweep runs as the serving user
    stale = backing / "c" / ".stampede-upload-0123456789abcdef"
    stale.write_bytes(b"left by a killed server")
    (backing / "hello.txt").write_text("hello\n")
    (backing / "hello.txt").chmod(0o644)
    started = time.monotonic()
    s = serve_on(disk, backend)
    try:
        ready = time.monotonic() - started
        assert RawClient(s).download("hello.txt") == b"hello\n"
        # Five directories at 1 s each: the sweep ends later, and removes the stale file.
        assert s.log_lines("temporary files of interrupted uploads", timeout=20)
        assert not stale.exists()
    finally:
        s.stop()
    assert ready < 2.5, f"the server said it serves {ready:.2f} s after it started"


def hold_thread(pid, name, seconds):
    """Stops the thread of process `pid` named `name` (its /proc comm: the server names its threads)
    for `seconds` and lets it go on, the others running meanwhile: ptrace's SEIZE and INTERRUPT
    stop one thread, where a signal would stop the whole process."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    PTRACE_DETACH, PTRACE_SEIZE, PTRACE_INTERRUPT, WALL = 17, 0x4206, 0x4207, 0x40000000
    # A thread names itself once it runs, which may be just after the server said READY=1.
    deadline = time.time() + 5
    while True:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")
                if open(f"/proc/{pid}/task/{t}/comm").read().strip() == name]
        if len(tids) == 1 or time.time() > deadline:
            break
        time.sleep(0.02)
    assert len(tids) == 1, f"no single thread named {name}"
    tid = tids[0]
    assert libc.ptrace(PTRACE_SEIZE, tid, None, None) == 0, os.strerror(ctypes.get_errno())
    assert libc.ptrace(PTRACE_INTERRUPT, tid, None, None) == 0, os.strerror(ctypes.get_errno())
    os.waitpid(tid, WALL)
    time.sleep(seconds)
    assert libc.ptrace(PTRACE_DETACH, tid, None, None) == 0, os.strerror(ctypes.get_errno())


def test_a_stuck_http_loop_stops_the_watchdog_pings(tmp_path):
    """systemd restarts a server whose loop is stuck: a TFTP worker that stops turning stops the
    pings, and so must an HTTP loop. Nothing a loop does waits on the disk any more (the tests
    below), so the loop is held from outside: its thread ("http-0") is stopped for 4 s while the
    others run (a loop silent for 2 s is stuck). Meanwhile no WATCHDOG=1 goes out, the log says which loop, and once it goes on it
    answers and the pings come back."""
    import socket
    from conftest import free_tcp_port, free_udp_port
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "hello.txt").write_text("hello\n")
    (tmp_path / "root" / "hello.txt").chmod(0o644)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = tmp_path / "notify"
    listener.bind(str(path))
    listener.settimeout(10)
    web, port = free_tcp_port(), free_udp_port()
    environment = dict(os.environ, NOTIFY_SOCKET=str(path), WATCHDOG_USEC="200000")
    log = open(tmp_path / "server.log", "w+")
    server = subprocess.Popen([str(BINARY), "-l", "-L", "-a", f"127.0.0.1:{port}", "--http", f"127.0.0.1:{web}",
                               "--workers", "1", "-u", "root", str(tmp_path / "root")], env=environment, stderr=log)
    try:
        assert "READY=1" in listener.recv(4096).decode()
        pings = []
        started = time.time()
        held = []  # what the holder says: None when it held the thread, else its failure
        def hold():
            try:
                hold_thread(server.pid, "http-0", 4.0)
                held.append(None)
            except BaseException as failure:
                held.append(failure)
        holder = threading.Thread(target=hold)
        holder.start()
        while time.time() - started < 6:
            if listener.recv(4096) == b"WATCHDOG=1":
                pings.append(time.time() - started)
        holder.join()
        assert held == [None], held
        gaps = [b - a for a, b in zip([0.0] + pings, pings + [6.0])]
        assert max(gaps) > 1.5, pings  # the pings stopped while the loop was held
        assert pings and pings[-1] > 5.0, pings  # and came back when it went on
        assert run(["curl", "-s", f"http://127.0.0.1:{web}/hello.txt"]).stdout == b"hello\n"
        log.flush()
        assert "HTTP loop 0 has not turned for more than the watchdog interval" in (tmp_path / "server.log").read_text()
    finally:
        server.send_signal(15)
        server.wait(timeout=15)
        listener.close()


def answers_others_while_the_disk_holds(slow_disk, backend, tmp_path, slow_name, delays, missing=None, protocols=("http", "tftp"),
                                        flags=()):
    """Serves a slow disk (`delays` for names beginning with "slow") with one TFTP worker and one
    HTTP loop; asks for `slow_name` over HTTP and TFTP (and for `missing`, absent, if given), and
    while the disk holds them, asks three times for a cached file over both, each answer within a
    second. Then the slow file must come whole, and the missing one be a 404 and a TFTP "File not
    found". Returns how long the slow fetches took."""
    from conftest import free_tcp_port
    backing, mount = slow_disk(**delays)
    slow = os.urandom(1 << 20)
    (backing / "hello.txt").write_text("hello\n")
    (backing / slow_name).write_bytes(slow)
    for f in backing.iterdir():
        f.chmod(0o644)
    web = free_tcp_port()
    s = Server(mount, ("--http", f"127.0.0.1:{web}", "--workers", "1", "-u", "root", *flags), backend=backend)
    try:
        url, tftp = f"http://127.0.0.1:{web}", f"tftp://127.0.0.1:{s.port}"
        bases = [(kind, base) for kind, base in (("http", url), ("tftp", tftp)) if kind in protocols]
        assert run(["curl", "-s", f"{url}/hello.txt"]).stdout == b"hello\n"  # in the cache now
        started = time.time()
        fetches = [subprocess.Popen(["curl", "-s", "-o", str(tmp_path / f"{kind}.img"), f"{base}/{slow_name}"])
                   for kind, base in bases]
        if missing:
            absent = [subprocess.Popen(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", f"{url}/{missing}"],
                                       stdout=subprocess.PIPE),
                      subprocess.Popen(["curl", "-s", "-o", "/dev/null", f"{tftp}/{missing}"])]
        time.sleep(0.3)
        for _ in range(3):
            asked = time.time()
            for _, base in bases:
                assert run(["curl", "-s", f"{base}/hello.txt"]).stdout == b"hello\n"
            assert time.time() - asked < 1.0, "an answer waited behind another file's lookup or read"
        answered = time.time() - started
        assert all(fetch.wait(timeout=30) == 0 for fetch in fetches)
        assert all((tmp_path / f"{kind}.img").read_bytes() == slow for kind, _ in bases)
        if missing:
            assert absent[0].communicate(timeout=30)[0] == b"404"
            assert absent[1].wait(timeout=30) == 68  # curl's TFTP "File not found"
        return answered, time.time() - started
    finally:
        s.stop()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_cached_file_is_answered_while_another_files_first_read_waits_on_the_disk(slow_disk, backend, tmp_path):
    """A version the cache does not hold is read on a disk thread, never on an event loop: while
    the disk takes seconds over a cold file's first read, the same loop (one worker, one HTTP
    loop) answers what is cached at once, over TFTP and HTTP; the cold file comes whole when the
    disk has it."""
    answered, slow = answers_others_while_the_disk_holds(slow_disk, backend, tmp_path, "slow.img", {"read": 3.0})
    assert answered < 2.5 <= slow  # the cached answers all came while the disk still held slow.img's read


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_name_the_file_system_is_slow_to_look_up_holds_no_other_answer(slow_disk, backend, tmp_path):
    """Issue 57, item 4: a loop looks at a name from the kernel's caches alone; a name they cannot
    resolve (here the file system takes 3 s over each lookup of a "slow" name, a cold directory on
    a busy disk) is looked at on a disk thread. Meanwhile the same loop answers another file at
    once, over TFTP and HTTP; the slow file comes whole, and the slow missing one is a 404 and a
    TFTP "File not found", when the file system has answered."""
    answered, slow = answers_others_while_the_disk_holds(slow_disk, backend, tmp_path, "slow-name.img", {"lookup": 3.0},
                                                         missing="slow-missing.img")
    assert answered < 2.8 <= slow  # the others' answers all came while the file system still looked


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_streamed_file_on_a_slow_disk_holds_no_other_answer(slow_disk, backend, tmp_path):
    """Issue 57, item 4: a file too large to cache (here every file: --cache-file-limit 0) is sent
    as a disk thread reads it ahead: over HTTP as far as the page cache holds it, over TFTP each
    block read from the page cache alone (a block still on the disk waits for the read-ahead). While
    the disk takes 3 s over its first bytes, the same HTTP loop and TFTP worker answer another file
    at once, and the slow one comes whole over both."""
    answered, slow = answers_others_while_the_disk_holds(slow_disk, backend, tmp_path, "slow.img", {"read": 3.0},
                                                         flags=("--cache-file-limit", "0"))
    assert answered < 2.5 <= slow


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_remap_probe_the_file_system_is_slow_to_answer_holds_no_other_answer(slow_disk, backend, tmp_path):
    """Issue 57, item 4: an `E` rule asks whether its name can be served; the kernel's caches answer
    on the loop, and a name they cannot (here the file system takes 3 s over each lookup of a "slow"
    name) is probed on a disk thread. Meanwhile the same loop answers another file at once, over
    TFTP and HTTP; the slow file comes whole, and the slow missing one is a 404 and a TFTP "File not
    found", when the file system has answered."""
    rules = tmp_path / "rules"
    rules.write_text("rE ^(slow.*)$ \\1\n")
    answered, slow = answers_others_while_the_disk_holds(slow_disk, backend, tmp_path, "slow-name.img", {"lookup": 3.0},
                                                         missing="slow-missing.img", flags=("-m", str(rules)))
    assert answered < 2.8 <= slow
