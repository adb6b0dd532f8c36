"""`--http`: the same root over HTTP/1.1 and 1.0, through the same access policy, remap rules and
file cache as TFTP. Checked with curl and with raw sockets that send what firmware, tools and
attackers send."""
import json
import os
import socket
import subprocess
import time
import urllib.request

import pytest

from conftest import Server, free_tcp_port, metrics_url, run


@pytest.fixture
def web(root, binary):
    """web(*args) starts a server on `root` with --http on a free port; stopped (exit 0) at the end."""
    servers = []

    def start(*args):
        port = free_tcp_port()
        s = Server(root, ("--http", f"127.0.0.1:{port}", *args))
        s.http_port = port
        s.url = f"http://127.0.0.1:{port}"
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.stop()


def curl(*args, timeout=30):
    return subprocess.run(["curl", "-s", "-S", *args], capture_output=True, timeout=timeout)


def exchange(port, data: bytes, until_closed=True, timeout=5.0) -> bytes:
    """Sends `data` on a new connection and returns everything read until the server closes it
    (or, without `until_closed`, until it is quiet for half a second)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        if not until_closed:
            s.settimeout(0.5)
        out = b""
        while True:
            try:
                chunk = s.recv(1 << 20)
            except socket.timeout:
                break
            if not chunk:
                break
            out += chunk
        return out


def responses(raw: bytes) -> list:
    """Splits a stream of responses into (status, headers, body) by their Content-Length."""
    out = []
    while raw:
        head, _, rest = raw.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        out.append((status, headers, rest[:length]))
        raw = rest[length:]
    return out


def test_curl_fetches_whole_files_byte_exact_cached_and_streamed(web, root, tmp_path):
    big = root / "kernel.img"
    big.write_bytes(os.urandom(5 << 20))
    big.chmod(0o644)
    # 1 MiB may be cached; 5 MiB may not: that one goes out by sendfile from the file itself.
    s = web("--cache-file-limit", "2")
    for name in ("one-mib.bin", "kernel.img", "hello.txt", "empty.bin"):
        got = tmp_path / name
        done = curl("-o", str(got), "-w", "%{http_code} %{size_download}", f"{s.url}/{name}")
        assert done.returncode == 0, done.stderr
        assert done.stdout.decode() == f"200 {(root / name).stat().st_size}"
        assert got.read_bytes() == (root / name).read_bytes()
    lines = s.log_lines('"kernel.img" http 200')
    assert lines and f"bytes={5 << 20}" in lines[0]


def test_readers_slower_than_the_server_get_every_byte(web, root):
    """Clients that read in bursts with pauses through a small receive buffer: every sendfile
    fills the socket part way (a short send: the server waits for the socket's next readiness
    instead of asking again), and each answer, cached or streamed from its file, still comes
    whole, byte for byte."""
    big = root / "slow.img"
    big.write_bytes(os.urandom(3 << 20))
    big.chmod(0o644)
    s = web("--cache-file-limit", "2")
    for name in ("slow.img", "one-mib.bin"):
        readers = []
        for _ in range(4):
            c = socket.socket()
            c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32768)
            c.settimeout(10)
            c.connect(("127.0.0.1", s.http_port))
            c.sendall(f"GET /{name} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            readers.append([c, b""])
        expected = (root / name).read_bytes()
        while readers:
            for reader in list(readers):
                chunk = reader[0].recv(48 << 10)
                assert chunk, f"{name}: the server closed after {len(reader[1])} bytes"
                reader[1] += chunk
                (status, headers, body), = responses(reader[1]) if b"\r\n\r\n" in reader[1] else [(0, {}, b"")]
                if status and len(body) == int(headers["content-length"]):
                    assert status == 200 and body == expected
                    reader[0].close()
                    readers.remove(reader)
            time.sleep(0.003)
    lines = s.log_lines('"slow.img" http 200')
    assert len(lines) == 4 and all(f"bytes={3 << 20}" in line for line in lines)


def test_the_response_says_what_firmware_needs_and_never_chunks(web, root):
    s = web()
    with urllib.request.urlopen(f"{s.url}/one-mib.bin") as answer:
        assert answer.status == 200
        assert answer.headers["Content-Length"] == str(1 << 20)
        assert answer.headers["Transfer-Encoding"] is None
        assert answer.headers["Accept-Ranges"] == "bytes"
        assert answer.headers["ETag"].startswith('"') and answer.headers["Last-Modified"].endswith(" GMT")
        assert answer.headers["Content-Type"] == "application/octet-stream"
        assert answer.read() == (root / "one-mib.bin").read_bytes()
    (root / "ipxe.efi").write_bytes(b"MZ" + os.urandom(1000))
    (root / "ipxe.efi").chmod(0o644)
    with urllib.request.urlopen(f"{s.url}/ipxe.efi") as answer:
        # EDK2's HTTP boot takes an image by this type.
        assert answer.headers["Content-Type"] == "application/efi"


def test_head_says_the_length_and_sends_no_body(web, root):
    s = web()
    raw = exchange(s.http_port, b"HEAD /one-mib.bin HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK")
    assert f"Content-Length: {1 << 20}".encode() in head
    assert body == b""


def test_single_ranges_206_and_416(web, root):
    s = web()
    data = (root / "one-mib.bin").read_bytes()
    for spec, part in (("0-99", data[:100]), ("1000-", data[1000:]), ("-500", data[-500:]),
                       ("1048000-9999999", data[1048000:])):
        done = curl("-D", "-", "-o", "/dev/stdout", "-r", spec, f"{s.url}/one-mib.bin")
        head, _, body = done.stdout.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 206"), head
        assert body == part
        assert f"Content-Length: {len(part)}".encode() in head
    for spec in ("2000000-", "-0"):
        done = curl("-D", "-", "-o", "/dev/null", "-H", f"Range: bytes={spec}", f"{s.url}/one-mib.bin")
        assert done.stdout.startswith(b"HTTP/1.1 416"), done.stdout
        assert f"Content-Range: bytes */{1 << 20}".encode() in done.stdout
    # Several ranges: no multipart, the whole file.
    done = curl("-D", "-", "-o", "/dev/null", "-H", "Range: bytes=0-1,5-9", f"{s.url}/one-mib.bin")
    assert done.stdout.startswith(b"HTTP/1.1 200")
    assert s.log_lines(" http 416 ")


def test_conditional_requests_304_and_if_range(web, root):
    s = web()
    with urllib.request.urlopen(f"{s.url}/hello.txt") as answer:
        etag, modified = answer.headers["ETag"], answer.headers["Last-Modified"]
    for header in (f"If-None-Match: {etag}", f'If-None-Match: "other", W/{etag}', "If-None-Match: *",
                   f"If-Modified-Since: {modified}"):
        done = curl("-D", "-", "-o", "/dev/null", "-H", header, f"{s.url}/hello.txt")
        assert done.stdout.startswith(b"HTTP/1.1 304"), (header, done.stdout)
        assert f"ETag: {etag}".encode() in done.stdout
    done = curl("-D", "-", "-o", "/dev/null", "-H", 'If-None-Match: "other"', f"{s.url}/hello.txt")
    assert done.stdout.startswith(b"HTTP/1.1 200")
    done = curl("-D", "-", "-o", "/dev/null", "-H", "If-Modified-Since: Sat, 01 Jan 2000 00:00:00 GMT", f"{s.url}/hello.txt")
    assert done.stdout.startswith(b"HTTP/1.1 200")
    # If-Range: the part for the same version, the whole file for another.
    done = curl("-D", "-", "-o", "/dev/null", "-r", "0-3", "-H", f"If-Range: {etag}", f"{s.url}/hello.txt")
    assert done.stdout.startswith(b"HTTP/1.1 206")
    done = curl("-D", "-", "-o", "/dev/null", "-r", "0-3", "-H", 'If-Range: "old"', f"{s.url}/hello.txt")
    assert done.stdout.startswith(b"HTTP/1.1 200")
    # A new version of the file is a new validator.
    time.sleep(0.01)
    (root / "hello.txt").write_text("hello again\n")
    done = curl("-D", "-", "-o", "/dev/null", "-H", f"If-None-Match: {etag}", f"{s.url}/hello.txt")
    assert done.stdout.startswith(b"HTTP/1.1 200")


def test_keep_alive_and_pipelining_answer_in_order_on_one_connection(web, root):
    s = web()
    files = ["hello.txt", "one-mib.bin", "missing", "exact-512.bin", "hello.txt"]
    pipeline = b"".join(f"GET /{name} HTTP/1.1\r\nHost: x\r\n\r\n".encode() for name in files)
    pipeline += b"GET /empty.bin HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    got = responses(exchange(s.http_port, pipeline))
    assert [status for status, _, _ in got] == [200, 200, 404, 200, 200, 200]
    for (status, _, body), name in zip(got, files + ["empty.bin"]):
        if status == 200:
            assert body == (root / name).read_bytes()
    assert got[-1][1]["connection"] == "close"
    # curl reuses the connection for several URLs.
    done = curl("-v", "-o", "/dev/null", "-o", "/dev/null", f"{s.url}/hello.txt", f"{s.url}/one-mib.bin")
    assert b"Re-using existing connection" in done.stderr or b"Reusing existing" in done.stderr, done.stderr


def test_http_1_0_closes_unless_asked_to_keep_alive(web):
    s = web()
    raw = exchange(s.http_port, b"GET /hello.txt HTTP/1.0\r\n\r\n")
    assert raw.startswith(b"HTTP/1.1 200") and raw.endswith(b"hello, rack\n")
    (_, headers, _), = responses(raw)
    assert headers["connection"] == "close"


def test_http_1_0_keep_alive_is_said_in_the_answer_and_kept(web):
    """RFC 9112 §9.3: a 1.0 connection persists only when the answer says keep-alive; a 1.0 client
    (ab -k, older tools) that asked and hears nothing waits for a close that never comes."""
    s = web()
    with socket.create_connection(("127.0.0.1", s.http_port), timeout=5) as c:
        for _ in range(2):
            c.sendall(b"GET /hello.txt HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            raw = b""
            while not raw.endswith(b"hello, rack\n"):
                raw += c.recv(4096)
            (status, headers, body), = responses(raw)
            assert status == 200 and headers["connection"] == "keep-alive" and body == b"hello, rack\n"
    # curl as a 1.0 client that asks for keep-alive reuses the connection it was promised.
    done = curl("-v", "--http1.0", "-H", "Connection: keep-alive", "-o", "/dev/null", "-o", "/dev/null",
                f"{s.url}/hello.txt", f"{s.url}/missing")
    assert b"Re-using existing connection" in done.stderr or b"Reusing existing" in done.stderr, done.stderr


@pytest.mark.parametrize("request_bytes, status", [
    (b"GARBAGE\r\n\r\n", 400),
    (b"GET /hello.txt HTTP/1.1\r\n\r\n", 400),  # no Host
    (b"GET hello.txt HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    (b"GET /hello%zz HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    (b"GET /hello%00.txt HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    (b"GET /hello.txt HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
    (b"GET /hello.txt HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n", 400),
    (b"POST /hello.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", 405),
    (b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414),
    (b"GET /hello.txt HTTP/1.1\r\nHost: x\r\n" + b"X-Filler: " + b"b" * 20000 + b"\r\n\r\n", 431),
    (b"GET /hello.txt HTTP/1.1\r\nHost: x\r\n" + b"X: y\r\n" * 101 + b"\r\n", 431),
    (b"GET /hello.txt HTTP/2.0\r\nHost: x\r\n\r\n", 505),
])
def test_bad_requests_get_their_status_and_a_log_line(web, request_bytes, status):
    s = web()
    raw = exchange(s.http_port, request_bytes, until_closed=status != 405)
    assert raw.startswith(f"HTTP/1.1 {status} ".encode()), raw[:200]
    assert s.log_lines(f" http {status} ")
    assert s.alive


@pytest.mark.parametrize("request_bytes, status", [
    (b"HEAD /hello%zz HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    (b"HEAD /hello.txt HTTP/1.1\r\n\r\n", 400),  # no Host
    (b"HEAD /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414),
    (b"HEAD /hello.txt HTTP/1.1\r\nHost: x\r\n" + b"X: y\r\n" * 101 + b"\r\n", 431),
    (b"HEAD /hello.txt HTTP/2.0\r\nHost: x\r\n\r\n", 505),
    (b"HEAD /missing HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 404),
])
def test_a_refused_head_has_no_body(web, request_bytes, status):
    """RFC 9110 §9.3.2: the answer to a HEAD has no body, whatever its status (its
    Content-Length is the GET's)."""
    s = web()
    raw = exchange(s.http_port, request_bytes)
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(f"HTTP/1.1 {status} ".encode()) and b"Content-Length: " in head, raw[:200]
    assert body == b"", raw


def test_the_access_policy_is_tftps(web, root, tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("not for clients")
    (root / "private.bin").write_bytes(b"x")
    (root / "private.bin").chmod(0o600)
    (root / "escape").symlink_to(secret)
    (root / "sub").mkdir()
    os.mkfifo(root / "fifo")
    (root / "fifo").chmod(0o666)
    s = web()
    for path, status in (("/../secret", 403), ("/%2e%2e/secret", 403), ("/sub/../../secret", 403), ("/escape", 403),
                         ("/private.bin", 403), ("/sub", 403), ("/fifo", 403), ("/", 404), ("/nothing", 404)):
        raw = exchange(s.http_port, f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        assert raw.startswith(f"HTTP/1.1 {status} ".encode()), (path, raw[:100])
        assert b"not for clients" not in raw
    # -p: what the OS allows, as for TFTP.
    s2 = web("-p", "-u", "root")
    raw = exchange(s2.http_port, b"GET /private.bin HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert raw.startswith(b"HTTP/1.1 200") and raw.endswith(b"\r\n\r\nx")


def test_remap_rules_give_per_host_files_with_a_default(web, root, tmp_path):
    (root / "boot").mkdir()
    (root / "boot" / "127.0.0.1.ipxe").write_text("#!ipxe\necho this host\n")
    (root / "boot" / "default.ipxe").write_text("#!ipxe\necho default\n")
    for f in (root / "boot").iterdir():
        f.chmod(0o644)
    rules = tmp_path / "rules"
    # tftp-hpa's E: the per-host name if it can be served, else the next rule.
    rules.write_text("rE ^boot/script\\.ipxe$ boot/\\i.ipxe\nr ^boot/script\\.ipxe$ boot/default.ipxe\n")
    s = web("-m", str(rules))
    done = curl(f"{s.url}/boot/script.ipxe")
    assert done.stdout == b"#!ipxe\necho this host\n"
    (root / "boot" / "127.0.0.1.ipxe").unlink()
    done = curl(f"{s.url}/boot/script.ipxe")
    assert done.stdout == b"#!ipxe\necho default\n"
    assert s.log_lines('remapped to "boot/default.ipxe"')


def test_tftp_and_http_share_one_image_and_one_view(web, root, tmp_path):
    s = web("--metrics", "127.0.0.1:0")
    url = metrics_url(s)
    assert curl("-o", str(tmp_path / "t"), f"tftp://127.0.0.1:{s.port}/one-mib.bin").returncode == 0
    assert curl("-o", str(tmp_path / "h"), f"{s.url}/one-mib.bin").returncode == 0
    assert curl("-o", str(tmp_path / "h2"), f"{s.url}/one-mib.bin").returncode == 0
    curl(f"{s.url}/missing")
    assert (tmp_path / "t").read_bytes() == (tmp_path / "h").read_bytes() == (root / "one-mib.bin").read_bytes()
    time.sleep(0.5)
    with urllib.request.urlopen(url) as answer:
        text = answer.read().decode()
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            values[key] = float(value)

    def total(name, *labels):
        return sum(v for k, v in values.items() if (k == name or k.startswith(name + "{")) and all(l in k for l in labels))
    # One load of the file, whichever protocol asked.
    assert total("stampede_cache_misses_total") == 1 and total("stampede_cache_hits_total") == 2
    assert total("stampede_requests_total", 'protocol="http"', 'request="get"', 'outcome="served"') == 2
    assert total("stampede_requests_total", 'protocol="http"', 'outcome="not_found"') == 1
    assert total("stampede_requests_total", 'protocol="tftp"', 'request="rrq"', 'outcome="served"') == 1
    assert total("stampede_file_bytes_total", 'protocol="http"') == 2 << 20
    assert total("stampede_transfer_duration_seconds_count", 'protocol="http"', 'file="one-mib.bin"') == 2
    assert total("stampede_http_sent_bytes_total") > 2 << 20
    check = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stdout + check.stderr


def test_json_log_has_one_line_per_finished_http_transfer(web, root, tmp_path):
    s = web("--log-format", "json")
    assert curl("-o", str(tmp_path / "h"), f"{s.url}/one-mib.bin").returncode == 0
    curl(f"{s.url}/missing")
    records = [json.loads(line) for line in s.log_lines('"protocol":"http"', count=2) if line.startswith("{")]
    assert len(records) == 2, s.log_text()
    served = next(r for r in records if r.get("outcome") == "served")
    assert served["file"] == "one-mib.bin" and int(served["status"]) == 200
    assert int(served["bytes"]) == 1 << 20
    assert any(r.get("outcome") == "not_found" for r in records)


def test_a_head_sent_a_byte_at_a_time_is_answered(web):
    s = web()
    with socket.create_connection(("127.0.0.1", s.http_port), timeout=10) as c:
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for byte in b"GET /hello.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n":
            c.send(bytes([byte]))
            time.sleep(0.001)
        answer = b""
        while chunk := c.recv(4096):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"hello, rack\n")


def test_slow_and_idle_connections_are_closed(web):
    s = web("--http-request-timeout", "1", "--http-idle-timeout", "2")
    with socket.create_connection(("127.0.0.1", s.http_port), timeout=10) as slow, \
            socket.create_connection(("127.0.0.1", s.http_port), timeout=10) as idle:
        slow.sendall(b"GET /hello.txt HTTP/1.1\r\nHost: x\r\n")  # never finished (slowloris)
        started = time.time()
        answer = slow.recv(4096)
        assert answer.startswith(b"HTTP/1.1 408"), answer
        assert slow.recv(4096) == b""
        assert time.time() - started < 3.5
        assert idle.recv(4096) == b""  # closed without a word after the idle timeout
        assert time.time() - started < 5
    assert s.log_lines(" http 408 ")


def test_the_connection_limit_bounds_connections_and_memory(web):
    """--http-max-connections 300 and 600 clients: 300 are taken, the rest wait in the listen
    queue (none is closed, the server holds no more descriptors or memory than 300 need), and
    each is answered in its turn as the ones before it close."""
    s = web("--http-max-connections", "300")
    before = s.rss_kib()
    held = []
    try:
        for _ in range(600):
            held.append(socket.create_connection(("127.0.0.1", s.http_port), timeout=5))
        time.sleep(1)
        closed = 0
        for c in held:
            c.settimeout(0.01)
            try:
                closed += c.recv(1) == b""
            except socket.timeout:
                pass  # held open, or waiting to be taken
            except ConnectionResetError:
                closed += 1
        assert closed == 0
        assert s.fd_count() < 300 + 64
        assert s.rss_kib() - before < 16 << 10
        # Each asks once and closes after its answer: the ones waiting are taken as others close.
        for c in held:
            c.sendall(b"GET /hello.txt HTTP/1.1\r\nHost: rack\r\nConnection: close\r\n\r\n")
        answered = 0
        for c in held:
            c.settimeout(20)
            answer = b""
            while chunk := c.recv(4096):
                answer += chunk
            answered += answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"hello, rack\n")
        assert answered == 600
        assert s.fd_count() < 300 + 64
    finally:
        for c in held:
            c.close()
    assert s.log_lines("300 connections open (--http-max-connections): new connections wait in the listen queue")


def test_http_over_ipv6_serves_as_over_ipv4(root, tmp_path):
    """--http [::1]:PORT: whole files, ranges and the log's client address over IPv6, beside TFTP
    on IPv6."""
    port = free_tcp_port()
    s = Server(root, ("--http", f"[::1]:{port}"), host="::1")
    try:
        url = f"http://[::1]:{port}"
        assert s.log_lines(f"over HTTP on {url}/")  # written after "serving": waited for
        got = tmp_path / "got"
        done = curl("-g", "-o", str(got), "-w", "%{http_code}", f"{url}/one-mib.bin")
        assert done.stdout == b"200" and got.read_bytes() == (root / "one-mib.bin").read_bytes()
        part = curl("-g", "-r", "10-19", "-o", "-", f"{url}/one-mib.bin")
        assert part.stdout == (root / "one-mib.bin").read_bytes()[10:20]
        assert curl("-g", "-o", "-", f"tftp://[::1]:{s.port}/hello.txt").stdout == b"hello, rack\n"
        lines = s.log_lines('"one-mib.bin" http 200')
        assert lines and "::1" in lines[0], lines
    finally:
        s.stop()


def test_bad_http_flags_exit_64(binary, tmp_path):
    for argv in (["--http", "nonsense"], ["--http", "127.0.0.1:99999"], ["--http-max-connections", "0"],
                 ["--http-idle-timeout", "0"]):
        done = run([str(binary), "-L", "-a", "127.0.0.1:0", *argv, str(tmp_path)])
        assert done.returncode == 64, (argv, done.stderr)
        assert b"--http" in done.stderr


def test_a_port_in_use_is_said_and_exits(binary, root):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run([str(binary), "-L", "-a", "127.0.0.1:0", "--http", f"127.0.0.1:{port}", str(root)])
        assert done.returncode == 1
        assert b"cannot listen for HTTP on 127.0.0.1:" in done.stderr


def test_a_stop_lets_a_running_download_finish(web, root, tmp_path):
    big = root / "big.img"
    big.write_bytes(os.urandom(64 << 20))
    big.chmod(0o644)
    s = web()
    # A slow reader: 64 MiB at 16 MiB/s takes about 4 s; the stop comes in the middle.
    reader = subprocess.Popen(["curl", "-s", "--limit-rate", "16M", "-o", str(tmp_path / "got"), f"{s.url}/big.img"])
    time.sleep(1.5)
    s.process.send_signal(15)
    assert reader.wait(timeout=30) == 0
    assert (tmp_path / "got").read_bytes() == big.read_bytes()
    s.stop()


def test_a_stop_answers_one_more_request_on_each_open_connection_then_closes_it(web, root):
    """SIGTERM: a connection idle after its responses, one accepted whose request is on its way,
    and one whose response is being written each get one more request answered, with
    Connection: close, and are then closed; one that asks nothing goes after a second or so.
    Closing them at once would fail a request already sent, or send the client to reopen on an
    anycast address that still routes to this server while its listener is closed: refused
    (issue 25's drain)."""
    big = os.urandom(8 << 20)
    (root / "big.bin").write_bytes(big)
    (root / "big.bin").chmod(0o644)
    s = web()
    idle = socket.create_connection(("127.0.0.1", s.http_port), timeout=5)
    idle.sendall(b"GET /hello.txt HTTP/1.1\r\nHost: x\r\n\r\n")
    assert b"hello, rack" in idle.recv(4096)
    fresh = socket.create_connection(("127.0.0.1", s.http_port), timeout=5)
    silent = socket.create_connection(("127.0.0.1", s.http_port), timeout=5)
    # A small window, set before connecting: the 8 MiB cannot all sit in the kernel's buffers,
    # so the server is still writing the response when it stops.
    busy = socket.socket()
    busy.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    busy.settimeout(5)
    busy.connect(("127.0.0.1", s.http_port))
    busy.sendall(b"GET /big.bin HTTP/1.1\r\nHost: x\r\n\r\n")
    first = busy.recv(65536)  # the response has begun; the rest waits for this client to read
    time.sleep(0.3)  # accepted by the server, nothing asked yet on `fresh` and `silent`
    s.process.send_signal(15)
    time.sleep(0.3)
    kept = first
    while len(kept) < kept.index(b"\r\n\r\n") + 4 + len(big):
        kept += busy.recv(1 << 20)
    (status, headers, body), = responses(kept)
    assert status == 200 and body == big and headers.get("connection") != "close"
    for c in (idle, fresh, busy):
        c.sendall(b"GET /hello.txt HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = b""
        while chunk := c.recv(4096):
            answer += chunk
        (status, headers, body), = responses(answer)
        assert status == 200 and body == b"hello, rack\n" and headers.get("connection") == "close", answer
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", s.http_port), timeout=2).close()
    # One that asks nothing while the server stops goes after a second or two, not the grace (10 s).
    quiet = time.time()
    assert silent.recv(4096) == b""
    assert time.time() - quiet < 3
    s.stop()
    for c in (idle, fresh, silent, busy):
        c.close()


def boot_root(root):
    """The files of the uefi-ipxe chain: ipxe.efi over TFTP, the script, a kernel and an initrd
    over HTTP."""
    files = {"ipxe.efi": os.urandom(300_000), "boot.ipxe": b"#!ipxe\nkernel vmlinuz\ninitrd initrd.img\nboot\n",
             "vmlinuz": os.urandom(3 << 20), "initrd.img": os.urandom((6 << 20) + 1)}
    for name, data in files.items():
        (root / name).write_bytes(data)
        (root / name).chmod(0o644)
    return files


def wait_for_port(port):
    """Until something accepts on 127.0.0.1:port (5 s at most)."""
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)


def test_storm_plays_the_uefi_ipxe_chain_over_tftp_and_http(web, root, binary):
    files = boot_root(root)
    s = web("--metrics", "127.0.0.1:0", "--log-format", "json")
    url = metrics_url(s)
    machines = 30
    done = run([str(binary), "storm", f"127.0.0.1:{s.port}", "--profile", "uefi-ipxe", "--http", f"127.0.0.1:{s.http_port}",
                "--clients", str(machines), "--ramp", "0.5", "--verify-root", str(root), "--metrics", url, "--json"], timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["ok"] == machines and result["failed"] == 0
    stages = result["stages"]
    assert [stage["stage"] for stage in stages] == [
        "uefi probe ipxe.efi", "uefi get ipxe.efi", "ipxe try autoexec.ipxe follow",
        "ipxe http GET boot.ipxe", "ipxe http GET vmlinuz", "ipxe http GET initrd.img"]
    assert all(stage["ok"] == machines for stage in stages)
    for stage, name in zip(stages[3:], ["boot.ipxe", "vmlinuz", "initrd.img"]):
        assert stage["bytes"] == machines * len(files[name]) and stage["p50_ms"] > 0
    assert result["bytes"] == machines * (len(files["ipxe.efi"]) + len(files["boot.ipxe"]) + len(files["vmlinuz"])
                                          + len(files["initrd.img"]))
    # The server saw the same, split by protocol; every machine kept one HTTP connection.
    view = result["server"]
    assert view["requests"]["tftp"] == {"served": machines, "probe": machines, "not_found": machines}
    assert view["requests"]["http"] == {"served": 3 * machines}
    assert view["file_bytes_sent_by_protocol"]["http"] == machines * (len(files["boot.ipxe"]) + len(files["vmlinuz"])
                                                                      + len(files["initrd.img"]))
    # Each machine from its own address, on one connection for its three files.
    records = [json.loads(line) for line in s.log_lines('"protocol":"http"', count=3 * machines) if line.startswith("{")]
    by_client = {}
    for record in records:
        by_client.setdefault(record["client"], []).append(record["file"])
    assert len(by_client) == machines and len({client.rsplit(":", 1)[0] for client in by_client}) == machines
    assert all(files == ["boot.ipxe", "vmlinuz", "initrd.img"] for files in by_client.values()), by_client
    text = run([str(binary), "storm", f"127.0.0.1:{s.port}", "--profile", "uefi-ipxe", "--http", f"127.0.0.1:{s.http_port}",
                "--clients", "3", "--verify-root", str(root), "--metrics", url], timeout=60)
    assert text.returncode == 0, text.stderr
    out = text.stdout.decode()
    assert "ipxe http GET initrd.img: 3 ok, 0 failed" in out
    assert "requests: tftp 3 " in out and "; http 9 served" in out


def test_storm_finds_a_wrong_byte_and_a_missing_file_over_http(web, root, binary, tmp_path):
    files = boot_root(root)
    s = web()
    checked = tmp_path / "checked"
    checked.mkdir()
    for name, data in files.items():
        (checked / name).write_bytes(data)
    wrong = bytearray(files["initrd.img"])
    wrong[5_000_000] ^= 1
    (checked / "initrd.img").write_bytes(bytes(wrong))
    done = run([str(binary), "storm", f"127.0.0.1:{s.port}", "--profile", "uefi-ipxe", "--http", f"127.0.0.1:{s.http_port}",
                "--clients", "4", "--verify-root", str(checked), "--json"], timeout=60)
    assert done.returncode == 1
    result = json.loads(done.stdout)
    assert result["failures"] == {"corrupted": 4} and result["stages"][5]["failed"] == 4
    assert "ipxe http GET initrd.img: corrupted: byte 5000000 differs" in result["failure_examples"][0]
    (root / "vmlinuz").unlink()
    done = run([str(binary), "storm", f"127.0.0.1:{s.port}", "--profile", "uefi-ipxe", "--http", f"127.0.0.1:{s.http_port}",
                "--clients", "2", "--json"], timeout=60)
    result = json.loads(done.stdout)
    assert done.returncode == 1 and result["failures"] == {"HTTP status 404": 2} and result["stages"][4]["failed"] == 2


def test_storm_reads_from_an_independent_http_server_that_closes_each_connection(root, binary, tmp_path):
    """Python's http.server speaks HTTP/1.0 and closes after each response: the storm's machines
    open a new connection for each file, and still compare every byte."""
    files = boot_root(root)
    port = free_tcp_port()
    web_server = subprocess.Popen(["python3", "-m", "http.server", "--bind", "127.0.0.1", "--directory", str(root), str(port)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port)
        profile = tmp_path / "chain.profile"
        profile.write_text("profile http-only\nfirmware ipxe retry=250ms tries=8 backoff=40\n"
                           f"http GET http://127.0.0.1:{port}/boot.ipxe\nhttp GET vmlinuz\nhttp GET initrd.img\n")
        done = run([str(binary), "storm", "127.0.0.1:69", "--profile-file", str(profile), "--http", f"127.0.0.1:{port}",
                    "--clients", "5", "--verify-root", str(root), "--json"], timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        result = json.loads(done.stdout)
        assert result["ok"] == 5 and result["bytes"] == 5 * (len(files["boot.ipxe"]) + len(files["vmlinuz"]) + len(files["initrd.img"]))
    finally:
        web_server.terminate()
        web_server.wait(timeout=10)


def test_storm_refuses_a_bad_http_address(binary):
    done = run([str(binary), "storm", "127.0.0.1:69", "--profile", "uefi-ipxe", "--http", "not an address"])
    assert done.returncode == 64 and b"--http" in done.stderr


def test_an_open_http_connection_keeps_the_idle_exit_away(binary, root):
    """-t exits a server that serves nothing for that long: a download over HTTP is something."""
    big = root / "slow.img"
    big.write_bytes(os.urandom(8 << 20))
    big.chmod(0o644)
    port = free_tcp_port()
    p = subprocess.Popen([str(binary), "-L", "-a", "127.0.0.1:0", "-t", "2", "-u", "root", "--http", f"127.0.0.1:{port}",
                          str(root)], stderr=subprocess.PIPE)
    try:
        wait_for_port(port)
        # 8 MiB at 2 MiB/s: about 4 s, twice -t, and no TFTP transfer meanwhile.
        got = curl("--limit-rate", "2M", f"http://127.0.0.1:{port}/slow.img", timeout=30)
        assert got.returncode == 0 and got.stdout == big.read_bytes()
        ended = time.time()
        assert p.poll() is None, "the server exited during the download"
        assert p.wait(timeout=10) == 0
        assert 1.0 < time.time() - ended < 4.5  # -t 2 after the connection closed
    finally:
        if p.poll() is None:
            p.kill()
    assert "(-t): exiting" in p.stderr.read().decode()
