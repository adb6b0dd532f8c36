"""`--https`: the root of --http over TLS (OpenSSL 3), checked with curl and openssl s_client as
clients, and with raw sockets for what a broken or hostile client sends."""
import json
import os
import re
import resource
import signal
import socket
import ssl
import struct
import subprocess
import time

import pytest

from conftest import BINARY, SERVER_BINARY, Server, free_tcp_port, run
from tlscerts import Certificates

# The suites of the default profile that need no elliptic curve: what EDK2 builds without EC use.
NON_EC_SUITES = ["DHE-RSA-AES128-GCM-SHA256", "DHE-RSA-AES256-GCM-SHA384", "DHE-RSA-AES128-SHA256", "DHE-RSA-AES256-SHA256",
                 "AES128-GCM-SHA256", "AES256-GCM-SHA384", "AES128-SHA256", "AES256-SHA256"]


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return Certificates(tmp_path_factory.mktemp("certs"))


@pytest.fixture
def secure(root, certs):
    """secure(*args, certificate=, key=) starts a server on `root` with --https on a free port;
    stopped (exit 0) at the end."""
    servers = []

    def start(*args, certificate=None, key=None):
        port = free_tcp_port()
        s = Server(root, ("--https", f"127.0.0.1:{port}", "--tls-certificate", str(certificate or certs.chain),
                          "--tls-key", str(key or certs.key), *args))
        assert s.log_lines("over HTTPS on", timeout=10)
        s.https_port = port
        s.url = f"https://127.0.0.1:{port}"
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.stop()


def curl(*args, timeout=60):
    return subprocess.run(["curl", "-s", "-S", *args], capture_output=True, timeout=timeout)


def s_client(port, request: bytes, *args, timeout=20):
    """openssl s_client: sends `request` once the handshake is done; what it printed."""
    return subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-ign_eof", *args],
                          input=request, capture_output=True, timeout=timeout)


def tls_socket(port, ca, ragged_eofs=True, **kw):
    """A TLS connection to 127.0.0.1:`port`; with `ragged_eofs` False, an EOF without close_notify
    raises SSLEOFError instead of reading as an end."""
    context = ssl.create_default_context(cafile=str(ca))
    for name, value in kw.items():
        setattr(context, name, value)
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    return context.wrap_socket(raw, server_hostname="127.0.0.1", suppress_ragged_eofs=ragged_eofs)


def read_all(sock) -> bytes:
    out = b""
    while True:
        try:
            chunk = sock.recv(1 << 20)
        except (ssl.SSLError, ConnectionResetError, socket.timeout):
            break
        if not chunk:
            break
        out += chunk
    return out


def test_curl_over_tls_1_2_and_1_3_byte_exact_ranges_and_304(secure, root, certs, tmp_path):
    big = root / "kernel.img"
    big.write_bytes(os.urandom(5 << 20))
    big.chmod(0o644)
    s = secure()
    for version in (["--tlsv1.2", "--tls-max", "1.2"], ["--tlsv1.3"]):
        for name in ("one-mib.bin", "kernel.img", "hello.txt", "empty.bin"):
            out = tmp_path / "out"
            r = curl(*version, "--cacert", str(certs.ca), "-o", str(out), "-w", "%{http_code} %{ssl_verify_result}",
                     f"{s.url}/{name}")
            assert r.returncode == 0 and r.stdout == b"200 0", r.stderr
            assert out.read_bytes() == (root / name).read_bytes(), name
        r = curl(*version, "--cacert", str(certs.ca), "-r", "1000-1999", f"{s.url}/kernel.img")
        assert r.stdout == big.read_bytes()[1000:2000]
        r = curl(*version, "--cacert", str(certs.ca), "-r", "-100", "-w", " %{http_code}", f"{s.url}/one-mib.bin")
        assert r.stdout[:-4] == (root / "one-mib.bin").read_bytes()[-100:] and r.stdout.endswith(b" 206")
    # 304 for the version the client has, by its ETag and by its date.
    head = curl("--cacert", str(certs.ca), "-I", f"{s.url}/one-mib.bin").stdout.decode()
    etag = re.search(r"(?i)^etag: (.+?)\r$", head, re.M).group(1)
    modified = re.search(r"(?i)^last-modified: (.+?)\r$", head, re.M).group(1)
    for header in (f"If-None-Match: {etag}", f"If-Modified-Since: {modified}"):
        r = curl("--cacert", str(certs.ca), "-H", header, "-w", "%{http_code}", f"{s.url}/one-mib.bin")
        assert r.stdout == b"304", header
    # Keep-alive: three files on one connection; a miss is a 404 on it.
    r = curl("--cacert", str(certs.ca), "-w", "%{num_connects} ", f"{s.url}/hello.txt", f"{s.url}/nothing-here", f"{s.url}/hello.txt")
    assert r.stdout == b"hello, rack\n1 404 Not Found\n0 hello, rack\n0 ", r.stdout  # connections made: 1, then none
    assert s.log_lines('"nothing-here" https 404')


