/*
 * CStampedeRing: batched UDP I/O through io_uring for the Stampede worker.
 *
 * An opaque ring per worker. Sockets are opened by the caller and handed over; each gets a
 * multishot recvmsg over a provided-buffer ring. Sends are SENDMSG of header + payload (the
 * payload is referenced, not copied). stampede_ring_wait submits everything queued with one
 * io_uring_enter, reaps completions in bulk and returns the datagrams that arrived.
 * Functions return a non-negative result or a negative errno. C never calls into Swift.
 */
#ifndef C_STAMPEDE_RING_H
#define C_STAMPEDE_RING_H

#include <stdint.h>
#include <sys/socket.h>

typedef struct stampede_ring stampede_ring;

typedef struct {
    /* Submission queue entries; the completion queue is four times larger. */
    uint32_t entries;
    /* Receive buffers for small datagrams (ACKs, small blocks): count (a power of two) and payload size. */
    uint32_t small_buffers;
    uint32_t small_size;
    /* Receive buffers for uploads with large blocks. */
    uint32_t large_buffers;
    uint32_t large_size;
    /* Receive buffers for listeners: requests (and, in single-port mode, an upload's DATA). */
    uint32_t request_buffers;
    uint32_t request_size;
    /* Sends in flight at once (one msghdr + iovecs each). */
    uint32_t send_slots;
    /* Datagrams returned by one wait. */
    uint32_t max_datagrams;
    /* Non-zero: windows go out as segmented sends (UDP GSO; the caller has probed the kernel). */
    uint32_t segmentation;
} stampede_ring_config;

/* One received datagram; `bytes` points into a provided buffer, valid until the next wait. */
typedef struct {
    uint64_t tag;
    const uint8_t *bytes;
    /* Payload length, or a negative errno for a socket error (ECONNREFUSED). */
    int32_t length;
    /* Non-zero: the datagram was longer than its buffer; `bytes` holds its start. */
    uint32_t truncated;
    /* Listeners: when the kernel took it (monotonic ns, SO_TIMESTAMPNS); zero otherwise. */
    int64_t received;
    struct sockaddr_storage peer;
    /* Listeners: the address the datagram was sent to (PKTINFO); zero otherwise. */
    struct sockaddr_storage local;
} stampede_ring_datagram;

typedef struct {
    /* Sends the kernel refused (a full socket buffer: loss that retransmission repairs). */
    uint64_t send_failures;
    /* Receives that ended for want of a provided buffer (re-armed at the next wait). */
    uint64_t receive_buffer_exhausted;
    /* Segmented sends a socket's path refused, sent again one datagram at a time. */
    uint64_t segmentation_fallbacks;
    /* Segmented sends the kernel took. */
    uint64_t segmented_sends;
    /* Entries into the kernel: io_uring_enter (when liburing makes one), registrations, and the
     * sendmmsg of a refused segmented send. */
    uint64_t system_calls;
    /* SENDMSG operations queued (each one datagram or a segmented send), and the sendmmsg
     * messages of the one-by-one fallback. */
    uint64_t send_operations;
    /* Datagrams the kernel took. */
    uint64_t datagrams_sent;
    /* Times the kernel said it dropped completions (io_uring_enter's EBADR: no memory for its
     * overflow list). Which ones is not said: a lost send's is waited for no longer than a
     * second; every receive is verified at the next wait, and one whose end was lost armed again. */
    uint64_t completions_lost;
    /* Receives found ended without their final completion (lost), and armed again. */
    uint64_t receives_recovered;
} stampede_ring_stats;

/* Checks that this kernel lets us use what the engine needs (a ring, provided buffer rings,
 * multishot recvmsg). 0, or a negative errno with *reason set to a static explanation. */
int stampede_ring_probe(const char **reason);

/* *flags names the setup flags the kernel accepted (a static string). NULL on failure, *error set. */
stampede_ring *stampede_ring_create(const stampede_ring_config *config, const char **flags, int *error);
void stampede_ring_destroy(stampede_ring *ring);

/* Hands over a non-blocking UDP socket and arms its receive: a listener's into the request
 * buffers, another's into the large ones if `large_datagrams`, else the small. Returns the slot. */
int stampede_ring_add_socket(stampede_ring *ring, int fd, uint64_t tag, int is_listener, int large_datagrams);
/* Ends waits when `fd` becomes readable (a multishot poll; the completion carries no datagram):
 * the storm's epoll of HTTP connections. Armed at the next wait; one descriptor per ring. */
int stampede_ring_watch(stampede_ring *ring, int fd);
/* The fd of a slot (for getsockname). */
int stampede_ring_socket_fd(const stampede_ring *ring, int slot);
/* Whether a slot holds a listener (1) or a transfer or client socket (0). */
int stampede_ring_socket_is_listener(const stampede_ring *ring, int slot);
/* Sends queued before still go out; the fd is closed and the slot reused once its receive is cancelled. */
void stampede_ring_close_socket(stampede_ring *ring, int slot);

/* Queues a datagram: `header` is copied, `payload` is referenced until the next wait returns.
 * `to` addresses a datagram from an unconnected socket; `from` (optional, with `to`) sets a
 * listener's source address. */
int stampede_ring_send(stampede_ring *ring, int slot, const void *header, uint32_t header_length,
                       const void *payload, uint32_t payload_length,
                       const struct sockaddr_storage *to, const struct sockaddr_storage *from);

/* Queues a window of `count` DATA datagrams: datagram i is the 4-byte headers[4i..4i+4] (copied)
 * and payload[i * block_size, min((i + 1) * block_size, payload_length)) (referenced until the
 * next wait returns); only the last may be short or empty. With segmentation on, runs of them go
 * out as one SENDMSG each with a UDP_SEGMENT control message; a socket whose path refuses one
 * (EINVAL, EIO, EMSGSIZE) gets that run again one datagram at a time, and so its later windows.
 * `to` and `from` as for stampede_ring_send. */
int stampede_ring_send_window(stampede_ring *ring, int slot, const uint8_t *headers, uint32_t count,
                              const uint8_t *payload, uint32_t payload_length, uint32_t block_size,
                              const struct sockaddr_storage *to, const struct sockaddr_storage *from);

/* Submits, waits up to timeout_ns (negative: no limit) for a datagram, reaps. Returns how many
 * datagrams are in stampede_ring_datagrams(). Every send queued before has completed on return. */
int stampede_ring_wait(stampede_ring *ring, int64_t timeout_ns);
const stampede_ring_datagram *stampede_ring_datagrams(const stampede_ring *ring);
stampede_ring_stats stampede_ring_get_stats(const stampede_ring *ring);
/* Sockets still held (open, or closing with a receive not yet cancelled). */
int stampede_ring_socket_count(const stampede_ring *ring);

#endif
