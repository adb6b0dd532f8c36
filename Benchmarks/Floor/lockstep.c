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
 * With --transfer-kib K the pairs are not kept: the kernel's price for a storm of small TFTP
 * transfers, each on a socket of its own as RFC 1350's transfer identifiers ask. P clients, each
 * an unconnected socket, send a request to the server's listener; for each, the server opens a
 * socket (bound to a fresh port, connected to the client), sends a 15-byte OACK, and on its ACK 0
 * the K KiB in lockstep (the last block short, an empty one when K KiB is a multiple of the
 * block), and closes the socket on the last ACK; the client then asks again. The listener is
 * drained with recvfrom when it is readable (a multishot poll in the ring, epoll otherwise). The
 * figure is still the serving thread's CPU per GB of blocks sent.
 *
 * With --reuse as well, a transfer's socket is not closed when it ends but kept for a later
 * transfer: that one connects it to its own client (a UDP socket may be connected again), and its
 * receive stays armed (the ring) or registered (epoll). What opening, binding and closing a socket
 * per transfer costs is the difference between the two.
 *
 * Usage: floor-lockstep [--rounds N] [--megabytes N] [--pairs N] [--transfer-kib K [--reuse]]
 */
#define _GNU_SOURCE
#include <errno.h>
#include <liburing.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
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
    unsigned generation; /* transfers: which transfer the slot runs (stale completions are older) */
    int last_short;      /* transfers: the last block sent was the short one */
    int kept;            /* --reuse: the slot's socket while no transfer runs on it (else -1) */
    struct sockaddr_in client;
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

/* The pair's message of its first `vectors` iovecs (it stays valid until the ACK comes back). */
static struct msghdr *message_of(struct pair *p, int vectors)
{
    memset(&p->message, 0, sizeof(p->message));
    p->message.msg_iov = p->vectors;
    p->message.msg_iovlen = (size_t)vectors;
    return &p->message;
}

/* The pair's next DATA: its header and `length` bytes of the image from the pair's offset. */
static struct msghdr *data_of(struct pair *p, size_t length)
{
    p->block++;
    p->header[0] = 0;
    p->header[1] = 3;
    p->header[2] = (unsigned char)(p->block >> 8);
    p->header[3] = (unsigned char)p->block;
    p->vectors[0].iov_base = p->header;
    p->vectors[0].iov_len = 4;
    p->vectors[1].iov_base = (void *)(image + p->offset);
    p->vectors[1].iov_len = length;
    p->offset += length;
    return message_of(p, 2);
}

/* A kept pair's next DATA, a whole block (the image read round and round). */
static struct msghdr *next_data(struct pair *p)
{
    if (p->offset + BLOCK > image_size)
        p->offset = 0;
    p->remaining--;
    return data_of(p, BLOCK);
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

/* A submission entry, the queue submitted first if it is full. */
static struct io_uring_sqe *next_sqe(void)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
    if (!sqe) {
        io_uring_submit(&ring);
        sqe = io_uring_get_sqe(&ring);
    }
    return sqe;
}

/* A multishot receive on `fd` into the provided buffers; its completions say `tag`. */
static void arm_receive(int fd, uint64_t tag)
{
    struct io_uring_sqe *sqe = next_sqe();
    io_uring_prep_recv_multishot(sqe, fd, NULL, 0, 0);
    sqe->flags |= IOSQE_BUFFER_SELECT;
    sqe->buf_group = GROUP;
    io_uring_sqe_set_data64(sqe, tag);
}

/* A SENDMSG of `message` whose completion comes only when it fails, saying `tag`. */
static void queue_send(int fd, struct msghdr *message, uint64_t tag)
{
    struct io_uring_sqe *sqe = next_sqe();
    io_uring_prep_sendmsg(sqe, fd, message, MSG_DONTWAIT);
    sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
    io_uring_sqe_set_data64(sqe, tag);
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
        arm_receive(side->pairs[i].fd, (uint64_t)i << 1);
    armed = 1;
    start = thread_seconds();
    for (i = 0; i < side->count; i++)
        if (side->pairs[i].remaining) {
            queue_send(side->pairs[i].fd, next_data(&side->pairs[i]), (uint64_t)i << 1 | 1);
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
                    queue_send(p->fd, next_data(p), (uint64_t)index << 1 | 1);
                    waiting++;
                }
            }
            if (!(cqe->flags & IORING_CQE_F_MORE))
                arm_receive(p->fd, (uint64_t)index << 1);
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

