/*
 * The kernel's price for lockstep TFTP: what a server pays per block when every block waits for
 * its ACK, with no TFTP at all.
 *
 * P pairs of connected UDP sockets on loopback (1,000 by default, as rack-boot's clients). The
 * measuring thread plays the server: on each pair it sends a DATA of 4 + 1,468 bytes (two
 * iovecs, a header and a slice of an image, as Stampede sends them), and the pair's next one when
 * its 4-byte ACK comes back, until the pairs have sent the measurement's megabytes between them.
 * A peer thread plays the clients: epoll, recv, and an ACK sent back for every DATA. The server
 * side is played two ways, each on its own pairs:
 *   uring  one io_uring: a multishot RECV per socket into provided buffers, a SENDMSG per block
 *          (its completion skipped when it succeeds), one submit-and-wait per batch of
 *          completions: what Stampede's engine does, without TFTP;
 *   epoll  epoll_wait, then recv and sendmsg per block: what a poll loop like dnsmasq's does.
 * The figure is the serving thread's CPU per GB sent (CLOCK_THREAD_CPUTIME_ID). On loopback that
 * includes the delivery of its DATA into the clients' sockets, and the ACKs' receives (the
 * io_uring task work runs in the thread that owns the ring), as a server measured on loopback
 * pays them; the ACKs' delivery into its sockets is the client thread's, as it is the storm's.
 * The modes alternate within each round; the median round and the spread, as JSON on stdout.
 *
 * Usage: floor-lockstep [--rounds N] [--megabytes N] [--pairs N]
 */
#define _GNU_SOURCE
#include <errno.h>
#include <liburing.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { BLOCK = 1468, DATAGRAM = 4 + BLOCK, ACK = 4, MAX_ROUNDS = 64 };
enum mode { URING, EPOLL, MODES };
static const char *mode_names[] = {"uring", "epoll"};

/* One transfer's server side: its socket and the DATA in flight (one at a time: lockstep). */
struct pair {
    int fd;
    unsigned block, remaining;
    size_t offset;
    unsigned char header[4];
    struct iovec vectors[2];
    struct msghdr message;
};

struct side {
    struct pair *pairs;
    int count;
};

static const unsigned char *image;
static size_t image_size;
static atomic_int stop_clients;
static long failures[MODES];

static double thread_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

/* The pair's next DATA, laid out in its own message (it stays valid until the ACK comes back). */
static struct msghdr *next_data(struct pair *p)
{
    if (p->offset + BLOCK > image_size)
        p->offset = 0;
    p->block++;
    p->header[0] = 0;
    p->header[1] = 3;
    p->header[2] = (unsigned char)(p->block >> 8);
    p->header[3] = (unsigned char)p->block;
    p->vectors[0].iov_base = p->header;
    p->vectors[0].iov_len = 4;
    p->vectors[1].iov_base = (void *)(image + p->offset);
    p->vectors[1].iov_len = BLOCK;
    p->offset += BLOCK;
    p->remaining--;
    memset(&p->message, 0, sizeof(p->message));
    p->message.msg_iov = p->vectors;
    p->message.msg_iovlen = 2;
    return &p->message;
}

/* Shares `blocks` among the pairs. */
static void share(struct side *side, long blocks)
{
    int i;
    for (i = 0; i < side->count; i++)
        side->pairs[i].remaining = (unsigned)(blocks / side->count + (i < blocks % side->count));
}

/* ---- the clients: an ACK for every DATA ---- */

static void *play_clients(void *argument)
{
    int epoll = *(int *)argument;
    struct epoll_event events[512];
    char buffer[2048];
    while (!atomic_load(&stop_clients)) {
        int n = epoll_wait(epoll, events, 512, 50), i;
        for (i = 0; i < n; i++) {
            int fd = events[i].data.fd;
            ssize_t length = recv(fd, buffer, sizeof(buffer), MSG_DONTWAIT);
            if (length >= 4) {
                unsigned char ack[ACK] = {0, 4, (unsigned char)buffer[2], (unsigned char)buffer[3]};
                send(fd, ack, sizeof(ack), MSG_DONTWAIT);
            }
        }
    }
    return NULL;
}

/* ---- the server on io_uring ---- */

enum { GROUP = 0, BUFFERS = 4096, BUFFER_SIZE = 64 };
static struct io_uring ring;
static struct io_uring_buf_ring *buffer_ring;
static unsigned char *buffer_memory;

static void give_back(unsigned id, int offset)
{
    io_uring_buf_ring_add(buffer_ring, buffer_memory + (size_t)id * BUFFER_SIZE, BUFFER_SIZE, (unsigned short)id,
                          io_uring_buf_ring_mask(BUFFERS), offset);
}

