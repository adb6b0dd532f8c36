"""Drop-in for in.tftpd: remap rules, inetd and systemd sockets, detaching, pidfile, syslog, argv[0]."""
import os
import pwd
import re
import resource
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from conftest import BACKENDS, BINARY, free_udp_port, run
from tftpwire import RawClient, ack, request

RULES = r"""
# tftpd-hpa style rules, as a PXE site writes them
a       \.\.                       No\ climbing
rg      \\                         /            # DOS separators
ri      ^/?pxelinux\.cfg/          pxelinux.cfg/
r       ^boot/by-ip$               hosts/\i
a~G     ^(hosts|pxelinux|[a-z]+\.)  Not\ here
"""


def fetch(port, name, host="127.0.0.1"):
    """(exit status, bytes) of curl fetching `name`."""
    url_host = f"[{host}]" if ":" in host else host
    r = run(["curl", "-s", "--max-time", "10", "-o", "-", f"tftp://{url_host}:{port}/{name}"])
    return r.returncode, r.stdout


@pytest.fixture
def site(root):
    (root / "pxelinux.cfg").mkdir()
    (root / "pxelinux.cfg" / "default").write_text("DEFAULT linux\n")
    (root / "hosts").mkdir()
    (root / "hosts" / "127.0.0.1").write_text("for the loopback host\n")
    for p in root.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    rules = root.parent / "rules"
    rules.write_text(RULES)
    return root, rules


def test_remap_rules_choose_files_and_refuse_as_tftpd_hpa_does(serve, site):
    root, rules = site
    s = serve("-m", str(rules))
    assert fetch(s.port, "PXELINUX.CFG/default") == (0, b"DEFAULT linux\n")
    r = run(["tftp", "-m", "binary", "127.0.0.1", str(s.port), "-c", "get", r"pxelinux.cfg\default", "/dev/stdout"])
    assert r.stdout == b"DEFAULT linux\n", r
    assert fetch(s.port, "boot/by-ip") == (0, b"for the loopback host\n")
    assert fetch(s.port, "hello.txt")[1] == b"hello, rack\n"
    c = RawClient(s)
    assert c.exchange(request("../etc/passwd"))[0] == ("ERROR", (2, "No climbing"))
    assert c.exchange(request("secret/key"))[0] == ("ERROR", (2, "Not here"))
    assert 'remapped to "pxelinux.cfg/default"' in s.log_text()


def test_sighup_reloads_the_rules_and_a_bad_file_keeps_the_old_ones(serve, site):
    root, rules = site
    rules.parent.chmod(0o755)  # the -u user (nobody) reads the file again, as in /etc
    s = serve("-m", str(rules), *(["-s"] if os.geteuid() == 0 else []))  # -s: the file is outside the chroot
    assert fetch(s.port, "boot/by-ip")[1] == b"for the loopback host\n"
    # An editor's save: a new file renamed over the old one.
    fresh = rules.with_suffix(".new")
    fresh.write_text(r"r ^boot/by-ip$ hello.txt" + "\n")
    fresh.rename(rules)
    s.process.send_signal(signal.SIGHUP)
    s.log_lines("remap rules reloaded (1 rules)", timeout=5)
    assert fetch(s.port, "boot/by-ip")[1] == b"hello, rack\n"
    rules.write_text("r (broken\n")
    s.process.send_signal(signal.SIGHUP)
    s.log_lines("not reloaded", timeout=5)
    assert "line 1" in s.log_text() and s.alive
    assert fetch(s.port, "boot/by-ip")[1] == b"hello, rack\n"


def test_sighup_without_rules_does_not_stop_the_server(serve):
    s = serve()
    s.process.send_signal(signal.SIGHUP)
    time.sleep(0.8)
    assert s.alive and "no remap rules (-m) to reload" in s.log_text()
    assert fetch(s.port, "hello.txt")[1] == b"hello, rack\n"


def test_a_bad_rule_file_stops_the_server_naming_every_bad_line(binary, root, tmp_path):
    rules = tmp_path / "bad-rules"
    rules.write_text("r a b\nq x y\n# fine\nr (open x\nr~ a b\n")
    r = run([str(binary), "-l", "-L", "-a", "127.0.0.1:0", "-m", str(rules), str(root)])
    assert r.returncode == 78, r  # EX_CONFIG, as in.tftpd
    err = r.stderr.decode()
    assert "line 2" in err and "line 4" in err and "line 5" in err and "line 1" not in err, err
    missing = run([str(binary), "-l", "-L", "-m", str(tmp_path / "none"), str(root)])
    assert missing.returncode == 1 and b"cannot read" in missing.stderr


