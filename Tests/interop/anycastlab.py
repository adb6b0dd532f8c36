"""The anycast lab from Python: anycast-lab.sh's namespaces, a Stampede server in each server
namespace, storms in the client namespace. Used by test_anycast.py and Benchmarks/anycast.py (make bench-anycast)."""
import json
import subprocess
import time
from pathlib import Path

LAB = Path(__file__).with_name("anycast-lab.sh")
ANYCAST = "10.252.0.1"


def lab_command(*args):
    r = subprocess.run(["bash", str(LAB), *map(str, args)], capture_output=True, timeout=60)
    assert r.returncode == 0, f"anycast-lab.sh {' '.join(map(str, args))}: {r.stderr.decode()}"


class Lab:
    """One lab: a client namespace, a router whose multipath route (hash `policy` 0 or 1,
    `route` "hash-threshold" or "resilient") spreads ANYCAST over `servers` server namespaces."""

    def __init__(self, name, servers, policy, route, workdir, binary):
        self.name = name
        self.workdir = Path(workdir)
        self.binary = str(binary)
        self.servers = {}
        lab_command("up", name, servers, policy, route)

    def inside(self, where):
        return ["bash", str(LAB), "exec", self.name, str(where)]

    def start(self, i, root, *args):
        """Server i on the anycast address: TFTP on 69, HTTP on 80, one JSON line per transfer."""
        log = self.workdir / f"{self.name}-server-{i}.log"
        argv = [*self.inside(i), "prlimit", "--nofile=20000:20000", self.binary, "-l", "-L", "-a", f"{ANYCAST}:69",
                "--http", f"{ANYCAST}:80", "-v", "--log-format", "json", *args, str(root)]
        process = subprocess.Popen(argv, stdout=open(log, "w"), stderr=subprocess.STDOUT)
        self.servers[i] = (process, log)
        deadline = time.time() + 10
        while "serving" not in log.read_text():
            assert process.poll() is None and time.time() < deadline, log.read_text()
            time.sleep(0.02)

    def storm(self, root, machines, *args, ramp=1):
        """Starts a rack of `machines` playing uefi-ipxe (its HTTP stages from the anycast address
        too), powering on over `ramp` s, every byte compared with `root`: a Popen whose stdout is
        the storm's JSON report (`report()` reads it)."""
        argv = [*self.inside("client"), "prlimit", "--nofile=20000:20000", self.binary, "storm", f"{ANYCAST}:69",
                "--profile", "uefi-ipxe", "--http", f"{ANYCAST}:80", "--source-range", "10.251.0.1",
                "--clients", str(machines), "--ramp", str(ramp), "--verify-root", str(root), "--json", *args]
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    @staticmethod
    def report(storm, timeout=600):
        out, err = storm.communicate(timeout=timeout)
        assert out, err.decode()
        return json.loads(out)

    def share(self):
        """Per server: the machines (client addresses) it served a whole file to, and its bytes."""
        out = {}
        for i, (_, log) in self.servers.items():
            clients, sent = set(), 0
            for line in log.read_text().splitlines():
                if not line.startswith("{"):
                    continue
                entry = json.loads(line)
                if entry.get("event") == "transfer" and entry.get("outcome") == "served":
                    clients.add(entry["client"].rsplit(":", 1)[0].strip("[]"))
                    sent += entry.get("bytes", 0)
            out[i] = (len(clients), sent)
        return out

    def signal(self, i, sig):
        """Sends `sig` to server i (the lab's `exec` execs it: the Popen is the server)."""
        self.servers[i][0].send_signal(sig)

    def wait(self, i, timeout=30):
        return self.servers[i][0].wait(timeout=timeout)

    def withdraw(self, i):
        lab_command("withdraw", self.name, i)

    def down(self):
        for process, _ in self.servers.values():
            if process.poll() is None:
                process.kill()
                process.wait(timeout=10)
        lab_command("down", self.name)
