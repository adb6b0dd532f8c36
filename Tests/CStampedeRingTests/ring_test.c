/*
 * The io_uring engine's own tests, in C, for `make sanitize` (ASan + UBSan) and `make test`.
 * Loopback only. Prints "N passed, N failed".
 */
#include "CStampedeRing.h"
#include "ring_private.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int passed, failed;

#define CHECK(condition)                                                                           \
    do {                                                                                           \
        if (!(condition)) {                                                                        \
            fprintf(stderr, "%s:%d: %s: check failed: %s\n", __FILE__, __LINE__, __func__, #condition); \
            return 0;                                                                              \
        }                                                                                          \
    } while (0)

static struct sockaddr_storage loopback(uint16_t port)
{
    struct sockaddr_storage s;
    struct sockaddr_in *sin = (struct sockaddr_in *)&s;
    memset(&s, 0, sizeof(s));
    sin->sin_family = AF_INET;
    sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sin->sin_port = htons(port);
    return s;
}

static int udp_socket(uint16_t port, int pktinfo)
{
    int one = 1, fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
    struct sockaddr_storage a = loopback(port);
    if (pktinfo)
        setsockopt(fd, IPPROTO_IP, IP_PKTINFO, &one, sizeof(one));
    bind(fd, (struct sockaddr *)&a, sizeof(struct sockaddr_in));
    return fd;
}

static uint16_t port_of(int fd)
{
    struct sockaddr_in a;
    socklen_t length = sizeof(a);
    getsockname(fd, (struct sockaddr *)&a, &length);
    return ntohs(a.sin_port);
}

static stampede_ring *make_ring(uint32_t small_buffers)
{
    stampede_ring_config config = {256, small_buffers, 2048, 4, 65536, small_buffers, 2048, 256, 64, 0};
    const char *flags;
    int error;
    return stampede_ring_create(&config, &flags, &error);
}

/* Waits until at least `want` datagrams arrived over several waits; returns the last count. */
static int wait_for(stampede_ring *r, int want)
{
    int i, n = 0;
    for (i = 0; i < 50 && n < want; i++)
        n = stampede_ring_wait(r, 20 * 1000 * 1000);
    return n;
}

static int test_listener_sees_payload_peer_and_local_address(void)
{
    stampede_ring *r = make_ring(16);
    int listener = udp_socket(0, 1), client = udp_socket(0, 0);
    uint16_t port = port_of(listener);
    struct sockaddr_storage to = loopback(port);
    const stampede_ring_datagram *d;
    CHECK(r);
    CHECK(stampede_ring_add_socket(r, listener, 42, 1, 0) >= 0);
    stampede_ring_wait(r, 0);
    CHECK(sendto(client, "\0\1f\0octet\0", 10, 0, (struct sockaddr *)&to, sizeof(struct sockaddr_in)) == 10);
    CHECK(wait_for(r, 1) == 1);
    d = stampede_ring_datagrams(r);
    CHECK(d[0].tag == 42 && d[0].length == 10 && memcmp(d[0].bytes, "\0\1f\0octet\0", 10) == 0);
    CHECK(((const struct sockaddr_in *)&d[0].peer)->sin_port == htons(port_of(client)));
    CHECK(((const struct sockaddr_in *)&d[0].local)->sin_addr.s_addr == htonl(INADDR_LOOPBACK));
    close(client);
    stampede_ring_destroy(r);
    return 1;
}

static int test_send_gathers_header_and_payload(void)
{
    stampede_ring *r = make_ring(16);
    int sender = udp_socket(0, 0), client = udp_socket(0, 0), slot;
    struct sockaddr_storage peer = loopback(port_of(client));
    uint8_t payload[1000], got[2000];
    int i;
    for (i = 0; i < 1000; i++)
        payload[i] = (uint8_t)(i * 7);
    connect(sender, (struct sockaddr *)&peer, sizeof(struct sockaddr_in));
    slot = stampede_ring_add_socket(r, sender, 1, 0, 0);
    CHECK(slot >= 0);
    CHECK(stampede_ring_send(r, slot, "\0\3\0\1", 4, payload, sizeof(payload), NULL, NULL) == 0);
    CHECK(stampede_ring_wait(r, 0) == 0);
    usleep(10000);
    CHECK(recv(client, got, sizeof(got), 0) == 1004);
    CHECK(memcmp(got, "\0\3\0\1", 4) == 0 && memcmp(got + 4, payload, 1000) == 0);
    CHECK(stampede_ring_get_stats(r).send_failures == 0);
    close(client);
    stampede_ring_destroy(r);
    return 1;
}

/* A datagram longer than its buffer is delivered as its start and said to be cut, on a listener
 * (request buffers, 2048 here) and on a transfer socket (small buffers) alike: never taken as if
 * it were whole, never dropped without a word. */
static int test_a_datagram_longer_than_its_buffer_is_said_to_be_cut(void)
{
    stampede_ring *r = make_ring(8);
    int listener = udp_socket(0, 1), transfer = udp_socket(0, 0), client = udp_socket(0, 0), i, n, cut = 0, whole = 0;
    struct sockaddr_storage to_listener = loopback(port_of(listener)), to_transfer = loopback(port_of(transfer));
    static uint8_t big[3000];
    memset(big, 'x', sizeof(big));
    CHECK(stampede_ring_add_socket(r, listener, 1, 1, 0) >= 0);
    CHECK(stampede_ring_add_socket(r, transfer, 2, 0, 0) >= 0);
    stampede_ring_wait(r, 0);
    sendto(client, big, sizeof(big), 0, (struct sockaddr *)&to_listener, sizeof(struct sockaddr_in));
    sendto(client, big, sizeof(big), 0, (struct sockaddr *)&to_transfer, sizeof(struct sockaddr_in));
    sendto(client, big, 100, 0, (struct sockaddr *)&to_listener, sizeof(struct sockaddr_in));
    n = wait_for(r, 3);
    CHECK(n == 3);
    for (i = 0; i < n; i++) {
        const stampede_ring_datagram *d = &stampede_ring_datagrams(r)[i];
        if (d->truncated) {
            CHECK(d->length >= 2048 && d->length < 3000 && d->bytes[0] == 'x');
            cut++;
        } else {
            CHECK(d->length == 100);
            whole++;
        }
    }
    CHECK(cut == 2 && whole == 1);
    close(client);
    stampede_ring_destroy(r);
    return 1;
}

/* The kernel may drop completions under memory pressure (io_uring_enter's EBADR): a send whose
 * completion was lost must not hold the wait for ever. Simulated: a send counted in flight that
 * the kernel never heard of, after a loss was reported. */
static int test_a_send_whose_completion_was_lost_holds_no_wait(void)
{
    stampede_ring *r = make_ring(8);
    struct timespec start, end;
    int n;
    CHECK(r);
    stampede_ring_wait(r, 0);
    r->stats.completions_lost = 1;
    r->sends_in_flight = 1;
    clock_gettime(CLOCK_MONOTONIC, &start);
    n = stampede_ring_wait(r, 0);
    clock_gettime(CLOCK_MONOTONIC, &end);
    CHECK(n == 0);
    CHECK(r->sends_in_flight == 0);
    CHECK(end.tv_sec - start.tv_sec < 3);
    stampede_ring_destroy(r);
    return 1;
}

/* The kernel dropped completions (EBADR), among them a receive's last: the receive is cancelled
 * behind the engine's back and its completions eaten, as if lost, so the socket is deaf. Told
 * that completions were lost, the next wait verifies every receive, finds this one gone, and
 * arms it again: the datagram waiting in the socket arrives. A live receive is only re-armed. */
static int test_a_receive_whose_end_was_lost_is_armed_again(void)
{
    stampede_ring *r = make_ring(16);
    int listener = udp_socket(0, 1), other = udp_socket(0, 1), client = udp_socket(0, 0), slot, n;
    struct sockaddr_storage to = loopback(port_of(listener)), to_other = loopback(port_of(other));
    struct io_uring_sqe *sqe;
    struct io_uring_cqe *cqe;
    CHECK(r);
    slot = stampede_ring_add_socket(r, listener, 7, 1, 0);
    CHECK(slot >= 0 && stampede_ring_add_socket(r, other, 8, 1, 0) >= 0);
    stampede_ring_wait(r, 0);
    sqe = io_uring_get_sqe(&r->ring);
    CHECK(sqe);
    io_uring_prep_cancel64(sqe, pack(OP_RECV, r->sockets[slot].group, (uint32_t)slot, r->sockets[slot].generation), 0);
    io_uring_sqe_set_data64(sqe, 0);
    CHECK(io_uring_submit_and_wait(&r->ring, 2) >= 1);
    while (io_uring_peek_cqe(&r->ring, &cqe) == 0)
        io_uring_cqe_seen(&r->ring, cqe);
    sendto(client, "x", 1, 0, (struct sockaddr *)&to, sizeof(struct sockaddr_in));
    CHECK(wait_for(r, 1) == 0); /* deaf: the engine thinks its receive is in the kernel */
    r->stats.completions_lost++;
    r->receives_suspect = 1; /* what survived() records when io_uring_enter says EBADR */
    n = wait_for(r, 1);
    CHECK(n == 1 && stampede_ring_datagrams(r)[0].tag == 7 && stampede_ring_datagrams(r)[0].length == 1);
    CHECK(stampede_ring_get_stats(r).receives_recovered == 1);
    sendto(client, "y", 1, 0, (struct sockaddr *)&to_other, sizeof(struct sockaddr_in));
    n = wait_for(r, 1);
    CHECK(n == 1 && stampede_ring_datagrams(r)[0].tag == 8);
    close(client);
    stampede_ring_destroy(r);
    return 1;
}

static int test_more_datagrams_than_buffers_all_arrive(void)
{
    stampede_ring *r = make_ring(8);
    int listener = udp_socket(0, 1), client = udp_socket(0, 0), seen = 0, i, rounds;
    struct sockaddr_storage to = loopback(port_of(listener));
    CHECK(stampede_ring_add_socket(r, listener, 1, 1, 0) >= 0);
    stampede_ring_wait(r, 0);
    for (i = 0; i < 100; i++)
        sendto(client, "x", 1, 0, (struct sockaddr *)&to, sizeof(struct sockaddr_in));
    for (rounds = 0; rounds < 200 && seen < 100; rounds++)
        seen += stampede_ring_wait(r, 5 * 1000 * 1000);
    CHECK(seen == 100);
    CHECK(stampede_ring_get_stats(r).receive_buffer_exhausted > 0);
    close(client);
    stampede_ring_destroy(r);
    return 1;
}

static int test_closing_thousands_of_sockets_releases_every_slot(void)
{
    stampede_ring *r = make_ring(16);
    int round, i, slots[1500];
    CHECK(r);
    for (round = 0; round < 3; round++) {
        for (i = 0; i < 1500; i++)
            slots[i] = stampede_ring_add_socket(r, udp_socket(0, 0), (uint64_t)i, 0, i % 2);
        stampede_ring_wait(r, 0);
        CHECK(stampede_ring_socket_count(r) == 1500);
        for (i = 0; i < 1500; i++)
            stampede_ring_close_socket(r, slots[i]);
        stampede_ring_wait(r, 0);
        stampede_ring_wait(r, 0);
        CHECK(stampede_ring_socket_count(r) == 0);
    }
    stampede_ring_destroy(r);
    return 1;
}

/* Growing the socket table in one turn (before its receives are submitted) must not leave the
 * kernel reading moved memory: every socket, first and last, still receives. Under make
 * sanitize, ASan fills freed memory with garbage, so a stale pointer fails here. */
static int test_sockets_added_past_the_table_size_in_one_turn_all_receive(void)
{
    stampede_ring *r = make_ring(4096);
    enum { COUNT = 3000 };
    static int fds[COUNT];
    static uint8_t got[COUNT];
    int client = udp_socket(0, 0), i, seen = 0, rounds, size = 4 << 20;
    setsockopt(client, SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
    memset(got, 0, sizeof(got));
    for (i = 0; i < COUNT; i++) {
        fds[i] = udp_socket(0, 0);
        CHECK(stampede_ring_add_socket(r, fds[i], (uint64_t)i, 0, 0) >= 0);
    }
    stampede_ring_wait(r, 0);
    for (i = 0; i < COUNT; i++) {
        struct sockaddr_storage to = loopback(port_of(fds[i]));
        sendto(client, "hi", 2, 0, (struct sockaddr *)&to, sizeof(struct sockaddr_in));
    }
    for (rounds = 0; rounds < 100 && seen < COUNT; rounds++) {
        int n = stampede_ring_wait(r, 10 * 1000 * 1000), k;
        const stampede_ring_datagram *d = stampede_ring_datagrams(r);
        for (k = 0; k < n; k++) {
            CHECK(d[k].length == 2 && d[k].tag < COUNT && !got[d[k].tag]);
            got[d[k].tag] = 1;
            seen++;
        }
    }
    CHECK(seen == COUNT);
    close(client);
    stampede_ring_destroy(r);
    return 1;
}

static int test_a_closed_sockets_datagrams_never_surface(void)
{
    stampede_ring *r = make_ring(16);
    int fd = udp_socket(0, 0), client = udp_socket(0, 0), slot, n, i;
    struct sockaddr_storage to = loopback(port_of(fd));
    const stampede_ring_datagram *d;
    slot = stampede_ring_add_socket(r, fd, 7, 0, 0);
    stampede_ring_wait(r, 0);
    sendto(client, "late", 4, 0, (struct sockaddr *)&to, sizeof(struct sockaddr_in));
    stampede_ring_close_socket(r, slot);
    /* A new socket may take the same slot: it must only see its own traffic. */
    slot = stampede_ring_add_socket(r, udp_socket(0, 0), 8, 0, 0);
    for (i = 0; i < 5; i++) {
        n = stampede_ring_wait(r, 5 * 1000 * 1000);
        d = stampede_ring_datagrams(r);
        CHECK(n == 0 || d[0].tag == 8);
    }
    close(client);
    stampede_ring_destroy(r);
    return 1;
}

static int test_a_vanished_peer_is_reported(void)
{
    stampede_ring *r = make_ring(16);
    int sender = udp_socket(0, 0), gone = udp_socket(0, 0), slot;
    struct sockaddr_storage peer = loopback(port_of(gone));
    const stampede_ring_datagram *d;
    close(gone);
    connect(sender, (struct sockaddr *)&peer, sizeof(struct sockaddr_in));
    slot = stampede_ring_add_socket(r, sender, 9, 0, 0);
    stampede_ring_send(r, slot, "\0\3\0\1", 4, NULL, 0, NULL, NULL);
    CHECK(wait_for(r, 1) == 1);
    d = stampede_ring_datagrams(r);
    CHECK(d[0].tag == 9 && d[0].length == -ECONNREFUSED);
    stampede_ring_destroy(r);
    return 1;
}


static int open_fds(void)
{
    int n = 0, fd;
    for (fd = 0; fd < 65536; fd++)
        if (fcntl(fd, F_GETFD) >= 0)
            n++;
    return n;
}

/* A socket connected to a port nobody listens on: its first send draws ICMP port unreachable,
 * which ends its multishot receive with ECONNREFUSED. */
static int socket_to_a_vanished_peer(void)
{
    int fd = udp_socket(0, 0), gone = udp_socket(0, 0);
    struct sockaddr_storage peer = loopback(port_of(gone));
    close(gone);
    connect(fd, (struct sockaddr *)&peer, sizeof(struct sockaddr_in));
    return fd;
}

/* Issue 11 item 2: a transfer closed in a turn whose sends overflow the send slots (a mid-turn
 * flush), while its receive's last completion (ECONNREFUSED) is reaped during that flush and
 * handled at the next wait. The slot must be retired once: its fd closed, never twice on the
 * free list (two later sockets would share it and one's datagrams reach the other's tag). */
static int test_a_socket_closed_while_a_flush_meets_its_last_receive_is_retired_once(void)
{
    stampede_ring_config config = {64, 16, 2048, 4, 65536, 16, 2048, 2, 8, 0};
    const char *flags;
    int error, round;
    stampede_ring *r = stampede_ring_create(&config, &flags, &error);
    int sink = udp_socket(0, 0), before = open_fds();
    struct sockaddr_storage sink_address = loopback(port_of(sink));
    CHECK(r);
    for (round = 0; round < 20; round++) {
        int vanished = socket_to_a_vanished_peer(), streamer = udp_socket(0, 0), a, b, fa, fb, i, n, k;
        int slot, other;
        connect(streamer, (struct sockaddr *)&sink_address, sizeof(struct sockaddr_in));
        slot = stampede_ring_add_socket(r, vanished, 100, 0, 0);
        other = stampede_ring_add_socket(r, streamer, 200, 0, 0);
        CHECK(slot >= 0 && other >= 0);
        stampede_ring_wait(r, 0);
        /* The error arrives between waits; the multishot receive ends with it. */
        CHECK(send(vanished, "\0\5\0\0x\0", 6, 0) == 6);
        usleep(2000);
        stampede_ring_close_socket(r, slot);
        /* More sends than send slots: the engine flushes mid-turn and meets the completion. */
        for (i = 0; i < 5; i++)
            CHECK(stampede_ring_send(r, other, "\0\3\0\1", 4, NULL, 0, NULL, NULL) == 0);
        stampede_ring_wait(r, 0);
        stampede_ring_wait(r, 0);
        CHECK(stampede_ring_socket_count(r) == 1);
        /* Two new sockets get two slots, and each hears only its own datagrams. */
        fa = udp_socket(0, 0);
        fb = udp_socket(0, 0);
        {
            struct sockaddr_storage to_a = loopback(port_of(fa)), to_b = loopback(port_of(fb));
            a = stampede_ring_add_socket(r, fa, 1000 + (uint64_t)round, 0, 0);
            b = stampede_ring_add_socket(r, fb, 2000 + (uint64_t)round, 0, 0);
            CHECK(a >= 0 && b >= 0 && a != b);
            stampede_ring_wait(r, 0);
            sendto(sink, "A", 1, 0, (struct sockaddr *)&to_a, sizeof(struct sockaddr_in));
            sendto(sink, "B", 1, 0, (struct sockaddr *)&to_b, sizeof(struct sockaddr_in));
        }
        n = wait_for(r, 2);
        CHECK(n == 2);
        for (k = 0; k < n; k++) {
            const stampede_ring_datagram *d = &stampede_ring_datagrams(r)[k];
            CHECK(d->length == 1);
            CHECK((d->bytes[0] == 'A' && d->tag == 1000 + (uint64_t)round) ||
                  (d->bytes[0] == 'B' && d->tag == 2000 + (uint64_t)round));
        }
        stampede_ring_close_socket(r, a);
        stampede_ring_close_socket(r, b);
        stampede_ring_close_socket(r, other);
        stampede_ring_wait(r, 0);
        stampede_ring_wait(r, 0);
        CHECK(stampede_ring_socket_count(r) == 0);
        while (recv(sink, (char[8]){0}, 8, MSG_DONTWAIT) > 0)
            ;
    }
    /* Every socket handed over was closed: no descriptor leaked. */
    CHECK(open_fds() == before);
    close(sink);
    stampede_ring_destroy(r);
    return 1;
}

/* Socket errors and datagrams in one batch never overrun the batch: more sockets report
 * ECONNREFUSED than there is room for error reports, while every receive buffer holds a
 * datagram. Errors beyond the room are dropped (the next send reports again), datagrams never. */
static int test_errors_and_datagrams_in_one_batch_stay_within_it(void)
{
    stampede_ring_config config = {256, 8, 2048, 1, 65536, 8, 2048, 64, 4, 0};
    const char *flags;
    int error, i, n, errors = 0, data = 0, rounds;
    stampede_ring *r = stampede_ring_create(&config, &flags, &error);
    int listener = udp_socket(0, 1), client = udp_socket(0, 0), vanished[40];
    struct sockaddr_storage to = loopback(port_of(listener));
    CHECK(r);
    CHECK(stampede_ring_add_socket(r, listener, 1, 1, 0) >= 0);
    for (i = 0; i < 40; i++) {
        vanished[i] = socket_to_a_vanished_peer();
        CHECK(stampede_ring_add_socket(r, vanished[i], 500 + (uint64_t)i, 0, 0) >= 0);
    }
    stampede_ring_wait(r, 0);
    for (i = 0; i < 40; i++)
        send(vanished[i], "x", 1, 0);
    for (i = 0; i < 8; i++)
        sendto(client, "\0\1f\0octet\0", 10, 0, (struct sockaddr *)&to, sizeof(struct sockaddr_in));
    usleep(20000);
    for (rounds = 0; rounds < 20 && data < 8; rounds++) {
        int k;
        n = stampede_ring_wait(r, 5 * 1000 * 1000);
        CHECK(n <= 8 + 1 + 4);
        for (k = 0; k < n; k++) {
            const stampede_ring_datagram *d = &stampede_ring_datagrams(r)[k];
            if (d->length < 0)
                errors++;
            else
                data++;
        }
    }
    CHECK(data == 8 && errors >= 4);
    close(client);
    stampede_ring_destroy(r);
    return 1;
}

/* Buffers go back to the group they came from: large sockets closed with datagrams still
 * queued, many times over, leave every large buffer usable (one batch can still fill them all). */
static int test_large_buffers_survive_sockets_closed_with_datagrams_pending(void)
{
    stampede_ring_config config = {256, 16, 2048, 4, 65536, 16, 2048, 64, 8, 0};
    const char *flags;
    int error, round, i, n, seen = 0, rounds;
    stampede_ring *r = stampede_ring_create(&config, &flags, &error);
    int client = udp_socket(0, 0), fds[4];
    static uint8_t big[4000];
    CHECK(r);
    for (round = 0; round < 50; round++) {
        int fd = udp_socket(0, 0), slot;
        struct sockaddr_storage to = loopback(port_of(fd));
        slot = stampede_ring_add_socket(r, fd, 7, 0, 1);
        stampede_ring_wait(r, 0);
        for (i = 0; i < 3; i++)
            sendto(client, big, sizeof(big), 0, (struct sockaddr *)&to, sizeof(struct sockaddr_in));
        stampede_ring_close_socket(r, slot);
        stampede_ring_wait(r, 1000 * 1000);
    }
    stampede_ring_wait(r, 0);
    stampede_ring_wait(r, 0);
    CHECK(stampede_ring_socket_count(r) == 0);
    for (i = 0; i < 4; i++) {
        fds[i] = udp_socket(0, 0);
        CHECK(stampede_ring_add_socket(r, fds[i], 10 + (uint64_t)i, 0, 1) >= 0);
    }
    stampede_ring_wait(r, 0);
    for (i = 0; i < 4; i++) {
        struct sockaddr_storage to = loopback(port_of(fds[i]));
        sendto(client, big, sizeof(big), 0, (struct sockaddr *)&to, sizeof(struct sockaddr_in));
    }
    usleep(10000);
    for (rounds = 0; rounds < 20 && seen < 4; rounds++) {
        n = stampede_ring_wait(r, 5 * 1000 * 1000);
        for (i = 0; i < n; i++)
            CHECK(stampede_ring_datagrams(r)[i].length == (int)sizeof(big));
        seen += n;
    }
    CHECK(seen == 4);
    close(client);
    stampede_ring_destroy(r);
    return 1;
}

/* A vanished peer's ICMP error goes to whichever call comes first on a connected socket. A run
 * of sends draws one error after another, and the sends consume them: each is the transfer's
 * to hear, never counted as a datagram the kernel would not send. */
static int test_a_vanished_peer_found_by_a_send_is_reported_too(void)
{
    stampede_ring *r = make_ring(16);
    int slot = stampede_ring_add_socket(r, socket_to_a_vanished_peer(), 9, 0, 0), i, k, n, reports = 0;
    CHECK(slot >= 0);
    stampede_ring_wait(r, 0);
    for (i = 0; i < 20; i++)
        CHECK(stampede_ring_send(r, slot, "\0\3\0\1", 4, NULL, 0, NULL, NULL) == 0);
    for (i = 0; i < 10; i++) {
        n = stampede_ring_wait(r, 2 * 1000 * 1000);
        for (k = 0; k < n; k++) {
            const stampede_ring_datagram *d = &stampede_ring_datagrams(r)[k];
            CHECK(d->tag == 9 && d->length == -ECONNREFUSED);
            reports++;
        }
    }
    CHECK(reports > 1);
    CHECK(stampede_ring_get_stats(r).send_failures == 0);
    stampede_ring_destroy(r);
    return 1;
}

/* Windows of 50 blocks of 1,468 bytes (sends of 44 and 6 datagrams, linked), on a ring with two
 * send slots (every window flushes mid-way): each datagram arrives whole and in order, segmented
 * or, on a socket whose sends the kernel will not segment (SO_NO_CHECK: EINVAL, as for a segment
 * above the path MTU), sent again one by one. */
static int check_windows(int refuse)
{
    stampede_ring_config config = {64, 16, 2048, 4, 65536, 16, 2048, 2, 8, 1};
    const char *flags;
    int error, one = 1, size = 8 << 20, sender = udp_socket(0, 0), client = udp_socket(0, 0), slot, window, i;
    struct sockaddr_storage peer = loopback(port_of(client));
    enum { BLOCK = 1468, BLOCKS = 50, LAST = 10, BYTES = (BLOCKS - 1) * BLOCK + LAST };
    static uint8_t payload[BYTES], got[2000];
    uint8_t headers[4 * BLOCKS];
    stampede_ring *r = stampede_ring_create(&config, &flags, &error);
    stampede_ring_stats stats;
    CHECK(r);
    for (i = 0; i < BYTES; i++)
        payload[i] = (uint8_t)(i * 13 + (i >> 8));
    for (i = 0; i < BLOCKS; i++) {
        headers[4 * i] = 0;
        headers[4 * i + 1] = 3;
        headers[4 * i + 2] = (uint8_t)((i + 1) >> 8);
        headers[4 * i + 3] = (uint8_t)(i + 1);
    }
    setsockopt(client, SOL_SOCKET, SO_RCVBUFFORCE, &size, sizeof(size));
    if (refuse)
        CHECK(setsockopt(sender, SOL_SOCKET, SO_NO_CHECK, &one, sizeof(one)) == 0);
    connect(sender, (struct sockaddr *)&peer, sizeof(struct sockaddr_in));
    slot = stampede_ring_add_socket(r, sender, 1, 0, 0);
    CHECK(slot >= 0);
    for (window = 0; window < 3; window++) {
        CHECK(stampede_ring_send_window(r, slot, headers, BLOCKS, payload, BYTES, BLOCK, NULL, NULL) == 0);
        CHECK(stampede_ring_wait(r, 0) >= 0);
        usleep(10000);
        for (i = 0; i < BLOCKS; i++) {
            int expected = i + 1 < BLOCKS ? BLOCK : LAST;
            CHECK(recv(client, got, sizeof(got), MSG_DONTWAIT) == 4 + expected);
            CHECK(got[3] == (uint8_t)(i + 1) && memcmp(got + 4, payload + i * BLOCK, expected) == 0);
        }
        CHECK(recv(client, got, sizeof(got), MSG_DONTWAIT) < 0);
    }
    stats = stampede_ring_get_stats(r);
    CHECK(stats.send_failures == 0);
    CHECK(refuse ? stats.segmentation_fallbacks == 1 && stats.segmented_sends == 0
                 : stats.segmentation_fallbacks == 0 && stats.segmented_sends == 6);
    close(client);
    stampede_ring_destroy(r);
    return 1;
}

static int test_windows_arrive_whole_and_in_order(void)
{
    return check_windows(0);
}

static int test_a_refused_window_goes_again_one_by_one_in_order(void)
{
    return check_windows(1);
}

int main(void)
{
    int (*tests[])(void) = {
        test_listener_sees_payload_peer_and_local_address,
        test_send_gathers_header_and_payload,
        test_more_datagrams_than_buffers_all_arrive,
        test_a_datagram_longer_than_its_buffer_is_said_to_be_cut,
        test_a_send_whose_completion_was_lost_holds_no_wait,
        test_a_receive_whose_end_was_lost_is_armed_again,
        test_closing_thousands_of_sockets_releases_every_slot,
        test_sockets_added_past_the_table_size_in_one_turn_all_receive,
        test_a_closed_sockets_datagrams_never_surface,
        test_a_vanished_peer_is_reported,
        test_a_socket_closed_while_a_flush_meets_its_last_receive_is_retired_once,
        test_errors_and_datagrams_in_one_batch_stay_within_it,
        test_large_buffers_survive_sockets_closed_with_datagrams_pending,
        test_a_vanished_peer_found_by_a_send_is_reported_too,
        test_windows_arrive_whole_and_in_order,
        test_a_refused_window_goes_again_one_by_one_in_order,
    };
    const char *reason;
    size_t i;
    if (stampede_ring_probe(&reason) < 0) {
        printf("io_uring unavailable: %s\n0 passed, 0 failed, %zu skipped\n", reason, sizeof(tests) / sizeof(tests[0]));
        return 0;
    }
    for (i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
        if (tests[i]())
            passed++;
        else
            failed++;
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