def test_rules_that_would_take_the_server_down_are_refused(serve, binary, root, tmp_path):
    # Found by the fuzzer: a rule set that grows the name on every pass took 2 GB per request.
    growing = tmp_path / "growing"
    growing.write_text("rs a b\nrs b " + "x" * 40 + "a\n")
    s = serve("-m", str(growing))
    started = time.monotonic()
    reply = RawClient(s).exchange(request("a"))[0]
    assert reply == ("ERROR", (2, "Remap table failure")), reply
    assert time.monotonic() - started < 2
    assert s.log_lines("longer than 4096 bytes")
    assert fetch(s.port, "hello.txt")[1] == b"hello, rack\n"
    # A back-reference in a regex, and repetitions that regcomp writes out to 250,000 positions.
    for line, says in [(r"r (x*)*\1y z", "back-reference"), ("r (.{1,500}){1,500} z", "250000 characters")]:
        bad = tmp_path / "bad"
        bad.write_text(line + "\n")
        r = run([str(binary), "-l", "-L", "-a", "127.0.0.1:0", "-m", str(bad), str(root)])
        assert r.returncode == 78 and says in r.stderr.decode() and "line 1" in r.stderr.decode(), r


def test_map_test_prints_what_each_name_becomes(binary, site):
    """--map-test FILE as 7.3 reads it (its parity: test_parity_names.py); `-` is standard input,
    the way to try one name."""
    _, rules = site
    def map_test(names, *args):
        r = run([str(binary), "-m", str(rules), "--map-test", "-", *args], input="".join(n + "\n" for n in names).encode())
        return r.returncode, r.stdout.decode().split("\n")[:-1]
    assert map_test([r"PXELINUX.CFG\01-aa-bb", "boot/by-ip", "../x", "secret"]) == \
        (0, ["pxelinux.cfg/01-aa-bb", "hosts/192.0.2.34", "ERROR: No climbing", "ERROR: Not here"])
    assert map_test(["boot/by-ip"], "--map-client", "192.0.2.7") == (0, ["hosts/192.0.2.7"])
    for bad in ("", " 10.0.0.1", "10.0.0.1:69", "[::1]", "host.example"):  # an address, as a client's is
        assert map_test(["boot/by-ip"], "--map-client", bad)[0] == 64, bad
    assert map_test(["boot/by-ip"], "-6") == (0, ["hosts/2001:db8::feed:face:dead:beef"])
    assert map_test(["secret"], "-c") == (0, ["secret"])  # the a~ rule is G (reads) only
    traced = run([str(binary), "-m", str(rules), "--map-test", "-", "--verbosity", "3"], input=b"boot/by-ip\n")
    assert b"remap: rule 6: rewrite: hosts/192.0.2.34" in traced.stderr, traced


def spawn_with_sockets(binary, args, sockets):
    """Starts stampede as systemd would: the sockets as fds 3, 4, ..., LISTEN_FDS and LISTEN_PID set."""
    def place():
        high = [100 + i for i in range(len(sockets))]  # out of the way of 3, 4, ...
        for fd, s in zip(high, sockets):
            os.dup2(s.fileno(), fd)
        for i, fd in enumerate(high):
            os.dup2(fd, 3 + i)
    script = f'export LISTEN_PID=$$ LISTEN_FDS={len(sockets)}; exec "$@"'
    return subprocess.Popen(["sh", "-c", script, "sh", str(binary), *args], close_fds=False, preexec_fn=place,
                            stderr=subprocess.PIPE)


@pytest.mark.parametrize("backend", BACKENDS)
def test_inetd_mode_serves_the_socket_on_fd_0_and_exits_when_idle(binary, root, backend):
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    # inetd has bound the socket, a request is already waiting when the server starts.
    early = RawClient(type("S", (), {"host": "127.0.0.1", "port": port}))
    early.send(request("hello.txt"))
    p = subprocess.Popen([str(binary), "-t", "2", "-u", "root", "--backend", backend, str(root)],
                         stdin=sock.fileno(), stdout=sock.fileno(), stderr=sock.fileno())
    sock.close()
    reply, tid = early.receive()
    assert reply == ("DATA", (1, b"hello, rack\n"))
    early.send(ack(1), tid)
    assert fetch(port, "one-mib.bin")[1] == (root / "one-mib.bin").read_bytes()
    started = time.time()
    assert p.wait(timeout=10) == 0
    assert 1.0 < time.time() - started < 4.5  # -t 2 after the last transfer