/* ---- transfers: a socket of its own for each (--transfer-kib) ---- */

enum { KIND_RECEIVE, KIND_SEND, KIND_LISTENER, KIND_CANCEL };
static size_t transfer_bytes; /* 0: the pairs are kept */
static int reuse;             /* --reuse: a transfer's socket is kept for a later one */
static long opened[MODES];    /* transfer sockets opened, all rounds */
static const unsigned char option_ack[] = "\0\6blksize\0" "1468";
static const unsigned char read_request[] = "\0\1file.bin\0octet\0blksize\0" "1468";
static struct sockaddr_in listener_address[MODES];
static int listeners[MODES];

/* A mode's transfers: twice as many slots as clients (a client's next request may come before
 * its last ACK), those free on a stack, and the transfers the measurement still has to start. */
struct transfers {
    struct pair *slots;
    int *free, free_count, active;
    long budget;
};
static struct transfers transfer_sides[MODES];

static void ask(int fd, int mode)
{
    sendto(fd, read_request, sizeof(read_request), MSG_DONTWAIT, (struct sockaddr *)&listener_address[mode],
           sizeof(listener_address[mode]));
}

/* The clients of transfers: an ACK for every OACK and DATA, to the port it came from, and the
 * next request once a transfer's short block came. */
static void *play_transfer_clients(void *argument)
{
    int epoll = *(int *)argument;
    struct epoll_event events[512];
    char buffer[2048];
    while (!atomic_load(&stop_clients)) {
        int n = epoll_wait(epoll, events, 512, 50), i;
        for (i = 0; i < n; i++) {
            int fd = (int)(events[i].data.u64 & 0xffffffff), mode = (int)(events[i].data.u64 >> 32);
            struct sockaddr_in from;
            socklen_t length = sizeof(from);
            ssize_t got;
            while ((got = recvfrom(fd, buffer, sizeof(buffer), MSG_DONTWAIT, (struct sockaddr *)&from, &length)) >= 4) {
                int data = buffer[1] == 3;
                unsigned char ack[ACK] = {0, 4, data ? (unsigned char)buffer[2] : 0, data ? (unsigned char)buffer[3] : 0};
                sendto(fd, ack, sizeof(ack), MSG_DONTWAIT, (struct sockaddr *)&from, length);
                if (data && got < DATAGRAM)
                    ask(fd, mode);
                length = sizeof(from);
            }
        }
    }
    return NULL;
}

/* The transfer's next block: BLOCK bytes, or what is left (an empty block after a whole one). */
static struct msghdr *next_block(struct pair *p)
{
    size_t left = transfer_bytes - p->offset, length = left < BLOCK ? left : BLOCK;
    p->last_short = length < BLOCK;
    return data_of(p, length);
}

static struct msghdr *oack(struct pair *p)
{
    p->vectors[0].iov_base = (void *)option_ack;
    p->vectors[0].iov_len = sizeof(option_ack);
    return message_of(p, 1);
}

static uint64_t transfer_tag(int index, const struct pair *p, int kind)
{
    return (uint64_t)p->generation << 32 | (uint64_t)index << 2 | (uint64_t)kind;
}

static void send_in_ring(int index, struct pair *p, struct msghdr *message)
{
    queue_send(p->fd, message, transfer_tag(index, p, KIND_SEND));
}

/* The slot's open socket: its transfer's, or the one kept for its next transfer (-1: none). */
static int open_socket(const struct pair *p)
{
    return p->fd >= 0 ? p->fd : p->kept;
}

static void arm_transfer_receive(int index, struct pair *p)
{
    arm_receive(open_socket(p), transfer_tag(index, p, KIND_RECEIVE));
}

static void arm_listener(void)
{
    struct io_uring_sqe *sqe = next_sqe();
    io_uring_prep_poll_multishot(sqe, listeners[URING], POLLIN);
    io_uring_sqe_set_data64(sqe, KIND_LISTENER);
}

/* The requests waiting on the mode's listener, while the measurement wants transfers and a slot
 * is free: a socket each (a fresh port, connected to the client), and its OACK. */
