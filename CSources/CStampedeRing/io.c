/*
 * Sockets, sends and the wait loop of the io_uring engine (see ring.c for the design, and
 * ring_private.h for the life of a socket slot).
 */
#include "ring_private.h"

#include <CStampedeSys.h>

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* The first thread to submit becomes the ring's single issuer (it was created R_DISABLED). */
static int enable(stampede_ring *r)
{
    if (r->enabled)
        return 0;
    /* liburing 2.3 declares io_uring_enable_rings but does not export it: kernel ABI. */
    r->stats.system_calls++;
    if (syscall(__NR_io_uring_register, r->ring.ring_fd, IORING_REGISTER_ENABLE_RINGS, NULL, 0) < 0)
        return -errno;
    r->enabled = 1;
    return 0;
}

/* io_uring_submit, counted as a system call when liburing makes one (with nothing queued, it
 * does not). */
static int submit(stampede_ring *r)
{
    int result = io_uring_submit(&r->ring);
    if (result != 0)
        r->stats.system_calls++;
    return result;
}

/* A free submission entry, submitting the full queue first if need be; NULL if even that fails. */
static struct io_uring_sqe *next_sqe(stampede_ring *r)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring);
    if (!sqe && enable(r) == 0) {
        submit(r);
        sqe = io_uring_get_sqe(&r->ring);
    }
    return sqe;
}

/* A broken invariant of the engine's own bookkeeping. Carrying on would corrupt memory or hand one
 * client's datagrams to another transfer: stop here, saying which. */
static void invariant_failed(const char *what)
{
    fprintf(stderr, "CStampedeRing: invariant broken: %s\n", what);
    abort();
}

/* Appends a slot to one of the per-slot lists, each as long as the socket table. */
static void push(uint32_t *list, uint32_t *count, uint32_t capacity, uint32_t slot, const char *what)
{
    if (*count >= capacity)
        invariant_failed(what);
    list[(*count)++] = slot;
}

static int grow_sockets(stampede_ring *r)
{
    uint32_t old = r->socket_capacity, capacity = old * 2, i;
    struct socket_slot *sockets = realloc(r->sockets, capacity * sizeof(*sockets));
    uint32_t *free_sockets, *to_arm, *to_close;
    if (!sockets)
        return -ENOMEM;
    r->sockets = sockets;
    free_sockets = realloc(r->free_sockets, capacity * sizeof(uint32_t));
    if (!free_sockets)
        return -ENOMEM;
    r->free_sockets = free_sockets;
    to_arm = realloc(r->to_arm, capacity * sizeof(uint32_t));
    if (!to_arm)
        return -ENOMEM;
    r->to_arm = to_arm;
    to_close = realloc(r->to_close, capacity * sizeof(uint32_t));
    if (!to_close)
        return -ENOMEM;
    r->to_close = to_close;
    memset(sockets + old, 0, (capacity - old) * sizeof(*sockets));
    r->socket_capacity = capacity;
    for (i = capacity; i > old; i--) {
        sockets[i - 1].fd = -1;
        sockets[i - 1].state = SLOT_FREE;
        push(r->free_sockets, &r->free_count, capacity, i - 1, "free socket list overflow");
    }
    return 0;
}

/* Points an SQE at a socket: its registered-file index when it has one, else its fd. */
static void target(struct io_uring_sqe *sqe, const struct socket_slot *s, uint32_t slot)
{
    if (s->fixed) {
        sqe->fd = (int32_t)slot;
        sqe->flags |= IOSQE_FIXED_FILE;
    }
}

static unsigned group_of(const struct socket_slot *s)
{
    return s->group;
}

static int arm_receive(stampede_ring *r, uint32_t slot)
{
    struct socket_slot *s = &r->sockets[slot];
    struct io_uring_sqe *sqe = next_sqe(r);
    if (!sqe)
        return -EBUSY;
    io_uring_prep_recvmsg_multishot(sqe, s->fd, s->listener ? &r->listener_template : &r->transfer_template, 0);
    target(sqe, s, slot);
    sqe->flags |= IOSQE_BUFFER_SELECT;
    sqe->buf_group = group_of(s);
    io_uring_sqe_set_data64(sqe, pack(OP_RECV, group_of(s), slot, s->generation));
    s->state = SLOT_ARMED;
    return 0;
}

/* A slot whose receive ended, to be armed again at the next wait. */
static void rearm_later(stampede_ring *r, uint32_t slot)
{
    r->sockets[slot].state = SLOT_IDLE;
    push(r->to_arm, &r->to_arm_count, r->socket_capacity, slot, "re-arm list overflow");
}

/* Closes a slot's fd once its last submission is in the kernel. The registered-file table holds
 * a reference of its own: without the update the socket would outlive its close. */