def test_inetd_mode_on_a_dual_stack_socket_serves_ipv4_and_ipv6_clients(binary, root):
    sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)  # as inetd binds "udp" on many systems
    sock.bind(("::", 0))
    port = sock.getsockname()[1]
    p = subprocess.Popen([str(binary), "-t", "1", "-u", "root", str(root)],
                         stdin=sock.fileno(), stdout=sock.fileno(), stderr=sock.fileno())
    sock.close()
    assert fetch(port, "hello.txt") == (0, b"hello, rack\n")
    assert fetch(port, "hello.txt", host="::1") == (0, b"hello, rack\n")
    assert p.wait(timeout=10) == 0


def test_verbosity_levels_mean_what_they_mean_in_tftpd_hpa(serve, root, site):
    _, rules = site
    quiet = serve("--verbosity", "0", "-m", str(rules))
    assert fetch(quiet.port, "PXELINUX.CFG/default") == (0, b"DEFAULT linux\n")
    assert fetch(quiet.port, "missing.bin")[0] != 0
    chatty = serve("--verbosity", "1", "-m", str(rules))
    assert fetch(chatty.port, "PXELINUX.CFG/default") == (0, b"DEFAULT linux\n")
    detailed = serve("--verbosity", "2")
    assert fetch(detailed.port, "hello.txt") == (0, b"hello, rack\n")
    time.sleep(0.3)
    # 0: refusals still get their line (bad input always does), transfers and remappings do not.
    assert "missing.bin" in quiet.log_text() and "pxelinux" not in quiet.log_text().lower()
    # 1: the remapping and the transfer, 2: the request as accepted, with its options.
    assert 'remapped to "pxelinux.cfg/default"' in chatty.log_text() and "accepted on" not in chatty.log_text()
    assert "accepted on" in detailed.log_text()


@pytest.mark.parametrize("backend", BACKENDS)
def test_systemd_socket_activation_serves_every_passed_socket(binary, root, backend):
    v4 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    v4.bind(("127.0.0.1", 0))
    v6 = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    v6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    v6.bind(("::1", 0))
    p = spawn_with_sockets(binary, ["--systemd", "--stderr", "-v", "-t", "3", "-u", "root", "--backend", backend, str(root)],
                           [v4, v6])
    try:
        assert fetch(v4.getsockname()[1], "hello.txt") == (0, b"hello, rack\n")
        assert fetch(v6.getsockname()[1], "one-mib.bin", host="::1")[1] == (root / "one-mib.bin").read_bytes()
        assert p.wait(timeout=15) == 0
    finally:
        if p.poll() is None:
            p.kill()
    log = p.stderr.read().decode()
    assert "no transfer for 3 s (-t): exiting" in log, log


def test_systemd_passes_a_listening_tcp_socket_and_http_is_served_on_it(binary, root):
    """A socket unit with ListenStream= beside ListenDatagram=: the TCP socket is served as --http
    would be, by a server that could not bind it itself (port 80 as the user tftp)."""
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(64)
    p = spawn_with_sockets(binary, ["--systemd", "--stderr", "-u", "root", str(root)], [udp, tcp])
    try:
        url = f"http://127.0.0.1:{tcp.getsockname()[1]}"
        done = run(["curl", "-s", "--retry", "5", "--retry-connrefused", "-o", "-", f"{url}/one-mib.bin"])
        assert done.stdout == (root / "one-mib.bin").read_bytes()
        head = run(["curl", "-s", "-I", f"{url}/hello.txt"])
        assert head.stdout.startswith(b"HTTP/1.1 200") and b"Content-Length: 12" in head.stdout
        assert fetch(udp.getsockname()[1], "hello.txt") == (0, b"hello, rack\n")
    finally:
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=15) == 0
    log = p.stderr.read().decode()
    assert f"over HTTP on http://127.0.0.1:{tcp.getsockname()[1]}/" in log, log


@pytest.mark.parametrize("count, says", [("2147483647", "more descriptors than this process may hold"),
                                         (str(resource.getrlimit(resource.RLIMIT_NOFILE)[1] - 8), "descriptor 4 is not open"),
                                         ("x", "not a count of sockets"),
                                         ("2", "neither a UDP socket nor a listening TCP socket")])
