"""Parity with tftpd-hpa: the same command line, the same remap file and the same requests given to
Debian's in.tftpd (tftp-hpa 7.3, from the Debian unstable tree `make parity-deps` makes) and to
Stampede; outcomes compared case by case: the bytes served, the error codes (the messages may
differ), the files written. Deliberate differences are listed here and in docs/drop-in.md's
note. The option negotiation has its own corpus: test_parity_options.py."""
import os
import pwd
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from conftest import REPO, SERVER_BINARY, Server, free_udp_port
from parity import (SID, REQUIRES_PEER, UPLOAD, TftpdHpa, assert_same_outcomes, compared, in_tftpd, make_root,
                    outcome, run_both, serves, start_both)

pytestmark = REQUIRES_PEER

RULES = r"""
# A PXE site's rules: every flag the two servers share
r       ^restarted$               hello.txt
a       ^private/                 No\ private\ files
rg      \\                        /
ri      ^/?pxelinux\.cfg/         pxelinux.cfg/
r       ^boot/by-ip$              hosts/\i
re      ^first$                   first.txt
r       ^first\.txt$              never-reached
rP      ^upload/                  incoming/
r4      ^family$                  v4.txt
r6      ^family$                  v6.txt
a~G     ^(hosts|pxelinux|incoming|upload|[a-z0-9-]+\.|first|again|restarted|family|\.\.|/)   Not\ here\ (\0)
rs      ^again$                   restarted
"""

# Requests as (name, write, mode, options); what each server answers is compared.
CASES = {
    "found": ("hello.txt", False, "octet", ()),
    "found, netascii": ("text.txt", False, "netascii", ()),
    "found, options": ("one-mib.bin", False, "octet", (("blksize", "1468"), ("tsize", "0"))),
    "not found": ("missing.bin", False, "octet", ()),
    "remapped, case and separators": (r"PXELINUX.CFG\default", False, "octet", ()),
    "remapped by client address": ("boot/by-ip", False, "octet", ()),
    "remapped, rule order and e": ("first", False, "octet", ()),
    "remapped by family": ("family", False, "octet", ()),
    "refused by an a rule": ("private/key", False, "octet", ()),
    "refused by an inverse a rule": ("secret/x", False, "octet", ()),
    "traversal": ("../../etc/passwd", False, "octet", ()),
    "traversal, absolute": ("/../etc/passwd", False, "octet", ()),
    "written": ("new.bin", True, "octet", ()),
    "written, remapped": ("upload/up.bin", True, "octet", ()),
    "refused write, not world-writable": ("hello.txt", True, "octet", ()),
    "restart (s)": ("again", False, "octet", ()),
}



@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    base = tmp_path_factory.mktemp("parity")
    rules = base / "rules"
    rules.write_text(RULES)
    args = ["-s", "-c", "-u", "root", "-m", str(rules)]
    theirs = TftpdHpa(make_root(base / "tftpd-hpa"), args)
    ours = Server(make_root(base / "stampede"), args)
    yield theirs, ours
    theirs.stop()
    ours.stop()


@pytest.mark.parametrize("case", CASES)
def test_same_request_same_outcome_as_tftpd_hpa(pair, case):
    theirs, ours = pair
    name, write, _, _ = CASES[case]
    [got] = assert_same_outcomes(theirs, ours, [CASES[case]], case)
    if write and got[0] == "WROTE":
        target = name.replace("upload/", "incoming/")
        assert (ours.root / target).read_bytes() == (theirs.root / target).read_bytes() == UPLOAD


# -j/--jail and -s: the directory is every name's "/". A climb stops there, an absolute symlink is
# read inside it, one that leads nowhere inside is not found; uploads land inside too.
ROOT_LINKS = {"abs-link": "/etc/passwd", "up-link": "../../../../etc/passwd", "in-link": "hello.txt",
              "abs-in-link": "/hello.txt", "abs-dir-link": "/pxelinux.cfg"}
