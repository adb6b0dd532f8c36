"""A machine API as pixiecore documents it (`GET <prefix>/v1/boot/<mac>`: 200 with
{kernel, initrd, cmdline, message}, any other status ignores the machine), for tests and the
bench: answers from a JSON file of MAC -> answer (a machine not in it: 404), each after `--delay`
seconds, on threads; `POST <prefix>/v1/done/<mac>` (Stampede's report of a finished boot) takes
the machine out of the answers. Every request is printed on standard output, a line each.

    python3 pixieapi.py --port 8081 --answers answers.json [--prefix /pixiecore] [--delay 0.02]
"""
import argparse
import http.server
import json
import sys
import threading
import time


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--answers", required=True)
    parser.add_argument("--prefix", default="")
    parser.add_argument("--delay", type=float, default=0.0)
    options = parser.parse_args()
    with open(options.answers) as f:
        answers = {mac.lower(): answer for mac, answer in json.load(f).items()}
    lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def answer(self, status, body=b""):
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            print(f"GET {self.path}", flush=True)
            time.sleep(options.delay)
            path = self.path.split("?")[0]
            boot = options.prefix + "/v1/boot/"
            if not path.startswith(boot):
                return self.answer(404)
            with lock:
                found = answers.get(path[len(boot):].lower())
            if found is None:
                return self.answer(404)
            if isinstance(found, int):  # a status to answer, for tests of failures
                return self.answer(found)
            body = found.encode() if isinstance(found, str) else json.dumps(found).encode()
            self.answer(200, body)

        def do_POST(self):
            print(f"POST {self.path}", flush=True)
            done = options.prefix + "/v1/done/"
            if not self.path.startswith(done):
                return self.answer(404)
            with lock:
                answers.pop(self.path[len(done):].lower(), None)
            self.answer(204)

    server = http.server.ThreadingHTTPServer((options.host, options.port), Handler)
    server.daemon_threads = True
    print("ready", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