static int ring_setup(int pairs)
{
    struct io_uring_params params;
    struct io_uring_buf_reg registration;
    unsigned i;
    memset(&params, 0, sizeof(params));
    params.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_COOP_TASKRUN | IORING_SETUP_CQSIZE;
    params.cq_entries = (unsigned)pairs * 8;
    if (io_uring_queue_init_params((unsigned)pairs * 2, &ring, &params) < 0) {
        params.flags = IORING_SETUP_CQSIZE;
        if (io_uring_queue_init_params((unsigned)pairs * 2, &ring, &params) < 0)
            return -1;
    }
    buffer_ring = mmap(NULL, BUFFERS * sizeof(struct io_uring_buf), PROT_READ | PROT_WRITE,
                       MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
    buffer_memory = malloc((size_t)BUFFERS * BUFFER_SIZE);
    if (buffer_ring == MAP_FAILED || !buffer_memory)
        return -1;
    memset(&registration, 0, sizeof(registration));
    registration.ring_addr = (unsigned long)buffer_ring;
    registration.ring_entries = BUFFERS;
    registration.bgid = GROUP;
    if (io_uring_register_buf_ring(&ring, &registration, 0) < 0)
        return -1;
    io_uring_buf_ring_init(buffer_ring);
    for (i = 0; i < BUFFERS; i++)
        give_back(i, (int)i);
    io_uring_buf_ring_advance(buffer_ring, BUFFERS);
    return 0;
}

static void arm_receive(int index, int fd)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
    io_uring_prep_recv_multishot(sqe, fd, NULL, 0, 0);
    sqe->flags |= IOSQE_BUFFER_SELECT;
    sqe->buf_group = GROUP;
    io_uring_sqe_set_data64(sqe, (uint64_t)index << 1);
}

static void queue_send(int index, struct pair *p)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
    io_uring_prep_sendmsg(sqe, p->fd, next_data(p), MSG_DONTWAIT);
    sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
    io_uring_sqe_set_data64(sqe, (uint64_t)index << 1 | 1);
}

/* The receives stay armed from one measurement to the next (the pairs are this mode's alone). */
static double serve_uring(struct side *side, long blocks)
{
    static int armed;
    long waiting = 0;
    int i;
    double start;
    share(side, blocks);
    for (i = 0; i < side->count && !armed; i++)
        arm_receive(i, side->pairs[i].fd);
    armed = 1;
    start = thread_seconds();
    for (i = 0; i < side->count; i++)
        if (side->pairs[i].remaining) {
            queue_send(i, &side->pairs[i]);
            waiting++;
        }
    while (waiting > 0) {
        struct io_uring_cqe *cqe;
        struct __kernel_timespec timeout = {1, 0};
        unsigned head, seen = 0, returned = 0;
        if (io_uring_submit_and_wait_timeout(&ring, &cqe, 1, &timeout, NULL) == -ETIME) {
            fprintf(stderr, "floor-lockstep: uring: %ld ACKs never came\n", waiting);
            failures[URING] += waiting;
            break;
        }
        io_uring_for_each_cqe(&ring, head, cqe)
        {
            int index = (int)(cqe->user_data >> 1);
            struct pair *p = &side->pairs[index];
            seen++;
            if (cqe->user_data & 1) { /* a failed send: its ACK will not come */
                failures[URING]++;
                waiting--;
                continue;
            }
            if (cqe->res > 0 && (cqe->flags & IORING_CQE_F_BUFFER)) {
                give_back(cqe->flags >> IORING_CQE_BUFFER_SHIFT, (int)returned++);
                waiting--;
                if (p->remaining) {
                    queue_send(index, p);
                    waiting++;
                }
            }
            if (!(cqe->flags & IORING_CQE_F_MORE))
                arm_receive(index, p->fd);
        }
        io_uring_buf_ring_advance(buffer_ring, (int)returned);
        io_uring_cq_advance(&ring, seen);
    }
    return thread_seconds() - start;
}

/* ---- the server on epoll ---- */

static int server_epoll;

static double serve_epoll(struct side *side, long blocks)
{
    struct epoll_event events[512];
    char buffer[64];
    long waiting = 0;
    int i;
    double start;
    share(side, blocks);
    start = thread_seconds();
    for (i = 0; i < side->count; i++)
        if (side->pairs[i].remaining) {
            if (sendmsg(side->pairs[i].fd, next_data(&side->pairs[i]), MSG_DONTWAIT) < 0)
                failures[EPOLL]++;
            else
                waiting++;
        }
    while (waiting > 0) {
        int n = epoll_wait(server_epoll, events, 512, 1000);
        if (n == 0) {
            fprintf(stderr, "floor-lockstep: epoll: %ld ACKs never came\n", waiting);
            failures[EPOLL] += waiting;
            break;
        }
        for (i = 0; i < n; i++) {
            struct pair *p = &side->pairs[events[i].data.u32];
            if (recv(p->fd, buffer, sizeof(buffer), MSG_DONTWAIT) <= 0)
                continue;
            waiting--;
            if (!p->remaining)
                continue;
            if (sendmsg(p->fd, next_data(p), MSG_DONTWAIT) < 0)
                failures[EPOLL]++;
            else
                waiting++;
        }
    }
    return thread_seconds() - start;
}

/* ---- setup ---- */