static void take_requests(enum mode mode)
{
    struct transfers *t = &transfer_sides[mode];
    while (t->budget > 0 && t->free_count > 0) {
        struct sockaddr_in local = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)}, client;
        socklen_t length = sizeof(client);
        char request[512];
        int index = t->free[t->free_count - 1], fd, kept;
        struct pair *p = &t->slots[index];
        if (recvfrom(listeners[mode], request, sizeof(request), MSG_DONTWAIT, (struct sockaddr *)&client, &length) < 0)
            return;
        kept = p->kept >= 0;
        fd = kept ? p->kept : socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0 || (!kept && bind(fd, (struct sockaddr *)&local, sizeof(local)) < 0) ||
            connect(fd, (struct sockaddr *)&client, sizeof(client)) < 0) {
            if (kept && mode == URING) { /* its receive, armed on the slot's tag, goes first */
                struct io_uring_sqe *sqe = next_sqe();
                io_uring_prep_cancel64(sqe, transfer_tag(index, p, KIND_RECEIVE), 0);
                sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
                io_uring_sqe_set_data64(sqe, KIND_CANCEL);
            }
            if (fd >= 0)
                close(fd);
            p->kept = -1;
            p->generation++;
            failures[mode]++;
            continue;
        }
        t->free_count--;
        opened[mode] += !kept;
        p->fd = fd;
        p->kept = -1;
        if (!kept) /* a kept socket's receive keeps its tag, and so its generation */
            p->generation++;
        p->offset = 0;
        p->block = 0;
        p->last_short = 0;
        p->client = client;
        t->active++;
        t->budget--;
        if (mode == URING) {
            if (!kept) /* a kept socket's receive stays armed (serve_transfers_uring) */
                arm_transfer_receive(index, p);
            send_in_ring(index, p, oack(p));
        } else {
            struct epoll_event event = {.events = EPOLLIN, .data.u64 = transfer_tag(index, p, KIND_RECEIVE)};
            if ((!kept && epoll_ctl(server_epoll, EPOLL_CTL_ADD, fd, &event) < 0) || sendmsg(fd, oack(p), MSG_DONTWAIT) < 0)
                failures[mode]++;
        }
    }
}

/* The last ACK came: the socket closed (in the ring, its receive cancelled first), or with --reuse
 * kept for the slot's next transfer; the slot free. */
static void end_transfer(enum mode mode, int index)
{
    struct transfers *t = &transfer_sides[mode];
    struct pair *p = &t->slots[index];
    if (reuse) {
        p->kept = p->fd;
        p->fd = -1;
        t->free[t->free_count++] = index;
        t->active--;
        return;
    }
    if (mode == URING) {
        struct io_uring_sqe *sqe = next_sqe();
        io_uring_prep_cancel64(sqe, transfer_tag(index, p, KIND_RECEIVE), 0);
        sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
        io_uring_sqe_set_data64(sqe, KIND_CANCEL);
    }
    close(p->fd);
    p->fd = -1;
    t->free[t->free_count++] = index;
    t->active--;
}

static double serve_transfers_uring(long transfers)
{
    static int armed;
    struct transfers *t = &transfer_sides[URING];
    double start;
    t->budget = transfers;
    if (!armed)
        arm_listener();
    armed = 1;
    start = thread_seconds();
    take_requests(URING);
    while (t->budget > 0 || t->active > 0) {
        struct io_uring_cqe *cqe;
        struct __kernel_timespec timeout = {1, 0};
        unsigned head, seen = 0, returned = 0;
        if (io_uring_submit_and_wait_timeout(&ring, &cqe, 1, &timeout, NULL) == -ETIME) {
            fprintf(stderr, "floor-lockstep: uring: %d transfers stalled, %ld never started\n", t->active, t->budget);
            failures[URING] += t->active + t->budget;
            break;
        }
        io_uring_for_each_cqe(&ring, head, cqe)
        {
            uint64_t tag = cqe->user_data;
            int index = (int)(tag >> 2 & 0x3fffffff), kind = (int)(tag & 3);
            struct pair *p = &t->slots[index];
            seen++;
            if (kind == KIND_LISTENER) {
                if (!(cqe->flags & IORING_CQE_F_MORE))
                    arm_listener();
                take_requests(URING);
                continue;
            }
            if (kind == KIND_CANCEL)
                continue;
            if (cqe->flags & IORING_CQE_F_BUFFER)
                give_back(cqe->flags >> IORING_CQE_BUFFER_SHIFT, (int)returned++);
            if ((unsigned)(tag >> 32) != p->generation || open_socket(p) < 0)
                continue; /* an ended transfer's */
            /* A receive that stopped is armed again while its socket stays open, kept ones too (a
             * transfer that ends on this completion cancels it with the socket it closes). */
            if (kind == KIND_RECEIVE && !(cqe->flags & IORING_CQE_F_MORE))
                arm_transfer_receive(index, p);
            if (p->fd < 0)
                continue; /* a kept socket's, between transfers */
            if (kind == KIND_SEND) { /* a failed send: its ACK will not come */
                failures[URING]++;
                end_transfer(URING, index);
                continue;
            }
            if (cqe->res > 0) {
                if (p->last_short) {
                    end_transfer(URING, index);
                    take_requests(URING);
                    continue;
                }
                send_in_ring(index, p, next_block(p));
            }
        }
        io_uring_buf_ring_advance(buffer_ring, (int)returned);
        io_uring_cq_advance(&ring, seen);
    }
    return thread_seconds() - start;
}

