/*
 * The kernel floor: what sending TFTP-sized datagrams costs the sender with no TFTP server at all.
 *
 * A connected UDP socket on loopback sends windows of W datagrams of 4 + 1468 bytes, each gathered
 * from two iovecs (a 4-byte header, a slice of a file image), as Stampede sends DATA:
 *   sendmmsg   one sendmmsg of W messages per window (what batching buys without GSO);
 *   gso        one sendmsg per window with UDP_SEGMENT (the kernel walks the stack once);
 *   gso-zc     the same with MSG_ZEROCOPY (--zerocopy; the completions read from the error queue);
 *   uring-gso, uring-gso-zc  the GSO send as io_uring SENDMSG and SENDMSG_ZC (--zerocopy), one
 *              submit-and-wait per window; the zero-copy notifications reaped as they come.
 *              The kernel pins each iovec's pages as fragments of one skb, at most 17
 *              (MAX_SKB_FRAGS), so a zero-copy send takes a window of 4 blocks at most (8 iovecs,
 *              most spanning two pages): larger windows get EMSGSIZE and are not measured.
 * A receiver thread on the other core drains the socket with recvmmsg; the sender stays at most
 * 4,096 datagrams ahead of it (sleeping, not spinning), so nothing is dropped at a full queue,
 * which would make a send cheaper than a delivered one. The figure is the sending
 * thread's CPU per GB sent (CLOCK_THREAD_CPUTIME_ID); on loopback that includes the delivery into
 * the receiver's queue, which runs in the sender's softirq, exactly as it does for a server
 * measured on loopback. Modes and windows alternate within each round; the median round and the
 * spread are reported, as JSON on stdout.
 *
 * Usage: floor [--rounds N] [--megabytes N] [--zerocopy]
 */
#define _GNU_SOURCE
#include <errno.h>
#include <liburing.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef SO_ZEROCOPY
#define SO_ZEROCOPY 60
#endif
#ifndef MSG_ZEROCOPY
#define MSG_ZEROCOPY 0x4000000
#endif

enum { BLOCK = 1468, DATAGRAM = 4 + BLOCK, MAX_WINDOW = 44, MAX_ZEROCOPY_WINDOW = 4 };
static const int windows[] = {1, 4, 8, 16, 32, 44};
enum { WINDOWS = sizeof(windows) / sizeof(windows[0]) };
enum mode { SENDMMSG, GSO, GSO_ZC, URING_GSO, URING_GSO_ZC, MODES };
static const char *mode_names[] = {"sendmmsg", "gso", "gso-zc", "uring-gso", "uring-gso-zc"};
static struct io_uring ring;
static unsigned notifications_pending;

/* One GSO send through the ring: SENDMSG, or SENDMSG_ZC whose buffer notification comes later. */
static int ring_send(int fd, struct msghdr *message, int zerocopy)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
    struct io_uring_cqe *cqe;
    int result = 0, waiting = 1;
    if (zerocopy)
        io_uring_prep_sendmsg_zc(sqe, fd, message, 0);
    else
        io_uring_prep_sendmsg(sqe, fd, message, 0);
    io_uring_submit_and_wait(&ring, 1);
    while (waiting || (zerocopy && notifications_pending > 64)) {
        if (io_uring_wait_cqe(&ring, &cqe) < 0)
            return -1;
        if (cqe->flags & IORING_CQE_F_NOTIF) {
            notifications_pending--;
        } else {
            waiting = 0;
            result = cqe->res;
            if (cqe->flags & IORING_CQE_F_MORE)
                notifications_pending++;
        }
        io_uring_cqe_seen(&ring, cqe);
        /* Reap whatever else is there without waiting. */
        while (!waiting && io_uring_peek_cqe(&ring, &cqe) == 0) {
            if (cqe->flags & IORING_CQE_F_NOTIF)
                notifications_pending--;
            io_uring_cqe_seen(&ring, cqe);
        }
    }
    if (result < 0)
        errno = -result;
    return result;
}

static atomic_int stop_receiver;
static atomic_long received;
static long sent_datagrams;

/* Waits (sleeping) until the receiver is at most `ahead` datagrams behind, or has made no progress
 * for 100 ms (it lost some: a full queue). */
static void pace(long ahead)
{
    long last = atomic_load(&received);
    int idle = 0;
    while (sent_datagrams - atomic_load(&received) > ahead && idle < 2000) {
        struct timespec pause = {0, 50 * 1000};
        nanosleep(&pause, NULL);
        if (atomic_load(&received) == last) {
            idle++;
        } else {
            last = atomic_load(&received);
            idle = 0;
        }
    }
}

