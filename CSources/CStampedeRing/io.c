/*
 * Sockets, sends and the wait loop of the io_uring engine (see ring.c for the design).
 * The ring's private layout is shared with ring.c through this include.
 */
#include "ring_private.h"

#include <CStampedeSys.h>

#include <errno.h>
#include <netinet/in.h>
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
    if (syscall(__NR_io_uring_register, r->ring.ring_fd, IORING_REGISTER_ENABLE_RINGS, NULL, 0) < 0)
        return -errno;
    r->enabled = 1;
    return 0;
}

/* A free submission entry, submitting the full queue first if need be; NULL if even that fails. */
static struct io_uring_sqe *next_sqe(stampede_ring *r)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring);
    if (!sqe && enable(r) == 0) {
        io_uring_submit(&r->ring);
        r->stats.enters++;
        sqe = io_uring_get_sqe(&r->ring);
    }
    return sqe;
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
    for (i = capacity; i > old; i--) {
        sockets[i - 1].fd = -1;
        r->free_sockets[r->free_count++] = i - 1;
    }
    r->socket_capacity = capacity;
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

static int arm_receive(stampede_ring *r, uint32_t slot)
{
    struct socket_slot *s = &r->sockets[slot];
    struct io_uring_sqe *sqe = next_sqe(r);
    if (!sqe)
        return -EBUSY;
    io_uring_prep_recvmsg_multishot(sqe, s->fd, s->listener ? &r->listener_template : &r->transfer_template, 0);
    target(sqe, s, slot);
    sqe->flags |= IOSQE_BUFFER_SELECT;
    sqe->buf_group = s->large ? GROUP_LARGE : GROUP_SMALL;
    io_uring_sqe_set_data64(sqe, pack(OP_RECV, slot, s->generation));
    s->armed = 1;
    s->needs_arm = 0;
    return 0;
}

static void release_slot(stampede_ring *r, uint32_t slot);

/* The file table holds its own reference: without this the socket would outlive its close. */
static void unregister_file(stampede_ring *r, struct socket_slot *s, uint32_t slot)
{
    int none = -1;
    if (s->fixed)
        io_uring_register_files_update(&r->ring, slot, &none, 1);
    s->fixed = 0;
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
    s->fd = fd;
    s->tag = tag;
    s->listener = is_listener != 0;
    s->large = large_datagrams != 0;
    s->closing = 0;
    s->cancel_pending = 0;
    s->fixed = slot < r->fixed_capacity && io_uring_register_files_update(&r->ring, slot, &fd, 1) == 1;
    r->open_count++;
    if (arm_receive(r, slot) < 0) {
        unregister_file(r, s, slot);
        close(fd);
        release_slot(r, slot);
        return -EBUSY;
    }
    return (int)slot;
}

int stampede_ring_socket_fd(const stampede_ring *r, int slot)
{
    return r->sockets[slot].fd;
}

void stampede_ring_close_socket(stampede_ring *r, int slot)
{
    struct socket_slot *s = &r->sockets[slot];
    if (s->fd < 0 || s->closing)
        return;
    s->closing = 1;
    r->to_close[r->to_close_count++] = (uint32_t)slot;
}

static void release_slot(stampede_ring *r, uint32_t slot)
{
    struct socket_slot *s = &r->sockets[slot];
    s->generation = (s->generation + 1) & 0xFFFFFFFF;
    s->closing = 0;
    s->armed = 0;
    s->fd = -1;
    r->free_sockets[r->free_count++] = slot;
    r->open_count--;
}

/* ---- sends ---- */

static int wait_for_sends(stampede_ring *r);

