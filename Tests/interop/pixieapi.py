"""A machine API as pixiecore documents it (`GET <prefix>/v1/boot/<mac>`: 200 with
{kernel, initrd, cmdline, message}, any other status ignores the machine), for tests and the
bench: answers from a JSON file of MAC -> answer (a machine not in it: 404; a number: that
status), each after `--delay` seconds, many at once (asyncio: a rack's proxy asks thousands);
`POST <prefix>/v1/done/<mac>` (Stampede's report of a finished boot) takes the machine out of the
answers. A connection stays open for the next request unless the request says `Connection: close`
(HTTP/1.1's default, as the Go servers of pixiecore's API and matchbox keep it). Every request is
printed on standard output, a line each.

    python3 pixieapi.py --port 8081 --answers answers.json [--prefix /pixiecore] [--delay 0.02]
"""
import argparse
import asyncio
import json
import sys

REASONS = {200: "OK", 204: "No Content", 400: "Bad Request", 404: "Not Found"}


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
    boot, done = options.prefix + "/v1/boot/", options.prefix + "/v1/done/"

    def answer(method, target):
        path = target.split("?")[0]
        if method == "GET" and path.startswith(boot):
            found = answers.get(path[len(boot):].lower())
            if found is None:
                return 404, b""
            if isinstance(found, int):  # a status to answer, for tests of failures
                return found, b""
            return 200, (found.encode() if isinstance(found, str) else json.dumps(found).encode())
        if method == "POST" and path.startswith(done):
            answers.pop(path[len(done):].lower(), None)
            return 204, b""
        return 404, b""

    async def serve(reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, target = lines[0].split(" ")[:2]
                print(f"{method} {target}", flush=True)
                fields = {name.strip().lower(): value.strip().lower() for name, _, value in (line.partition(":") for line in lines[1:] if line)}
                length = int(fields.get("content-length", "0"))
                if length:
                    await reader.readexactly(length)
                close = fields.get("connection") == "close"
                await asyncio.sleep(options.delay)
                status, body = answer(method, target)
                ending = "Connection: close\r\n" if close else ""
                writer.write(f"HTTP/1.1 {status} {REASONS.get(status, 'Status')}\r\nContent-Type: application/json\r\n"
                             f"Content-Length: {len(body)}\r\n{ending}\r\n".encode() + body)
                await writer.drain()
                if close:
                    break
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        finally:
            writer.close()

    async def run():
        server = await asyncio.start_server(serve, options.host, options.port, backlog=4096)
        print("ready", flush=True)
        async with server:
            await server.serve_forever()

    try:
        asyncio.run(run())
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
