"""Every numeric flag of every subcommand has a range (issue 21, defect 5): 0, -1, a huge value,
one past a 64-bit integer and a word are each either taken or refused with a usage error (exit
64) that names the flag; none may crash the server later (`--workers 0` divided by zero, `-T`
and `--cache-size` wrapped, `--retries -1` trapped at the first retransmission)."""
import json
import subprocess

import pytest

from conftest import BINARY, free_udp_port

YEAR = 365 * 86400
COUNT = (1, 16_777_216)
MIB = (0, 16_777_216)
RETRIES = (0, 100)

# flag: (low, high), integers unless a float is given.
NUMERIC = {
    "serve": {
        "-t": (0, YEAR), "-T": (1000, 255_000_000), "--verbosity": (0, 9), "--workers": (1, 1024),
        "--retries": RETRIES, "--grace": (0, YEAR), "--cache-size": MIB, "--cache-file-limit": MIB,
        "--max-transfers": COUNT, "--max-transfer-sockets": (0, COUNT[1]), "--max-per-client": COUNT,
        "--max-per-prefix": COUNT, "-B": (8, 65464), "-W": (0, 2**63 - 1),
        "--window-bytes": (0, 2**63 - 1), "--map-steps": (1, 2**31 - 1),
        "--http-max-connections": COUNT, "--http-max-per-client": COUNT, "--http-max-per-prefix": COUNT, "--http-idle-timeout": (1, YEAR),
        "--http-request-timeout": (1, YEAR), "--machines-api-cache": (1, YEAR), "--machines-api-calls": (1, 1024),
    },
    "get": {"--blksize": (8, 65464), "--windowsize": (1, 32767), "--timeout": (1, 255), "--retries": RETRIES},
    "put": {"--blksize": (8, 65464), "--windowsize": (1, 32767), "--timeout": (1, 255), "--retries": RETRIES},
    "storm": {
        "--stages": (1, 2), "--ramp": (0.0, float(YEAR)), "--clients": COUNT, "--total": (0, 2**31 - 1),
        "--duration": (0.001, float(YEAR)), "--blksize": (8, 65464), "--windowsize": (1, 32767),
        "--timeout": (1, 255), "--retransmit": (1, 255_000), "--retries": RETRIES, "--hold": (0.0, 255.0),
        "--threads": (1, 1024),
    },
}
# The other flags that take a value: names, addresses, choices, files (checked elsewhere).
OTHER = {
    "serve": {"--address", "--user", "--umask", "--pidfile", "--map-file", "--map-test", "--map-client", "--refuse",
              "--port-range", "--backend", "--when-busy", "--metrics", "--log-format", "--logfile", "--logformat",
              "--service",  # a port or a services(5) name: test_cli.py
              "--path-prefix", "--normalize",  # test_parity_names.py
              "--max-upload",  # a size with k, M, G...: test_parity_uploads.py
              "--http",  # ADDR:PORT: test_http.py, and below
              "--proxy-dhcp", "--boot-file", "--pxe-vendor",  # an IPv4 address, SELECTOR=NAME, a vendor class: test_proxy_dhcp.py, ServePlanTests
              "--proxy-dhcp6",  # an IPv6 address: test_proxy_dhcp6.py
              "--boot-chain",  # ipxe or secure-boot: test_proxy_dhcp.py, test_firmware.py, BootMenuTests
              "--machines", "--unknown-machines", "--machines-api",  # a directory, a choice, a URL: test_machines.py
              "--https", "--tls-certificate", "--tls-key", "--tls-profile"},  # ADDR:PORT, files, a choice: test_https.py
    "get": {"--mode", "--option"},  # NAME=VALUE of the option table: test_parity_options.py, test_cli.py
    "put": {"--mode", "--option"},
    "storm": {"--profile", "--profile-file", "--show-profile", "--verify-root", "--slice", "--source-range", "--machines",
              "--verify", "--backend", "--metrics", "--option",
              "--http",  # HOST[:PORT]: test_http.py
              "--dhcp",  # an IPv4 address: test_proxy_dhcp.py
              "--https", "--tls-ca"},  # HOST[:PORT], a file: test_https.py
}
VALUES = ["0", "-1", "99999999999", "99999999999999999999999", "x"]