ROOT_REQUESTS = [*((name, False, "octet", ()) for name in (
    "hello.txt", "/hello.txt", "../hello.txt", "a/../hello.txt", "//hello.txt", "./hello.txt", "../../etc/passwd",
    "/../etc/passwd", "pxelinux.cfg//default", "hosts/", *ROOT_LINKS, "abs-dir-link/default", "up-link/x")),
    ("../climbed.bin", True, "octet", ()), ("abs-dir-link/written.bin", True, "octet", ()),
    ("in-link", True, "octet", ())]


# Refused by both, with another code (docs/drop-in.md): a directory, which 7.3
# opens and fails to read (ERROR 0 "Input/output error"), and an upload onto a symlink, which 7.3's
# O_NOFOLLOW refuses with ERROR 0 (ELOOP); Stampede answers both ERROR 2 "Not a regular file".
ROOT_DELIBERATE = {(name, write): (("ERROR", 0), ("ERROR", 2))
                   for name, write in (("hosts/", False), ("abs-dir-link", False), ("in-link", True))}


def make_linked_root(path: Path) -> Path:
    root = make_root(path)
    for name, target in ROOT_LINKS.items():
        (root / name).symlink_to(target)
    return root


@pytest.mark.parametrize("flag", ["-j", "--jail", "-s"])
def test_a_virtual_root_resolves_names_as_7_3_does(tmp_path, flag):
    args = [flag, "-c", "-u", "root"]
    theirs = TftpdHpa(make_linked_root(tmp_path / "tftpd-hpa"), args)
    ours = Server(make_linked_root(tmp_path / "stampede"), args)
    try:
        assert_same_outcomes(theirs, ours, ROOT_REQUESTS, flag, ROOT_DELIBERATE)
        for written in ("climbed.bin", "pxelinux.cfg/written.bin"):
            assert (ours.root / written).read_bytes() == (theirs.root / written).read_bytes() == UPLOAD
        assert not (tmp_path / "climbed.bin").exists()
    finally:
        theirs.stop()
        ours.stop()