static void close_fd(stampede_ring *r, struct socket_slot *s, uint32_t slot)
{
    int none = -1;
    if (s->fixed) {
        io_uring_register_files_update(&r->ring, slot, &none, 1);
        r->stats.system_calls++;
    }
    s->fixed = 0;
    close(s->fd);
    s->fd = -1;
}

/* The one way back to FREE: the fd is closed and the kernel holds no receive of the slot, so its
 * late completions are told apart by the generation and it is on the free list once. */
static void retire(stampede_ring *r, uint32_t slot)
{
    struct socket_slot *s = &r->sockets[slot];
    if (s->state == SLOT_FREE || s->fd >= 0)
        invariant_failed("a slot retired twice, or with its fd open");
    s->state = SLOT_FREE;
    s->generation++;
    push(r->free_sockets, &r->free_count, r->socket_capacity, slot, "free socket list overflow");
    r->open_count--;
}

int stampede_ring_add_socket(stampede_ring *r, int fd, uint64_t tag, int is_listener, int large_datagrams)
{
    uint32_t slot;
    struct socket_slot *s;
    if (r->free_count == 0 && grow_sockets(r) < 0) {
        close(fd);
        return -ENOMEM;
    }
    slot = r->free_sockets[--r->free_count];
    s = &r->sockets[slot];
    if (s->state != SLOT_FREE)
        invariant_failed("a slot on the free list is in use");
    s->fd = fd;
    s->tag = tag;
    s->listener = is_listener != 0;
    s->group = is_listener ? GROUP_REQUEST : large_datagrams ? GROUP_LARGE : GROUP_SMALL;
    s->segments = (uint8_t)r->segmentation;
    s->fixed = slot < r->fixed_capacity && io_uring_register_files_update(&r->ring, slot, &fd, 1) == 1;
    if (slot < r->fixed_capacity)
        r->stats.system_calls++;
    r->open_count++;
    /* No submission entry now (only when the kernel refuses a submit): armed at the next wait. */
    if (arm_receive(r, slot) < 0)
        rearm_later(r, slot);
    return (int)slot;
}

int stampede_ring_socket_fd(const stampede_ring *r, int slot)
{
    return slot >= 0 && (uint32_t)slot < r->socket_capacity ? r->sockets[slot].fd : -EBADF;
}

int stampede_ring_socket_is_listener(const stampede_ring *r, int slot)
{
    return slot >= 0 && (uint32_t)slot < r->socket_capacity && r->sockets[slot].listener;
}

void stampede_ring_close_socket(stampede_ring *r, int slot)
{
    struct socket_slot *s;
    if (slot < 0 || (uint32_t)slot >= r->socket_capacity)
        return;
    s = &r->sockets[slot];
    switch (s->state) {
    case SLOT_ARMED:
        s->state = SLOT_CLOSING;
        break;
    case SLOT_IDLE:
        s->state = SLOT_CLOSING_IDLE;
        break;
    default:
        return; /* free, or closing already */
    }
    push(r->to_close, &r->to_close_count, r->socket_capacity, (uint32_t)slot, "close list overflow");
}

/* ---- sends ---- */

static int wait_for_sends(stampede_ring *r);

/* A send slot with room for `header_length` copied bytes and `vectors` pooled iovecs. Out of
 * either mid-turn: let the queued sends complete, then reuse everything; receives that complete
 * meanwhile wait for the next turn's batch. */
static struct send_slot *take_send_slot(stampede_ring *r, uint32_t header_length, uint32_t vectors, int *error)
{
    struct send_slot *m;
    if (r->sends_used == r->send_capacity || r->arena_used + header_length > r->arena_size ||
        r->vectors_used + vectors > r->vector_capacity) {
        int result;
        r->deferring = 1;
        result = wait_for_sends(r);
        r->deferring = 0;
        if (result < 0) {
            *error = result;
            return NULL;
        }
    }
    m = &r->sends[r->sends_used++];
    memset(&m->message, 0, sizeof(m->message));
    return m;
}

/* Names the destination of an unconnected socket's send, and with `from` its source (PKTINFO). */
static void address_send(struct send_slot *m, const struct sockaddr_storage *to, const struct sockaddr_storage *from)
{
    if (!to)
        return;
    m->name = *to;
    m->message.msg_name = &m->name;
    m->message.msg_namelen = to->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    if (from) {
        size_t length = stampede_pktinfo_control(m->control, sizeof(m->control), from);
        if (length) {
            m->message.msg_control = m->control;
            m->message.msg_controllen = length;
        }
    }
}

