"""Where a datagram goes (issue 21, defects 2 and 3), on the real binary: a late duplicate of a
request never disturbs the transfer it started, and a forged packet to port 69 never reaches a
transfer that runs on its own or a shared socket, on every backend and in every socket mode."""
import pytest

from tftpwire import RawClient, ack, error, request

MODES = {
    "own sockets": (),
    "shared sockets": ("--max-transfer-sockets", "0"),
    "single port": ("--single-port",),
}


def read_blocks(client, tid, first_reply, count):
    """Acknowledges `count` blocks from `tid`; returns the bytes read and the last block number."""
    out = bytearray()
    reply = first_reply
    block = 0
    while block < count:
        assert reply is not None and reply[0] == "DATA", reply
        assert reply[1][0] == block + 1, reply
        out += reply[1][1]
        block += 1
        client.send(ack(block), tid)
        reply, sender = client.receive()
        assert sender == tid, f"a packet from {sender}, not the transfer's {tid}: {reply}"
    return out, block, reply


def finish(client, tid, out, block, reply, blksize=512):
    """Reads to the end from `tid`, every packet from it alone."""
    while True:
        assert reply is not None and reply[0] == "DATA", reply
        if reply[1][0] == (block + 1) & 0xFFFF:
            out += reply[1][1]
            block += 1
        client.send(ack(block), tid)
        if len(reply[1][1]) < blksize:
            return bytes(out)
        reply, sender = client.receive()
        assert sender == tid, f"a packet from {sender}, not the transfer's {tid}: {reply}"


@pytest.mark.parametrize("mode", MODES)
def test_a_late_duplicate_request_never_disturbs_the_transfer_it_started(serve, root, mode):
    s = serve(*MODES[mode])
    client = RawClient(s)
    rrq = request("one-mib.bin")
    reply, tid = client.exchange(rrq)
    out, block, reply = read_blocks(client, tid, reply, 3)
    # The client's resend of its request, delivered late (iPXE resends after 250 ms).
    client.send(rrq)
    assert finish(client, tid, out, block, reply) == (root / "one-mib.bin").read_bytes()
    # Nothing else came: no second transfer, no ERROR.
    client.sock.settimeout(0.5)
    assert client.receive() == (None, None)
    client.close()
    assert len(s.log_lines('RRQ 127.0.0.1')) == 1
    assert "superseded" not in s.log_text()


@pytest.mark.parametrize("mode", ["own sockets", "shared sockets"])
def test_a_forged_packet_to_port_69_never_reaches_a_transfer(serve, root, mode):
    s = serve(*MODES[mode])
    client = RawClient(s)
    reply, tid = client.exchange(request("one-mib.bin"))
    out, block, reply = read_blocks(client, tid, reply, 2)
    # An attacker forging the client's address and port sends to port 69, the one port it knows.
    for forged in (error(0, "forged"), error(5, "forged"), ack(block + 5)):
        client.send(forged)
    assert finish(client, tid, out, block, reply) == (root / "one-mib.bin").read_bytes()
    client.close()
    assert s.log_lines(": ok")


def test_shared_sockets_are_bound_where_requests_came_to_not_to_every_address(serve, root):
    s = serve("--max-transfer-sockets", "0")
    client = RawClient(s)
    reply, tid = client.exchange(request("one-mib.bin"))
    assert reply[0] == "DATA" and tid[0] == "127.0.0.1"
    shared = [(address, port) for address, port in s.udp_sockets() if port != s.port]
    assert shared, "no shared transfer socket"
    # Bound to the address -a names, as a transfer's own socket is: none on a wildcard.
    assert {address for address, _ in shared} == {"127.0.0.1"}, shared
    client.send(error(0, "done"), tid)
    client.close()