@pytest.fixture
def open_directory():
    """A directory anyone may enter (pytest's tmp_path is root's alone), removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="stampede-parity-") as name:
        os.chmod(name, 0o755)
        yield Path(name)


def test_debians_unit_with_stampedes_path_passes_systemd_analyze(tmp_path):
    """Debian unstable's tftpd-hpa.service and .socket, as shipped, with Stampede's binary in
    ExecStart: systemd reads them without a word (man:in.tftpd is not looked up: Debian's page)."""
    for unit in ("tftpd-hpa.service", "tftpd-hpa.socket"):
        text = (SID / "usr/lib/systemd/system" / unit).read_text()
        (tmp_path / unit).write_text(text.replace("/usr/sbin/in.tftpd", str(SERVER_BINARY)))
    assert str(SERVER_BINARY) in (tmp_path / "tftpd-hpa.service").read_text()
    check = subprocess.run(["systemd-analyze", "verify", "--man=no", "tftpd-hpa.service", "tftpd-hpa.socket"],
                           cwd=tmp_path, capture_output=True, timeout=60)
    assert check.returncode == 0 and not check.stdout and not check.stderr, check.stderr.decode()


def test_stampedes_activated_unit_is_hardened_as_debians(tmp_path):
    """contrib's socket-activated unit runs as tftp with --jail and every sandbox line of Debian
    unstable's tftpd-hpa.service."""
    ours = (REPO / "contrib/systemd/stampede.service").read_text()
    theirs = (SID / "usr/lib/systemd/system/tftpd-hpa.service").read_text()
    sandbox = [line for line in theirs.splitlines() if line.split("=")[0] in
               ("User", "ReadWritePaths", "NoNewPrivileges", "RestrictAddressFamilies", "SystemCallArchitectures",
                "PrivateDevices", "PrivateTmp") or line.startswith("Protect")]
    assert len(sandbox) >= 14, sandbox
    assert [line for line in sandbox if line not in ours.splitlines()] == []
    assert "--systemd --jail ${TFTPD_HOME}" in ours and "--secure" not in ours.split("[Service]")[1]
    assert "u tftp " in (REPO / "contrib/systemd/stampede.sysusers").read_text()


def test_debians_unit_line_serves_as_its_user_without_root(open_directory):
    """Debian unstable's tftpd-hpa.service: `in.tftpd $TFTPD_OPTS --systemd --jail ${TFTPD_HOME}`
    as User=tftp (here nobody), on the socket tftpd-hpa.socket passes. Both servers, the same line."""
    answers = []
    for who in ("tftpd-hpa", "stampede"):
        root = make_linked_root(open_directory / who)
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind(("127.0.0.1", 0))
        line = ["--systemd", "--jail", root]
        if who == "tftpd-hpa":
            command = [part.replace('exec chroot "$0"', 'exec chroot --userspec=nobody:nogroup "$0"')
                       for part in in_tftpd(*line, share=open_directory)]
        else:
            command = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", str(SERVER_BINARY), *map(str, line)]
        # As systemd passes it: fd 3, LISTEN_FDS=1, LISTEN_PID the server's own (every step execs).
        def place(fd=sock.fileno()):
            os.dup2(fd, 100)
            os.dup2(100, 3)
        script = 'export LISTEN_PID=$$ LISTEN_FDS=1; exec "$@"'
        process = subprocess.Popen(["sh", "-c", script, "sh", *command], preexec_fn=place, close_fds=False,
                                   stderr=subprocess.PIPE)
        try:
            answers.append([compared(outcome(sock.getsockname()[1], name, False, "octet", ()))
                            for name in ("hello.txt", "../hello.txt", "abs-in-link", "abs-link")])
            status = Path(f"/proc/{process.pid}/status").read_text()
            assert [line.split()[1] for line in status.splitlines() if line.startswith("Uid:")] == \
                [str(pwd.getpwnam("nobody").pw_uid)], (who, status)
        finally:
            process.terminate()
            sock.close()
            _, err = process.communicate(timeout=10)
        assert process.returncode in (0, -signal.SIGTERM), (who, process.returncode, err)
    assert answers[0] == answers[1], answers
    assert answers[1] == [("DATA", b"hello, rack\n")] * 3 + [("ERROR", 1)], answers


@pytest.mark.parametrize("args,status", [(["-j", "-s"], 64), (["-j"], 64), (["-j", "/nowhere/at/all"], 66),
                                         (["--jail", "/tmp", "/srv"], 64)])
def test_jail_misuse_exits_as_7_3_does(tmp_path, args, status):
    argv = ["-l", "-L", "-a", "127.0.0.1:0", "-u", "root", *args]
    if args == ["-j", "-s"]:
        argv.append(str(make_root(tmp_path / "root")))
    theirs = subprocess.run(in_tftpd(*argv, share=tmp_path), capture_output=True, timeout=10)
    ours = subprocess.run([str(SERVER_BINARY), *argv], capture_output=True, timeout=10)
    assert theirs.returncode == ours.returncode == status, (theirs, ours)
    assert ours.stderr, ours


# tftp-hpa 7.x's spellings of the flags, each given to both servers with -s -c -u root: the
# requests' outcomes must match.
SPELLINGS = {
    "--ro": ["--ro"],
    "--read-only": ["--read-only"],
    "--reject": ["--reject", "tsize"],
    "--chroot": ["--chroot"],
    "--ports": ["--ports", "40000:40100"],
}
SPELLING_REQUESTS = [("hello.txt", False, "octet", ()), ("new.bin", True, "octet", ()),
                     ("one-mib.bin", False, "octet", (("blksize", "1468"), ("tsize", "0")))]


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_tftp_hpa_7_spellings_do_what_7_3_does(tmp_path, spelling):
    flags = SPELLINGS[spelling]
    args = [*([] if spelling == "--chroot" else ["-s"]), "-c", "-u", "root", *flags]
    theirs = TftpdHpa(make_root(tmp_path / "tftpd-hpa"), args)
    ours = Server(make_root(tmp_path / "stampede"), args)
    try:
        assert_same_outcomes(theirs, ours, SPELLING_REQUESTS, spelling)
    finally:
        theirs.stop()
        ours.stop()


def test_service_is_the_port_of_an_address_that_names_none(tmp_path):
    """-S/--service/--port PORT: `-a 127.0.0.1` listens on PORT, for 7.3 and for Stampede, one
    after the other on the same port."""
    port = free_udp_port()
    answers = []
    for spelling, command in (("-S", in_tftpd), ("--port", lambda *a, share: [str(SERVER_BINARY), *map(str, a)])):
        root = make_root(tmp_path / spelling.strip("-"))
        process = subprocess.Popen(command("-l", "-L", "-a", "127.0.0.1", spelling, str(port), "-s", "-u", "root", root,
                                           share=tmp_path), stderr=subprocess.DEVNULL)
        try:
            deadline = time.time() + 10
            answer = ("SILENT",)
            while time.time() < deadline and answer[0] != "DATA" and process.poll() is None:
                answer = outcome(port, "hello.txt", False, "octet", ())
            answers.append(answer)
        finally:
            process.terminate()
            process.wait(timeout=10)
    assert answers == [("DATA", b"hello, rack\n")] * 2, answers


# -a with a host name: every address it resolves to; a port may be a services(5) name. Each server
# runs in a mount namespace whose /etc/hosts and /etc/services are the test's, one after the other.
HOSTS = "127.0.0.1 rack-boot\n127.0.0.2 rack-boot\n::1 rack-boot\n127.0.0.3 other-name\n"


def with_name_files(command, tmp_path, etc):
    """`command` (an in.tftpd one from in_tftpd, or Stampede's) with the test's hosts and services."""
    hosts, services, port = tmp_path / "hosts", tmp_path / "services", free_udp_port()
    hosts.write_text(HOSTS)
    services.write_text(f"stampede-parity {port}/udp\n")
    binds = f'for f in hosts services; do [ -e "{etc}/$f" ] || touch "{etc}/$f"; done && ' \
            f'mount --bind "{hosts}" "{etc}/hosts" && mount --bind "{services}" "{etc}/services" && exec "$@"'
    return ["unshare", "--mount", "sh", "-c", binds, "sh", *command], port


@pytest.mark.parametrize("flags,answering,silent", [
    (["-a", "rack-boot:{port}"], ["127.0.0.1", "127.0.0.2", "::1"], ["127.0.0.3"]),
    (["-4", "-a", "rack-boot:{port}"], ["127.0.0.1", "127.0.0.2"], ["::1"]),
    (["-a", "127.0.0.3:stampede-parity"], ["127.0.0.3"], ["127.0.0.1"]),
    (["-a", "rack-boot:{port}", "-a", "other-name:{port}"], ["127.0.0.1", "127.0.0.2", "::1", "127.0.0.3"], []),
], ids=["every address of a name", "-4 leaves IPv4", "a service name as the port", "repeated"])
def test_a_names_every_address_of_a_host_as_7_3_does(tmp_path, flags, answering, silent):
    answers = []
    for who in ("tftpd-hpa", "stampede"):
        root = make_root(tmp_path / who)
        port = free_udp_port()
        argv = ["-L", "-s", "-u", "root", *(flag.format(port=port) for flag in flags), root]
        if who == "tftpd-hpa":  # the chroot's /etc, mounted over inside in_tftpd's namespace
            command, service = with_name_files(in_tftpd(*argv, share=tmp_path), tmp_path, SID / "etc")
        else:
            command, service = with_name_files([str(SERVER_BINARY), *map(str, argv)], tmp_path, "/etc")
        wanted = service if "stampede-parity" in " ".join(flags) else port
        process = subprocess.Popen(command, stderr=subprocess.PIPE)
        try:
            got = {}
            for host in answering + silent:
                family = socket.AF_INET6 if ":" in host else socket.AF_INET
                deadline = time.time() + (8 if host in answering else 1)
                answer = ("SILENT",)
                while answer[0] == "SILENT" and time.time() < deadline and process.poll() is None:
                    answer = fetch_from(host, family, wanted)
                got[host] = answer[0]
            answers.append(got)
        finally:
            process.terminate()
            _, err = process.communicate(timeout=10)
        assert all(got[h] == "DATA" for h in answering), (who, got, err)
        assert all(got[h] == "SILENT" for h in silent), (who, got, err)
    assert answers[0] == answers[1]


def fetch_from(host, family, port):
    """One RRQ of hello.txt to HOST:PORT: ("DATA",) or ("SILENT",) (a refused port is silent too)."""
    with socket.socket(family, socket.SOCK_DGRAM) as sock:
        sock.settimeout(0.5)
        try:
            sock.sendto(b"\x00\x01hello.txt\x00octet\x00", (host, port))
            packet, _ = sock.recvfrom(1024)
        except (socket.timeout, ConnectionRefusedError):
            return ("SILENT",)
        return ("DATA",) if packet[:2] == b"\x00\x03" else ("OTHER",)


def test_refuse_all_negotiates_nothing_where_7_3_answers_nothing(tmp_path):
    """--refuse-all/--reject-all: "requests containing options proceed directly to the normal TFTP
    data stage without an option acknowledgment" (in.tftpd(8), 7.3). Debian unstable's 7.3 answers
    no request at all with it (nor logs one): a deliberate difference, asserted so that a fixed
    7.3 shows up here."""
    args = ["-s", "-u", "root", "--refuse-all"]
    theirs = TftpdHpa(make_root(tmp_path / "tftpd-hpa"), args)
    ours = Server(make_root(tmp_path / "stampede"), ["-s", "-u", "root", "--reject-all"])
    try:
        asked = (("blksize", "1468"), ("tsize", "0"), ("windowsize", "4"))
        assert outcome(theirs.port, "hello.txt", False, "octet", asked) == ("SILENT",)
        # DATA straight away, in 512-byte blocks: no OACK, nothing negotiated.
        got = outcome(ours.port, "one-mib.bin", False, "octet", asked)
        assert got == ("DATA", bytes(range(256)) * 4096, ()), got[:1] + got[2:]
    finally:
        theirs.stop()
        ours.stop()


@pytest.mark.parametrize("bad", ["R a b", "r (unclosed x", "r~ a b", "rq a b", "r"])
def test_a_bad_rule_stops_both_servers_with_ex_config(tmp_path, bad):
    rules = tmp_path / "rules"
    rules.write_text(f"r ok fine\n{bad}\n")
    root = make_root(tmp_path / "root")
    argv = ["-l", "-L", "-a", "127.0.0.1:0", "-u", "root", "-m", str(rules), str(root)]
    theirs = subprocess.run(in_tftpd(*argv, share=tmp_path), capture_output=True, timeout=10)
    ours = subprocess.run([str(SERVER_BINARY), *argv], capture_output=True, timeout=10)
    assert theirs.returncode == ours.returncode == 78, (theirs, ours)
    assert b"line 2" in ours.stderr


# The command line of 7.3: -L implies -l, --systemd excludes -l/-L/-a, -t counts standalone too,
# and the log goes where --syslog, --stderr, --stdout or --logfile says, in 7.3's line formats.
@pytest.mark.parametrize("argv", [["--systemd", "-L"], ["--systemd", "-l"], ["--systemd", "-a", "127.0.0.1:0"],
                                  ["-L", "--logformat", "bogus"], ["-L", "--stderr=bogus"]],
                         ids=lambda argv: " ".join(argv))
def test_flags_that_exclude_each_other_are_usage_errors_in_both(tmp_path, argv):
    theirs, ours = run_both([*argv, "-u", "root", make_root(tmp_path / "root")], tmp_path)
    assert theirs.returncode == ours.returncode == 64 and ours.stderr, (theirs, ours)


def test_L_alone_serves_standalone_and_t_ends_an_idle_one(tmp_path):
    """-L implies -l; -t N makes a standalone server exit after N idle seconds (status 0), and
    -t 0 (the standalone default) never."""
    forever = start_both(["-L", "-u", "root", "-s", "-t", "0"], tmp_path / "t0")
    both = start_both(["-L", "-u", "root", "-s", "-t", "4"], tmp_path / "t4")
    try:
        for process, port, _ in both + forever:
            assert serves(port), process.args
        served = time.time()
        assert [process.wait(timeout=15) for process, _, _ in both] == [0, 0]
        assert 2 < time.time() - served < 8
        assert [process.poll() for process, _, _ in forever] == [None, None]
    finally:
        for process, _, _ in both + forever:
            process.kill()
            process.wait()


HUMAN = r"^(in\.tftpd|stampede)\[\d+\]: (debug|info|notice|warning|error|crit): \S"
TAG = r"^<[0-7]>\S"


@pytest.mark.parametrize("flags,stream,pattern", [
    (["--stderr"], "stderr", HUMAN), (["--stderr=tag"], "stderr", TAG), (["--stdout=human"], "stdout", HUMAN),
    (["--logformat", "tag", "--stdout"], "stdout", TAG), (["--syslog", "--stderr"], "stderr", HUMAN),
    (["--stderr", "--syslog"], None, None)], ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_the_log_goes_where_7_3_sends_it_in_its_line_formats(tmp_path, flags, stream, pattern):
    import re
    started = start_both(["-L", "-v", "-u", "root", "-s", *flags], tmp_path, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    outputs = []
    try:
        for process, port, _ in started:
            assert serves(port)
            assert outcome(port, "missing.bin", False, "octet", ())[:2] == ("ERROR", 1)
    finally:
        for process, _, _ in started:
            process.terminate()
            out, err = process.communicate(timeout=10)
            outputs.append({"stdout": out.decode(), "stderr": err.decode()})
    for who, output in zip(("tftpd-hpa", "stampede"), outputs):
        if stream is None:
            assert output == {"stdout": "", "stderr": ""}, (who, output)
            continue
        other = "stdout" if stream == "stderr" else "stderr"
        lines = output[stream].splitlines()
        assert lines and output[other] == "", (who, output)
        assert all(re.match(pattern, line) for line in lines), (who, lines)
        assert any("missing.bin" in line for line in lines), (who, lines)


def test_logfile_is_appended_to_and_reopened_on_sighup(tmp_path):
    """--logfile: created 0644, appended to; after logrotate renames it, SIGHUP opens the name again."""
    (tmp_path / "roots").mkdir()
    logs = {who: tmp_path / "roots" / f"{who}.log" for who in ("tftpd-hpa", "stampede")}
    for log in logs.values():
        log.write_text("kept\n")
    started = start_both(lambda who: ["-L", "-v", "-u", "root", "-s", "--logfile", logs[who]], tmp_path / "roots")
    try:
        for process, port, _ in started:
            assert serves(port)
            assert outcome(port, "first.bin", False, "octet", ())[:2] == ("ERROR", 1)
        for log in logs.values():
            log.rename(log.with_suffix(".log.1"))
        for process, _, _ in started:
            process.send_signal(signal.SIGHUP)
        time.sleep(0.5)
        for process, port, _ in started:
            assert outcome(port, "second.bin", False, "octet", ())[:2] == ("ERROR", 1)
        time.sleep(0.3)
        for who, log in logs.items():
            old, new = log.with_suffix(".log.1").read_text(), log.read_text()
            assert old.startswith("kept\n") and "first.bin" in old and "second.bin" not in old, (who, old)
            assert "second.bin" in new and "first.bin" not in new, (who, new)
            assert log.stat().st_mode & 0o777 == 0o644, who
    finally:
        for process, _, _ in started:
            process.kill()
            process.wait()
