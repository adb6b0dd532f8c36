#!/usr/bin/env python3
"""stampede(8)'s option lists, written from the binary's own definitions: each subcommand's
`--experimental-dump-help` (swift-argument-parser's description of every flag, its names, value
and help), so that the page cannot say other than the command does.

The page (docs/stampede.8) is prose with regions that this writes:

    .\\" OPTIONS serve
    (written here)
    .\\" END OPTIONS

`serve`'s flags go under the headings of SERVE_HEADINGS (a flag no heading names is an error:
place it); `get put` writes the options both take (and says which one alone takes any other).

    python3 Tools/manual.py BINARY PAGE            # the page with its regions written, on stdout
    python3 Tools/manual.py BINARY PAGE --write    # rewritten in place (`make manual`)
    python3 Tools/manual.py BINARY PAGE --check    # exit 1, saying where, if PAGE is not what it writes
"""
import json
import re
import subprocess
import sys

# serve's flags by heading, each named by its first long name (or its short one).
SERVE_HEADINGS = [
    ("How it listens", ["listen", "foreground", "systemd", "address", "service", "ipv4", "ipv6", "port-range", "single-port"]),
    ("What it serves", ["secure", "jail", "create", "ro", "max-upload", "permissive", "user", "umask", "map-file", "map-steps",
                        "map-test", "map-client", "normalize", "validate", "path-prefix"]),
    ("Options it negotiates", ["blocksize", "windowsize", "window-bytes", "refuse", "refuse-all", "retransmit", "fixed-timeout",
                               "retries"]),
    ("Logging", ["verbose", "verbosity", "syslog", "stderr", "stdout", "logfile", "logformat", "log-format", "metrics"]),
    ("HTTP", ["http", "http-max-connections", "http-max-per-client", "http-max-per-prefix", "http-idle-timeout", "http-request-timeout"]),
    ("HTTPS", ["https", "tls-certificate", "tls-key", "tls-profile", "tls-kernel"]),
    ("Network boot: proxyDHCP", ["proxy-dhcp", "proxy-dhcp6", "dhcp6-derived", "boot-file", "boot-chain", "pxe-vendor", "machines", "unknown-machines", "machines-api", "machines-api-cache", "machines-api-calls"]),
    ("Running", ["timeout", "pidfile", "grace", "workers", "backend", "no-gso", "cache-size", "cache-file-limit", "max-transfers",
                 "max-per-client", "max-per-prefix", "max-transfer-sockets", "when-busy", "version"]),
]
REGION = re.compile(r'^\.\\" OPTIONS ([^\n]+)\n.*?^\.\\" END OPTIONS\n', re.MULTILINE | re.DOTALL)


def dump(binary, command):
    """`command`'s options; a subcommand's is named with a slash (`machines/done`)."""
    out = subprocess.run([binary, *command.split("/"), "--experimental-dump-help"], capture_output=True, check=True).stdout
    return [a for a in json.loads(out)["command"]["arguments"]
            if a["kind"] != "positional" and a.get("shouldDisplay", True) and key(a) != "help"]


def key(argument):
    names = argument.get("names", [])
    longs = [n["name"] for n in names if n["kind"] != "short"]
    return longs[0] if longs else names[0]["name"]


def text(words):
    """Prose as roff: backslashes and minus signs escaped, other than ASCII as groff's \\[uXXXX],
    no line that roff would take for a request."""
    escaped = words.replace("\\", "\\e").replace("-", "\\-")
    escaped = "".join(c if ord(c) < 128 else f"\\[u{ord(c):04X}]" for c in escaped)
    return "\n".join(("\\&" + line) if line.startswith((".", "'")) else line for line in escaped.split("\n"))


def entry(argument):
    """One option: its names in bold, its value in italics (its choices when it has some), its help."""
    names = [("-" if n["kind"] == "short" else "--") + n["name"] for n in argument["names"]]
    shown = ", ".join(name.replace("-", "\\-") for name in names)
    if argument["kind"] == "flag":
        head = f'.TP\n.B "{shown}"'
    else:
        value = ("|".join(argument["allValues"]) if argument.get("allValues") else argument["valueName"]).replace("-", "\\-")
        head = f'.TP\n.BI "{shown} " "{value}"'

    help_text = argument.get("abstract", "")
    if argument.get("discussion"):
        help_text += "\n" + argument["discussion"]
    return f"{head}\n{text(help_text)}\n"


def serve(binary):
    arguments = {key(a): a for a in dump(binary, "serve")}
    placed = [name for _, names in SERVE_HEADINGS for name in names]
    missing = sorted(set(arguments) - set(placed))
    if missing:
        sys.exit(f"Tools/manual.py: serve's {', '.join('--' + m for m in missing)} under no heading: place each in SERVE_HEADINGS")
    gone = sorted(set(placed) - set(arguments))
    if gone:
        sys.exit(f"Tools/manual.py: SERVE_HEADINGS names {', '.join('--' + g for g in gone)}, which serve does not take")
    return "".join(f".SS {heading}\n" + "".join(entry(arguments[name]) for name in names) for heading, names in SERVE_HEADINGS)


def commands(binary, names):
    """The options of each of `names`, once each, in the first command's order; an option only
    some take says so."""
    lists = {name: dump(binary, name) for name in names}
    order, takers = [], {}
    for name in names:
        for argument in lists[name]:
            if key(argument) not in takers:
                order.append(argument)
            takers.setdefault(key(argument), []).append(name)
    out = ""
    for argument in order:
        alone = takers[key(argument)]
        if len(alone) < len(names):
            argument = {**argument, "abstract": argument.get("abstract", "") + f" ({' and '.join(alone)} only)"}
        out += entry(argument)
    return out


def written(binary, page):
    def region(match):
        names = match.group(1).split()
        body = serve(binary) if names == ["serve"] else commands(binary, names)
        return f'.\\" OPTIONS {match.group(1)}\n{body}.\\" END OPTIONS\n'
    return REGION.sub(region, page)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    binary, path = sys.argv[1], sys.argv[2]
    page = open(path).read()
    new = written(binary, page)
    if "--check" in sys.argv:
        if new != page:
            lines = [n for n, (a, b) in enumerate(zip(page.splitlines(), new.splitlines()), 1) if a != b]
            sys.exit(f"{path} is not what the binary's flags make of it (first difference at line "
                     f"{lines[0] if lines else min(len(page.splitlines()), len(new.splitlines())) + 1}): `make manual` writes it")
    elif "--write" in sys.argv:
        open(path, "w").write(new)
    else:
        sys.stdout.write(new)


if __name__ == "__main__":
    main()