static double serve_transfers_epoll(long transfers)
{
    struct transfers *t = &transfer_sides[EPOLL];
    struct epoll_event events[512];
    char buffer[64];
    double start;
    t->budget = transfers;
    start = thread_seconds();
    take_requests(EPOLL);
    while (t->budget > 0 || t->active > 0) {
        int n = epoll_wait(server_epoll, events, 512, 1000), i;
        if (n == 0) {
            fprintf(stderr, "floor-lockstep: epoll: %d transfers stalled, %ld never started\n", t->active, t->budget);
            failures[EPOLL] += t->active + t->budget;
            break;
        }
        for (i = 0; i < n; i++) {
            uint64_t tag = events[i].data.u64;
            int index = (int)(tag >> 2 & 0x3fffffff);
            struct pair *p = &t->slots[index];
            if (tag == KIND_LISTENER) {
                take_requests(EPOLL);
                continue;
            }
            if (p->fd < 0 || (unsigned)(tag >> 32) != p->generation || recv(p->fd, buffer, sizeof(buffer), MSG_DONTWAIT) <= 0)
                continue;
            if (p->last_short) {
                end_transfer(EPOLL, index);
                take_requests(EPOLL);
            } else if (sendmsg(p->fd, next_block(p), MSG_DONTWAIT) < 0) {
                failures[EPOLL]++;
                end_transfer(EPOLL, index);
            }
        }
    }
    return thread_seconds() - start;
}

/* A mode's listener (its queue large enough for every client's request), its slots and its
 * clients, each of which asks once now. */
