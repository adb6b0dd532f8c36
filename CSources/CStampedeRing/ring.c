/*
 * The io_uring engine. One ring per worker thread, so the ring is single-issuer.
 *
 * Receives: every socket has one multishot recvmsg that picks buffers from a provided-buffer
 * ring (group 0 small, 1 large, 2 requests: listeners'). A CQE without IORING_CQE_F_MORE means the multishot
 * ended (ENOBUFS, a socket error): the socket is re-armed at the next wait, after the buffers of
 * the last batch went back to the kernel.
 * Sends: SENDMSG with MSG_DONTWAIT, so a UDP send is done (or fails with EAGAIN, i.e. loss) when
 * it is issued and never parks on a poll holding a reference to the caller's payload.
 * user_data packs (op, slot, generation): a closed slot's late completions are recognised.
 */
#include "ring_private.h"

/* An optimized build is a shipped one: hardened as Debian builds C (Package.swift's strictC). */
#if defined(__OPTIMIZE__) && !defined(_FORTIFY_SOURCE)
#error "optimized builds of Stampede's C need _FORTIFY_SOURCE (Package.swift, strictC)"
#endif

#include <errno.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---- provided buffers ---- */

void give_buffer(struct buffer_group *g, uint16_t id, int offset)
{
    io_uring_buf_ring_add(g->ring, g->memory + (size_t)id * g->size, g->size, id,
                          io_uring_buf_ring_mask(g->count), offset);
}

