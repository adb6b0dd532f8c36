"""The Debian package (`make deb`) on a Debian host that has never seen Swift: a minimal tree of
this machine's own release (`make package-deps` makes it once with debootstrap, under .build),
used through an overlay, so that every test starts from the same tree and leaves it as it was."""
import gzip
import os
import shutil
import signal
import socket
import struct
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import BINARY, REPO, free_tcp_port, free_udp_port, run
from tlscerts import Certificates

TREE = REPO / ".build" / "host-tree"
DEB_DIR = REPO / ".build" / "deb"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="installing a package into a tree needs root: chroot, mounts")


def package() -> Path:
    debs = sorted(DEB_DIR.glob("stampede_*.deb"))
    if not debs:
        pytest.skip(f"no stampede_*.deb in {DEB_DIR}: `make deb` builds it (`make test` does first)")
    return debs[-1]


class Host:
    """The tree as a host: an overlay of it (the changes go to `upper`), with /dev and /proc."""

    def __init__(self, base: Path):
        if not (TREE / "usr" / "bin" / "apt-get").exists():
            pytest.skip(f"{TREE} missing: `make package-deps` makes it (`make test` does first)")
        self.upper, work, self.root = base / "upper", base / "work", base / "root"
        for d in (self.upper, work, self.root):
            d.mkdir()
        self.mounts = []
        self.mount(["-t", "overlay", "overlay", "-o", f"lowerdir={TREE},upperdir={self.upper},workdir={work}"], self.root)
        self.mount(["--rbind", "/dev"], self.root / "dev")
        self.mount(["-t", "proc", "proc"], self.root / "proc")
        # Nothing the packages' scripts start may run here (Debian's way for chroots): tftpd-hpa's
        # init script would otherwise bind port 69 of the machine.
        policy = self.root / "usr" / "sbin" / "policy-rc.d"
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)

    def mount(self, args, target: Path):
        r = run(["mount", *args, str(target)])
        assert r.returncode == 0, r.stderr.decode()
        self.mounts.append(target)

    def close(self):
        for target in reversed(self.mounts):
            run(["umount", "-R", "-l", str(target)])

    def run(self, *argv, user=None, check=True, timeout=300, **kwargs):
        spec = [f"--userspec={user}"] if user else []
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C"}
        r = subprocess.run(["chroot", *spec, str(self.root), *argv], capture_output=True, env=env, timeout=timeout, **kwargs)
        if check:
            assert r.returncode == 0, f"{argv}: {r.returncode}\n{r.stdout.decode()[-3000:]}\n{r.stderr.decode()[-3000:]}"
        return r

    def apt_install(self, *what):
        return self.run("apt-get", "install", "-y", "--no-install-recommends", "-o", "Debug::NoLocking=1", *what)

    def put(self, deb: Path) -> str:
        shutil.copy(deb, self.root / "tmp" / deb.name)
        return f"/tmp/{deb.name}"

    def files(self) -> set:
        """Every path in the tree but the kernel's and the scratch ones."""
        found = set()
        for top, dirs, names in os.walk(self.root):
            if Path(top) == self.root:
                dirs[:] = [d for d in dirs if d not in ("dev", "proc", "sys", "run", "tmp")]
            found.update("/" + str((Path(top) / name).relative_to(self.root)) for name in dirs + names)
        return found

    def ids(self, name) -> tuple:
        entry = self.run("getent", "passwd", name).stdout.decode().split(":")
        return int(entry[2]), int(entry[3])

    def installed(self, name) -> bool:
        r = self.run("dpkg-query", "-W", "-f", "${db:Status-Abbrev}", name, check=False)
        return r.stdout.decode().startswith("ii")


@pytest.fixture
def host(tmp_path):
    h = Host(tmp_path)
    try:
        yield h
    finally:
        h.close()


def wait_for(fetch, deadline=10.0):
    end = time.time() + deadline
    while True:
        result = fetch()
        if result or time.time() > end:
            return result
        time.sleep(0.1)