int stampede_ring_send(stampede_ring *r, int slot, const void *header, uint32_t header_length,
                       const void *payload, uint32_t payload_length,
                       const struct sockaddr_storage *to, const struct sockaddr_storage *from)
{
    struct send_slot *m;
    struct io_uring_sqe *sqe;
    void *copy;
    if (r->sends_used == r->send_capacity || r->arena_used + header_length > r->arena_size) {
        /* Out of send slots mid-turn: let the queued sends complete, then reuse everything.
         * Receives that complete meanwhile wait for the next turn's batch. */
        int result;
        r->deferring = 1;
        result = wait_for_sends(r);
        r->deferring = 0;
        if (result < 0)
            return result;
    }
    m = &r->sends[r->sends_used++];
    if (header_length <= SEND_INLINE) {
        copy = m->header;
    } else {
        copy = r->arena + r->arena_used;
        r->arena_used += (header_length + 15) & ~15u;
    }
    memcpy(copy, header, header_length);
    memset(&m->message, 0, sizeof(m->message));
    m->iov[0].iov_base = copy;
    m->iov[0].iov_len = header_length;
    m->iov[1].iov_base = (void *)payload;
    m->iov[1].iov_len = payload_length;
    m->message.msg_iov = m->iov;
    m->message.msg_iovlen = payload_length ? 2 : 1;
    if (to) {
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
    sqe = next_sqe(r);
    if (!sqe) {
        r->sends_used--;
        r->stats.send_failures++;
        return -EBUSY;
    }
    io_uring_prep_sendmsg(sqe, r->sockets[slot].fd, &m->message, MSG_DONTWAIT);
    target(sqe, &r->sockets[slot], (uint32_t)slot);
    io_uring_sqe_set_data64(sqe, pack(OP_SEND, (uint32_t)slot, r->sockets[slot].generation));
    r->sends_in_flight++;
    return 0;
}

/* ---- completions ---- */

static void lend_buffer(stampede_ring *r, int group, uint16_t id)
{
    r->lent_ids[r->lent_count] = id;
    r->lent_groups[r->lent_count] = (uint8_t)group;
    r->lent_count++;
}

static void take_back_buffers(stampede_ring *r)
{
    uint32_t i;
    int added[2] = {0, 0};
    for (i = 0; i < r->lent_count; i++) {
        int group = r->lent_groups[i];
        give_buffer(&r->groups[group], r->lent_ids[i], added[group]++);
    }
    if (added[0])
        io_uring_buf_ring_advance(r->groups[0].ring, added[0]);
    if (added[1])
        io_uring_buf_ring_advance(r->groups[1].ring, added[1]);
    r->lent_count = 0;
}

static void on_receive(stampede_ring *r, struct io_uring_cqe *cqe)
{
    uint32_t slot = unpack_slot(cqe->user_data);
    struct socket_slot *s = &r->sockets[slot];
    int current = slot < r->socket_capacity && s->generation == unpack_generation(cqe->user_data);
    int more = (cqe->flags & IORING_CQE_F_MORE) != 0;
    int has_buffer = (cqe->flags & IORING_CQE_F_BUFFER) != 0;
    int group = current && s->large ? GROUP_LARGE : GROUP_SMALL;
    uint16_t id = (uint16_t)(cqe->flags >> IORING_CQE_BUFFER_SHIFT);

    if (!current) {
        /* Cannot happen while a slot's generation only changes after its final CQE; be safe. */
        if (has_buffer)
            give_buffer(&r->groups[group], id, 0), io_uring_buf_ring_advance(r->groups[group].ring, 1);
        return;
    }
    if (!more) {
        s->armed = 0;
        if (s->closing) {
            if (has_buffer)
                lend_buffer(r, group, id);
            if (!s->cancel_pending)
                release_slot(r, slot);
            return;
        }
        if (cqe->res == -ENOBUFS)
            r->stats.receive_buffer_exhausted++;
        if (!s->needs_arm) {
            s->needs_arm = 1;
            r->to_arm[r->to_arm_count++] = slot;
        }
    }
    if (s->closing) {
        if (has_buffer)
            lend_buffer(r, group, id);
        return;
    }
    if (cqe->res < 0) {
        /* A socket error (ECONNREFUSED: the client's port closed) is told to the transfer. */
        if (cqe->res != -ENOBUFS && r->datagram_count < r->datagram_capacity) {
            stampede_ring_datagram *d = &r->datagrams[r->datagram_count++];
            memset(d, 0, sizeof(*d));
            d->tag = s->tag;
            d->socket = (int32_t)slot;
            d->length = cqe->res;
        }
        return;
    }
    if (!has_buffer)
        return;
    {
        struct buffer_group *g = &r->groups[group];
        uint8_t *buffer = g->memory + (size_t)id * g->size;
        struct msghdr *layout = s->listener ? &r->listener_template : &r->transfer_template;
        struct io_uring_recvmsg_out *out = io_uring_recvmsg_validate(buffer, cqe->res, layout);
        stampede_ring_datagram *d;
        lend_buffer(r, group, id);
        if (!out)
            return;
        /* A transfer's datagram cut short is no packet we accept; a listener keeps the start of a
         * long request (its option list is cut at a limit anyway). */
        if ((out->flags & MSG_TRUNC) && !s->listener)
            return;
        d = &r->datagrams[r->datagram_count++];
        d->tag = s->tag;
        d->socket = (int32_t)slot;
        d->bytes = io_uring_recvmsg_payload(out, layout);
        d->length = (int32_t)io_uring_recvmsg_payload_length(out, cqe->res, layout);
        memset(&d->peer, 0, sizeof(d->peer));
        memcpy(&d->peer, io_uring_recvmsg_name(out),
               out->namelen < sizeof(d->peer) ? out->namelen : sizeof(d->peer));
        memset(&d->local, 0, sizeof(d->local));
        if (s->listener)
            stampede_ring_local_address(out, layout, &d->local);
    }
}

/* Keeps a receive completion for the next wait (the caller is still reading this turn's batch). */
static void defer(stampede_ring *r, const struct io_uring_cqe *cqe)
{
    if (r->deferred_count == r->deferred_capacity) {
        uint32_t capacity = r->deferred_capacity ? r->deferred_capacity * 2 : 1024;
        struct io_uring_cqe *grown = realloc(r->deferred, capacity * sizeof(*grown));
        if (!grown) {
            /* No memory: drop the datagram (retransmission repairs it) but keep its buffer. */
            on_receive(r, (struct io_uring_cqe *)cqe);
            return;
        }
        r->deferred = grown;
        r->deferred_capacity = capacity;
    }
    r->deferred[r->deferred_count++] = *cqe;
}

static void on_completion(stampede_ring *r, struct io_uring_cqe *cqe)
{
    switch (unpack_op(cqe->user_data)) {
    case OP_RECV:
        if (r->deferring)
            defer(r, cqe);
        else
            on_receive(r, cqe);
        break;
    case OP_SEND:
        r->sends_in_flight--;
        if (cqe->res < 0)
            r->stats.send_failures++;
        break;
    case OP_CANCEL: {
        uint32_t slot = unpack_slot(cqe->user_data);
        struct socket_slot *s = &r->sockets[slot];
        if (s->generation != unpack_generation(cqe->user_data))
            break;
        s->cancel_pending = 0;
        if (!s->armed)
            release_slot(r, slot);
        break;
    }
    }
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
        r->stats.enters++;
        if (drain(r) == 0)
            return;
    }
}

