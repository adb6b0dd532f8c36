"""Parity of what happens to a requested name with tftp-hpa 7.3 (issue 22): in.tftpd(8)'s
FILENAME PROCESSING (-m, then --normalize, then --validate, then --path-prefix) and the remap
language of 5.4-7.3 (`:label` and `j`, `E`, `gg`, `\\#`, the combinations it refuses,
--map-steps), each played against Debian unstable's in.tftpd and Stampede with the same flags,
as requests (the bytes served, the error codes, the files written) and as 7.3's --map-test FILE
(its output, line by line). Where Stampede differs on purpose, the difference is named here and
in docs/drop-in.md's list of differences."""
import contextlib
import os
import subprocess
from collections import namedtuple

import pytest

from conftest import SERVER_BINARY
from parity import REQUIRES_PEER, UPLOAD, assert_same_outcomes, compared, in_tftpd, outcome, run_both, start_both

pytestmark = REQUIRES_PEER

Served = namedtuple("Served", "port root")


@contextlib.contextmanager
def both(args, tmp_path, directory=None):
    """7.3 and Stampede serving with `-L ARGS` (and `directory(root)` as the directory, if given)."""
    flags = (lambda who: ["-L", *args(who)]) if callable(args) else ["-L", *args]
    started = start_both(flags, tmp_path, directory=directory, stderr=subprocess.DEVNULL)
    try:
        yield [Served(port, root) for _, port, root in started]
    finally:
        for process, _, _ in started:
            process.terminate()
            process.wait(timeout=10)


def reads(*names):
    return [(name, False, "octet", ()) for name in names]


def writes(*names):
    return [(name, True, "octet", ()) for name in names]


def ready(servers, name="/hello.txt"):
    """Waits until each server answers `name` at all."""
    for served in servers:
        for _ in range(50):
            if outcome(served.port, name, False, "octet", ())[0] != "SILENT":
                break
        else:
            pytest.fail(f"port {served.port} never answered")


# --normalize under a virtual root (-s, -j): the name as 7.3 rewrites it, resolved in the root.
NORMALIZE_REQUESTS = reads("hello.txt", "/hello.txt", "//hello.txt", "./hello.txt", "pxelinux.cfg/./default",
                           "pxelinux.cfg//default", "private/../hello.txt", "../../hello.txt", "a/b/../../hello.txt",
                           "/nothere", "hosts/.", "hosts/127.0.0.1/..") + \
    writes("incoming/./new.bin", "x/../incoming/other.bin")

# A directory: 7.3 opens it and fails its read (ERROR 0); Stampede refuses it (ERROR 2).
DIRECTORY = (("ERROR", 0), ("ERROR", 2))


@pytest.mark.parametrize("mode", ["--normalize", "--normalize=path", "--normalize=root", "--normalize=none"])
@pytest.mark.parametrize("root", ["-s", "-j"])
def test_normalize_rewrites_names_as_7_3_does(tmp_path, mode, root):
    with both([root, "-c", "-u", "root", mode], tmp_path) as (theirs, ours):
        ready((theirs, ours))
        deliberate = {("hosts/.", False): DIRECTORY}
        if mode in ("--normalize", "--normalize=path"):  # "hosts/" then; otherwise a file's "..": ENOTDIR
            deliberate[("hosts/127.0.0.1/..", False)] = DIRECTORY
        got = assert_same_outcomes(theirs, ours, NORMALIZE_REQUESTS, mode, deliberate)
        for written, (name, *_) in zip(got[-2:], NORMALIZE_REQUESTS[-2:]):
            if written[0] == "WROTE":  # "x/../incoming" only once normalized: there is no x
                path = os.path.normpath(name)
                assert (ours.root / path).read_bytes() == (theirs.root / path).read_bytes() == UPLOAD


def test_normalization_comes_after_the_remap_rules(tmp_path):
    """A rule that refuses names beginning with "/" sees the name before --normalize adds it."""
    rules = tmp_path / "rules"
    rules.write_text("a ^/ absolute\\ names\\ refused\nr ^alias$ hello.txt\n")
    with both(["-s", "-u", "root", "-m", rules, "--normalize=root"], tmp_path) as (theirs, ours):
        ready((theirs, ours), "hello.txt")
        got = assert_same_outcomes(theirs, ours, reads("hello.txt", "/hello.txt", "alias"), "after -m")
        assert [o[0] for o in got] == ["DATA", "ERROR", "DATA"], got


