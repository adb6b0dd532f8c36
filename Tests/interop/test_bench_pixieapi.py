"""bench-machines' API (Benchmarks/PixieAPI/pixieapi.c) answers as pixiecore's API does, as the
tests' pixieapi.py does: a listed machine's answer after the delay, 404 for one not listed, a
done report that takes the machine out, keep-alive unless the request says close."""
import http.client
import json
import socket
import subprocess
import time

import pytest

from conftest import REPO, free_tcp_port, run

API = REPO / ".build" / "pixieapi"
ANSWER = {"kernel": "http://10.0.0.1/vmlinuz", "initrd": ["http://10.0.0.1/initrd.img"], "cmdline": "hostname=node-1 quiet"}


@pytest.fixture
def api(tmp_path):
    assert API.exists(), "make test builds .build/pixieapi"
    answers = tmp_path / "answers.txt"
    answers.write_text(f"52:54:00:00:00:01 {json.dumps(ANSWER)}\n52:54:00:00:00:02 {json.dumps(ANSWER)}\n")
    port = free_tcp_port()
    p = subprocess.Popen([str(API), "--port", str(port), "--prefix", "/pixiecore", "--answers", str(answers), "--delay-ms", "50"],
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().startswith("ready (2 answers)")
    yield port
    p.kill()
    p.wait()


def test_a_listed_machine_gets_its_answer_after_the_delay_and_the_connection_stays_open(api):
    connection = http.client.HTTPConnection("127.0.0.1", api, timeout=5)
    for mac in ("52:54:00:00:00:01", "52:54:00:00:00:02", "52:54:00:00:00:03"):
        started = time.monotonic()
        connection.request("GET", f"/pixiecore/v1/boot/{mac.upper()}?arch=7&stage=dhcp")
        answer = connection.getresponse()
        body = answer.read()
        assert time.monotonic() - started >= 0.05
        if mac.endswith("3"):
            assert answer.status == 404 and body == b""
        else:
            assert answer.status == 200 and json.loads(body) == ANSWER
        assert not answer.will_close
    connection.close()


def test_done_takes_the_machine_out_and_close_is_honoured(api):
    connection = http.client.HTTPConnection("127.0.0.1", api, timeout=5)
    connection.request("POST", "/pixiecore/v1/done/52:54:00:00:00:01", headers={"Content-Length": "0"})
    answer = connection.getresponse()
    assert answer.status == 204 and answer.read() == b""
    connection.request("GET", "/pixiecore/v1/boot/52:54:00:00:00:01")
    assert connection.getresponse().status == 404
    connection.close()
    with socket.create_connection(("127.0.0.1", api), timeout=5) as s:
        s.sendall(b"GET /pixiecore/v1/boot/52:54:00:00:00:02 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        read = b""
        while chunk := s.recv(4096):
            read += chunk  # to the end: the server closes it
    head, _, body = read.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK") and b"Connection: close" in head and json.loads(body) == ANSWER


def test_a_bad_flag_is_exit_64(tmp_path):
    assert run([str(API), "--what"]).returncode == 64
    assert run([str(API), "--port", "0", "--answers", str(tmp_path / "a")]).returncode == 64
    assert run([str(API), "--port", "1", "--answers", str(tmp_path / "a"), "--delay-ms", "-1"]).returncode == 64