/* Two sockets on loopback, each bound and connected to the other. */
static int connected_pair(int *server, int *client)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)}, b = a;
    socklen_t length = sizeof(a);
    *server = socket(AF_INET, SOCK_DGRAM, 0);
    *client = socket(AF_INET, SOCK_DGRAM, 0);
    if (*server < 0 || *client < 0 || bind(*server, (struct sockaddr *)&a, sizeof(a)) < 0 ||
        bind(*client, (struct sockaddr *)&b, sizeof(b)) < 0 ||
        getsockname(*server, (struct sockaddr *)&a, &length) < 0 ||
        getsockname(*client, (struct sockaddr *)&b, &length) < 0 ||
        connect(*server, (struct sockaddr *)&b, sizeof(b)) < 0 || connect(*client, (struct sockaddr *)&a, sizeof(a)) < 0)
        return -1;
    return 0;
}

static int make_side(struct side *side, int count, int client_epoll, int own_epoll)
{
    int i;
    side->count = count;
    side->pairs = calloc((size_t)count, sizeof(struct pair));
    if (!side->pairs)
        return -1;
    for (i = 0; i < count; i++) {
        int client;
        struct epoll_event event = {.events = EPOLLIN};
        if (connected_pair(&side->pairs[i].fd, &client) < 0)
            return -1;
        side->pairs[i].offset = (size_t)i * BLOCK * 7 % (image_size - BLOCK);
        event.data.fd = client;
        if (epoll_ctl(client_epoll, EPOLL_CTL_ADD, client, &event) < 0)
            return -1;
        if (own_epoll >= 0) {
            event.data.u32 = (uint32_t)i;
            if (epoll_ctl(own_epoll, EPOLL_CTL_ADD, side->pairs[i].fd, &event) < 0)
                return -1;
        }
    }
    return 0;
}

static int compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    int rounds = 5, megabytes = 64, pairs = 1000, i, round, m, client_epoll;
    static double seconds[MODES][MAX_ROUNDS];
    struct side sides[MODES];
    struct rlimit limit;
    unsigned char *memory;
    pthread_t clients;
    long blocks;
    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--megabytes") && i + 1 < argc)
            megabytes = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--pairs") && i + 1 < argc)
            pairs = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: floor-lockstep [--rounds N] [--megabytes N] [--pairs N]\n");
            return 64;
        }
    }
    if (rounds < 1 || rounds > MAX_ROUNDS || megabytes < 1 || pairs < 1 || pairs > 30000) {
        fprintf(stderr, "floor-lockstep: rounds 1-%d, megabytes 1 or more, pairs 1-30000\n", MAX_ROUNDS);
        return 64;
    }
    /* Four sockets a pair (both modes), and a few more. */
    if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < (rlim_t)pairs * 4 + 64) {
        limit.rlim_cur = limit.rlim_max;
        setrlimit(RLIMIT_NOFILE, &limit);
    }
    image_size = 8 << 20;
    memory = malloc(image_size);
    if (!memory)
        return 1;
    for (i = 0; i < (int)image_size; i++)
        memory[i] = (unsigned char)(i * 31);
    image = memory;
    blocks = ((long)megabytes << 20) / BLOCK;

    client_epoll = epoll_create1(0);
    server_epoll = epoll_create1(0);
    if (client_epoll < 0 || server_epoll < 0 || make_side(&sides[URING], pairs, client_epoll, -1) < 0 ||
        make_side(&sides[EPOLL], pairs, client_epoll, server_epoll) < 0) {
        perror("floor-lockstep: loopback sockets (is the descriptor limit high enough?)");
        return 1;
    }
    if (ring_setup(pairs) < 0) {
        perror("floor-lockstep: io_uring");
        return 1;
    }
    pthread_create(&clients, NULL, play_clients, &client_epoll);

    for (round = 0; round < rounds; round++)
        for (m = 0; m < MODES; m++) {
            /* Alternate the order of the modes from round to round. */
            enum mode mode = (enum mode)((m + round) % MODES);
            seconds[mode][round] = mode == URING ? serve_uring(&sides[URING], blocks) : serve_epoll(&sides[EPOLL], blocks);
        }
    atomic_store(&stop_clients, 1);
    pthread_join(clients, NULL);

    printf("{\n  \"datagram_bytes\": %d, \"pairs\": %d, \"megabytes_per_measurement\": %d, \"rounds\": %d,\n"
           "  \"blocks_per_measurement\": %ld, \"failures\": {\"uring\": %ld, \"epoll\": %ld},\n  \"cpu_s_per_gb\": [\n",
           DATAGRAM, pairs, megabytes, rounds, blocks, failures[URING], failures[EPOLL]);
    for (m = 0; m < MODES; m++) {
        double sorted[MAX_ROUNDS], scale = 1e9 / ((double)blocks * BLOCK);
        memcpy(sorted, seconds[m], sizeof(double) * rounds);
        qsort(sorted, rounds, sizeof(double), compare_doubles);
        printf("    {\"mode\": \"%s\", \"median\": %.3f, \"low\": %.3f, \"high\": %.3f}%s\n", mode_names[m],
               sorted[(rounds - 1) / 2] * scale, sorted[0] * scale, sorted[rounds - 1] * scale,
               m == MODES - 1 ? "" : ",");
    }
    printf("  ]\n}\n");
    free(memory);
    return 0;
}