/* liburing 2.3 has no io_uring_setup_buf_ring: map the ring memory and register it ourselves. */
static int setup_buffer_group(struct io_uring *ring, struct buffer_group *g, int group,
                              uint32_t count, uint32_t payload)
{
    struct io_uring_buf_reg reg;
    uint32_t i;
    int r;
    g->count = count;
    g->size = sizeof(struct io_uring_recvmsg_out) + NAME_SPACE + CONTROL_SPACE + payload;
    g->size = (g->size + 63) & ~63u;
    g->ring_bytes = (size_t)count * sizeof(struct io_uring_buf);
    g->ring = mmap(NULL, g->ring_bytes, PROT_READ | PROT_WRITE, MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
    if (g->ring == MAP_FAILED) {
        g->ring = NULL;
        return -errno;
    }
    g->memory = mmap(NULL, (size_t)count * g->size, PROT_READ | PROT_WRITE, MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
    if (g->memory == MAP_FAILED) {
        g->memory = NULL;
        return -errno;
    }
    memset(&reg, 0, sizeof(reg));
    reg.ring_addr = (uint64_t)(uintptr_t)g->ring;
    reg.ring_entries = count;
    reg.bgid = group;
    r = io_uring_register_buf_ring(ring, &reg, 0);
    if (r < 0)
        return r;
    io_uring_buf_ring_init(g->ring);
    for (i = 0; i < count; i++)
        give_buffer(g, (uint16_t)i, (int)i);
    io_uring_buf_ring_advance(g->ring, (int)count);
    return 0;
}

static void free_buffer_group(struct buffer_group *g)
{
    if (g->ring)
        munmap(g->ring, g->ring_bytes);
    if (g->memory)
        munmap(g->memory, (size_t)g->count * g->size);
}

/* ---- setup ---- */

static int init_ring(struct io_uring *ring, uint32_t entries, const char **flags)
{
    /* Newest first; each step drops what an older kernel refuses (EINVAL). */
    static const struct {
        unsigned flags;
        const char *name;
    } attempts[] = {
        {IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG,
         "SINGLE_ISSUER|COOP_TASKRUN"},
        {IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG, "COOP_TASKRUN"},
        {0, "none"},
    };
    size_t i;
    int r = -EINVAL;
    for (i = 0; i < sizeof(attempts) / sizeof(attempts[0]); i++) {
        struct io_uring_params params;
        memset(&params, 0, sizeof(params));
        /* R_DISABLED: the ring is made on the main thread (sockets bind before privileges drop)
         * and enabled by its worker thread at the first wait, which makes that thread the
         * single issuer. */
        params.flags = attempts[i].flags | IORING_SETUP_SUBMIT_ALL | IORING_SETUP_CQSIZE | IORING_SETUP_R_DISABLED;
        params.cq_entries = entries * 4;
        r = io_uring_queue_init_params(entries, ring, &params);
        if (r == 0) {
            if (flags)
                *flags = attempts[i].name;
            return 0;
        }
        if (r != -EINVAL)
            return r;
    }
    return r;
}

static void *allocate(size_t count, size_t size, int *failed)
{
    void *p = calloc(count ? count : 1, size);
    if (!p)
        *failed = 1;
    return p;
}

/* A sparse registered-file table as large as the fd limit allows (the kernel caps it there); a
 * kernel or limit that refuses it leaves the engine on plain fds. */
static void register_file_table(stampede_ring *r)
{
    struct rlimit limit;
    uint32_t size = 65536;
    if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < size)
        size = (uint32_t)limit.rlim_cur;
    if (size > 0 && io_uring_register_files_sparse(&r->ring, size) == 0)
        r->fixed_capacity = size;
}

stampede_ring *stampede_ring_create(const stampede_ring_config *config, const char **flags, int *error)
{
    stampede_ring *r = calloc(1, sizeof(*r));
    int failed = 0, result;
    uint32_t i;
    if (!r) {
        *error = -ENOMEM;
        return NULL;
    }
    if ((config->small_buffers & (config->small_buffers - 1)) || (config->large_buffers & (config->large_buffers - 1)) ||
        (config->request_buffers & (config->request_buffers - 1)) || config->small_buffers > 32768 ||
        config->large_buffers > 32768 || config->request_buffers > 32768) {
        free(r);
        *error = -EINVAL;
        return NULL;
    }
    result = init_ring(&r->ring, config->entries, flags);
    if (result < 0) {
        free(r);
        *error = result;
        return NULL;
    }
    r->socket_capacity = 1024;
    r->sockets = allocate(r->socket_capacity, sizeof(*r->sockets), &failed);
    r->free_sockets = allocate(r->socket_capacity, sizeof(uint32_t), &failed);
    r->to_arm = allocate(r->socket_capacity, sizeof(uint32_t), &failed);
    r->to_close = allocate(r->socket_capacity, sizeof(uint32_t), &failed);
    r->send_capacity = config->send_slots;
    r->sends = allocate(r->send_capacity, sizeof(*r->sends), &failed);
    r->arena_size = 8u << 20;
    r->arena = allocate(r->arena_size, 1, &failed);
    r->vector_capacity = r->send_capacity * 4 > 256 ? r->send_capacity * 4 : 256;
    r->vectors = allocate(r->vector_capacity, sizeof(*r->vectors), &failed);
    r->segmentation = config->segmentation != 0;
    /* A place for every receive buffer, which may all be lent out in one batch, plus the socket
     * errors a batch reports: reaping never stops early, so every send completion is seen
     * before a wait returns. */
    r->error_capacity = config->max_datagrams;
    r->datagram_capacity = config->small_buffers + config->large_buffers + config->request_buffers + config->max_datagrams;
    r->datagrams = allocate(r->datagram_capacity, sizeof(*r->datagrams), &failed);
    r->lent_ids = allocate(r->datagram_capacity, sizeof(uint16_t), &failed);
    r->lent_groups = allocate(r->datagram_capacity, 1, &failed);
    r->cqe_capacity = config->entries * 4;
    if (failed) {
        stampede_ring_destroy(r);
        *error = -ENOMEM;
        return NULL;
    }
    for (i = 0; i < r->socket_capacity; i++) {
        r->sockets[i].fd = -1;
        r->sockets[i].state = SLOT_FREE;
        r->free_sockets[i] = r->socket_capacity - 1 - i;
    }
    r->free_count = r->socket_capacity;
    r->listener_template.msg_namelen = NAME_SPACE;
    r->listener_template.msg_controllen = CONTROL_SPACE;
    r->transfer_template.msg_namelen = NAME_SPACE;
    result = setup_buffer_group(&r->ring, &r->groups[GROUP_SMALL], GROUP_SMALL, config->small_buffers, config->small_size);
    if (result == 0)
        result = setup_buffer_group(&r->ring, &r->groups[GROUP_LARGE], GROUP_LARGE, config->large_buffers, config->large_size);
    if (result == 0)
        result = setup_buffer_group(&r->ring, &r->groups[GROUP_REQUEST], GROUP_REQUEST, config->request_buffers,
                                    config->request_size);
    if (result < 0) {
        stampede_ring_destroy(r);
        *error = result;
        return NULL;
    }
    register_file_table(r);
    return r;
}

void stampede_ring_destroy(stampede_ring *r)
{
    uint32_t i;
    if (!r)
        return;
    if (r->sockets)
        for (i = 0; i < r->socket_capacity; i++)
            if (r->sockets[i].fd >= 0)
                close(r->sockets[i].fd);
    if (r->ring.ring_fd > 0)
        io_uring_queue_exit(&r->ring);
    for (i = 0; i < GROUP_COUNT; i++)
        free_buffer_group(&r->groups[i]);
    free(r->sockets);
    free(r->free_sockets);
    free(r->to_arm);
    free(r->to_close);
    free(r->sends);
    free(r->arena);
    free(r->vectors);
    free(r->datagrams);
    free(r->lent_ids);
    free(r->lent_groups);
    free(r->deferred);
    free(r);
}

int stampede_ring_probe(const char **reason)
{
    stampede_ring_config config = {8, 8, 64, 1, 64, 1, 64, 8, 8, 0};
    const char *flags;
    int error = 0;
    stampede_ring *r = stampede_ring_create(&config, &flags, &error);
    if (r) {
        stampede_ring_destroy(r);
        return 0;
    }
    switch (error) {
    case -ENOSYS:
        *reason = "io_uring_setup is not implemented by this kernel (ENOSYS)";
        break;
    case -EPERM:
        *reason = "io_uring is forbidden here (EPERM: seccomp, or kernel.io_uring_disabled)";
        break;
    case -ENOMEM:
        *reason = "no memory for a ring (ENOMEM: RLIMIT_MEMLOCK too low?)";
        break;
    case -EINVAL:
        *reason = "this kernel lacks provided buffer rings or the setup flags (EINVAL; needs Linux 6.0+)";
        break;
    default:
        *reason = "io_uring setup failed";
        break;
    }
    return error;
}