def dynamic_entries(path: Path) -> dict:
    """An ELF64 little-endian file's DT_NEEDED, DT_RPATH and DT_RUNPATH strings (readelf -d)."""
    data = path.read_bytes()
    assert data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1, "not an ELF64 LE file"
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    dynamic = next(s for s in sections if s[1] == 6)  # SHT_DYNAMIC; its sh_link is the string table
    strings = sections[dynamic[6]]
    names = {1: "NEEDED", 15: "RPATH", 29: "RUNPATH"}
    found = {name: [] for name in names.values()}
    for offset in range(dynamic[4], dynamic[4] + dynamic[5], 16):
        tag, value = struct.unpack_from("<qQ", data, offset)
        if tag == 0:
            break
        if tag in names:
            start = strings[4] + value
            found[names[tag]].append(data[start:data.index(b"\0", start)].decode())
    return found


def test_the_shipped_binary_needs_nothing_from_a_swift_toolchain():
    """The Swift runtime and the C++ runtime it uses are linked in: the binary the package ships
    needs libc6's libraries, libgcc-s1's (which libc6 pulls in), liburing2's and libssl3's (OpenSSL,
    linked dynamically so that Debian's security updates reach it), and has no RUNPATH into a
    toolchain (none at all)."""
    entries = dynamic_entries(BINARY)
    assert set(entries["NEEDED"]) <= {"libc.so.6", "libm.so.6", "ld-linux-x86-64.so.2", "libgcc_s.so.1", "liburing.so.2",
                                      "libssl.so.3", "libcrypto.so.3"}, entries
    assert {"liburing.so.2", "libssl.so.3", "libcrypto.so.3"} <= set(entries["NEEDED"]), entries
    assert not entries["RPATH"] and not entries["RUNPATH"], entries


def test_the_package_serves_as_the_user_tftp_on_a_host_without_swift_and_purges_clean(host, tmp_path):
    deb = package()
    assert not list((TREE / "usr").rglob("libswiftCore*")) and not (TREE / "usr" / "bin" / "swift").exists()
    # What it depends on first (apt finds it by itself: test_apt_swaps_…), so that what is left
    # after the purge is the package's alone.
    host.apt_install("liburing2", "libssl3", "systemd-standalone-sysusers")
    before = host.files()
    depends = run(["dpkg-deb", "-f", str(deb), "Depends"], text=True).stdout
    assert "libssl3" in depends and "liburing2" in depends, depends
    host.apt_install(host.put(deb))
    assert host.installed("stampede")

    # What it installed: the binary and in.tftpd, the tftp user, the directory, the units
    # enabled as Debian enables them, the man page, the completions.
    assert os.readlink(host.root / "usr/sbin/in.tftpd") == "stampede"
    uid, gid = host.ids("tftp")
    assert uid != 0 and (host.root / "var/lib/tftpboot").is_dir()
    units = host.root / "lib/systemd/system"
    assert "--systemd --jail ${TFTPD_HOME}" in (units / "stampede.service").read_text()
    assert (host.root / "etc/systemd/system/sockets.target.wants/stampede.socket").is_symlink()
    assert (host.root / "etc/systemd/system/multi-user.target.wants/stampede.service").is_symlink()
    # The page the package installs is written from the binary's flags (Tools/manual.py): the
    # newest are in it.
    page = gzip.decompress((host.root / "usr/share/man/man8/stampede.8.gz").read_bytes()).decode()
    for flag in ("\\-\\-proxy\\-dhcp", "\\-\\-tls\\-kernel", "\\-\\-http\\-max\\-per\\-client", "\\-\\-boot\\-file"):
        assert flag in page, flag
    assert (host.root / "usr/share/bash-completion/completions/stampede").exists()
    version = host.run("dpkg-query", "-W", "-f", "${Version}", "stampede").stdout.decode()
    assert host.run("in.tftpd", "-V").stdout.decode().splitlines()[0] == f"tftp-hpa 7.3 compatible (stampede {version})"

    # Debian's line, by hand: in.tftpd --jail as the user tftp, fetched with curl byte for byte.
    served = os.urandom(3 << 20)
    boot = host.root / "var/lib/tftpboot/boot.bin"
    boot.write_bytes(served)
    boot.chmod(0o644)
    port, metrics, https = free_udp_port(), free_tcp_port(), free_tcp_port()
    # HTTPS through the host's libssl3, with a key only the user tftp reads.
    certs = Certificates(tmp_path / "certs")
    tls = host.root / "etc/stampede-test"
    tls.mkdir(parents=True, exist_ok=True)
    shutil.copy(certs.chain, tls / "server.pem")
    shutil.copy(certs.key, tls / "server.key")
    os.chown(tls / "server.key", uid, gid)
    (tls / "server.key").chmod(0o600)
    server = subprocess.Popen(["chroot", f"--userspec={uid}:{gid}", str(host.root), "/usr/sbin/in.tftpd", "--jail",
                               "/var/lib/tftpboot", "-L", "-l", "-a", f"127.0.0.1:{port}", "--metrics", f"127.0.0.1:{metrics}",
                               "--https", f"127.0.0.1:{https}", "--tls-certificate", "/etc/stampede-test/server.pem",
                               "--tls-key", "/etc/stampede-test/server.key"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        got = tmp_path / "curl.bin"

        def curl():
            return run(["curl", "-s", "-o", str(got), f"tftp://127.0.0.1:{port}/boot.bin"]).returncode == 0 and got.exists()
        assert wait_for(curl), server.stderr.read1().decode() if server.poll() is not None else "no answer"
        assert got.read_bytes() == served
        fetched = run(["curl", "-s", "--cacert", str(certs.ca), "-o", "-", f"https://127.0.0.1:{https}/boot.bin"])
        assert fetched.returncode == 0 and fetched.stdout == served, fetched.stderr
        uids = Path(f"/proc/{server.pid}/status").read_text().split("Uid:")[1].split()[:4]
        assert uids == [str(uid)] * 4, uids

        # One version: the package's, -V's and the metrics' build_info.
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=5) as answer:
            assert f'stampede_build_info{{version="{version}"' in answer.read().decode()

        # The client and the load generator run there too.
        host.run("stampede", "get", f"127.0.0.1:{port}", "boot.bin", "/tmp/got.bin", "-b", "1468", "-w", "16")
        assert (host.root / "tmp/got.bin").read_bytes() == served
        storm = host.run("stampede", "storm", f"127.0.0.1:{port}", "boot.bin", "--clients", "20", "--blksize", "1468",
                         "--verify", "/var/lib/tftpboot/boot.bin")
        assert b"20 ok, 0 failed" in storm.stdout, storm.stdout.decode()
    finally:
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=30) == 0

    # Purged, it leaves what Debian policy keeps (the user, dpkg's and apt's own records) and
    # nothing else.
    boot.unlink()
    shutil.rmtree(tls)
    host.run("dpkg", "--purge", "stampede")
    kept = sorted(path for path in host.files() - before if not path.startswith(KEPT))
    assert kept == [], kept
    for path in ("/usr/sbin/stampede", "/usr/sbin/in.tftpd", "/var/lib/tftpboot", "/lib/systemd/system/stampede.service",
                 "/usr/lib/sysusers.d/stampede.conf", "/etc/systemd/system/sockets.target.wants/stampede.socket"):
        assert not os.path.lexists(host.root / path.lstrip("/")), path