/* Queues the SENDMSG of a filled send slot; `sqe_flags` may link it to the next (IOSQE_IO_LINK). */
static int submit_send(stampede_ring *r, struct send_slot *m, uint32_t slot, uint64_t user_data, uint32_t datagrams,
                       unsigned sqe_flags)
{
    struct io_uring_sqe *sqe = next_sqe(r);
    if (!sqe) {
        r->sends_used--;
        r->stats.send_failures += datagrams;
        return -EBUSY;
    }
    io_uring_prep_sendmsg(sqe, r->sockets[slot].fd, &m->message, MSG_DONTWAIT);
    r->stats.send_operations++;
    target(sqe, &r->sockets[slot], slot);
    sqe->flags |= sqe_flags;
    io_uring_sqe_set_data64(sqe, user_data);
    r->sends_in_flight++;
    return 0;
}

static int valid_socket(const stampede_ring *r, int slot)
{
    return slot >= 0 && (uint32_t)slot < r->socket_capacity && r->sockets[slot].fd >= 0;
}

int stampede_ring_send(stampede_ring *r, int slot, const void *header, uint32_t header_length,
                       const void *payload, uint32_t payload_length,
                       const struct sockaddr_storage *to, const struct sockaddr_storage *from)
{
    struct send_slot *m;
    void *copy;
    int error = 0;
    if (!valid_socket(r, slot))
        return -EBADF;
    m = take_send_slot(r, header_length > SEND_INLINE ? header_length : 0, 0, &error);
    if (!m)
        return error;
    if (header_length <= SEND_INLINE) {
        copy = m->header;
    } else {
        copy = r->arena + r->arena_used;
        r->arena_used += (header_length + 15) & ~15u;
    }
    memcpy(copy, header, header_length);
    m->iov[0].iov_base = copy;
    m->iov[0].iov_len = header_length;
    m->iov[1].iov_base = (void *)payload;
    m->iov[1].iov_len = payload_length;
    m->message.msg_iov = m->iov;
    m->message.msg_iovlen = payload_length ? 2 : 1;
    address_send(m, to, from);
    return submit_send(r, m, (uint32_t)slot, pack(OP_SEND, 0, (uint32_t)slot, r->sockets[slot].generation), 1, 0);
}

/* Bytes [*start, *end) of block `i` of a window's payload: block_size of them, fewer (or none)
 * at its end. */
static void window_block(uint32_t i, uint32_t block_size, uint32_t payload_length, uint32_t *start, uint32_t *end)
{
    uint64_t from = (uint64_t)i * block_size, to = from + block_size;
    *start = (uint32_t)(from < payload_length ? from : payload_length);
    *end = (uint32_t)(to < payload_length ? to : payload_length);
}

/* One send of datagrams first..first+count-1 of a window: segmented when count > 1. `link`: the
 * window's next run follows in the kernel only if this one went out (see send_one_by_one). */
static int send_run(stampede_ring *r, int slot, const uint8_t *headers, uint32_t first, uint32_t count,
                    const uint8_t *payload, uint32_t payload_length, uint32_t block_size,
                    const struct sockaddr_storage *to, const struct sockaddr_storage *from, int link)
{
    struct send_slot *m;
    struct iovec *v;
    uint32_t i, used = 0;
    int error = 0;
    m = take_send_slot(r, 0, 2 * count, &error);
    if (!m)
        return error;
    memcpy(m->header, headers + 4 * first, 4 * count);
    v = r->vectors + r->vectors_used;
    for (i = 0; i < count; i++) {
        uint32_t start, end;
        window_block(first + i, block_size, payload_length, &start, &end);
        v[used].iov_base = m->header + 4 * i;
        v[used++].iov_len = 4;
        if (end > start) {
            v[used].iov_base = (void *)(payload + start);
            v[used++].iov_len = end - start;
        }
    }
    r->vectors_used += used;
    m->message.msg_iov = v;
    m->message.msg_iovlen = used;
    address_send(m, to, from);
    if (count > 1) {
        m->message.msg_controllen = stampede_segment_control(m->control, sizeof(m->control),
                                                             m->message.msg_controllen, (uint16_t)(4 + block_size));
        m->message.msg_control = m->control;
    }
    m->socket = (uint32_t)slot;
    m->generation = r->sockets[slot].generation;
    m->datagrams = count;
    return submit_send(r, m, (uint32_t)slot, (uint64_t)OP_SEND_RUN | (uint64_t)(m - r->sends) << 8, count,
                       link ? IOSQE_IO_LINK : 0);
}

