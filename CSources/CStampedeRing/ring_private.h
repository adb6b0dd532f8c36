/* The engine's private layout, shared by ring.c (setup), io.c (run time) and cmsg.c. */
#ifndef STAMPEDE_RING_PRIVATE_H
#define STAMPEDE_RING_PRIVATE_H

#include "CStampedeRing.h"

#include <liburing.h>
#include <netinet/in.h>
#include <stddef.h>

/* OP_SEND carries the socket slot; OP_SEND_RUN (a run of a window's datagrams, sent segmented) the
 * send slot, which names the socket, so that a refused run can be sent again one datagram at a time. */
/* OP_WATCH is the multishot poll of the watched descriptor (stampede_ring_watch). */
/* OP_VERIFY is a cancel that asks whether a slot's receive is still in the kernel, once the kernel
 * said it dropped completions (stampede_ring_wait, verify_receives). */
enum { OP_RECV = 1, OP_SEND = 2, OP_CANCEL = 3, OP_SEND_RUN = 4, OP_WATCH = 5, OP_VERIFY = 6 };
/* Receive buffers: small ones for a transfer's ACKs and a client's DATA of small blocks, large
 * ones for uploads of large blocks, request ones for listeners (a request, or a single-port
 * upload's DATA). */
enum { GROUP_SMALL = 0, GROUP_LARGE = 1, GROUP_REQUEST = 2, GROUP_COUNT = 3 };
enum { NAME_SPACE = sizeof(struct sockaddr_storage), CONTROL_SPACE = 96, SEND_INLINE = 576 };
/* A send's control messages: PKTINFO, then UDP_SEGMENT. */
enum { SEND_CONTROL_SPACE = 96 };
_Static_assert(SEND_CONTROL_SPACE >= CMSG_SPACE(sizeof(struct in6_pktinfo)) + CMSG_SPACE(sizeof(uint16_t)),
               "room for PKTINFO and UDP_SEGMENT");
_Static_assert(SEND_INLINE >= 4 * 64, "a segmented send's headers fit inline");

_Static_assert(CONTROL_SPACE >= CMSG_SPACE(sizeof(struct in6_pktinfo)) + CMSG_SPACE(sizeof(struct timespec)),
               "room for PKTINFO and the receive time");
_Static_assert(sizeof(stampede_ring_datagram) == 8 + 8 + 4 + 4 + 8 + 2 * sizeof(struct sockaddr_storage),
               "stampede_ring_datagram layout is read by Swift");
_Static_assert(offsetof(stampede_ring_datagram, peer) == 32, "stampede_ring_datagram layout");

struct buffer_group {
    struct io_uring_buf_ring *ring;
    size_t ring_bytes;
    uint8_t *memory;
    uint32_t count;
    uint32_t size; /* whole buffer: recvmsg_out + name + control + payload */
};

/* The life of a socket slot. Only the receive's final completion (no IORING_CQE_F_MORE) and the
 * wait's close step move a slot on; retire() is the one way back to FREE, so a slot is on the
 * free list at most once and its fd is closed exactly once.
 *
 *   FREE --add--> ARMED <--re-arm at a wait-- IDLE          (receive ended: ENOBUFS, an error)
 *                   |  \--receive ends--------^  |
 *                close                          close
 *                   v                             v
 *                CLOSING --receive ends--> CLOSING_IDLE --wait: fd closed--> retired (FREE)
 *                   |
 *                 wait: cancel submitted, fd closed
 *                   v
 *                DRAINING --receive ends--> retired (FREE)
 */
enum slot_state {
    SLOT_FREE = 0,
    SLOT_ARMED,
    SLOT_IDLE,
    SLOT_CLOSING,
    SLOT_CLOSING_IDLE,
    SLOT_DRAINING,
};

struct socket_slot {
    int fd;
    uint32_t generation;
    uint64_t tag;
    uint8_t state;
    uint8_t listener;
    /* The buffer group its receive takes buffers from (GROUP_*). */
    uint8_t group;
    /* Registered in the ring's file table at the slot's index (IOSQE_FIXED_FILE). */
    uint8_t fixed;
    /* Windows go out segmented (until the socket's path refuses once). */
    uint8_t segments;
};