def value_options(command):
    """The long names of the options `command` takes a value for, from the parser's own dump."""
    out = subprocess.run([str(BINARY), command, "--experimental-dump-help"], capture_output=True, check=True).stdout
    names = set()
    for argument in json.loads(out)["command"]["arguments"]:
        if argument["kind"] == "option":
            longs = [n["name"] for n in argument["names"] if n["kind"] == "long"]
            shorts = [n["name"] for n in argument["names"] if n["kind"] == "short"]
            names.add("--" + longs[0] if longs else "-" + shorts[0])
    return names


def long_name(command, flag):
    """-t → --timeout (the dump names options by their long name)."""
    short = {"-t": "--timeout", "-T": "--retransmit", "-B": "--blocksize", "-W": "--windowsize"}
    return short.get(flag, flag) if command == "serve" else flag


@pytest.mark.parametrize("command", NUMERIC)
def test_every_flag_that_takes_a_value_is_in_a_table_here(command):
    listed = {long_name(command, flag) for flag in NUMERIC[command]} | OTHER[command]
    assert value_options(command) == listed


def taken(value, bounds):
    low, high = bounds
    try:
        number = float(value) if isinstance(low, float) else int(value)
    except ValueError:
        return False
    return low <= number <= high and (isinstance(low, float) or -2**63 <= number < 2**63)


def invocation(command, flag, value, tmp_path, port):
    local = tmp_path / "local.bin"
    local.write_bytes(b"x" * 100)
    base = {
        # A directory that is not there: a flag that is taken gets as far as opening it (exit 66).
        "serve": ["-l", "-a", "127.0.0.1:0", str(tmp_path / "absent")],
        "get": [f"127.0.0.1:{port}", "f", str(tmp_path / "out")],
        "put": [f"127.0.0.1:{port}", str(local), "f"],
        "storm": [f"127.0.0.1:{port}", "f", "--clients", "1"],
    }[command]
    # A profile sets its own options; --stages needs one (uefi has 2 stages).
    if command == "storm" and flag == "--stages":
        base = [f"127.0.0.1:{port}", "--profile", "uefi", "--clients", "1"]
    # A client that gets going gives up soon (its socket hears no ICMP: it waits for its timeout).
    quick = {"get": {"--retries": "0"}, "put": {"--retries": "0"}, "storm": {"--retries": "0", "--retransmit": "100"}}
    for option, quick_value in quick.get(command, {}).items():
        if option != flag and flag != "--stages":
            base += [option, quick_value]
    return [str(BINARY), command, *base, f"{flag}={value}" if value.startswith("-") else flag, *([] if value.startswith("-") else [value])]


@pytest.mark.parametrize("command,flag", [(c, f) for c in NUMERIC for f in NUMERIC[c]])
def test_a_numeric_flag_takes_its_range_and_refuses_the_rest_with_exit_64(command, flag, tmp_path):
    port = free_udp_port()  # nothing listens: a client run that gets going fails at once
    bounds = NUMERIC[command][flag]
    for value in VALUES + [str(bounds[0]), str(bounds[1])]:
        argv = invocation(command, flag, value, tmp_path, port)
        try:
            r = subprocess.run(argv, capture_output=True, timeout=2)
        except subprocess.TimeoutExpired:
            # Still running: the flag was taken (a storm with 0 s of --hold, say).
            assert taken(value, bounds), f"{flag} {value}: neither refused nor finished"
            continue
        stderr = r.stderr.decode(errors="replace")
        assert r.returncode >= 0, f"{flag} {value}: killed by signal {-r.returncode}\n{stderr}"
        if taken(value, bounds):
            assert r.returncode != 64, f"{flag} {value} was refused: {stderr}"
        else:
            assert r.returncode == 64, f"{flag} {value}: exit {r.returncode}\n{stderr}"
            assert flag.lstrip("-") in stderr or long_name(command, flag).lstrip("-") in stderr, stderr


@pytest.mark.parametrize("flag,value", [("-U", "-1"), ("-U", "1000"), ("-U", "9z"), ("-R", "0:5"), ("-R", "5:1"),
                                        ("-R", "1:70000"), ("-R", "x"), ("--metrics", ":70000"), ("--metrics", "x"),
                                        ("--http", ":70000"), ("--http", "x")])
def test_the_other_numbers_of_serve_are_usage_errors_too(flag, value, tmp_path):
    r = subprocess.run([str(BINARY), "-l", "-a", "127.0.0.1:0", f"{flag}={value}", str(tmp_path)], capture_output=True,
                       timeout=5)
    assert r.returncode == 64, (r.returncode, r.stderr)