int stampede_ring_send_window(stampede_ring *r, int slot, const uint8_t *headers, uint32_t count,
                              const uint8_t *payload, uint32_t payload_length, uint32_t block_size,
                              const struct sockaddr_storage *to, const struct sockaddr_storage *from)
{
    uint32_t first = 0, per_send = 1;
    int result = 0;
    if (!valid_socket(r, slot))
        return -EBADF;
    if (r->sockets[slot].segments) {
        per_send = STAMPEDE_SEGMENTED_BYTES_MAX / (4 + block_size);
        if (per_send > STAMPEDE_SEGMENTS_MAX)
            per_send = STAMPEDE_SEGMENTS_MAX;
    }
    /* Runs are linked, so that a run the path refuses stops the window's later runs: all of them go
     * again one by one, in order, and the client never sees the window's end before its start. */
    while (first < count && result == 0) {
        uint32_t n = count - first < per_send ? count - first : per_send;
        if (per_send > 1 && count > 1) {
            result = send_run(r, slot, headers, first, n, payload, payload_length, block_size, to, from,
                              first + n < count);
        } else {
            uint32_t start, end;
            window_block(first, block_size, payload_length, &start, &end);
            result = stampede_ring_send(r, slot, headers + 4 * first, 4, payload + start, end - start, to, from);
        }
        first += n;
    }
    r->stats.send_failures += count - first; /* after a failure: the rest is lost, and counted */
    return result;
}

/* ---- completions ---- */

/* A segmented send the socket's path refused (a segment above its MTU, a device that cannot
 * segment): its datagrams again, one by one with a plain sendmmsg now (their payload is valid until
 * the wait returns), and the socket's later windows unsegmented. */
static void send_one_by_one(stampede_ring *r, const struct send_slot *m)
{
    stampede_mmsghdr messages[STAMPEDE_SEGMENTS_MAX];
    struct socket_slot *s = &r->sockets[m->socket];
    uint32_t i, vector = 0, next = 0;
    size_t control = m->message.msg_controllen - (m->datagrams > 1 ? stampede_segment_space() : 0);
    for (i = 0; i < m->datagrams; i++) {
        struct msghdr *message = &messages[i].msg_hdr;
        *message = m->message;
        message->msg_iov = m->message.msg_iov + vector;
        /* A header and its payload; only the last block may be empty (a header alone). */
        message->msg_iovlen = i + 1 < m->datagrams || vector + 2 == m->message.msg_iovlen ? 2 : 1;
        message->msg_control = control ? m->message.msg_control : NULL;
        message->msg_controllen = control;
        messages[i].msg_len = 0;
        vector += (uint32_t)message->msg_iovlen;
    }
    while (next < m->datagrams) {
        int sent = stampede_sendmmsg(s->fd, messages + next, m->datagrams - next);
        r->stats.system_calls++;
        if (sent > 0) {
            r->stats.send_operations += (uint32_t)sent;
            r->stats.datagrams_sent += (uint32_t)sent;
            next += (uint32_t)sent;
        } else {
            /* A full buffer loses the rest; any other error this datagram. Retransmission repairs. */
            uint32_t lost = sent == -EAGAIN || sent == -ENOBUFS ? m->datagrams - next : 1;
            r->stats.send_failures += lost;
            next += lost;
        }
    }
}

/* Buffers of a batch go back to the kernel at the next wait, in bulk. */
static void lend_buffer(stampede_ring *r, unsigned group, uint16_t id)
{
    struct buffer_group *g = &r->groups[group];
    if (id >= g->count)
        return;
    if (r->lent_count == r->datagram_capacity) {
        /* More buffers out than exist: cannot be; give this one back at once rather than overrun. */
        give_buffer(g, id, 0);
        io_uring_buf_ring_advance(g->ring, 1);
        return;
    }
    r->lent_ids[r->lent_count] = id;
    r->lent_groups[r->lent_count] = (uint8_t)group;
    r->lent_count++;
}

static void take_back_buffers(stampede_ring *r)
{
    uint32_t i;
    int added[GROUP_COUNT] = {0};
    for (i = 0; i < r->lent_count; i++) {
        int group = r->lent_groups[i];
        give_buffer(&r->groups[group], r->lent_ids[i], added[group]++);
    }
    for (i = 0; i < GROUP_COUNT; i++)
        if (added[i])
            io_uring_buf_ring_advance(r->groups[i].ring, added[i]);
    r->lent_count = 0;
}