# --validate: a name that is not absolute or has "." or ".." or a control character is refused
# (ERROR 2) by both. A valid one is served by Stampede; 7.3 under -s/-j checks it against the
# directory as named outside the root (the client must send the host's path) and then opens that
# whole path inside the root, so that it serves no name we tried (docs/drop-in.md).
VALIDATE_REFUSED = reads("hello.txt", "/pxelinux.cfg/./default", "/private/../hello.txt", "/../hello.txt",
                         "/hello\x01.txt", "pxelinux.cfg/default") + writes("incoming/new.bin", "/incoming/../x.bin")


@pytest.mark.parametrize("root", ["-s", "-j"])
def test_validate_refuses_what_7_3_refuses(tmp_path, root):
    with both([root, "-c", "-u", "root", "--validate"], tmp_path) as (theirs, ours):
        ready((theirs, ours))
        got = assert_same_outcomes(theirs, ours, VALIDATE_REFUSED, "--validate")
        assert all(o[:2] == ("ERROR", 2) for o in got), got
        valid = reads("/hello.txt", "//pxelinux.cfg//default/")
        assert [compared(outcome(theirs.port, *r)) for r in valid] == [("ERROR", 2)] * 2
        assert [compared(outcome(ours.port, *r)) for r in valid] == [("DATA", b"hello, rack\n"),
                                                                     ("DATA", b"DEFAULT linux\n")]


# --path-prefix: `--normalize --path-prefix DIR /` is in.tftpd(8)'s way to serve DIR without -s;
# with -s or -j the prefix is joined to the directory. Both serve the same names.
PREFIX_REQUESTS = reads("hello.txt", "/hello.txt", "pxelinux.cfg//default", "../../../etc/passwd", "a/../v4.txt",
                        "/nothere") + writes("incoming/new.bin")


@pytest.mark.parametrize("flags,directory", [
    (lambda root: ["--normalize", "--path-prefix", root], lambda root: "/"),
    (lambda root: ["-s", "--path-prefix", root.parent], lambda root: "/" + root.name),
    (lambda root: ["-j", "--path-prefix", root.parent], lambda root: "/" + root.name),
], ids=["--normalize --path-prefix DIR /", "-s --path-prefix PARENT /NAME", "-j --path-prefix PARENT /NAME"])
def test_path_prefix_serves_what_7_3_serves(tmp_path, flags, directory):
    roots = {who: tmp_path / who for who in ("tftpd-hpa", "stampede")}
    with both(lambda who: ["-c", "-u", "root", *flags(roots[who])], tmp_path, directory=directory) as (theirs, ours):
        ready((theirs, ours))
        got = assert_same_outcomes(theirs, ours, PREFIX_REQUESTS, "--path-prefix")
        assert got[0][0] == "DATA" and got[-1][0] == "WROTE", got
        assert (ours.root / "incoming/new.bin").read_bytes() == (theirs.root / "incoming/new.bin").read_bytes()


def test_a_host_path_under_path_prefix_slash_is_served_as_7_3_serves_it(tmp_path):
    """`--path-prefix / --normalize=path --validate -p DIR`, without -s or -j: 7.3 reads a name as
    the host's path inside DIR, and serves `DIR/hello.txt`; Stampede served `//DIR` and answered
    "File not found" (issue 56). Each server is asked for its own DIR's files."""
    with both(["-u", "root", "--path-prefix", "/", "--normalize=path", "--validate", "-p"], tmp_path) as servers:
        got = []
        for served in servers:
            base = str(served.root)
            ready([served], name=f"{base}/hello.txt")
            got.append([compared(outcome(served.port, *r)) for r in reads(
                f"{base}/hello.txt", f"{base}//pxelinux.cfg//default", f"{base}/private/../hello.txt", f"{base}/nothere")])
        assert got[0] == got[1], got
        assert got[1][:3] == [("DATA", b"hello, rack\n"), ("DATA", b"DEFAULT linux\n"), ("DATA", b"hello, rack\n")], got


@pytest.mark.parametrize("argv,status", [
    (["/"], 65),  # "/" only with --path-prefix
    (["--path-prefix", "/nonexistent-prefix", "/"], 65),
    (["srv"], 65),  # a relative directory, without -s or -j: "invalid directory path"
    (["./"], 65),
    (["--path-prefix", "/tmp", "relative/dir"], 65),
    (["--normalize=bogus", "/srv"], 64),
    (["--map-steps", "0", "/srv"], 64),
    (["--map-steps", "-1", "/srv"], 64),
    (["--map-steps", "99999999999", "/srv"], 64),
], ids=lambda v: " ".join(map(str, v)) if isinstance(v, list) else str(v))
def test_bad_names_and_prefixes_exit_as_7_3_does(tmp_path, argv, status):
    theirs, ours = run_both(["-L", "-a", "127.0.0.1:0", "-u", "root", *argv], tmp_path, timeout=5)
    assert theirs.returncode == ours.returncode == status, (theirs, ours)