/* Sends are MSG_DONTWAIT and complete when issued; this waits for their completions so that no
 * payload is referenced by the kernel once a wait returns (the caller may free it then). */
static int wait_for_sends(stampede_ring *r)
{
    while (r->sends_in_flight > 0) {
        int result = io_uring_submit_and_wait(&r->ring, 1);
        r->stats.enters++;
        if (result < 0 && result != -EINTR && result != -EAGAIN && result != -EBUSY)
            return result;
        reap(r);
    }
    r->sends_used = 0;
    r->arena_used = 0;
    return 0;
}

int stampede_ring_wait(stampede_ring *r, int64_t timeout_ns)
{
    uint32_t i, kept = 0, cancelled;
    struct __kernel_timespec timeout;
    struct io_uring_cqe *cqe = NULL;
    int result;

    result = enable(r);
    if (result < 0)
        return result;
    take_back_buffers(r);
    r->datagram_count = 0;
    for (i = 0; i < r->deferred_count; i++)
        on_receive(r, &r->deferred[i]);
    r->deferred_count = 0;
    for (i = 0; i < r->to_arm_count; i++) {
        uint32_t slot = r->to_arm[i];
        struct socket_slot *s = &r->sockets[slot];
        if (s->needs_arm && !s->closing && s->fd >= 0) {
            if (arm_receive(r, slot) < 0)
                r->to_arm[kept++] = slot; /* the queue is full: next turn */
            else
                r->stats.rearms++;
        }
    }
    r->to_arm_count = kept;
    /* Cancel the receive of each socket closing; one that finds no submission entry (only if the
     * kernel refuses a submit) stays on the list for the next turn, its fd still open. */
    for (cancelled = 0; cancelled < r->to_close_count; cancelled++) {
        uint32_t slot = r->to_close[cancelled];
        struct socket_slot *s = &r->sockets[slot];
        if (s->armed) {
            struct io_uring_sqe *sqe = next_sqe(r);
            if (!sqe)
                break;
            io_uring_prep_cancel64(sqe, pack(OP_RECV, slot, s->generation), 0);
            io_uring_sqe_set_data64(sqe, pack(OP_CANCEL, slot, s->generation));
            s->cancel_pending = 1;
        }
    }

    if (timeout_ns == 0) {
        result = io_uring_submit(&r->ring);
    } else if (timeout_ns < 0) {
        result = io_uring_submit_and_wait(&r->ring, 1);
    } else {
        timeout.tv_sec = timeout_ns / 1000000000;
        timeout.tv_nsec = timeout_ns % 1000000000;
        result = io_uring_submit_and_wait_timeout(&r->ring, &cqe, 1, &timeout, NULL);
    }
    r->stats.enters++;
    if (result < 0 && result != -ETIME && result != -EINTR && result != -EAGAIN && result != -EBUSY)
        return result;

    /* The cancels are in the kernel: the fds can go (an armed receive holds its own reference
     * until its cancellation completes, then the slot is released). */
    for (i = 0; i < cancelled; i++) {
        uint32_t slot = r->to_close[i];
        struct socket_slot *s = &r->sockets[slot];
        unregister_file(r, s, slot);
        close(s->fd);
        if (!s->armed && !s->cancel_pending)
            release_slot(r, slot);
        else
            s->fd = -2; /* closed, slot still held until the kernel confirms */
    }
    memmove(r->to_close, r->to_close + cancelled, (r->to_close_count - cancelled) * sizeof(uint32_t));
    r->to_close_count -= cancelled;

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