/* A datagram in buffer `id` of `group` becomes an entry of this wait's batch. */
static void add_datagram(stampede_ring *r, const struct socket_slot *s, unsigned group, uint16_t id,
                         int32_t length)
{
    struct buffer_group *g = &r->groups[group];
    struct msghdr *layout = s->listener ? &r->listener_template : &r->transfer_template;
    struct io_uring_recvmsg_out *out;
    stampede_ring_datagram *d;
    if (id >= g->count || r->datagram_count == r->datagram_capacity)
        return;
    out = io_uring_recvmsg_validate(g->memory + (size_t)id * g->size, length, layout);
    if (!out)
        return;
    d = &r->datagrams[r->datagram_count++];
    d->tag = s->tag;
    d->bytes = io_uring_recvmsg_payload(out, layout);
    d->length = (int32_t)io_uring_recvmsg_payload_length(out, length, layout);
    /* Longer than the buffer: its start, said so, for the caller to refuse as the Glibc backend
     * would the whole datagram (never taken as if it were whole). */
    d->truncated = (out->flags & MSG_TRUNC) != 0;
    memset(&d->peer, 0, sizeof(d->peer));
    memcpy(&d->peer, io_uring_recvmsg_name(out), out->namelen < sizeof(d->peer) ? out->namelen : sizeof(d->peer));
    memset(&d->local, 0, sizeof(d->local));
    d->received = 0;
    if (s->listener)
        stampede_ring_controls(out, layout, &d->local, &d->received);
}

/* A socket error (ECONNREFUSED: the client's port is gone) for the transfer. Beyond the batch's
 * room for errors it is dropped: the next send on that socket draws it again. */
static void add_error(stampede_ring *r, const struct socket_slot *s, int32_t error)
{
    stampede_ring_datagram *d;
    if (r->error_count == r->error_capacity || r->datagram_count == r->datagram_capacity)
        return;
    r->error_count++;
    d = &r->datagrams[r->datagram_count++];
    memset(d, 0, sizeof(*d));
    d->tag = s->tag;
    d->length = error;
}

/* A slot's receive ended (a completion without IORING_CQE_F_MORE): the slot moves on in its life. */
static void receive_ended(stampede_ring *r, uint32_t slot, int32_t result)
{
    struct socket_slot *s = &r->sockets[slot];
    switch (s->state) {
    case SLOT_ARMED:
        if (result == -ENOBUFS)
            r->stats.receive_buffer_exhausted++;
        rearm_later(r, slot);
        break;
    case SLOT_CLOSING:
        s->state = SLOT_CLOSING_IDLE;
        break;
    case SLOT_DRAINING:
        retire(r, slot);
        break;
    default:
        invariant_failed("a receive ended on a slot that had none");
    }
}

/* One receive completion. `deliver` is 0 when it cannot join a batch (no memory to defer it):
 * its datagram is dropped, as loss, but the slot's life moves on all the same. */
static void on_receive(stampede_ring *r, const struct io_uring_cqe *cqe, int deliver)
{
    uint32_t slot = unpack_slot(cqe->user_data);
    unsigned group = unpack_group(cqe->user_data);
    uint16_t id = (uint16_t)(cqe->flags >> IORING_CQE_BUFFER_SHIFT);
    int has_buffer = (cqe->flags & IORING_CQE_F_BUFFER) != 0;
    struct socket_slot *s;

    if (has_buffer)
        lend_buffer(r, group, id);
    if (slot >= r->socket_capacity || r->sockets[slot].generation != unpack_generation(cqe->user_data))
        return; /* cannot be: a generation changes only after the receive's final completion */
    s = &r->sockets[slot];
    if (deliver && s->state == SLOT_ARMED) {
        if (cqe->res >= 0 && has_buffer)
            add_datagram(r, s, group, id, cqe->res);
        else if (cqe->res < 0 && cqe->res != -ENOBUFS && cqe->res != -ECANCELED)
            add_error(r, s, cqe->res);
    }
    if (!(cqe->flags & IORING_CQE_F_MORE))
        receive_ended(r, slot, cqe->res);
}

/* An error the network sent back about a peer (ICMP port or host unreachable): on a connected
 * socket it goes to whichever call comes first, a receive or a send. */
static int is_peer_error(int32_t result)
{
    return result == -ECONNREFUSED || result == -EHOSTUNREACH || result == -ENETUNREACH;
}

/* A send's completion that carries the peer's error: the transfer hears it as from a receive. */
static void on_send_error(stampede_ring *r, const struct io_uring_cqe *cqe)
{
    uint32_t slot = unpack_slot(cqe->user_data);
    if (slot < r->socket_capacity && r->sockets[slot].generation == unpack_generation(cqe->user_data) &&
        (r->sockets[slot].state == SLOT_ARMED || r->sockets[slot].state == SLOT_IDLE))
        add_error(r, &r->sockets[slot], cqe->res);
}

/* Keeps a completion for the next wait (the caller is still reading this turn's batch). */
static void defer(stampede_ring *r, const struct io_uring_cqe *cqe)
{
    if (r->deferred_count == r->deferred_capacity) {
        uint32_t capacity = r->deferred_capacity ? r->deferred_capacity * 2 : 1024;
        struct io_uring_cqe *grown = realloc(r->deferred, capacity * sizeof(*grown));
        if (!grown) {
            if (unpack_op(cqe->user_data) == OP_RECV)
                on_receive(r, cqe, 0);
            return;
        }
        r->deferred = grown;
        r->deferred_capacity = capacity;
    }
    r->deferred[r->deferred_count++] = *cqe;
}

