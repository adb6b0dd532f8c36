"""A UDP relay for one TFTP session at a time that duplicates and reorders datagrams.

The client talks to the relay's port as if it were the server. The relay forwards the request
to the server's listener and learns the server's transfer port (TID) from its first reply; after
that the client's packets go to that TID, and every server reply goes back to the client from
the relay's one port. Each datagram, in either direction, is sent twice with probability
`duplicate`, and held back until after the next one with probability `reorder`."""
import random
import select
import socket
import threading


class Relay:
    def __init__(self, server_port, duplicate=0.0, reorder=0.0, seed=1):
        self.server = ("127.0.0.1", server_port)
        self.duplicate, self.reorder = duplicate, reorder
        self.random = random.Random(seed)
        self.front = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # faces the client
        self.front.bind(("127.0.0.1", 0))
        self.back = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)   # faces the server
        self.back.bind(("127.0.0.1", 0))
        self.port = self.front.getsockname()[1]
        self.client = None
        self.tid = None
        self.held = {"up": None, "down": None}
        self.counts = {"duplicated": 0, "reordered": 0}
        self.stopping = False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def deliver(self, direction, sock, packet, to):
        if self.random.random() < self.reorder and self.held[direction] is None:
            self.held[direction] = (sock, packet, to)
            self.counts["reordered"] += 1
            return
        sock.sendto(packet, to)
        if self.random.random() < self.duplicate:
            sock.sendto(packet, to)
            self.counts["duplicated"] += 1
        if self.held[direction] is not None:
            held = self.held[direction]
            self.held[direction] = None
            held[0].sendto(held[1], held[2])

    def flush(self):
        for direction, held in self.held.items():
            if held is not None:
                held[0].sendto(held[1], held[2])
                self.held[direction] = None

    def run(self):
        while not self.stopping:
            ready, _, _ = select.select([self.front, self.back], [], [], 0.05)
            if not ready:
                self.flush()  # nothing followed a held packet: let it go late rather than never
            for sock in ready:
                packet, sender = sock.recvfrom(70000)
                if sock is self.front:
                    if packet[:2] in (b"\x00\x01", b"\x00\x02"):
                        self.client, self.tid = sender, None  # a new session
                        self.back.sendto(packet, self.server)
                    elif self.tid:
                        self.deliver("up", self.back, packet, self.tid)
                elif self.client:
                    if self.tid is None:
                        self.tid = sender
                    if sender == self.tid:
                        self.deliver("down", self.front, packet, self.client)
        self.flush()  # a packet held back when the test ends (a last ACK) still goes

    def close(self):
        self.stopping = True
        self.thread.join()
        self.front.close()
        self.back.close()
