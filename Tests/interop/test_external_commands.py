"""Every external command the tests and benchmarks run is one `make deps` (or `make bench-deps`)
installs: the Makefile's TEST_COMMANDS and BENCH_COMMANDS list them, and this reads the sources
to hold it true.
A new user's machine has only what the Makefile installs; CI's machine has more, so a command
missing from the list would pass CI and fail every new user."""
import ast
import re
import shlex
import subprocess
from pathlib import Path

from conftest import REPO, external_commands, find_command

RUNNERS = {"run", "Popen", "check_output", "check_call", "call"}
# Not installed by make deps, and need not be: what runs the suite itself, and shell builtins.
GIVEN = {"python3", "make", "kill", "echo", "printf", "test", "true", "false", "set", "trap", "cd", "wait", "exit"}


def python_command_literals(path):
    """Program names in argv lists: the first argument of run/Popen/..., or a `prefix=` list,
    whose first element (after any *splat) is a string."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        lists = [node.args[0]] if name in RUNNERS and node.args else []
        lists += [k.value for k in node.keywords if k.arg == "prefix"]
        for argv in lists:
            if not isinstance(argv, ast.List):
                continue
            first = next((e for e in argv.elts if not isinstance(e, ast.Starred)), None)
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                found.add(first.value)
    return found


def shell_words(path):
    """Every bare word of a shell script that names a program on this machine."""
    words = set()
    for line in path.read_text().splitlines():
        try:
            tokens = shlex.split(line, comments=True)
        except ValueError:
            tokens = line.split()
        words.update(t for t in tokens if re.fullmatch(r"[a-z][a-z0-9.+_-]*", t))
    return {w for w in words if find_command(w)}


def debian_package(command):
    """The package that owns `command`, and whether it is essential (always installed)."""
    path = find_command(command)
    if not path:
        return None, False
    for candidate in (str(Path(path).resolve()), f"/bin/{command}", f"/sbin/{command}", f"/usr/bin/{command}",
                      f"/usr/sbin/{command}"):
        r = subprocess.run(["dpkg", "-S", candidate], capture_output=True, text=True)
        owners = [line.split(":")[0] for line in r.stdout.splitlines() if not line.startswith("diversion")]
        if r.returncode == 0 and owners:
            package = owners[0]
            essential = subprocess.run(["dpkg-query", "-W", "-f=${Essential}", package], capture_output=True,
                                       text=True).stdout == "yes"
            return package, essential
    return None, False


def ours(folder, pattern):
    """The project's own files under `folder` matching `pattern`: not what a build folder there holds
    (Benchmarks/.build has the micro-benchmarks' packages, with scripts of their own)."""
    return [path for path in (REPO / folder).rglob(pattern)
            if not any(part.startswith(".build") for part in path.relative_to(REPO).parts)]


def test_every_command_the_tests_and_benchmarks_run_is_installed_by_make():
    listed = external_commands()
    commands = {}
    for path in [*ours("Tests", "*.py"), *ours("Benchmarks", "*.py")]:
        for command in python_command_literals(path):
            commands.setdefault(command, path.relative_to(REPO))
    for path in ours("Benchmarks", "*.sh"):
        for command in shell_words(path):
            commands.setdefault(command, path.relative_to(REPO))
    unlisted = []
    for command, where in sorted(commands.items()):
        if command in listed or command in GIVEN:
            continue
        package, essential = debian_package(command)
        if not essential:
            unlisted.append(f"{command} ({where}; Debian package {package or 'unknown'})")
    assert not unlisted, "add to the Makefile's TEST_COMMANDS or BENCH_COMMANDS (make deps, make bench-deps install them): " + ", ".join(unlisted)
    # The list itself names real packages: each listed command that is here belongs to its package.
    for command, package in listed.items():
        owner, _ = debian_package(command)
        assert owner in (None, package), f"{command} belongs to {owner}, the list says {package}"


def test_the_checker_finds_commands_in_argv_lists(tmp_path):
    source = tmp_path / "example.py"
    source.write_text('run(["nft", "list"])\nsubprocess.Popen([*inside, "example-sniffer", "-i"])\n'
                      'serve(prefix=["prlimit", "--nofile=64"])\nrun([str(BINARY), "storm"])\n')
    assert python_command_literals(source) == {"nft", "example-sniffer", "prlimit"}