/* A verifying cancel's completion (verify_receives). 0: the receive was there, and ends now with
 * -ECANCELED, after which the slot is armed again as after any end. -ENOENT on a slot whose
 * receive has not been seen to end: it ended and its final completion was one the kernel
 * dropped (a completion posted before this one would have been reaped before it). */
static void on_verified(stampede_ring *r, const struct io_uring_cqe *cqe)
{
    uint32_t slot = unpack_slot(cqe->user_data);
    struct socket_slot *s;
    if (cqe->res != -ENOENT || slot >= r->socket_capacity)
        return;
    s = &r->sockets[slot];
    if (s->generation == unpack_generation(cqe->user_data) &&
        (s->state == SLOT_ARMED || s->state == SLOT_CLOSING || s->state == SLOT_DRAINING)) {
        r->stats.receives_recovered++;
        receive_ended(r, slot, -ECANCELED);
    }
}

/* A cancel's own completion. -ENOENT: the receive had ended already (its final completion is
 * here or on its way). Any other failure: ask again at the next wait. */
static void on_cancel(stampede_ring *r, const struct io_uring_cqe *cqe)
{
    uint32_t slot = unpack_slot(cqe->user_data);
    if (cqe->res >= 0 || cqe->res == -ENOENT || slot >= r->socket_capacity)
        return;
    if (r->sockets[slot].generation == unpack_generation(cqe->user_data) && r->sockets[slot].state == SLOT_DRAINING)
        push(r->to_close, &r->to_close_count, r->socket_capacity, slot, "close list overflow");
}

static void on_send_completion(stampede_ring *r, struct io_uring_cqe *cqe, uint32_t datagrams)
{
    r->sends_in_flight--;
    if (is_peer_error(cqe->res)) {
        if (r->deferring)
            defer(r, cqe);
        else
            on_send_error(r, cqe);
    } else if (cqe->res < 0) {
        r->stats.send_failures += datagrams;
    } else {
        r->stats.datagrams_sent += datagrams;
    }
}

/* A window run's completion, seen before its send slot is reused (sends_in_flight counts it). A
 * run the path refused goes again one datagram at a time, and so do the window's later runs, which
 * its link cancelled (and which the socket, unsegmented now, tells apart from a plain failure). */
static void on_run_sent(stampede_ring *r, struct io_uring_cqe *cqe)
{
    const struct send_slot *m = &r->sends[(cqe->user_data >> 8) & 0xFFFFFF];
    struct socket_slot *s = &r->sockets[m->socket];
    struct io_uring_cqe as_socket = *cqe;
    int usable = s->generation == m->generation && s->fd >= 0;
    int refused = cqe->res < 0 && m->datagrams > 1 && stampede_segmentation_refused(-cqe->res);
    if (cqe->res >= 0 && m->datagrams > 1)
        r->stats.segmented_sends++;
    if (usable && (refused || (cqe->res == -ECANCELED && !s->segments))) {
        if (refused) {
            s->segments = 0;
            r->stats.segmentation_fallbacks++;
        }
        r->sends_in_flight--;
        send_one_by_one(r, m);
        return;
    }
    /* Otherwise as any send: a peer's error reaches the transfer (by socket slot), a failure counts. */
    as_socket.user_data = pack(OP_SEND, 0, m->socket, m->generation);
    on_send_completion(r, &as_socket, m->datagrams);
}

static void on_completion(stampede_ring *r, struct io_uring_cqe *cqe)
{
    switch (unpack_op(cqe->user_data)) {
    case OP_SEND_RUN:
        on_run_sent(r, cqe);
        break;
    case OP_RECV:
        if (r->deferring)
            defer(r, cqe);
        else
            on_receive(r, cqe, 1);
        break;
    case OP_SEND:
        on_send_completion(r, cqe, 1);
        break;
    case OP_CANCEL:
        on_cancel(r, cqe);
        break;
    case OP_VERIFY:
        on_verified(r, cqe);
        break;
    case OP_WATCH:
        /* The wait has ended, which is all a readiness says. A poll the kernel ended is armed again,
         * unless it ended in an error (the descriptor closed): armed again, it would end every wait. */
        if (!(cqe->flags & IORING_CQE_F_MORE))
            r->watch_to_arm = cqe->res >= 0;
        break;
    }
}

int stampede_ring_watch(stampede_ring *r, int fd)
{
    if (r->watching)
        return -EBUSY;
    r->watch_fd = fd;
    r->watching = 1;
    r->watch_to_arm = 1;
    return 0;
}