def test_openssl_s_client_with_each_non_ec_suite_of_the_firmware_profile(secure, root, certs):
    s = secure()
    body = (root / "one-mib.bin").read_bytes()
    for suite in NON_EC_SUITES:
        r = s_client(s.https_port, b"GET /one-mib.bin HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                     "-tls1_2", "-cipher", suite, "-CAfile", str(certs.ca), "-verify_return_error")
        out = r.stdout
        assert f"Cipher is {suite}".encode() in out, (suite, out[-2000:], r.stderr[-2000:])
        assert b"Verify return code: 0 (ok)" in out
        assert body in out, suite
    # TLS 1.3 and ECDHE first for a client that has them.
    r = s_client(s.https_port, b"GET /hello.txt HTTP/1.0\r\n\r\n", "-CAfile", str(certs.ca))
    assert b"TLSv1.3" in r.stdout and b"\r\n\r\nhello, rack\n" in r.stdout
    r = s_client(s.https_port, b"GET /hello.txt HTTP/1.0\r\n\r\n", "-tls1_2", "-CAfile", str(certs.ca))
    assert b"Cipher is ECDHE-RSA-AES128-GCM-SHA256" in r.stdout


def test_the_modern_profile_refuses_what_firmware_without_ec_needs(secure, certs):
    s = secure("--tls-profile", "modern")
    assert s.log_lines("profile modern")
    r = s_client(s.https_port, b"GET /hello.txt HTTP/1.0\r\n\r\n", "-tls1_2", "-cipher", "DHE-RSA-AES128-GCM-SHA256")
    assert b"Cipher is (NONE)" in r.stdout or r.returncode != 0
    r = curl("--cacert", str(certs.ca), f"{s.url}/hello.txt")
    assert r.stdout == b"hello, rack\n"


def test_alpn_sni_and_session_resumption(secure, certs, tmp_path):
    s = secure()
    r = curl("-v", "--cacert", str(certs.ca), f"{s.url}/hello.txt")
    assert b"ALPN: server accepted http/1.1" in r.stderr, r.stderr
    # A client that offers only h2 is not refused: it gets no ALPN, and HTTP/1.1.
    r = s_client(s.https_port, b"GET /hello.txt HTTP/1.0\r\n\r\n", "-alpn", "h2", "-CAfile", str(certs.ca))
    assert b"No ALPN negotiated" in r.stdout and b"\r\n\r\nhello, rack\n" in r.stdout
    # No SNI (an address in the URL, as firmware has): served.
    r = s_client(s.https_port, b"GET /hello.txt HTTP/1.0\r\n\r\n", "-noservername", "-CAfile", str(certs.ca))
    assert b"\r\n\r\nhello, rack\n" in r.stdout
    # A session resumed, from the server's own cache: no TLS 1.2 session ticket (its key never
    # rotates: whoever reads it decrypts every recorded session that used one), TLS 1.3's
    # stateful ticket, and a lifetime no longer than nginx's 5 minutes.
    for version in ("-tls1_2", "-tls1_3"):
        session = tmp_path / f"session{version}"
        first = s_client(s.https_port, b"GET /hello.txt HTTP/1.0\r\n\r\n", version, "-sess_out", str(session), "-CAfile", str(certs.ca))
        if version == "-tls1_2":
            assert b"TLS session ticket lifetime hint" not in first.stdout, first.stdout[-1500:]
        else:
            assert b"TLS session ticket lifetime hint: 300 (seconds)" in first.stdout, first.stdout[-1500:]
        r = s_client(s.https_port, b"GET /hello.txt HTTP/1.0\r\n\r\n", version, "-sess_in", str(session), "-CAfile", str(certs.ca))
        assert b"Reused, " in r.stdout, (version, r.stdout[-1500:])
    # The key exchange groups the server allows, whatever OpenSSL's defaults become: X25519,
    # P-256, P-384, and nothing else.
    for group, taken in (("X25519", True), ("P-256", True), ("P-384", True), ("P-521", False), ("ffdhe2048", False)):
        r = s_client(s.https_port, b"GET /hello.txt HTTP/1.0\r\n\r\n", "-tls1_3", "-groups", group, "-CAfile", str(certs.ca))
        assert (b"\r\n\r\nhello, rack\n" in r.stdout) == taken, (group, r.stdout[-800:], r.stderr[-800:])


def test_a_certificate_whose_names_miss_the_url_is_refused_by_curl(secure, certs):
    """Why SANs matter: the certificate is the CA's and valid, but names elsewhere.example; a
    client that asks for 127.0.0.1 (as firmware asks for the address in its boot URL) refuses it."""
    s = secure(certificate=certs.wrong_name, key=certs.wrong_name_key)
    r = curl("--cacert", str(certs.ca), f"{s.url}/hello.txt")
    assert r.returncode == 60 and b"no alternative certificate subject name matches" in r.stderr, r.stderr
    # The same certificate, asked for by the name it holds: served.
    r = curl("--cacert", str(certs.ca), "--resolve", f"elsewhere.example:{s.https_port}:127.0.0.1",
             f"https://elsewhere.example:{s.https_port}/hello.txt")
    assert r.stdout == b"hello, rack\n", r.stderr
    # And a CA that did not sign it: refused too.
    r = curl("--cacert", str(certs.other_ca), f"https://127.0.0.1:{s.https_port}/hello.txt")
    assert r.returncode == 60
    assert s.log_lines("TLS handshake failed: tlsv1 alert unknown ca")


def test_bad_certificates_and_keys_exit_78_naming_the_file(root, certs, binary, tmp_path):
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    cases = [
        (tmp_path / "missing.pem", certs.key, "missing.pem: cannot read it: No such file or directory"),
        (garbage, certs.key, "garbage.pem: not a PEM certificate"),
        (certs.server, garbage, "garbage.pem: not a PEM private key"),
        (certs.wrong_name, certs.key, "server.key: the key is not the certificate's"),
        (certs.expired, certs.key, "expired.pem: the certificate expired on "),
    ]
    for certificate, key, said in cases:
        r = run([str(binary), "-L", "-a", f"127.0.0.1:{free_tcp_port()}", "--https", f"127.0.0.1:{free_tcp_port()}",
                 "--tls-certificate", str(certificate), "--tls-key", str(key), str(root)], timeout=20, text=True)
        assert r.returncode == 78, (said, r.stderr)
        assert said in r.stderr, (said, r.stderr)
    # Flags that cannot make a server: 64.
    for args in (["--https", "127.0.0.1:1"], ["--https", "127.0.0.1:1", "--tls-certificate", str(certs.server)],
                 ["--tls-key", str(certs.key)], ["--https", "127.0.0.1:1", "--tls-certificate", "x", "--tls-key", "y",
                                                 "--tls-profile", "ancient"]):
        r = run([str(binary), "-L", "-a", "127.0.0.1:0", *args, str(root)], timeout=20, text=True)
        assert r.returncode == 64, (args, r.stderr)


def test_a_key_others_can_read_is_warned_of(secure, certs, tmp_path):
    key = tmp_path / "open.key"
    key.write_bytes(certs.key.read_bytes())
    key.chmod(0o644)
    s = secure(key=key)
    assert s.log_lines("the private key is readable by every user")


def test_sighup_reloads_the_certificate_without_dropping_a_transfer(secure, root, certs, tmp_path):
    big = root / "big.img"
    big.write_bytes(os.urandom(8 << 20))
    big.chmod(0o644)
    certificate, key = tmp_path / "live.pem", tmp_path / "live.key"
    certificate.write_bytes(certs.chain.read_bytes())
    key.write_bytes(certs.key.read_bytes())
    key.chmod(0o600)
    # As the user it starts as: the files are root's, and a reload reads them as the serving user.
    s = secure("-u", "root", certificate=certificate, key=key)
    # A slow download under way, and a keep-alive connection between requests.
    out = tmp_path / "big.out"
    slow = subprocess.Popen(["curl", "-s", "-S", "--limit-rate", "2M", "--cacert", str(certs.ca), "-o", str(out), f"{s.url}/big.img"],
                            stderr=subprocess.PIPE)
    kept = tls_socket(s.https_port, certs.ca)
    kept.sendall(b"GET /hello.txt HTTP/1.1\r\nHost: x\r\n\r\n")
    assert kept.recv(4096).endswith(b"hello, rack\n")
    time.sleep(1)
    # A broken pair first: the reload fails, says why, and the old certificate stays.
    certificate.write_bytes(certs.wrong_name.read_bytes())
    s.process.send_signal(signal.SIGHUP)
    assert s.log_lines("still serving the certificate loaded before")
    assert curl("--cacert", str(certs.ca), f"{s.url}/hello.txt").stdout == b"hello, rack\n"
    # Then the new one: new handshakes present it.
    certificate.write_bytes(certs.wrong_name.read_bytes())
    key.write_bytes(certs.wrong_name_key.read_bytes())
    s.process.send_signal(signal.SIGHUP)
    assert s.log_lines("certificate for elsewhere.example loaded again")
    r = curl("--cacert", str(certs.ca), f"{s.url}/hello.txt")
    assert r.returncode == 60  # the new certificate names elsewhere.example only
    r = curl("--cacert", str(certs.ca), "--resolve", f"elsewhere.example:{s.https_port}:127.0.0.1",
             f"https://elsewhere.example:{s.https_port}/hello.txt")
    assert r.stdout == b"hello, rack\n"
    # The connections opened before go on with the one they began with.
    kept.sendall(b"GET /hello.txt HTTP/1.1\r\nHost: x\r\n\r\n")
    assert kept.recv(4096).endswith(b"hello, rack\n")
    kept.close()
    assert slow.wait(timeout=60) == 0, slow.stderr.read()
    assert out.read_bytes() == big.read_bytes()


def test_files_the_serving_user_cannot_read_again_are_said_at_start(secure, certs):
    """Dropped to nobody, the server could not read root's key on SIGHUP: it says so at start."""
    s = secure()
    assert s.log_lines("SIGHUP cannot load the certificate again: as nobody")
    s.process.send_signal(signal.SIGHUP)
    assert s.log_lines("still serving the certificate loaded before")
    assert curl("--cacert", str(certs.ca), f"{s.url}/hello.txt").stdout == b"hello, rack\n"


def test_plain_http_to_the_https_port_gets_400_and_a_close(secure):
    s = secure()
    with socket.create_connection(("127.0.0.1", s.https_port), timeout=5) as c:
        c.sendall(b"GET /hello.txt HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = read_all(c)
    assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n") and b"Connection: close" in answer
    assert s.log_lines("plain HTTP sent to the HTTPS port")


def test_garbage_renegotiation_and_alerts_mid_body_leave_the_server_serving(secure, root, certs):
    big = root / "big.img"
    big.write_bytes(os.urandom(16 << 20))
    big.chmod(0o644)
    s = secure("--http", f"127.0.0.1:{free_tcp_port()}")
    # Garbage where a ClientHello goes: an alert, or a close.
    for garbage in (os.urandom(600), b"\x16\x03\x01\xff\xff" + os.urandom(100), b"\x16\x03\x01\x00\x05\x01\x00\x00\x01\x00"):
        with socket.create_connection(("127.0.0.1", s.https_port), timeout=5) as c:
            c.sendall(garbage)
            answer = read_all(c)
        assert len(answer) < 100  # nothing but an alert
    # Renegotiation asked by the client (TLS 1.2 "R"): refused, the connection serves on or ends.
    r = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{s.https_port}", "-tls1_2", "-CAfile", str(certs.ca)],
                       input=b"R\n", capture_output=True, timeout=20)
    said = r.stdout + r.stderr
    assert b"RENEGOTIATING" in said and b"no renegotiation" in said, said[-1000:]
    # A client that sends a fatal alert mid-body, and one that resets mid-body.
    for end in ("alert", "reset"):
        c = tls_socket(s.https_port, certs.ca)
        c.sendall(b"GET /big.img HTTP/1.1\r\nHost: x\r\n\r\n")
        got = 0
        while got < 1 << 20:
            got += len(c.recv(1 << 16))
        if end == "alert":
            # A fatal alert in the clear, under the session: the answer is abandoned.
            os.write(c.fileno(), b"\x15\x03\x03\x00\x02\x02\x28")
            time.sleep(0.2)
            c.close()
        else:
            c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            c.close()
    assert s.log_lines('"big.img" https 200', count=2, timeout=10)
    assert curl("--cacert", str(certs.ca), f"{s.url}/hello.txt").stdout == b"hello, rack\n"
    assert s.alive


def test_half_open_handshakes_are_bounded_and_leave_tftp_and_http_serving(secure, root, certs, tmp_path):
    """1,000 connections that begin a handshake and stop: each is closed by the request deadline,
    memory stays bounded, and TFTP, --http and other HTTPS clients are served meanwhile."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    http_port = free_tcp_port()
    s = secure("--http", f"127.0.0.1:{http_port}", "--http-request-timeout", "3")
    before = s.rss_kib()
    hello = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + os.urandom(32)  # a ClientHello's first bytes of 517
    sockets = []
    try:
        for _ in range(1000):
            c = socket.create_connection(("127.0.0.1", s.https_port), timeout=5)
            c.sendall(hello)
            sockets.append(c)
        started = time.time()
        r = curl("--cacert", str(certs.ca), f"{s.url}/one-mib.bin", "-o", str(tmp_path / "a"))
        assert r.returncode == 0 and (tmp_path / "a").read_bytes() == (root / "one-mib.bin").read_bytes()
        assert curl(f"http://127.0.0.1:{http_port}/hello.txt").stdout == b"hello, rack\n"
        assert run(["curl", "-s", f"tftp://127.0.0.1:{s.port}/hello.txt"], timeout=20, text=True).stdout == "hello, rack\n"
        grown = s.rss_kib() - before
        assert grown < 64 << 10, f"{grown} KiB for 1,000 half-open handshakes"
        # Each is closed by the server within the deadline (3 s, swept once a second).
        closed = 0
        for c in sockets:
            c.settimeout(max(0.1, started + 10 - time.time()))
            try:
                while c.recv(100):
                    pass
                closed += 1
            except ConnectionResetError:
                closed += 1
            except socket.timeout:
                pass
        assert closed == 1000 and time.time() - started < 10
    finally:
        for c in sockets:
            c.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    deadline = time.time() + 5
    while time.time() < deadline and s.fd_count() > 40:
        time.sleep(0.1)
    assert s.fd_count() < 60


def test_pipelined_requests_over_tls(secure, root, certs):
    s = secure()
    c = tls_socket(s.https_port, certs.ca)
    c.sendall(b"GET /hello.txt HTTP/1.1\r\nHost: x\r\n\r\nHEAD /one-mib.bin HTTP/1.1\r\nHost: x\r\n\r\n"
              b"GET /exact-512.bin HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    raw = read_all(c)
    c.close()
    assert raw.count(b"HTTP/1.1 200 OK") == 3
    assert raw.endswith((root / "exact-512.bin").read_bytes())


def test_metrics_count_https_by_protocol_handshakes_and_body_path(secure, certs):
    metrics_port = free_tcp_port()
    s = secure("--metrics", f"127.0.0.1:{metrics_port}")
    for _ in range(2):
        assert curl("--cacert", str(certs.ca), f"{s.url}/one-mib.bin", "-o", "/dev/null").returncode == 0
    with socket.create_connection(("127.0.0.1", s.https_port), timeout=5) as c:
        c.sendall(b"GET / HTTP/1.0\r\n\r\n")
        read_all(c)
    text = subprocess.run(["curl", "-s", f"http://127.0.0.1:{metrics_port}/metrics"], capture_output=True, text=True).stdout

    def value(name, *labels):
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith(name) and all(label in line for label in labels))
    assert value("stampede_requests_total", 'protocol="https"', 'request="get"', 'outcome="served"') == 2
    assert value("stampede_file_bytes_total", 'protocol="https"') == 2 << 20
    assert value("stampede_tls_handshakes_total", 'outcome="full"') + value("stampede_tls_handshakes_total", 'outcome="resumed"') == 2
    assert value("stampede_tls_handshakes_total", 'outcome="plain_http"') == 1
    kernel = value("stampede_tls_body_bytes_total", 'path="kernel_sendfile"')
    written = value("stampede_tls_body_bytes_total", 'path="ssl_write"')
    assert kernel + written == 2 << 20
    # Which path ran is said at start, and the counters agree with it.
    said_kernel = bool(s.log_lines("kernel TLS: bodies by SSL_sendfile", timeout=0))
    if said_kernel:
        assert kernel > 0, "the start said kernel TLS, and no body went that way"
    else:
        assert kernel == 0 and written == 2 << 20
    check = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stdout + check.stderr


def test_tls_ca_writes_the_efi_signature_list_of_each_certificate(certs, binary, tmp_path):
    out = tmp_path / "cacerts.esl"
    both = tmp_path / "both.pem"
    both.write_bytes(certs.ca.read_bytes() + certs.other_ca.read_bytes())
    r = run([str(binary), "tls-ca", str(both), "--output", str(out)], text=True)
    assert r.returncode == 0, r.stderr
    assert "2 certificates" in r.stderr
    ders = [subprocess.run(["openssl", "x509", "-in", str(p), "-outform", "DER"], capture_output=True, check=True).stdout
            for p in (certs.ca, certs.other_ca)]
    data = out.read_bytes()
    x509_guid = bytes.fromhex("a159c0a5e494a74a87b5ab155c2bf072")
    at, found = 0, []
    while at < len(data):
        assert data[at:at + 16] == x509_guid
        list_size, header_size, size = struct.unpack_from("<III", data, at + 16)
        assert header_size == 0 and list_size == 28 + size
        found.append(data[at + 28 + 16:at + list_size])
        at += list_size
    assert found == ders
    # A server certificate (not a CA) is written with a warning; a key is refused.
    r = run([str(binary), "tls-ca", str(certs.server), "-o", str(tmp_path / "leaf.esl")], text=True)
    assert r.returncode == 0 and "is not a CA" in r.stderr
    r = run([str(binary), "tls-ca", str(certs.key), "-o", str(tmp_path / "key.esl")], text=True)
    assert r.returncode == 65 and not (tmp_path / "key.esl").exists()


def test_storm_boots_a_rack_over_https_every_byte_compared_and_refuses_another_ca(secure, root, certs):
    """storm --https: uefi-ipxe's http stages over TLS, each machine's handshake timed; a CA that
    did not sign the server's certificate fails every machine at its first HTTPS stage."""
    for name, size in (("ipxe.efi", 1 << 20), ("vmlinuz", 4 << 20), ("initrd.img", 8 << 20)):
        (root / name).write_bytes(os.urandom(size))
        (root / name).chmod(0o644)
    (root / "boot.ipxe").write_text("#!ipxe\nkernel vmlinuz\ninitrd initrd.img\nboot\n")
    (root / "boot.ipxe").chmod(0o644)
    s = secure()
    storm = [str(SERVER_BINARY), "storm", f"127.0.0.1:{s.port}", "--profile", "uefi-ipxe", "--https", f"127.0.0.1:{s.https_port}"]
    r = run(storm + ["--tls-ca", str(certs.ca), "--clients", "40", "--ramp", "1", "--verify-root", str(root), "--json"],
            timeout=300, text=True)
    report = json.loads(r.stdout)
    assert r.returncode == 0 and report["ok"] == 40 and report["failed"] == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert report["tls_handshakes"] == 40 and report["tls_handshake_p50_ms"] > 0
    assert s.log_lines('"initrd.img" https 200', count=40)
    r = run(storm + ["--tls-ca", str(certs.other_ca), "--clients", "3", "--stages", "4"], timeout=120, text=True)
    assert r.returncode == 1 and "0 booted, 3 failed" in r.stdout and "TLS: certificate verify failed" in r.stdout, r.stdout
    r = run(storm + ["--clients", "1"], timeout=60, text=True)
    assert r.returncode == 64 and "--https needs --tls-ca" in r.stderr


def test_kernel_tls_is_off_unless_asked_for(secure, certs):
    """As nginx: the kernel is not asked to take TLS over (as root, asking loads its module) unless
    --tls-kernel says so; then the start says what the kernel answered."""
    s = secure()
    assert s.log_lines("kernel TLS off: --tls-kernel asks for it"), s.log_text()
    asked = secure("--tls-kernel")
    assert asked.log_lines("kernel TLS: bodies by SSL_sendfile") or asked.log_lines("this kernel has no tls module"), asked.log_text()
    assert curl("--cacert", str(certs.ca), f"{asked.url}/hello.txt").stdout == b"hello, rack\n"
    r = run([str(SERVER_BINARY), "-L", "-a", "127.0.0.1:0", "--tls-kernel", "/tmp"])
    assert r.returncode == 64 and b"--tls-kernel is for --https" in r.stderr, r.stderr


def test_a_port_check_is_no_failed_handshake(secure, certs):
    """A connection closed before its ClientHello (a load balancer's probe, `nc -z`) is neither a
    failed handshake in the metrics nor a line; one that stops mid-handshake is both."""
    metrics_port = free_tcp_port()
    s = secure("--metrics", f"127.0.0.1:{metrics_port}")
    for _ in range(5):
        socket.create_connection(("127.0.0.1", s.https_port), timeout=5).close()
    with socket.create_connection(("127.0.0.1", s.https_port), timeout=5) as c:
        c.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + os.urandom(32) + bytes(460) + b"\x00\x02\x13\x01\x01\x00")
        time.sleep(0.3)
    assert curl("--cacert", str(certs.ca), f"{s.url}/hello.txt").stdout == b"hello, rack\n"
    time.sleep(0.5)
    text = subprocess.run(["curl", "-s", f"http://127.0.0.1:{metrics_port}/metrics"], capture_output=True, text=True).stdout
    assert 'stampede_tls_handshakes_total{outcome="failed"} 1' in text, text
    assert len(s.log_lines("TLS handshake failed", timeout=0)) == 1, s.log_text()