struct send_slot {
    struct msghdr message;
    /* A single datagram's header and payload; a segmented send's iovecs are in the ring's pool. */
    struct iovec iov[2];
    struct sockaddr_storage name;
    uint8_t control[SEND_CONTROL_SPACE];
    uint8_t header[SEND_INLINE];
    /* A run of a window (OP_SEND_RUN): its socket and how many datagrams it carries. */
    uint32_t socket;
    uint32_t generation;
    uint32_t datagrams;
};

struct stampede_ring {
    struct io_uring ring;
    struct buffer_group groups[GROUP_COUNT];
    /* What a multishot recvmsg lays out in each buffer (name, control). One per kind of socket,
     * held here because the kernel reads it at submission and the socket array may move. */
    struct msghdr listener_template;
    struct msghdr transfer_template;

    struct socket_slot *sockets;
    uint32_t socket_capacity;
    uint32_t *free_sockets;
    uint32_t free_count;
    uint32_t open_count;
    uint32_t *to_arm;
    uint32_t to_arm_count;
    uint32_t *to_close;
    uint32_t to_close_count;

    struct send_slot *sends;
    uint32_t send_capacity;
    uint32_t sends_used;
    uint32_t sends_in_flight;
    uint8_t *arena; /* headers too big to inline (streamed blocks) */
    struct iovec *vectors; /* segmented sends' iovecs: header, payload, header, ... */
    uint32_t vector_capacity;
    uint32_t vectors_used;
    int segmentation;
    size_t arena_size;
    size_t arena_used;

    stampede_ring_datagram *datagrams;
    uint32_t datagram_capacity;
    /* Socket errors (no buffer) a batch may report; datagrams have a place per receive buffer. */
    uint32_t error_capacity;
    uint32_t error_count;
    /* Size of the sparse registered-file table (0: none, plain fds): a slot below it gets
     * its socket registered, so no SQE pays for the fd lookup. */
    uint32_t fixed_capacity;
    uint32_t datagram_count;
    /* Buffers lent to the caller with the last batch, returned at the next wait. */
    uint16_t *lent_ids;
    uint8_t *lent_groups;
    uint32_t lent_count;

    int enabled;
    /* Receive completions, and sends' peer errors, met while a mid-turn send flush waited:
     * handled at the next wait. */
    struct io_uring_cqe *deferred;
    uint32_t deferred_count;
    uint32_t deferred_capacity;
    int deferring;
    uint32_t cqe_capacity;
    /* The watched descriptor (stampede_ring_watch), and whether its poll must be (re)armed. */
    int watch_fd;
    int watching;
    int watch_to_arm;
    /* The kernel dropped completions (EBADR): a receive's final one may be among them, which would
     * leave its slot ARMED with nothing in the kernel, deaf. Set until every receive is verified. */
    int receives_suspect;
    stampede_ring_stats stats;
};

/* user_data: op (bits 0-3), the receive's buffer group (bits 4-5), slot (8-31), generation (32-63). */
static inline uint64_t pack(unsigned op, unsigned group, uint32_t slot, uint32_t generation)
{
    return (uint64_t)op | (uint64_t)group << 4 | (uint64_t)slot << 8 | (uint64_t)generation << 32;
}
_Static_assert(GROUP_COUNT <= 4, "the group fits user_data's bits 4-5");

static inline unsigned unpack_op(uint64_t data) { return data & 0xF; }
static inline unsigned unpack_group(uint64_t data) { return (data >> 4) & 3; }
static inline uint32_t unpack_slot(uint64_t data) { return (data >> 8) & 0xFFFFFF; }
static inline uint32_t unpack_generation(uint64_t data) { return data >> 32; }

/* Returns buffer `id` of `g` to the kernel at position `offset` of the next advance. */
void give_buffer(struct buffer_group *g, uint16_t id, int offset);
/* A listener's datagram's destination address (PKTINFO) and the time the kernel took it
 * (SO_TIMESTAMPNS, monotonic ns); each zero where its message is missing. */
void stampede_ring_controls(struct io_uring_recvmsg_out *out, struct msghdr *template_message,
                            struct sockaddr_storage *local, int64_t *received);

#endif