/* Arms the watched descriptor's poll; one that finds no submission entry waits for the next turn. */
static void arm_watch(stampede_ring *r)
{
    struct io_uring_sqe *sqe;
    if (!r->watch_to_arm || !(sqe = next_sqe(r)))
        return;
    io_uring_prep_poll_multishot(sqe, r->watch_fd, POLLIN);
    io_uring_sqe_set_data64(sqe, pack(OP_WATCH, 0, 0, 0));
    r->watch_to_arm = 0;
}

/* The kernel has deferred work (completions) for us to run: IORING_SQ_TASKRUN, from TASKRUN_FLAG. */
static int task_work_pending(const stampede_ring *r)
{
    return (IO_URING_READ_ONCE(*r->ring.sq.kflags) & (IORING_SQ_TASKRUN | IORING_SQ_CQ_OVERFLOW)) != 0;
}

/* Processes what the CQ holds right now, in bulk: one cq_advance per batch. The CQ is read
 * directly (io_uring_peek_batch_cqe would enter the kernel whenever the TASKRUN flag is up). */
static unsigned drain(stampede_ring *r)
{
    unsigned head, n = 0, total = 0;
    struct io_uring_cqe *cqe;
    do {
        n = 0;
        io_uring_for_each_cqe(&r->ring, head, cqe)
        {
            on_completion(r, cqe);
            if (++n == r->cqe_capacity)
                break;
        }
        io_uring_cq_advance(&r->ring, n);
        total += n;
    } while (n > 0);
    return total;
}

/* Reaps everything, in bulk. The datagram array has room for every buffer the kernel can fill,
 * so no completion ever waits for the next turn for lack of room.
 * With DEFER_TASKRUN a kernel runs a bounded amount of task work per enter (20 items on recent
 * kernels), so while the kernel says work is pending we enter again to collect it, but only as
 * long as that yields completions: the flag can stay up without producing any, and a loop on
 * the flag alone spins. */
static void reap(stampede_ring *r)
{
    int rounds;
    drain(r);
    for (rounds = 0; rounds < 64 && task_work_pending(r); rounds++) {
        io_uring_get_events(&r->ring);
        r->stats.system_calls++;
        if (drain(r) == 0)
            return;
    }
}

/* Sends are MSG_DONTWAIT and complete when issued; this waits for their completions so that no
 * payload is referenced by the kernel once a wait returns (the caller may free it then). */
/* The kernel dropped completions (EBADR: under memory pressure it had no room for its overflow
 * list): a loss to count and live with, not a reason to stop. */
static int survived(stampede_ring *r, int result)
{
    if (result != -EBADR)
        return result;
    r->stats.completions_lost++;
    r->receives_suspect = 1;
    return 0;
}

/* After dropped completions: every slot with a receive in the kernel, as far as the engine knows,
 * has it cancelled, and hears back whether it was there (on_verified). A live receive is only
 * armed again (the datagrams meanwhile wait in the socket); a lost one no longer leaves its socket
 * deaf until its transfer times out, nor a closed slot unretired. The watched descriptor's poll
 * is armed again too (a second one, if the first lives, only ends waits). Slots that find no
 * submission entry are verified at the next wait. */
static void verify_receives(stampede_ring *r)
{
    uint32_t slot;
    for (slot = 0; slot < r->socket_capacity; slot++) {
        struct socket_slot *s = &r->sockets[slot];
        struct io_uring_sqe *sqe;
        if (s->state != SLOT_ARMED && s->state != SLOT_CLOSING && s->state != SLOT_DRAINING)
            continue;
        if (!(sqe = next_sqe(r)))
            return;
        io_uring_prep_cancel64(sqe, pack(OP_RECV, group_of(s), slot, s->generation), 0);
        io_uring_sqe_set_data64(sqe, pack(OP_VERIFY, 0, slot, s->generation));
    }
    if (r->watching)
        r->watch_to_arm = 1;
    r->receives_suspect = 0;
}

static int wait_for_sends(stampede_ring *r)
{
    uint32_t idle = 0;
    while (r->sends_in_flight > 0) {
        /* A send with MSG_DONTWAIT completes when it is issued: a second of waits without a
         * completion, after the kernel said it dropped some, means the rest were among them. */
        struct __kernel_timespec timeout = {0, 100 * 1000 * 1000};
        struct io_uring_cqe *cqe = NULL;
        uint32_t before = r->sends_in_flight;
        int result = survived(r, io_uring_submit_and_wait_timeout(&r->ring, &cqe, 1, &timeout, NULL));
        r->stats.system_calls++;
        if (result < 0 && result != -ETIME && result != -EINTR && result != -EAGAIN && result != -EBUSY &&
            result != -ENOMEM)
            return result;
        /* Whatever the wait said (a timeout may come with completions posted meanwhile). */
        reap(r);
        idle = r->sends_in_flight < before ? 0 : idle + 1;
        if (idle >= 10 && r->stats.completions_lost > 0) {
            r->sends_in_flight = 0;
            break;
        }
    }
    r->sends_used = 0;
    r->arena_used = 0;
    r->vectors_used = 0;
    return 0;
}