def test_listen_fds_is_not_taken_on_trust(binary, root, tmp_path, count, says):
    """LISTEN_FDS names descriptors that must exist: a count no process can hold allocated 8 GB
    and died; each descriptor is checked, and a bad one stops the server saying which."""
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    regular = open(tmp_path / "not-a-socket", "w")
    script = f'export LISTEN_PID=$$ LISTEN_FDS={count}; exec "$@"'
    fds = [udp.fileno()] if count != "2" else [udp.fileno(), regular.fileno()]

    def place():
        for i, fd in enumerate(fds):
            os.dup2(fd, 100 + i)
        for i in range(len(fds)):
            os.dup2(100 + i, 3 + i)
        for fd in range(4 + len(fds) - 1, 120):
            if fd >= 3 + len(fds):
                try:
                    os.close(fd)
                except OSError:
                    pass
    r = subprocess.run(["sh", "-c", script, "sh", str(binary), "--systemd", str(root)], close_fds=False,
                       preexec_fn=place, capture_output=True, timeout=20)
    assert r.returncode == 1 and says in r.stderr.decode(), (r.returncode, r.stderr)
    regular.close()


def test_systemd_mode_without_sockets_says_so(binary, root):
    r = run([str(binary), "--systemd", str(root)], env={**os.environ, "LISTEN_PID": "1", "LISTEN_FDS": "1"})
    assert r.returncode == 1 and b"no sockets passed" in r.stderr, r


def test_without_l_or_a_socket_there_is_nothing_to_serve(binary, root):
    r = run([str(binary), str(root)], stdin=subprocess.DEVNULL)
    assert r.returncode == 64 and b"nothing to serve on" in r.stderr


def wait_until_gone(pid, seconds=5):
    deadline = time.time() + seconds
    while time.time() < deadline and Path(f"/proc/{pid}").exists():
        time.sleep(0.05)


def test_without_L_it_detaches_once_serving_and_writes_the_pidfile(binary, root, tmp_path):
    pidfile = tmp_path / "tftpd.pid"
    number = free_udp_port()
    r = run([str(binary), "-l", "-a", f"127.0.0.1:{number}", "-u", "root", "-P", str(pidfile), str(root)], timeout=20)
    assert r.returncode == 0 and r.stdout == b"" and r.stderr == b"", r
    pid = int(pidfile.read_text())
    try:
        assert Path(f"/proc/{pid}").exists()
        assert os.getsid(pid) == pid  # its own session: no terminal
        assert fetch(number, "hello.txt") == (0, b"hello, rack\n")
    finally:
        os.kill(pid, signal.SIGTERM)
    wait_until_gone(pid)
    assert not pidfile.exists()


def test_a_detaching_servers_log_lines_name_the_process_that_wrote_each(binary, root, tmp_path):
    # The rule file's warning is logged before the fork, by the command's own process; the rest
    # by the server it leaves behind. The process id is asked of the kernel once per process:
    # the child must not name its parent.
    rules = tmp_path / "rules"
    rules.write_text("r ^nothing something extra\n")
    log, pidfile = tmp_path / "stampede.log", tmp_path / "tftpd.pid"
    number = free_udp_port()
    r = run([str(binary), "-l", "-a", f"127.0.0.1:{number}", "-u", "root", "-P", str(pidfile), "-m", str(rules),
             "--logfile", str(log), "-v", str(root)], timeout=20)
    assert r.returncode == 0, r
    pid = int(pidfile.read_text())
    try:
        assert fetch(number, "hello.txt") == (0, b"hello, rack\n")
        deadline = time.monotonic() + 10
        while "hello.txt" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        os.kill(pid, signal.SIGTERM)
    wait_until_gone(pid)
    lines = log.read_text().splitlines()
    named = {line: int(re.match(r"stampede\[(\d+)\]: ", line).group(1)) for line in lines}
    warning = next(line for line in lines if "ignored" in line)
    assert named[warning] != pid, lines
    assert all(named[line] == pid for line in lines if line != warning), lines
    assert any("serving" in line for line in lines) and any("hello.txt" in line for line in lines), lines