static int make_transfers(enum mode mode, int clients, int client_epoll)
{
    struct transfers *t = &transfer_sides[mode];
    struct sockaddr_in local = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t length = sizeof(local);
    int queue = 8 << 20, i;
    listeners[mode] = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (listeners[mode] < 0)
        return -1;
    if (setsockopt(listeners[mode], SOL_SOCKET, SO_RCVBUFFORCE, &queue, sizeof(queue)) < 0)
        setsockopt(listeners[mode], SOL_SOCKET, SO_RCVBUF, &queue, sizeof(queue));
    if (bind(listeners[mode], (struct sockaddr *)&local, sizeof(local)) < 0 ||
        getsockname(listeners[mode], (struct sockaddr *)&listener_address[mode], &length) < 0)
        return -1;
    if (mode == EPOLL) {
        struct epoll_event event = {.events = EPOLLIN, .data.u64 = KIND_LISTENER};
        if (epoll_ctl(server_epoll, EPOLL_CTL_ADD, listeners[mode], &event) < 0)
            return -1;
    }
    t->slots = calloc((size_t)clients * 2, sizeof(struct pair));
    t->free = calloc((size_t)clients * 2, sizeof(int));
    if (!t->slots || !t->free)
        return -1;
    for (i = 0; i < clients * 2; i++) {
        t->slots[i].fd = -1;
        t->slots[i].kept = -1;
        t->free[t->free_count++] = clients * 2 - 1 - i;
    }
    for (i = 0; i < clients; i++) {
        struct sockaddr_in address = local;
        struct epoll_event event = {.events = EPOLLIN};
        int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        address.sin_port = 0;
        if (fd < 0 || bind(fd, (struct sockaddr *)&address, sizeof(address)) < 0)
            return -1;
        event.data.u64 = (uint64_t)mode << 32 | (uint32_t)fd;
        if (epoll_ctl(client_epoll, EPOLL_CTL_ADD, fd, &event) < 0)
            return -1;
        ask(fd, mode);
    }
    return 0;
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
    int rounds = 5, megabytes = 64, pairs = 1000, transfer_kib = 0, i, round, m, client_epoll;
    static double seconds[MODES][MAX_ROUNDS];
    struct side sides[MODES];
    struct rlimit limit;
    unsigned char *memory;
    pthread_t clients;
    long blocks, transfers = 0;
    double bytes;
    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--megabytes") && i + 1 < argc)
            megabytes = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--pairs") && i + 1 < argc)
            pairs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--transfer-kib") && i + 1 < argc)
            transfer_kib = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reuse"))
            reuse = 1;
        else {
            fprintf(stderr, "usage: floor-lockstep [--rounds N] [--megabytes N] [--pairs N] [--transfer-kib K [--reuse]]\n");
            return 64;
        }
    }
    if (rounds < 1 || rounds > MAX_ROUNDS || megabytes < 1 || pairs < 1 || pairs > 30000 || transfer_kib < 0 ||
        transfer_kib > 4096 || (reuse && !transfer_kib)) {
        fprintf(stderr, "floor-lockstep: rounds 1-%d, megabytes 1 or more, pairs 1-30000, transfer-kib 0-4096, --reuse "
                        "with --transfer-kib\n", MAX_ROUNDS);
        return 64;
    }
    transfer_bytes = (size_t)transfer_kib << 10;
    /* Four sockets a pair (both modes), or a client and two transfers' each; and a few more. */
    if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < (rlim_t)pairs * 6 + 64) {
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
    bytes = (double)blocks * BLOCK;
    if (transfer_bytes) {
        transfers = ((long)megabytes << 20) / (long)transfer_bytes;
        bytes = (double)transfers * (double)transfer_bytes;
    }

    client_epoll = epoll_create1(0);
    server_epoll = epoll_create1(0);
    if (client_epoll < 0 || server_epoll < 0 ||
        (transfer_bytes ? make_transfers(URING, pairs, client_epoll) < 0 || make_transfers(EPOLL, pairs, client_epoll) < 0
                        : make_side(&sides[URING], pairs, client_epoll, -1) < 0 ||
                              make_side(&sides[EPOLL], pairs, client_epoll, server_epoll) < 0)) {
        perror("floor-lockstep: loopback sockets (is the descriptor limit high enough?)");
        return 1;
    }
    if (ring_setup(transfer_bytes ? pairs * 2 : pairs) < 0) {
        perror("floor-lockstep: io_uring");
        return 1;
    }
    pthread_create(&clients, NULL, transfer_bytes ? play_transfer_clients : play_clients, &client_epoll);

    for (round = 0; round < rounds; round++)
        for (m = 0; m < MODES; m++) {
            /* Alternate the order of the modes from round to round. */
            enum mode mode = (enum mode)((m + round) % MODES);
            if (transfer_bytes)
                seconds[mode][round] = mode == URING ? serve_transfers_uring(transfers) : serve_transfers_epoll(transfers);
            else
                seconds[mode][round] = mode == URING ? serve_uring(&sides[URING], blocks) : serve_epoll(&sides[EPOLL], blocks);
        }
    atomic_store(&stop_clients, 1);
    pthread_join(clients, NULL);

    printf("{\n  \"datagram_bytes\": %d, \"pairs\": %d, \"megabytes_per_measurement\": %d, \"rounds\": %d,\n"
           "  \"blocks_per_measurement\": %ld, \"transfer_kib\": %d, \"reuse\": %s, \"transfers_per_measurement\": %ld,\n"
           "  \"failures\": {\"uring\": %ld, \"epoll\": %ld}, \"sockets_opened\": {\"uring\": %ld, \"epoll\": %ld},\n"
           "  \"cpu_s_per_gb\": [\n",
           DATAGRAM, pairs, megabytes, rounds, blocks, transfer_kib, reuse ? "true" : "false", transfers, failures[URING],
           failures[EPOLL], opened[URING], opened[EPOLL]);
    for (m = 0; m < MODES; m++) {
        double sorted[MAX_ROUNDS], scale = 1e9 / bytes;
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