# Left by installing and purging, as Debian policy has it: the system user and its group (and the
# backups of those files), and the records of dpkg and apt.
KEPT = ("/etc/passwd-", "/etc/group-", "/etc/shadow-", "/etc/gshadow-", "/var/log/", "/var/lib/dpkg/",
        "/var/cache/apt/", "/var/cache/debconf/", "/var/lib/apt/")


def test_apt_swaps_stampede_and_tftpd_hpa_both_ways(host):
    """Provides, Conflicts and Replaces tftp-server: `apt install ./stampede….deb` takes
    tftpd-hpa's place, and `apt install tftpd-hpa` takes it back."""
    deb = host.put(package())
    assert not host.installed("liburing2") and not host.installed("libssl3")  # apt must find what the package depends on
    host.apt_install("tftpd-hpa")
    assert host.run("in.tftpd", "-V").stdout.decode().startswith("tftp-hpa")
    host.apt_install(deb)
    assert host.installed("stampede") and not host.installed("tftpd-hpa")
    assert "stampede" in host.run("in.tftpd", "-V").stdout.decode().splitlines()[0]
    host.apt_install("tftpd-hpa")
    assert host.installed("tftpd-hpa") and not host.installed("stampede")
    assert host.run("in.tftpd", "-V").stdout.decode().startswith("tftp-hpa")


