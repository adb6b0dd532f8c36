"""stampede(8) says what the binary takes: its option lists are written from the binary's own
definitions (Tools/manual.py, from swift-argument-parser's dump of each subcommand), so that the
page cannot drift from the flags again; and every flag of every subcommand is in it."""
import json
import sys

import pytest

from conftest import BINARY, REPO, run

PAGE = REPO / "docs" / "stampede.8"
COMMANDS = ["serve", "get", "put", "storm", "tls-ca", "machines/list", "machines/done"]


def test_the_page_is_what_the_binarys_flags_make_of_it():
    r = run([sys.executable, str(REPO / "Tools" / "manual.py"), str(BINARY), str(PAGE), "--check"])
    assert r.returncode == 0, r.stderr.decode()


@pytest.mark.parametrize("command", COMMANDS)
def test_every_flag_of_every_subcommand_is_in_the_page(command):
    page = PAGE.read_text()
    arguments = json.loads(run([str(BINARY), *command.split("/"), "--experimental-dump-help"]).stdout)["command"]["arguments"]
    names = [("-" if n["kind"] == "short" else "--") + n["name"] for a in arguments for n in a.get("names", [])
             if a["kind"] != "positional" and n["name"] != "help" and n["name"] != "h"]
    assert names, command
    missing = [name for name in names if name.replace("-", "\\-") not in page]
    assert not missing, f"{command}: {missing} not in {PAGE}"


def test_a_flag_under_no_heading_stops_the_writer(tmp_path):
    """A new serve flag must be placed under a heading: the writer says which, and fails."""
    page = tmp_path / "stampede.8"
    page.write_text('.SH SERVER OPTIONS\n.\\" OPTIONS serve\n.\\" END OPTIONS\n')
    fake = tmp_path / "fake"
    dump = json.loads(run([str(BINARY), "serve", "--experimental-dump-help"]).stdout)
    dump["command"]["arguments"].append({"kind": "flag", "names": [{"kind": "long", "name": "new-flag"}], "abstract": "x",
                                         "valueName": "new-flag", "shouldDisplay": True})
    fake.write_text(f"#!/bin/sh\ncat <<'EOF'\n{json.dumps(dump)}\nEOF\n")
    fake.chmod(0o755)
    r = run([sys.executable, str(REPO / "Tools" / "manual.py"), str(fake), str(page)])
    assert r.returncode != 0 and b"--new-flag under no heading" in r.stderr, r.stderr