static double thread_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void *receive_all(void *argument)
{
    int fd = *(int *)argument;
    static char buffers[64][2048];
    struct mmsghdr messages[64];
    struct iovec vectors[64];
    int i;
    for (i = 0; i < 64; i++) {
        vectors[i].iov_base = buffers[i];
        vectors[i].iov_len = sizeof(buffers[i]);
        memset(&messages[i], 0, sizeof(messages[i]));
        messages[i].msg_hdr.msg_iov = &vectors[i];
        messages[i].msg_hdr.msg_iovlen = 1;
    }
    /* recvmmsg's own timeout is only looked at after a datagram: the socket's wakes it when idle. */
    struct timeval idle = {0, 50 * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &idle, sizeof(idle));
    while (!atomic_load(&stop_receiver)) {
        int n = recvmmsg(fd, messages, 64, MSG_WAITFORONE, NULL);
        if (n > 0)
            atomic_fetch_add(&received, n);
    }
    return NULL;
}

/* Zero-copy completions: read (and discard) what the error queue holds. */
static void drain_completions(int fd)
{
    char control[128];
    struct msghdr message;
    for (;;) {
        memset(&message, 0, sizeof(message));
        message.msg_control = control;
        message.msg_controllen = sizeof(control);
        if (recvmsg(fd, &message, MSG_ERRQUEUE | MSG_DONTWAIT) < 0)
            return;
    }
}

/* Sends `total` bytes of payload in windows of `window`; returns the sender's CPU seconds. */
static double send_windows(int fd, enum mode mode, int window, const unsigned char *image, size_t image_size,
                           size_t total, long *failures)
{
    struct iovec vectors[2 * MAX_WINDOW];
    struct mmsghdr messages[MAX_WINDOW];
    unsigned char headers[4 * MAX_WINDOW];
    char control[CMSG_SPACE(sizeof(uint16_t))];
    size_t sent = 0, offset = 0;
    unsigned block = 1;
    double start = thread_seconds();
    while (sent < total) {
        int i;
        for (i = 0; i < window; i++, block++) {
            if (offset + BLOCK > image_size)
                offset = 0;
            headers[4 * i] = 0;
            headers[4 * i + 1] = 3;
            headers[4 * i + 2] = (unsigned char)(block >> 8);
            headers[4 * i + 3] = (unsigned char)block;
            vectors[2 * i].iov_base = headers + 4 * i;
            vectors[2 * i].iov_len = 4;
            vectors[2 * i + 1].iov_base = (void *)(image + offset);
            vectors[2 * i + 1].iov_len = BLOCK;
            offset += BLOCK;
        }
        if (mode == SENDMMSG || window == 1) {
            int done = 0;
            for (i = 0; i < window; i++) {
                memset(&messages[i], 0, sizeof(messages[i]));
                messages[i].msg_hdr.msg_iov = vectors + 2 * i;
                messages[i].msg_hdr.msg_iovlen = 2;
            }
            while (done < window) {
                int n = sendmmsg(fd, messages + done, window - done, 0);
                if (n < 0) {
                    *failures += window - done;
                    break;
                }
                done += n;
            }
            sent_datagrams += done;
        } else {
            struct msghdr message;
            struct cmsghdr *c;
            uint16_t size = DATAGRAM;
            memset(&message, 0, sizeof(message));
            message.msg_iov = vectors;
            message.msg_iovlen = 2 * window;
            message.msg_control = control;
            message.msg_controllen = sizeof(control);
            c = CMSG_FIRSTHDR(&message);
            c->cmsg_level = SOL_UDP;
            c->cmsg_type = UDP_SEGMENT;
            c->cmsg_len = CMSG_LEN(sizeof(size));
            memcpy(CMSG_DATA(c), &size, sizeof(size));
            for (;;) {
                int result = mode == URING_GSO || mode == URING_GSO_ZC
                                 ? ring_send(fd, &message, mode == URING_GSO_ZC)
                                 : (int)sendmsg(fd, &message, mode == GSO_ZC ? MSG_ZEROCOPY : 0);
                if (result >= 0) {
                    sent_datagrams += window;
                    break;
                }
                if (mode != GSO_ZC || errno != ENOBUFS) {
                    if (!*failures)
                        fprintf(stderr, "floor: %s send: %s\n", mode_names[mode], strerror(errno));
                    *failures += window;
                    break;
                }
                /* Too many notifications unread: read them, let the receiver catch up, send again. */
                drain_completions(fd);
                pace(0);
            }
            if (mode == GSO_ZC)
                drain_completions(fd);
        }
        pace(4096);
        sent += (size_t)window * BLOCK;
    }
    return thread_seconds() - start;
}