def test_the_packaged_units_serve_http_on_port_80_as_the_user_tftp(host, network_namespace, tmp_path):
    """The socket unit with the example drop-in (ListenStream=80) passes port 80 to the service,
    which runs as the user tftp and could not bind it: the unit's own command line serves HTTP
    on it, and TFTP on port 69 beside it. systemd is played by the test (in a network namespace
    of its own, so that the ports are the real ones): the sockets as its socket unit makes them,
    LISTEN_FDS, the user and the command line of stampede.service."""
    host.apt_install(host.put(package()))
    uid, gid = host.ids("tftp")
    dropin = (host.root / "usr/share/doc/stampede/examples/stampede-http.conf").read_text()
    assert "[Socket]" in dropin and "ListenStream=80" in dropin.splitlines()
    service = (host.root / "lib/systemd/system/stampede.service").read_text()
    command = next(line for line in service.splitlines() if line.startswith("ExecStart="))
    argv = [word.replace("${TFTPD_HOME}", "/var/lib/tftpboot") for word in command[len("ExecStart="):].split()
            if word != "$TFTPD_OPTS"]
    served = os.urandom(2 << 20)
    boot = host.root / "var/lib/tftpboot/ipxe.efi"
    boot.write_bytes(served)
    boot.chmod(0o644)
    lab = network_namespace()
    with lab.sockets():
        # BindIPv6Only=both, as the package's socket unit says: one dual-stack socket for each line.
        udp = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        udp.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        udp.bind(("::", 69))
        tcp = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        tcp.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        tcp.bind(("::", 80))
        tcp.listen(128)

    def place():
        os.dup2(udp.fileno(), 100)
        os.dup2(tcp.fileno(), 101)
        os.dup2(100, 3)
        os.dup2(101, 4)
    # In the namespace too: the transfers' own sockets are made where the server runs.
    script = 'export LISTEN_PID=$$ LISTEN_FDS=2; exec "$@"'
    server = subprocess.Popen(["sh", "-c", script, "sh", *lab.inside, "chroot", f"--userspec={uid}:{gid}", str(host.root),
                               *argv], close_fds=False,
                              preexec_fn=place, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        got = tmp_path / "got"
        done = lab.run_inside(["curl", "-s", "--retry", "5", "--retry-connrefused", "-o", str(got),
                               "http://127.0.0.1:80/ipxe.efi"], timeout=60)
        assert done.returncode == 0 and got.read_bytes() == served, done.stderr
        done = lab.run_inside(["curl", "-s", "-g", "-o", str(got), "http://[::1]:80/ipxe.efi"], timeout=60)
        assert done.returncode == 0 and got.read_bytes() == served
        done = lab.run_inside(["curl", "-s", "-o", str(got), "tftp://127.0.0.1:69/ipxe.efi"], timeout=60)
        assert done.returncode == 0 and got.read_bytes() == served
        uids = Path(f"/proc/{server.pid}/status").read_text().split("Uid:")[1].split()[:4]
        assert uids == [str(uid)] * 4, uids
    finally:
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=30) == 0
        udp.close()
        tcp.close()


class DropInService:
    """The packaged service with an example drop-in, as systemd would run it: its capabilities
    (AmbientCapabilities), its TFTPD_OPTS (`example` replaced by `address`) in the unit's
    ExecStart, as the user tftp (setpriv), port 69 passed as the socket unit passes it, in
    `namespace`."""

    def __init__(self, host, name, example, address, namespace):
        host.apt_install(host.put(package()))
        self.uid, self.gid = host.ids("tftp")
        self.host, self.namespace = host, namespace
        self.dropin = (host.root / f"usr/share/doc/stampede/examples/{name}").read_text().splitlines()
        assert "[Service]" in self.dropin, self.dropin
        self.capabilities = next(line for line in self.dropin if line.startswith("AmbientCapabilities=")).split("=", 1)[1].split()
        options = next(line for line in self.dropin if line.startswith("Environment=\"TFTPD_OPTS="))
        options = options.split("=", 2)[2].rstrip('"').replace(example, address).split()
        service = (host.root / "lib/systemd/system/stampede.service").read_text()
        command = next(line for line in service.splitlines() if line.startswith("ExecStart="))
        self.argv = []
        for word in command[len("ExecStart="):].split():
            self.argv += options if word == "$TFTPD_OPTS" else [word.replace("${TFTPD_HOME}", "/var/lib/tftpboot")]
        with namespace.sockets():
            self.udp = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
            self.udp.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            self.udp.bind(("::", 69))

    def start(self, capability):
        named = ",".join("+" + c.removeprefix("CAP_").lower() for c in self.capabilities)
        caps = [f"--inh-caps={named}", f"--ambient-caps={named}"] if capability else []
        user = ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups", *caps]
        script = 'export LISTEN_PID=$$ LISTEN_FDS=1; exec "$@"'
        return subprocess.Popen(["sh", "-c", script, "sh", *self.namespace.inside, "chroot", str(self.host.root), *user, *self.argv],
                                close_fds=False, preexec_fn=lambda: os.dup2(self.udp.fileno(), 3),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def refused_without_capability(self):
        """What the service says when the drop-in's capability is not given (it must stop)."""
        refused = self.start(capability=False)
        assert refused.wait(timeout=30) != 0
        return refused.stderr.read().decode()

    def stop(self, server):
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=30) == 0, server.stderr.read().decode()
        self.udp.close()

    def runs_as_tftp(self, server):
        uids = Path(f"/proc/{server.pid}/status").read_text().split("Uid:")[1].split()[:4]
        return uids == [str(self.uid)] * 4