# The remap language of 5.4-7.3, served: E (per-host files with a default; undone when the result
# cannot be served, for reads and for writes), labels and j, gg, \#.
RULES = r"""
# E: the client's own file if there is one, else the default
rE      ^boot$                  hosts/\i
r       ^boot$                  hello.txt
rE      ^(.*)\.cfg$             \1.missing
rE      ^drop/(.*)$             incoming/\1
r       ^drop/(.*)$             nowhere/\1
E       ^v6\.txt$
# labels and j
j       ^jump/                  jumped
r       ^jump/                  not-jumped/
:jumped
r       ^jump/(.*)$             \1
j~      ^skip                   end
r       ^skip                   never
:end
# gg, and \# in a regex and a replacement
rgg     \+                      /
r       ^hash\#(.*)$            \1
r       ^tag$                   \#tag
"""

REMAP_REQUESTS = reads("boot", "pxelinux.cfg", "first.cfg", "v6.txt", "jump/hello.txt", "skip", "skipper",
                       "pxelinux.cfg+default", "hosts+127.0.0.1", "hash#v4.txt", "tag", "/abs") + \
    writes("drop/new.bin", "drop/../first.txt")


def test_the_remap_language_of_7_3_serves_as_7_3_does(tmp_path):
    rules = tmp_path / "rules"
    rules.write_text(RULES)
    with both(["-s", "-c", "-u", "root", "-m", rules], tmp_path) as (theirs, ours):
        ready((theirs, ours), "v4.txt")
        got = assert_same_outcomes(theirs, ours, REMAP_REQUESTS, "remap", {("pxelinux.cfg", False): DIRECTORY})
        assert got[0] == ("DATA", b"for 127.0.0.1\n"), got[0]  # E found the host's file
        assert got[4] == ("DATA", b"hello, rack\n"), got[4]  # jumped
        assert (ours.root / "incoming/new.bin").read_bytes() == (theirs.root / "incoming/new.bin").read_bytes()


# --map-test FILE: each line a requested name, the result on stdout, as 7.3 prints it. An `a`
# rule's line is "ERROR: " and its message, the replacement with its escapes expanded (7.3's
# MATCHONLY: not the name rewritten); for a rule without one 7.3 prints "(null)", Stampede
# "Access violation", the message it sends.
MAP_RULES = r"""
r ^foo bar
a ^deny
rG ^get got
rP ^put putted
r4 ^fam four-
r6 ^fam six-
r ^x(.*) \i-\x-\1
rgg a X
rg b Y
j ^boot boot
r ^ other/
e ^
:boot
ri ^BOOT(.*) B\1
rE ^(.*)$ \1.never
r ^hash\#(.*)$ \#\1
"""
# Ahead of MAP_RULES: the messages of `a` rules.
ABORT_RULES = r"""
a ^secret denied
a ^(pri)vate no-\1-here\ for\ \i
a~ ^[a-z] \0-\1-not-a-letter
"""
MAP_NAMES = ["secret/x", "private/y", "0day", "foo.txt", "deny/me", "get", "put", "family", "xabc", "aaa", "abba", "bab", "BoOt.x", "boot", "hash#x",
             "", "  spaced  ", "/abs/./p", "a/../../b", "pxelinux.cfg/01-aa-bb"]


def map_test(command, *argv):
    r = subprocess.run([*command, *map(str, argv)], capture_output=True, timeout=10)
    lines = r.stdout.decode(errors="replace").split("\n")
    return r.returncode, ["ERROR: Access violation" if line == "ERROR: (null)" else line for line in lines]


@pytest.mark.parametrize("flags", [[], ["-6"], ["-c"], ["-4", "-c"], ["--normalize"], ["--normalize=root"],
                                   ["--map-steps", "5"]], ids=lambda f: " ".join(f) or "plain")
def test_map_test_prints_what_7_3_prints(tmp_path, flags):
    rules, names = tmp_path / "rules", tmp_path / "names"
    rules.write_text(ABORT_RULES + MAP_RULES)
    names.write_text("\n".join(MAP_NAMES) + "\n")
    theirs = map_test(in_tftpd(*flags, "-m", rules, "--map-test", names, share=tmp_path))
    ours = map_test([str(SERVER_BINARY), *flags, "-m", rules, "--map-test", names])
    assert ours == theirs
    assert theirs[0] == 0 and len(theirs[1]) == len(MAP_NAMES) + 1