/* A window of one is one datagram whatever the mode: measured once, as sendmmsg. */
static int skipped(enum mode mode, int window, int zerocopy)
{
    int copies_nothing = mode == GSO_ZC || mode == URING_GSO_ZC;
    return (window == 1 && mode != SENDMMSG) || (copies_nothing && (!zerocopy || window > MAX_ZEROCOPY_WINDOW));
}

static int compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    int rounds = 5, megabytes = 256, zerocopy = 0, i, round, w, m, one = 1, buffer = 64 << 20;
    int sender, receiver;
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t length = sizeof(address);
    size_t image_size = 8 << 20;
    unsigned char *image = malloc(image_size);
    static double seconds[MODES][WINDOWS][64];
    long failures[MODES] = {0, 0, 0, 0, 0};
    pthread_t thread;
    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--megabytes") && i + 1 < argc)
            megabytes = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--zerocopy"))
            zerocopy = 1;
        else {
            fprintf(stderr, "usage: floor [--rounds N] [--megabytes N] [--zerocopy]\n");
            return 64;
        }
    }
    if (rounds < 1 || rounds > 64 || megabytes < 1 || !image)
        return 64;
    for (i = 0; i < (int)image_size; i++)
        image[i] = (unsigned char)(i * 31);

    receiver = socket(AF_INET, SOCK_DGRAM, 0);
    sender = socket(AF_INET, SOCK_DGRAM, 0);
    if (setsockopt(receiver, SOL_SOCKET, SO_RCVBUFFORCE, &buffer, sizeof(buffer)) < 0)
        setsockopt(receiver, SOL_SOCKET, SO_RCVBUF, &buffer, sizeof(buffer));
    if (bind(receiver, (struct sockaddr *)&address, sizeof(address)) < 0 ||
        getsockname(receiver, (struct sockaddr *)&address, &length) < 0 ||
        connect(sender, (struct sockaddr *)&address, sizeof(address)) < 0) {
        perror("floor: loopback sockets");
        return 1;
    }
    if (zerocopy && setsockopt(sender, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof(one)) < 0) {
        perror("floor: SO_ZEROCOPY");
        return 1;
    }
    if (io_uring_queue_init(64, &ring, 0) < 0) {
        perror("floor: io_uring");
        return 1;
    }
    pthread_create(&thread, NULL, receive_all, &receiver);

    for (round = 0; round < rounds; round++)
        for (w = 0; w < WINDOWS; w++)
            for (m = 0; m < MODES; m++) {
                /* Alternate the order of the modes from round to round. */
                enum mode mode = (enum mode)((m + round) % MODES);
                if (skipped(mode, windows[w], zerocopy))
                    continue;
                seconds[mode][w][round] = send_windows(sender, mode, windows[w], image, image_size,
                                                       (size_t)megabytes << 20, &failures[mode]);
            }
    pace(0); /* the receiver takes the last ones before it stops */
    atomic_store(&stop_receiver, 1);
    pthread_join(thread, NULL);

    printf("{\n  \"datagram_bytes\": %d, \"megabytes_per_measurement\": %d, \"rounds\": %d,\n"
           "  \"send_failures\": {\"sendmmsg\": %ld, \"gso\": %ld, \"gso-zc\": %ld, \"uring-gso\": %ld, "
           "\"uring-gso-zc\": %ld},\n"
           "  \"sent_datagrams\": %ld, \"received_datagrams\": %ld,\n  \"cpu_s_per_gb\": [\n",
           DATAGRAM, megabytes, rounds, failures[SENDMMSG], failures[GSO], failures[GSO_ZC], failures[URING_GSO],
           failures[URING_GSO_ZC], sent_datagrams,
           atomic_load(&received));
    for (w = 0; w < WINDOWS; w++)
        for (m = 0; m < MODES; m++) {
            double sorted[64], scale = 1e9 / ((double)megabytes * 1048576);
            if (skipped((enum mode)m, windows[w], zerocopy))
                continue;
            memcpy(sorted, seconds[m][w], sizeof(double) * rounds);
            qsort(sorted, rounds, sizeof(double), compare_doubles);
            printf("    {\"window\": %d, \"mode\": \"%s\", \"median\": %.3f, \"low\": %.3f, \"high\": %.3f}%s\n",
                   windows[w], mode_names[m], sorted[(rounds - 1) / 2] * scale, sorted[0] * scale,
                   sorted[rounds - 1] * scale, w == WINDOWS - 1 && m == URING_GSO ? "" : ",");
        }
    printf("  ]\n}\n");
    close(sender);
    close(receiver);
    free(image);
    return 0;
}