def test_the_packaged_service_answers_proxy_dhcp_as_the_user_tftp(host, boot_link):
    """With the example drop-in (the capabilities and address family it adds, and --proxy-dhcp in
    TFTPD_OPTS), the service, as the user tftp, hears DHCP through its packet socket beside the
    port 69 the socket unit passes, and offers a booting machine its file; without the
    capability it stops at start and says why. systemd is played by the test (setpriv for the
    capabilities), in the server namespace of a boot link, as above."""
    import dhcpwire
    server_ns, client_ns = boot_link
    unit = DropInService(host, "stampede-proxy-dhcp.conf", "192.0.2.1", dhcpwire.SERVER, server_ns)
    assert unit.capabilities == ["CAP_NET_RAW"], unit.capabilities
    # The unit allows AF_UNIX, AF_INET and AF_INET6 only: the drop-in adds the packet socket's.
    assert "RestrictAddressFamilies=AF_PACKET" in unit.dropin, unit.dropin
    said = unit.refused_without_capability()
    assert "CAP_NET_RAW" in said and "not permitted" in said, said
    server = unit.start(capability=True)
    machine = dhcpwire.Machine(client_ns)
    try:
        reply = None
        for _ in range(20):
            reply = machine.ask(dhcpwire.message(dhcpwire.MAC, arch=7), timeout=0.5)
            if reply:
                break
        assert reply and reply["file"] == "ipxe.efi" and reply["siaddr"] == dhcpwire.SERVER, reply
        assert unit.runs_as_tftp(server)
    finally:
        machine.close()
        unit.stop(server)


def test_the_packaged_service_answers_dhcpv6_as_the_user_tftp(host, link6):
    """With the DHCPv6 drop-in (CAP_NET_BIND_SERVICE for port 547, --proxy-dhcp6 in TFTPD_OPTS),
    the service, as the user tftp, answers OVMF's Solicit with the proxy offer and its Request on
    4011 with the URL; without the capability it stops at start and says why."""
    import dhcp6wire
    server_ns, client_ns = link6
    unit = DropInService(host, "stampede-proxy-dhcp6.conf", "2001:db8::1", dhcp6wire.SERVER6, server_ns)
    assert unit.capabilities == ["CAP_NET_BIND_SERVICE"], unit.capabilities
    said = unit.refused_without_capability()
    assert "CAP_NET_BIND_SERVICE" in said and "547" in said, said
    server = unit.start(capability=True)
    machine = dhcp6wire.Machine6(client_ns)
    try:
        data = None
        for _ in range(20):
            data, _ = machine.ask(dhcp6wire.solicit(), dhcp6wire.multicast(client_ns), timeout=0.5)
            if data:
                break
        assert data and data[0] == 2, server.stderr.read1().decode() if data is None else data
        url = dhcp6wire.first(dhcp6wire.options_of(data), 59).decode()
        assert url == f"tftp://[{dhcp6wire.SERVER6}]/ipxe.efi", url
        assert unit.runs_as_tftp(server)
    finally:
        machine.close()
        unit.stop(server)


