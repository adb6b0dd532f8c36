/*
 * The io_uring engine's own tests, in C, for `make sanitize` (ASan + UBSan) and `make test`.
 * Loopback only. Prints "N passed, N failed".
 */
#include "CStampedeRing.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
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
    stampede_ring_config config = {256, small_buffers, 2048, 4, 65536, 256, 64};
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

int main(void)
{
    int (*tests[])(void) = {
        test_listener_sees_payload_peer_and_local_address,
        test_send_gathers_header_and_payload,
        test_more_datagrams_than_buffers_all_arrive,
        test_closing_thousands_of_sockets_releases_every_slot,
        test_sockets_added_past_the_table_size_in_one_turn_all_receive,
        test_a_closed_sockets_datagrams_never_surface,
        test_a_vanished_peer_is_reported,
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