@pytest.mark.skipif(os.geteuid() != 0, reason="LOUD SKIP: -s and -u need root")
@pytest.mark.parametrize("directory_mode", [0o755, 0o777], ids=["root-only like /run", "writable by nobody"])
def test_secure_detached_server_writes_its_pidfile_before_the_chroot_and_the_command_returns(
        binary, root, tmp_path, directory_mode):
    """`ssh host stampede -l -s -u nobody -P /run/tftpd.pid /srv/tftp` must return: the detached
    server's fds 0-2 go to /dev/null, opened before the chroot hides it, so the command's output
    pipes close. The pidfile is written before the chroot; at exit nobody removes it where it
    may, and empties it where it may not (a root-owned directory such as /run)."""
    run_directory = tmp_path / "run"
    run_directory.mkdir()
    run_directory.chmod(directory_mode)
    pidfile = run_directory / "tftpd.pid"
    number = free_udp_port()
    # capture_output waits for the daemon to close the pipes: a hang here is the bug.
    r = subprocess.run([str(binary), "-l", "-s", "-u", "nobody", "-P", str(pidfile), "-a", f"127.0.0.1:{number}",
                        str(root)], capture_output=True, timeout=20)
    assert r.returncode == 0 and r.stdout == b"" and r.stderr == b"", r
    pid = int(pidfile.read_text())
    try:
        assert os.readlink(f"/proc/{pid}/root") == str(root)
        status = Path(f"/proc/{pid}/status").read_text()
        assert [line.split()[1] for line in status.splitlines() if line.startswith("Uid:")] == [str(pwd.getpwnam("nobody").pw_uid)]
        assert all(os.readlink(f"/proc/{pid}/fd/{fd}") == "/dev/null" for fd in (0, 1, 2))
        assert fetch(number, "hello.txt") == (0, b"hello, rack\n")
    finally:
        os.kill(pid, signal.SIGTERM)
    wait_until_gone(pid)
    assert not Path(f"/proc/{pid}").exists()
    if directory_mode == 0o777:
        assert not pidfile.exists()
    else:
        assert pidfile.read_text() == ""


def test_a_detaching_server_that_cannot_start_fails_the_command(binary, root, tmp_path):
    busy = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    busy.bind(("127.0.0.1", 0))  # no SO_REUSEPORT: the server cannot bind beside it
    r = run([str(binary), "-l", "-a", f"127.0.0.1:{busy.getsockname()[1]}", "-u", "root", str(root)], timeout=20)
    assert r.returncode == 1 and b"cannot listen" in r.stderr, r
    r = run([str(binary), "-l", "-a", "127.0.0.1:0", str(tmp_path / "missing")], timeout=20)
    assert r.returncode == 66 and b"cannot open" in r.stderr, r  # EX_NOINPUT, as in.tftpd


def test_as_in_tftpd_every_argument_is_the_servers(binary, tmp_path):
    link = tmp_path / "in.tftpd"
    link.symlink_to(binary)
    r = run([str(link), "-V"])
    assert r.returncode == 0 and r.stdout.startswith(b"tftp-hpa 7.3 compatible (stampede "), r
    assert b"\nFilename remap: yes\n" in r.stdout and b"\nJail:           yes (openat2)\n" in r.stdout, r
    r = run([str(link), "-l", "-L", "-a", "127.0.0.1:0", "get"], stdin=subprocess.DEVNULL)
    # A directory named get, not the client (relative, so refused as 7.3 refuses it).
    assert r.returncode == 65 and b"invalid directory path: get" in r.stderr, r


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root for a private mount namespace with its own /dev/log")
def test_detached_and_inetd_servers_log_to_syslog_as_daemon(binary, root, tmp_path):
    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / "null").touch()
    log = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    log.bind(str(dev / "log"))
    log.settimeout(10)
    port = free_udp_port()
    # /dev/null stays /dev/null; /dev/log is the test's socket.
    script = f'mount --bind /dev/null {dev}/null && mount --bind {dev} /dev && exec "$@"'
    r = run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", str(binary), "-l",
             "-a", f"127.0.0.1:{port}", "-u", "root", "-v", "-P", str(tmp_path / "pid"), str(root)], timeout=20)
    assert r.returncode == 0, r
    pid = int((tmp_path / "pid").read_text())
    try:
        assert fetch(port, "hello.txt") == (0, b"hello, rack\n")
        lines = []
        while not any("hello.txt" in line for line in lines):
            lines.append(log.recv(4096).decode())
    finally:
        os.kill(pid, signal.SIGTERM)
    # <30> is facility daemon (3 << 3) with priority info (6); <29> notice.
    assert any(line.startswith("<29>") and f"stampede[{pid}]" in line and "serving" in line for line in lines), lines
    assert any(line.startswith("<30>") and "hello.txt" in line for line in lines), lines