def fingerprint(pem: bytes):
    return run(["openssl", "x509", "-noout", "-fingerprint", "-sha256"], input=pem).stdout.decode().strip()


def served_certificate(namespace, port):
    """The SHA-256 fingerprint of the certificate an HTTPS server at 127.0.0.1:`port` presents,
    or None when none answers."""
    shown = namespace.run_inside(["openssl", "s_client", "-connect", f"127.0.0.1:{port}"], input=b"", timeout=30).stdout
    begin, end = shown.find(b"-----BEGIN CERTIFICATE-----"), shown.find(b"-----END CERTIFICATE-----")
    return fingerprint(shown[begin:end + 25]) if begin >= 0 and end > begin else None


def test_a_renewed_certificate_is_served_after_sighup_under_the_standalone_units_secure_and_user(host, network_namespace, tmp_path):
    """The standalone unit's way (--secure, as root, then --user tftp), with the key where Debian
    keeps keys (/etc/ssl/private, 0710 root:ssl-cert; the key 0640 root:ssl-cert) and the user
    tftp in the group ssl-cert. A renewal replaces both files (a new inode each, as certbot's and
    acme.sh's do); `systemctl reload` sends SIGHUP (the unit's ExecReload), and the next handshake
    presents the new certificate. Before: the reload looked for the files inside the chroot (the
    served root) and failed; and with them there, it could not read the key, its groups dropped."""
    host.apt_install(host.put(package()))
    host.run("groupadd", "--system", "ssl-cert")
    host.run("usermod", "-a", "-G", "ssl-cert", "tftp")
    unit = (host.root / "usr/share/doc/stampede/examples/stampede-standalone.service").read_text()
    assert "ExecReload=/bin/kill -HUP $MAINPID" in unit.splitlines(), unit
    ssl = host.root / "etc/ssl"
    for directory in ("private", "certs"):
        (ssl / directory).mkdir(parents=True, exist_ok=True)
    group = int(host.run("getent", "group", "ssl-cert").stdout.decode().split(":")[2])
    os.chown(ssl / "private", 0, group)
    (ssl / "private").chmod(0o710)
    old, new = Certificates(tmp_path / "old"), Certificates(tmp_path / "new")

    def install(certificates):
        for source, target, mode in ((certificates.chain, ssl / "certs/stampede.pem", 0o644),
                                     (certificates.key, ssl / "private/stampede.key", 0o640)):
            staged = target.with_suffix(".new")
            shutil.copy(source, staged)
            os.chown(staged, 0, group)
            staged.chmod(mode)
            staged.rename(target)
    install(old)
    (host.root / "srv/tftp").mkdir(parents=True, exist_ok=True)
    lab = network_namespace()
    metrics = free_tcp_port()
    server = subprocess.Popen([*lab.inside, "chroot", str(host.root), "/usr/sbin/stampede", "--listen", "--foreground",
                               "--user", "tftp", "--address", "127.0.0.1:69", "--secure", "--https", "127.0.0.1:443",
                               "--metrics", f"127.0.0.1:{metrics}", "--tls-certificate", "/etc/ssl/certs/stampede.pem",
                               "--tls-key", "/etc/ssl/private/stampede.key", "/srv/tftp"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        assert wait_for(lambda: served_certificate(lab, 443)) == fingerprint(old.server.read_bytes())
        groups = Path(f"/proc/{server.pid}/status").read_text().split("Groups:")[1].split("\n")[0].split()
        assert str(group) in groups, groups
        install(new)
        server.send_signal(signal.SIGHUP)
        expected = fingerprint(new.server.read_bytes())
        assert wait_for(lambda: served_certificate(lab, 443) == expected), "the renewed certificate is not served"
        text = lab.run_inside(["curl", "-s", f"http://127.0.0.1:{metrics}/metrics"]).stdout.decode()
        assert 'stampede_tls_certificate_reloads_total{outcome="loaded"} 1' in text, text
        assert 'stampede_tls_certificate_reloads_total{outcome="failed"} 0' in text, text
        assert "stampede_tls_certificate_expiry_timestamp_seconds " in text, text
    finally:
        server.send_signal(signal.SIGTERM)
        out = server.communicate(timeout=30)[0].decode(errors="replace")
    assert server.returncode == 0, out
    assert "SIGHUP: --https certificate for 127.0.0.1, boot.example loaded again" in out, out