def test_map_test_without_rules_echoes_and_a_missing_file_is_ex_noinput(tmp_path):
    names = tmp_path / "names"
    names.write_text("a//b\n./c\n")
    for flags in ([], ["--normalize"]):
        theirs = map_test(in_tftpd(*flags, "--map-test", names, share=tmp_path))
        assert map_test([str(SERVER_BINARY), *flags, "--map-test", names]) == theirs
    theirs, ours = run_both(["--map-test", tmp_path / "missing"], tmp_path)
    assert theirs.returncode == ours.returncode == 66, (theirs, ours)


# The combinations in.tftpd(8) forbids: exit 78 (EX_CONFIG), the line named, in 7.3's words.
# `sj` is forbidden by the manual but taken by 7.3 (where it loops): Stampede refuses it.
@pytest.mark.parametrize("flags,words", [("ra", "r and a"), ("r~", "r and ~"), ("rj", "r and j"), ("ea", "a and e"),
                                         ("eE", "e and E"), ("ej", "e and j"), ("es", "e and s"), ("Ea", "a and E"),
                                         ("Ej", "E and j"), ("Es", "E and s"), ("sa", "a and s"), ("aj", "a and j")])
def test_combinations_7_3_refuses_are_refused_with_the_line(tmp_path, flags, words):
    rules = tmp_path / "rules"
    rules.write_text(f"r ^x y\n:foo\n{flags} ^foo bar\n")
    theirs, ours = run_both(["-m", rules, "--map-test", "/dev/null"], tmp_path)
    assert theirs.returncode == ours.returncode == 78, (theirs, ours)
    assert f"line 3: rule flags {words} cannot be combined".encode() in theirs.stderr
    assert f"line 3: rule flags {words} cannot be combined".encode() in ours.stderr


# Deliberate differences in the language, each shown against 7.3.
def test_where_stampede_differs_on_purpose(tmp_path):
    names = tmp_path / "names"
    names.write_text("XabE\nabbcb\n")

    def compare(rules_text):
        rules = tmp_path / "rules"
        rules.write_text(rules_text)
        return (map_test(in_tftpd("-m", rules, "--map-test", names, share=tmp_path)),
                map_test([str(SERVER_BINARY), "-m", rules, "--map-test", names]))

    # gg with an empty match: 7.3 never moves past it and fails the request after --map-steps;
    # Stampede moves on as sed does (`sed 's/b*/-/g'`).
    theirs, ours = compare("rgg b* -\n")
    assert theirs == (0, ["ERROR: Remap table failure", "ERROR: Remap table failure", ""])
    assert ours == (0, ["-X-a-E-", "-a-c-", ""])
    # A jump to a label that is not there: 7.3 fails each request that takes it; Stampede
    # refuses the file at start (exit 78), as it refuses every other bad line.
    for text in ("j ^a nowhere\n", "j ^a\n", "sj ^a somewhere\n:somewhere\n"):
        theirs, ours = compare(text)
        assert theirs[0] == 0 and ours[0] == 78, (text, theirs, ours)


def test_an_a_rule_s_message_goes_on_the_wire_where_7_3_sends_its_own(tmp_path):
    """Deliberate: 7.3 computes an `a` rule's message (its --map-test prints it) but answers every
    refusal with "access denied"; Stampede sends the message, as tftpd-hpa 5.x did, so that a
    client's operator reads why. The code is the same, 2."""
    rules = tmp_path / "rules"
    rules.write_text("a ^secret denied\n")
    with both(["-s", "-u", "root", "-m", rules], tmp_path) as (theirs, ours):
        ready((theirs, ours))
        assert outcome(theirs.port, "secret/x", False, "octet", ()) == ("ERROR", 2, "access denied")
        assert outcome(ours.port, "secret/x", False, "octet", ()) == ("ERROR", 2, "denied")


def test_map_test_s_E_rule_finds_no_file_as_7_3_s(tmp_path):
    """7.3's --map-test answers every `E` probe "Just testing...", whatever directory is named
    and whatever is in it: the rewrite is undone. Stampede's does the same."""
    root = tmp_path / "root"
    root.mkdir()
    (root / "a.found").write_text("x\n")
    (root / "a.found").chmod(0o644)
    rules, names = tmp_path / "rules", tmp_path / "names"
    rules.write_text("rE ^(.*)$ \\1.found\n")
    names.write_text("a\nb\n")
    theirs = map_test(in_tftpd("-m", rules, "--map-test", names, root, share=tmp_path))
    assert theirs == (0, ["a", "b", ""])
    assert map_test([str(SERVER_BINARY), "-m", rules, "--map-test", names, root]) == theirs