def test_single_port_runs_every_transfer_on_the_listeners_port(serve, root, tmp_path):
    root.chmod(0o777)  # uploads create files: a world-writable directory, as tftpd-hpa wants
    s = serve("--single-port", "-c")
    c = RawClient(s)
    reply, tid = c.exchange(request("hello.txt"))
    assert reply == ("DATA", (1, b"hello, rack\n")) and tid[1] == s.port
    c.send(ack(1), tid)
    assert RawClient(s).download("one-mib.bin", options=(("blksize", "1468"), ("windowsize", "8"))) == \
        (root / "one-mib.bin").read_bytes()
    assert fetch(s.port, "one-mib.bin")[1] == (root / "one-mib.bin").read_bytes()
    r = run(["tftp", "-m", "binary", "127.0.0.1", str(s.port), "-c", "get", "exact-512.bin", "/dev/stdout"])
    assert r.stdout == (root / "exact-512.bin").read_bytes()
    # Uploads too, with their blocks capped to what the listener's buffers hold.
    src = tmp_path / "up.bin"
    src.write_bytes(os.urandom(300_000))
    r = run(["busybox", "tftp", "-p", "-l", str(src), "-r", "up.bin", "-b", "8192", "127.0.0.1", str(s.port)])
    assert r.returncode == 0, r
    assert (root / "up.bin").read_bytes() == src.read_bytes()
    # Hundreds at once, each told apart by its client port, every byte checked.
    r = run([str(BINARY), "storm", f"127.0.0.1:{s.port}", "one-mib.bin", "--clients", "200", "--blksize", "1468",
             "--windowsize", "4", "--verify", str(root / "one-mib.bin")])
    assert r.returncode == 0, r.stdout.decode() + r.stderr.decode()
    assert "blksize=1468" in s.log_text()


def systemd_command(unit: Path, environment_file: Path) -> list:
    """ExecStart= of `unit` expanded as systemd does: Environment= defaults, then the
    EnvironmentFile (shell-style, quotes removed); ${VAR} stays one word, $VAR splits on blanks."""
    env, command = {}, None
    for line in unit.read_text().splitlines():
        if line.startswith("Environment="):
            env.update(pair.split("=", 1) for pair in line[len("Environment="):].split())
        elif line.startswith("ExecStart="):
            command = line[len("ExecStart="):]
    for line in environment_file.read_text().splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            key, value = line.split("=", 1)
            env[key.strip()] = value.strip().strip('"')
    words = []
    for word in command.split():
        if word.startswith("${") and word.endswith("}"):
            words.append(env[word[2:-1]])
        elif word.startswith("$"):
            words.extend(env[word[1:]].split())
        else:
            words.append(word)
    return words


def test_make_install_puts_units_that_run_debians_tftpd_hpa_settings_unchanged(root, tmp_path):
    destdir = tmp_path / "dest"
    r = run(["make", "-C", str(Path(__file__).resolve().parents[2]), "install", f"DESTDIR={destdir}", "UNITS=1",
             "PREFIX=/usr"], timeout=600)
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    units = destdir / "lib" / "systemd" / "system"
    assert sorted(p.name for p in units.iterdir()) == ["stampede-standalone.service", "stampede.service",
                                                       "stampede.socket"]
    assert (destdir / "usr" / "sbin" / "stampede").exists()
    number = free_udp_port()
    # /etc/default/tftpd-hpa as Debian writes it, pointed at the test's root and port.
    defaults = tmp_path / "tftpd-hpa"
    options = "--secure --create" if os.geteuid() == 0 else "--create"
    defaults.write_text(f'# /etc/default/tftpd-hpa\n\nTFTP_USERNAME="root"\nTFTP_DIRECTORY="{root}"\n'
                        f'TFTP_ADDRESS="127.0.0.1:{number}"\nTFTP_OPTIONS="{options}"\n')
    argv = systemd_command(units / "stampede-standalone.service", defaults)
    assert argv[0] == "/usr/sbin/stampede"
    argv[0] = str(destdir / "usr" / "sbin" / "stampede")
    p = subprocess.Popen(argv, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 10
        while time.time() < deadline and fetch(number, "hello.txt")[1] != b"hello, rack\n":
            time.sleep(0.1)
        assert fetch(number, "hello.txt") == (0, b"hello, rack\n")
    finally:
        p.terminate()
    assert p.wait(timeout=15) == 0
    activated = (units / "stampede.service").read_text()
    assert "ExecStart=/usr/sbin/stampede $TFTPD_OPTS --stderr=tag --systemd --jail ${TFTPD_HOME}" in activated
    assert "u tftp " in (destdir / "usr" / "lib" / "sysusers.d" / "stampede.conf").read_text()