/* Arms again the receives that ended; one that finds no submission entry waits for the next turn. */
static void rearm(stampede_ring *r)
{
    uint32_t i, kept = 0;
    for (i = 0; i < r->to_arm_count; i++) {
        uint32_t slot = r->to_arm[i];
        if (r->sockets[slot].state != SLOT_IDLE)
            continue; /* closed meanwhile */
        if (arm_receive(r, slot) < 0)
            r->to_arm[kept++] = slot;
    }
    r->to_arm_count = kept;
}

/* Before the submit: a cancel for each closing slot whose receive is still in the kernel.
 * Returns how many slots of the close list are ready for finish_closing; the rest (no
 * submission entry, only when the kernel refuses a submit) wait for the next turn. */
static uint32_t start_closing(stampede_ring *r)
{
    uint32_t i;
    for (i = 0; i < r->to_close_count; i++) {
        uint32_t slot = r->to_close[i];
        struct socket_slot *s = &r->sockets[slot];
        if (s->state == SLOT_CLOSING || s->state == SLOT_DRAINING) {
            struct io_uring_sqe *sqe = next_sqe(r);
            if (!sqe)
                break;
            io_uring_prep_cancel64(sqe, pack(OP_RECV, group_of(s), slot, s->generation), 0);
            io_uring_sqe_set_data64(sqe, pack(OP_CANCEL, 0, slot, s->generation));
        }
    }
    return i;
}

/* After the submit (the sends queued on these sockets and the cancels are in the kernel): the
 * fds close. A slot without a receive retires now, one with a receive when it ends. */
static void finish_closing(stampede_ring *r, uint32_t ready)
{
    uint32_t i;
    for (i = 0; i < ready; i++) {
        uint32_t slot = r->to_close[i];
        struct socket_slot *s = &r->sockets[slot];
        switch (s->state) {
        case SLOT_CLOSING:
            close_fd(r, s, slot);
            s->state = SLOT_DRAINING;
            break;
        case SLOT_CLOSING_IDLE:
            close_fd(r, s, slot);
            retire(r, slot);
            break;
        default:
            break; /* DRAINING: its cancel went in again */
        }
    }
    memmove(r->to_close, r->to_close + ready, (r->to_close_count - ready) * sizeof(uint32_t));
    r->to_close_count -= ready;
}

int stampede_ring_wait(stampede_ring *r, int64_t timeout_ns)
{
    uint32_t i, ready;
    struct __kernel_timespec timeout;
    struct io_uring_cqe *cqe = NULL;
    int result;

    result = enable(r);
    if (result < 0)
        return result;
    take_back_buffers(r);
    r->datagram_count = 0;
    r->error_count = 0;
    /* Completions met by last turn's mid-turn flushes, in the order the kernel posted them. */
    for (i = 0; i < r->deferred_count; i++) {
        if (unpack_op(r->deferred[i].user_data) == OP_RECV)
            on_receive(r, &r->deferred[i], 1);
        else
            on_send_error(r, &r->deferred[i]);
    }
    r->deferred_count = 0;
    rearm(r);
    if (r->receives_suspect)
        verify_receives(r);
    arm_watch(r);
    ready = start_closing(r);

    if (timeout_ns == 0) {
        result = survived(r, submit(r));
    } else if (timeout_ns < 0) {
        result = survived(r, io_uring_submit_and_wait(&r->ring, 1));
        r->stats.system_calls++;
    } else {
        timeout.tv_sec = timeout_ns / 1000000000;
        timeout.tv_nsec = timeout_ns % 1000000000;
        result = survived(r, io_uring_submit_and_wait_timeout(&r->ring, &cqe, 1, &timeout, NULL));
        r->stats.system_calls++;
    }
    /* Transient: interrupted, timed out, the kernel short of memory or busy with completions. */
    if (result < 0 && result != -ETIME && result != -EINTR && result != -EAGAIN && result != -EBUSY && result != -ENOMEM)
        return result;

    finish_closing(r, ready);
    reap(r);
    result = wait_for_sends(r);
    if (result < 0)
        return result;
    return (int)r->datagram_count;
}

const stampede_ring_datagram *stampede_ring_datagrams(const stampede_ring *r)
{
    return r->datagrams;
}

stampede_ring_stats stampede_ring_get_stats(const stampede_ring *r)
{
    return r->stats;
}

int stampede_ring_socket_count(const stampede_ring *r)
{
    return (int)r->open_count;
}
