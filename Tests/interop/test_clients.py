"""Every byte compared, fetched by real independent clients: curl, tftp-hpa, atftp, busybox, tftpy."""
import hashlib
import os

import pytest
import tftpy

from conftest import run


def same(a, b) -> bool:
    return hashlib.sha256(open(a, "rb").read()).digest() == hashlib.sha256(open(b, "rb").read()).digest()


@pytest.mark.parametrize("name", ["hello.txt", "one-mib.bin", "exact-512.bin", "empty.bin"])
def test_curl_default(serve, root, tmp_path, name):
    s = serve()
    out = tmp_path / "out"
    # curl 7.88 rejects an OACK with tsize 0 ("invalid tsize"), whoever the server: an empty
    # file is fetched without options (RFC 2349 says the server answers the size, and it does).
    extra = ["--tftp-no-options"] if name == "empty.bin" else []
    r = run(["curl", "-sS", *extra, "-o", str(out), f"tftp://127.0.0.1:{s.port}/{name}"])
    assert r.returncode == 0, r.stderr
    assert same(out, root / name)


def test_curl_blksize_1468_and_no_options(serve, root, tmp_path):
    s = serve()
    for extra in (["--tftp-blksize", "1468"], ["--tftp-no-options"]):
        out = tmp_path / "out"
        r = run(["curl", "-sS", *extra, "-o", str(out), f"tftp://127.0.0.1:{s.port}/one-mib.bin"])
        assert r.returncode == 0, r.stderr
        assert same(out, root / "one-mib.bin")
    assert "blksize=1468" in s.log_text()


def test_tftp_hpa_binary_and_netascii(serve, root, tmp_path):
    s = serve()
    out = tmp_path / "bin"
    r = run(["tftp", "-m", "binary", "127.0.0.1", str(s.port), "-c", "get", "one-mib.bin", str(out)])
    assert r.returncode == 0 and out.exists(), r.stderr
    assert same(out, root / "one-mib.bin")
    # netascii both ways: the client turns CR LF back into LF and CR NUL into CR.
    text = tmp_path / "text"
    r = run(["tftp", "-m", "ascii", "127.0.0.1", str(s.port), "-c", "get", "text.txt", str(text)])
    assert r.returncode == 0, r.stderr
    assert text.read_bytes() == (root / "text.txt").read_bytes()


def test_atftp_with_blksize_tsize_timeout_windowsize(serve, root, tmp_path):
    s = serve()
    out = tmp_path / "out"
    r = run(["atftp", "--option", "blksize 1468", "--option", "tsize 0", "--option", "timeout 2",
             "--option", "windowsize 16", "-g", "-r", "one-mib.bin", "-l", str(out), "127.0.0.1", str(s.port)])
    assert r.returncode == 0, r.stderr
    assert same(out, root / "one-mib.bin")
    line = [l for l in s.log_lines("RRQ") if "windowsize" in l]
    assert line and "blksize=1468" in line[0] and "tsize=1048576" in line[0] and "timeout=2" in line[0]
    assert "windowsize=16" in line[0]


def test_busybox_get_and_blksize(serve, root, tmp_path):
    s = serve()
    for extra in ([], ["-b", "1468"], ["-b", "65464"]):
        out = tmp_path / "out"
        if out.exists():
            out.unlink()
        r = run(["busybox", "tftp", "-g", "-r", "one-mib.bin", "-l", str(out), *extra, "127.0.0.1", str(s.port)])
        assert r.returncode == 0, r.stderr
        assert same(out, root / "one-mib.bin")


@pytest.mark.parametrize("options", [{}, {"blksize": 1468}, {"blksize": 1468, "tsize": 0}, {"blksize": 65464}])
# tftpy sends windowsize and timeout but rejects them in an OACK ("Unsupported option"):
# atftp covers those.
def test_tftpy_download(serve, root, tmp_path, options):
    s = serve()
    out = tmp_path / "out"
    tftpy.TftpClient("127.0.0.1", s.port, options=dict(options)).download("one-mib.bin", str(out), timeout=5)
    assert same(out, root / "one-mib.bin")


def test_a_100_mib_file_at_blksize_512_rolls_the_block_number_over(serve, root, tmp_path):
    big = root / "hundred.bin"
    with open(big, "wb") as f:
        chunk = os.urandom(1 << 20)
        for i in range(100):
            f.write(chunk[i:] + chunk[:i])
    big.chmod(0o644)
    s = serve()
    out = tmp_path / "out"
    # tftp-hpa asks for no options: 512-byte lockstep, 204,801 blocks, past 65535 three times.
    r = run(["tftp", "-m", "binary", "127.0.0.1", str(s.port), "-c", "get", "hundred.bin", str(out)], timeout=300)
    assert r.returncode == 0, r.stderr
    assert same(out, big)
    assert "bytes=104857600" in s.log_text()


def test_ipv6_loopback(serve, root, tmp_path):
    s = serve(host="::1")
    out = tmp_path / "out"
    r = run(["curl", "-sS", "-o", str(out), f"tftp://[::1]:{s.port}/one-mib.bin"])
    assert r.returncode == 0, r.stderr
    assert same(out, root / "one-mib.bin")