def test_an_answer_cut_short_ends_without_close_notify_and_a_whole_one_with_it(secure, root, certs):
    """A streamed file rewritten mid-answer ends the connection short of its Content-Length, and
    without close_notify: the client sees a truncated answer, not a clean end (nginx's way). An
    answer written whole, on a connection that asked to close, ends with close_notify."""
    big = root / "big.img"
    big.write_bytes(os.urandom(32 << 20))
    big.chmod(0o644)
    s = secure("--cache-file-limit", "1")
    whole = tls_socket(s.https_port, certs.ca, ragged_eofs=False)
    whole.sendall(b"GET /hello.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    received, ended = b"", None
    while ended is None:
        try:
            chunk = whole.recv(65536)
            if not chunk:
                ended = "close_notify"
            received += chunk
        except ssl.SSLEOFError:
            ended = "eof"
    whole.close()
    assert received.endswith(b"hello, rack\n") and ended == "close_notify", (received, ended)
    cut = tls_socket(s.https_port, certs.ca, ragged_eofs=False)
    cut.sendall(b"GET /big.img HTTP/1.1\r\nHost: x\r\n\r\n")
    received = cut.recv(65536)
    with open(big, "r+b") as f:
        f.write(b"rewritten in place")
    ended = None
    while ended is None:
        try:
            chunk = cut.recv(1 << 20)
            if not chunk:
                ended = "close_notify"
            received += chunk
        except ssl.SSLEOFError:
            ended = "eof"
    cut.close()
    assert ended == "eof" and len(received) < 32 << 20, (ended, len(received))
    assert s.log_lines("the file changed while it was sent"), s.log_text()


def test_a_socket_systemd_names_https_is_served_over_tls(root, certs, tmp_path):
    """The packaged way to port 443 (contrib's stampede-https.socket, FileDescriptorName=https):
    a passed listening socket named https is served as --https, beside one unnamed (HTTP) and
    TFTP's; a socket named https without a certificate to present stops the start (64)."""
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    plain, secure_ = socket.socket(), socket.socket()
    for tcp in (plain, secure_):
        tcp.bind(("127.0.0.1", 0))
        tcp.listen(64)
    ports = [sock.getsockname()[1] for sock in (udp, plain, secure_)]

    def place():
        for target, sock in zip((3, 4, 5), (udp, plain, secure_)):
            os.dup2(sock.fileno(), target)
    script = 'export LISTEN_PID=$$ LISTEN_FDS=3 LISTEN_FDNAMES=stampede.socket:stampede.socket:https; exec "$@"'
    try:
        refused = subprocess.run(["sh", "-c", script, "sh", str(SERVER_BINARY), "--systemd", "--stderr", str(root)],
                                 close_fds=False, preexec_fn=place, capture_output=True, timeout=30)
        assert refused.returncode == 64 and b"systemd passed a socket named https" in refused.stderr, refused.stderr
        log = open(tmp_path / "log", "w")
        server = subprocess.Popen(["sh", "-c", script, "sh", str(SERVER_BINARY), "--systemd", "--stderr", "-v",
                                   "--tls-certificate", str(certs.chain), "--tls-key", str(certs.key), str(root)],
                                  close_fds=False, preexec_fn=place, stdout=log, stderr=subprocess.STDOUT)
        try:
            fetched = curl("--retry", "5", "--retry-connrefused", "--cacert", str(certs.ca), f"https://127.0.0.1:{ports[2]}/hello.txt")
            assert fetched.stdout == b"hello, rack\n", ((tmp_path / "log").read_text(), fetched.stderr)
            assert curl(f"http://127.0.0.1:{ports[1]}/hello.txt").stdout == b"hello, rack\n"
            assert run(["curl", "-s", f"tftp://127.0.0.1:{ports[0]}/hello.txt"]).stdout == b"hello, rack\n"
        finally:
            server.send_signal(signal.SIGTERM)
            assert server.wait(timeout=30) == 0, (tmp_path / "log").read_text()
    finally:
        for sock in (udp, plain, secure_):
            sock.close()


def test_one_client_cannot_take_the_connections_and_handshakes_every_machine_needs(boot_link, root, tmp_path):
    """One host (10.78.0.57) opens 3,000 connections over HTTP and over HTTPS and sends nothing,
    or begins a handshake and stops: it holds 64 (--http-max-per-client's default) of which 16 in
    handshakes, the rest closed as they come, counted by reason. Another machine (10.78.0.58)
    fetches 16 files over each while they are held, each within 2 s. Before, the first host took
    every connection, and none of the other's fetches succeeded."""
    server_ns, client_ns = boot_link
    assert client_ns.run_inside(["ip", "addr", "add", "10.78.0.58/24", "dev", "veth-c"]).returncode == 0
    certs = Certificates(tmp_path / "certs", server_names="IP:10.78.0.1")
    metrics_port = free_tcp_port()
    s = Server(root, ["--http", "10.78.0.1:80", "--https", "10.78.0.1:443", "--tls-certificate", str(certs.chain),
                      "--tls-key", str(certs.key), "--metrics", f"127.0.0.1:{metrics_port}", "--http-request-timeout", "60"],
               host="10.78.0.1", prefix=server_ns.inside)
    held = []
    hello = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + os.urandom(32)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 16384), hard))
    try:
        with client_ns.sockets():
            # The handshakes first (16 held, the rest refused for that), then the plain ones (48 more).
            for port, first in ((443, hello), (80, b"")):
                for _ in range(3000):
                    c = socket.socket()
                    c.bind(("10.78.0.57", 0))
                    c.settimeout(5)
                    c.connect(("10.78.0.1", port))
                    if first:
                        c.sendall(first)
                    held.append((port, c))
        time.sleep(1)
        for scheme, port in (("http", 80), ("https", 443)):
            for n in range(16):
                started = time.time()
                r = client_ns.run_inside(["curl", "-s", "-S", "--interface", "10.78.0.58", "--max-time", "2", "--cacert", str(certs.ca),
                                          "-o", "-", f"{scheme}://10.78.0.1:{port}/hello.txt"], timeout=10)
                assert r.stdout == b"hello, rack\n" and time.time() - started < 2, (scheme, n, r.stderr)
        still_open = {80: 0, 443: 0}
        for port, c in held:
            c.setblocking(False)
            try:
                if c.recv(1) == b"":
                    continue  # closed by the server
            except BlockingIOError:
                pass
            except ConnectionResetError:
                continue
            still_open[port] += 1
        # 64 in all for the client, HTTP and HTTPS together; of the HTTPS ones 16 in a handshake.
        assert still_open[80] + still_open[443] == 64 and still_open[443] == 16, still_open
        text = server_ns.run_inside(["curl", "-s", f"http://127.0.0.1:{metrics_port}/metrics"]).stdout.decode()
        for protocol, reason in (("https", "client_handshakes"), ("http", "client_limit")):
            refused = [line for line in text.splitlines()
                       if line.startswith(f'stampede_http_connections_refused_total{{protocol="{protocol}",reason="{reason}"}}')]
            assert refused and float(refused[0].split()[-1]) > 2000, (protocol, reason, refused)
        assert s.log_lines("connections open from this client (--http-max-per-client)", timeout=0)
    finally:
        for _, c in held:
            c.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        s.stop()
