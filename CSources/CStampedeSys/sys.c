#include "CStampedeSys.h"

#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <linux/openat2.h>
#include <linux/sock_diag.h>
#include <netinet/tcp.h>
#include <netinet/udp.h>
#include <net/if.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

/* An optimized build is a shipped one: hardened as Debian builds C (Package.swift's strictC). */
#if defined(__OPTIMIZE__) && !defined(_FORTIFY_SOURCE)
#error "optimized builds of Stampede's C need _FORTIFY_SOURCE (Package.swift, strictC)"
#endif

_Static_assert(sizeof(stampede_mmsghdr) == sizeof(struct mmsghdr), "mmsghdr layout");
_Static_assert(offsetof(stampede_mmsghdr, msg_len) == offsetof(struct mmsghdr, msg_len), "mmsghdr layout");

const int stampede_o_path = O_PATH;

static int negative_errno(int result)
{
    return result < 0 ? -errno : result;
}

int stampede_recvmmsg(int fd, stampede_mmsghdr *messages, unsigned int count)
{
    int n;
    do {
        n = recvmmsg(fd, (struct mmsghdr *)messages, count, MSG_DONTWAIT, NULL);
    } while (n < 0 && errno == EINTR);
    return negative_errno(n);
}

int stampede_sendmmsg(int fd, stampede_mmsghdr *messages, unsigned int count)
{
    int n;
    do {
        n = sendmmsg(fd, (struct mmsghdr *)messages, count, MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    return negative_errno(n);
}

size_t stampede_pktinfo_space(void)
{
    size_t v4 = CMSG_SPACE(sizeof(struct in_pktinfo));
    size_t v6 = CMSG_SPACE(sizeof(struct in6_pktinfo));
    return v4 > v6 ? v4 : v6;
}

int stampede_pktinfo_decode(const struct cmsghdr *c, struct sockaddr_storage *local)
{
    memset(local, 0, sizeof(*local));
    if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_PKTINFO) {
        struct in_pktinfo info;
        struct sockaddr_in *sin = (struct sockaddr_in *)local;
        memcpy(&info, CMSG_DATA(c), sizeof(info));
        sin->sin_family = AF_INET;
        /* Not ipi_addr, the header's destination: for a request sent to a broadcast address
         * that is no address a reply can come from. ipi_spec_dst is the local address to answer
         * from: the destination itself for a unicast request, the interface's for a broadcast. */
        sin->sin_addr = info.ipi_spec_dst;
        return 1;
    }
    if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_PKTINFO) {
        struct in6_pktinfo info;
        struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)local;
        memcpy(&info, CMSG_DATA(c), sizeof(info));
        sin6->sin6_family = AF_INET6;
        /* A multicast destination is no source for a reply: left unspecified, the kernel picks
         * the interface's address when the transfer socket connects to the client. */
        if (!IN6_IS_ADDR_MULTICAST(&info.ipi6_addr))
            sin6->sin6_addr = info.ipi6_addr;
        /* A link-local destination only means something on the interface it came in on. */
        if (IN6_IS_ADDR_LINKLOCAL(&info.ipi6_addr))
            sin6->sin6_scope_id = info.ipi6_ifindex;
        return 1;
    }
    return 0;
}

size_t stampede_receive_control_space(void)
{
    return stampede_pktinfo_space() + CMSG_SPACE(sizeof(struct timespec));
}

static int64_t nanoseconds(struct timespec t)
{
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

int stampede_receive_time_decode(const struct cmsghdr *c, int64_t *received_ns)
{
    struct timespec stamp, real, monotonic;
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_TIMESTAMPNS)
        return 0;
    memcpy(&stamp, CMSG_DATA(c), sizeof(stamp));
    /* The stamp is CLOCK_REALTIME; its age, taken from the monotonic clock's now, is the same
     * moment on the clock everything else here reads. */
    clock_gettime(CLOCK_REALTIME, &real);
    clock_gettime(CLOCK_MONOTONIC, &monotonic);
    *received_ns = nanoseconds(monotonic) - (nanoseconds(real) - nanoseconds(stamp));
    return 1;
}

void stampede_listener_controls(const struct msghdr *message, struct sockaddr_storage *local, int64_t *received_ns)
{
    struct cmsghdr *c;
    memset(local, 0, sizeof(*local));
    *received_ns = 0;
    for (c = CMSG_FIRSTHDR((struct msghdr *)message); c; c = CMSG_NXTHDR((struct msghdr *)message, c)) {
        struct sockaddr_storage address;
        if (stampede_pktinfo_decode(c, &address))
            *local = address;
        else
            (void)stampede_receive_time_decode(c, received_ns);
    }
}

void stampede_receive_timestamps(int fd)
{
    int one = 1;
    /* Best effort: without it a listener's datagrams carry no time, and a resend read late from
     * the queue is told from a client that started over by how quiet the client looks alone.
     * The kernel turns stamping on for the host in a deferred work item the first time a socket
     * asks: until it has run (milliseconds; seconds on a loaded host), a datagram is stamped
     * when it is read, which is the behaviour without stamps. */
    (void)setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof(one));
}

size_t stampede_pktinfo_control(void *buffer, size_t capacity, const struct sockaddr_storage *local)
{
    struct msghdr message;
    struct cmsghdr *c;
    memset(&message, 0, sizeof(message));
    message.msg_control = buffer;
    message.msg_controllen = capacity;
    memset(buffer, 0, capacity);
    c = CMSG_FIRSTHDR(&message);
    if (!c)
        return 0;
    if (local->ss_family == AF_INET) {
        struct in_pktinfo info;
        memset(&info, 0, sizeof(info));
        info.ipi_spec_dst = ((const struct sockaddr_in *)local)->sin_addr;
        if (info.ipi_spec_dst.s_addr == htonl(INADDR_ANY) || capacity < CMSG_SPACE(sizeof(info)))
            return 0;
        c->cmsg_level = IPPROTO_IP;
        c->cmsg_type = IP_PKTINFO;
        c->cmsg_len = CMSG_LEN(sizeof(info));
        memcpy(CMSG_DATA(c), &info, sizeof(info));
        return CMSG_SPACE(sizeof(info));
    }
    if (local->ss_family == AF_INET6) {
        struct in6_pktinfo info;
        const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)local;
        memset(&info, 0, sizeof(info));
        info.ipi6_addr = sin6->sin6_addr;
        info.ipi6_ifindex = sin6->sin6_scope_id;
        if (IN6_IS_ADDR_UNSPECIFIED(&info.ipi6_addr) || capacity < CMSG_SPACE(sizeof(info)))
            return 0;
        c->cmsg_level = IPPROTO_IPV6;
        c->cmsg_type = IPV6_PKTINFO;
        c->cmsg_len = CMSG_LEN(sizeof(info));
        memcpy(CMSG_DATA(c), &info, sizeof(info));
        return CMSG_SPACE(sizeof(info));
    }
    return 0;
}

size_t stampede_segment_space(void)
{
    return CMSG_SPACE(sizeof(uint16_t));
}

int stampede_segment_probe(int family)
{
    int fd = socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0), size = 1400, result = 0;
    if (fd < 0)
        return -errno;
    if (setsockopt(fd, SOL_UDP, UDP_SEGMENT, &size, sizeof(size)) < 0)
        result = -errno;
    close(fd);
    return result;
}

size_t stampede_segment_control(void *buffer, size_t capacity, size_t used, uint16_t segment_size)
{
    struct cmsghdr *c = (struct cmsghdr *)((uint8_t *)buffer + used);
    if (used % sizeof(size_t) != 0 || used + CMSG_SPACE(sizeof(segment_size)) > capacity)
        return 0;
    memset(c, 0, CMSG_SPACE(sizeof(segment_size)));
    c->cmsg_level = SOL_UDP;
    c->cmsg_type = UDP_SEGMENT;
    c->cmsg_len = CMSG_LEN(sizeof(segment_size));
    memcpy(CMSG_DATA(c), &segment_size, sizeof(segment_size));
    return used + CMSG_SPACE(sizeof(segment_size));
}

int stampede_segmentation_refused(int error)
{
    return error == EINVAL || error == EIO || error == EMSGSIZE;
}

static socklen_t address_length(const struct sockaddr_storage *address)
{
    return address->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

static int fail_closing(int fd)
{
    int error = -errno;
    close(fd);
    return error;
}

int stampede_fallocate(int fd, int64_t length)
{
    return negative_errno(fallocate(fd, 0, 0, (off_t)length));
}

void stampede_grow_socket_buffer(int fd, int receive, int bytes)
{
    int current = 0;
    socklen_t length = sizeof(current);
    if (bytes <= 0)
        return;
    /* getsockopt reports the doubled value the kernel keeps. */
    if (getsockopt(fd, SOL_SOCKET, receive ? SO_RCVBUF : SO_SNDBUF, &current, &length) == 0 && current / 2 >= bytes)
        return;
    if (setsockopt(fd, SOL_SOCKET, receive ? SO_RCVBUFFORCE : SO_SNDBUFFORCE, &bytes, sizeof(bytes)) < 0)
        (void)setsockopt(fd, SOL_SOCKET, receive ? SO_RCVBUF : SO_SNDBUF, &bytes, sizeof(bytes));
}

int stampede_listener_socket(const struct sockaddr_storage *address, int receive_buffer)
{
    int one = 1;
    int fd = socket(address->ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0)
        return fail_closing(fd);
    /* A rack boot is a burst of thousands of RRQs: a large queue drains it instead of dropping. */
    stampede_grow_socket_buffer(fd, 1, receive_buffer);
    if (address->ss_family == AF_INET6) {
        if (setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one)) < 0 ||
            setsockopt(fd, IPPROTO_IPV6, IPV6_RECVPKTINFO, &one, sizeof(one)) < 0)
            return fail_closing(fd);
    } else if (setsockopt(fd, IPPROTO_IP, IP_PKTINFO, &one, sizeof(one)) < 0) {
        return fail_closing(fd);
    }
    stampede_receive_timestamps(fd);
    if (bind(fd, (const struct sockaddr *)address, address_length(address)) < 0)
        return fail_closing(fd);
    return fd;
}

int stampede_memfd(const char *name, int64_t size)
{
    int fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0)
        return -errno;
    if (ftruncate(fd, size) < 0)
        return fail_closing(fd);
    return fd;
}

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif

void *stampede_map_image(int fd, size_t size)
{
    const size_t huge = (size_t)2 << 20, page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t whole = size & ~(huge - 1);
    if (whole == 0)
        return mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    /* A reservation a huge page longer, the memfd mapped over its first aligned address, the
     * rest given back. */
    const size_t reserved_size = size + huge;
    char *reserved = mmap(NULL, reserved_size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (reserved == MAP_FAILED)
        return MAP_FAILED;
    char *base = (char *)(((uintptr_t)reserved + huge - 1) & ~(uintptr_t)(huge - 1));
    if (mmap(base, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
        int error = errno;
        munmap(reserved, reserved_size);
        errno = error;
        return MAP_FAILED;
    }
    char *end = base + ((size + page - 1) & ~(page - 1));
    if (base > reserved)
        munmap(reserved, (size_t)(base - reserved));
    if (end < reserved + reserved_size)
        munmap(end, (size_t)(reserved + reserved_size - end));
    /* The kernel collapses only what holds a page: one byte of each 2 MiB (zero, as it was)
     * costs a 4 KiB page to copy where filling it all first would cost the whole 2 MiB. */
    for (size_t offset = 0; offset < whole; offset += huge)
        *(volatile char *)(base + offset) = 0;
    (void)madvise(base, whole, MADV_COLLAPSE);
    return base;
}

int stampede_tcp_listener(const struct sockaddr_storage *address, int backlog)
{
    int one = 1;
    int fd = socket(address->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0)
        return fail_closing(fd);
    if (address->ss_family == AF_INET6 && setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one)) < 0)
        return fail_closing(fd);
    if (bind(fd, (const struct sockaddr *)address, address_length(address)) < 0 || listen(fd, backlog) < 0)
        return fail_closing(fd);
    return fd;
}

int stampede_probe_exclusive(const struct sockaddr_storage *address, int stream, struct sockaddr_storage *bound)
{
    int one = 1;
    socklen_t length = sizeof(*bound);
    int fd = socket(address->ss_family, (stream ? SOCK_STREAM : SOCK_DGRAM) | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    /* As the listeners will be bound (IPv6 alone on an IPv6 address), but without SO_REUSEPORT:
     * any socket on the address makes it fail, as in.tftpd's bind would. A TCP probe may share
     * the port with connections of an earlier server in TIME_WAIT, never with a listener. */
    if ((stream && setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0) ||
        (address->ss_family == AF_INET6 && setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one)) < 0) ||
        bind(fd, (const struct sockaddr *)address, address_length(address)) < 0 ||
        getsockname(fd, (struct sockaddr *)bound, &length) < 0)
        return fail_closing(fd);
    close(fd);
    return 0;
}

int stampede_tcp_unsent_limit(int fd, int bytes)
{
    return negative_errno(setsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &bytes, sizeof(bytes)));
}

int stampede_tcp_accept(int listener, struct sockaddr_storage *peer)
{
    int one = 1;
    socklen_t length = sizeof(*peer);
    int fd = accept4(listener, (struct sockaddr *)peer, &length, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0)
        return -errno;
    /* A response is written whole (its head held back with MSG_MORE until the body joins it): Nagle would
     * only hold a small answer back behind the client's delayed ACK. */
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

static void set_port(struct sockaddr_storage *address, uint16_t port)
{
    if (address->ss_family == AF_INET6)
        ((struct sockaddr_in6 *)address)->sin6_port = htons(port);
    else
        ((struct sockaddr_in *)address)->sin_port = htons(port);
}

int stampede_transfer_socket(const struct sockaddr_storage *local, const struct sockaddr_storage *peer,
                             uint16_t port_low, uint16_t port_high, uint32_t seed)
{
    struct sockaddr_storage bound = *local;
    int one = 1;
    int fd = socket(local->ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    /* An IPv6 socket hears IPv6 alone, as the listeners do; only one bound to an IPv4-mapped
     * address (a request that came to a dual-stack socket) must hear IPv4. */
    if (local->ss_family == AF_INET6 && !IN6_IS_ADDR_V4MAPPED(&((const struct sockaddr_in6 *)local)->sin6_addr) &&
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one)) < 0)
        return fail_closing(fd);
    if (port_low == 0) {
        set_port(&bound, 0);
        if (bind(fd, (struct sockaddr *)&bound, address_length(&bound)) < 0)
            return fail_closing(fd);
    } else {
        uint32_t span = (uint32_t)port_high - port_low + 1, i;
        int bound_ok = 0;
        for (i = 0; i < span && !bound_ok; i++) {
            set_port(&bound, (uint16_t)(port_low + (seed + i) % span));
            if (bind(fd, (struct sockaddr *)&bound, address_length(&bound)) == 0)
                bound_ok = 1;
            else if (errno != EADDRINUSE)
                return fail_closing(fd);
        }
        if (!bound_ok) {
            close(fd);
            return -EADDRINUSE;
        }
    }
    if (peer && connect(fd, (const struct sockaddr *)peer, address_length(peer)) < 0)
        return fail_closing(fd);
    return fd;
}

int stampede_socket_address(int fd, struct sockaddr_storage *address)
{
    socklen_t length = sizeof(*address);
    return negative_errno(getsockname(fd, (struct sockaddr *)address, &length));
}

uint32_t stampede_socket_drops(int fd)
{
    uint32_t meminfo[SK_MEMINFO_VARS];
    socklen_t length = sizeof(meminfo);
    memset(meminfo, 0, sizeof(meminfo));
    if (getsockopt(fd, SOL_SOCKET, SO_MEMINFO, meminfo, &length) != 0 || length <= SK_MEMINFO_DROPS * sizeof(uint32_t))
        return 0;
    return meminfo[SK_MEMINFO_DROPS];
}

int stampede_open_beneath(int directory, const char *path, int flags, unsigned int mode, int in_root)
{
    struct open_how how;
    long fd;
    memset(&how, 0, sizeof(how));
    how.flags = (uint64_t)flags | O_CLOEXEC;
    how.mode = (flags & (O_CREAT | O_TMPFILE)) ? mode : 0;
    how.resolve = (in_root ? RESOLVE_IN_ROOT : RESOLVE_BENEATH) | RESOLVE_NO_MAGICLINKS;
    do {
        fd = syscall(SYS_openat2, directory, path, &how, sizeof(how));
    } while (fd < 0 && (errno == EINTR || errno == EAGAIN));
    return fd < 0 ? -errno : (int)fd;
}

int stampede_open_beneath_cached(int directory, const char *path, int flags, int in_root)
{
    struct open_how how;
    long fd;
    memset(&how, 0, sizeof(how));
    how.flags = (uint64_t)flags | O_CLOEXEC;
    how.resolve = (in_root ? RESOLVE_IN_ROOT : RESOLVE_BENEATH) | RESOLVE_NO_MAGICLINKS | RESOLVE_CACHED;
    do {
        fd = syscall(SYS_openat2, directory, path, &how, sizeof(how));
    } while (fd < 0 && errno == EINTR);
    return fd < 0 ? -errno : (int)fd;
}

int stampede_stat_cached(int fd, struct stat *out)
{
    struct statx seen;
    if (statx(fd, "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC, STATX_BASIC_STATS, &seen) != 0)
        return -errno;
    memset(out, 0, sizeof(*out));
    out->st_dev = makedev(seen.stx_dev_major, seen.stx_dev_minor);
    out->st_ino = seen.stx_ino;
    out->st_mode = seen.stx_mode;
    out->st_nlink = seen.stx_nlink;
    out->st_uid = seen.stx_uid;
    out->st_gid = seen.stx_gid;
    out->st_rdev = makedev(seen.stx_rdev_major, seen.stx_rdev_minor);
    out->st_size = (off_t)seen.stx_size;
    out->st_blksize = (blksize_t)seen.stx_blksize;
    out->st_blocks = (blkcnt_t)seen.stx_blocks;
    out->st_atim.tv_sec = seen.stx_atime.tv_sec;
    out->st_atim.tv_nsec = seen.stx_atime.tv_nsec;
    out->st_mtim.tv_sec = seen.stx_mtime.tv_sec;
    out->st_mtim.tv_nsec = seen.stx_mtime.tv_nsec;
    out->st_ctim.tv_sec = seen.stx_ctime.tv_sec;
    out->st_ctim.tv_nsec = seen.stx_ctime.tv_nsec;
    return 0;
}

/* cachestat(2) (Linux 6.5), by its number: Debian 12's headers predate it. */
#ifndef __NR_cachestat
#define __NR_cachestat 451
#endif
struct stampede_cachestat_range { uint64_t off, len; };
struct stampede_cachestat { uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted; };

int stampede_range_cached(int fd, off_t offset, size_t length)
{
    struct stampede_cachestat_range range = { (uint64_t)offset, (uint64_t)length };
    struct stampede_cachestat seen;
    long page = sysconf(_SC_PAGESIZE);
    uint64_t first = (uint64_t)offset / (uint64_t)page, last = ((uint64_t)offset + length + (uint64_t)page - 1) / (uint64_t)page;
    memset(&seen, 0, sizeof(seen));
    if (length == 0)
        return 1;
    if (syscall(__NR_cachestat, fd, &range, &seen, 0) != 0)
        return -errno;
    return seen.nr_cache >= last - first ? 1 : 0;
}

ssize_t stampede_pread_cached(int fd, void *buffer, size_t length, off_t offset)
{
    struct iovec vector = { buffer, length };
    ssize_t count = preadv2(fd, &vector, 1, offset, RWF_NOWAIT);
    return count < 0 ? -errno : count;
}

long stampede_file_system_type(int fd)
{
    struct statfs system;
    return fstatfs(fd, &system) == 0 ? (long)system.f_type : -errno;
}

int stampede_populate(int fd, off_t offset, size_t length)
{
    long page = sysconf(_SC_PAGESIZE);
    off_t start = offset - offset % page;
    size_t span = length + (size_t)(offset - start);
    void *mapped;
    if (span == 0)
        return 0;
    mapped = mmap(NULL, span, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, start);
    if (mapped == MAP_FAILED)
        return -errno;
    munmap(mapped, span);
    return 0;
}

int stampede_epoll_create(void)
{
    return negative_errno(epoll_create1(EPOLL_CLOEXEC));
}

int stampede_eventfd(void)
{
    return negative_errno(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
}

int stampede_epoll_add(int epoll_fd, int fd, uint64_t tag)
{
    struct epoll_event event;
    memset(&event, 0, sizeof(event));
    event.events = EPOLLIN;
    event.data.u64 = tag;
    return negative_errno(epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &event));
}

int stampede_epoll_add_exclusive(int epoll_fd, int fd, uint64_t tag)
{
    struct epoll_event event;
    memset(&event, 0, sizeof(event));
    event.events = EPOLLIN | EPOLLEXCLUSIVE;
    event.data.u64 = tag;
    return negative_errno(epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &event));
}

int stampede_epoll_remove(int epoll_fd, int fd)
{
    return negative_errno(epoll_ctl(epoll_fd, EPOLL_CTL_DEL, fd, NULL));
}

int stampede_epoll_add_edge(int epoll_fd, int fd, uint64_t tag)
{
    struct epoll_event event;
    memset(&event, 0, sizeof(event));
    event.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
    event.data.u64 = tag;
    return negative_errno(epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &event));
}

int stampede_epoll_wait(int epoll_fd, uint64_t *tags, int capacity, int64_t timeout_ns)
{
    struct epoll_event events[256];
    struct timespec timeout, *wait = NULL;
    int n, i;
    if (capacity > 256)
        capacity = 256;
    if (timeout_ns >= 0) {
        timeout.tv_sec = timeout_ns / 1000000000;
        timeout.tv_nsec = timeout_ns % 1000000000;
        wait = &timeout;
    }
    n = epoll_pwait2(epoll_fd, events, capacity, wait, NULL);
    if (n < 0)
        return errno == EINTR ? 0 : -errno;
    for (i = 0; i < n; i++)
        tags[i] = events[i].data.u64;
    return n;
}

static int same_address(const struct sockaddr *a, const struct sockaddr_storage *b)
{
    if (a->sa_family != b->ss_family)
        return 0;
    if (a->sa_family == AF_INET)
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr == ((const struct sockaddr_in *)b)->sin_addr.s_addr;
    if (a->sa_family == AF_INET6)
        return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr, &((const struct sockaddr_in6 *)b)->sin6_addr,
                      sizeof(struct in6_addr)) == 0;
    return 0;
}

int stampede_interface_mtu(const struct sockaddr_storage *address)
{
    struct ifaddrs *list, *entry;
    int result = -ENOENT;
    if (getifaddrs(&list) < 0)
        return -errno;
    for (entry = list; entry; entry = entry->ifa_next) {
        if (entry->ifa_addr && same_address(entry->ifa_addr, address)) {
            struct ifreq request;
            int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
            if (fd < 0) {
                result = -errno;
                break;
            }
            memset(&request, 0, sizeof(request));
            strncpy(request.ifr_name, entry->ifa_name, IFNAMSIZ - 1);
            result = ioctl(fd, SIOCGIFMTU, &request) < 0 ? -errno : request.ifr_mtu;
            close(fd);
            break;
        }
    }
    freeifaddrs(list);
    return result;
}

/* IPv4 through SIOCGIFCONF, not getifaddrs: a sandbox that allows only AF_INET and AF_INET6
 * sockets (the package's unit) refuses the netlink socket getifaddrs opens. */
/* SIOCGIFCONF lists IPv4 addresses alone: an IPv6 one is looked up in getifaddrs. */
static int interface_of6(const struct sockaddr_storage *address, char *name, size_t capacity)
{
    struct ifaddrs *list, *entry;
    int result = -ENOENT;
    if (getifaddrs(&list) < 0)
        return -errno;
    for (entry = list; entry; entry = entry->ifa_next) {
        if (!entry->ifa_addr || !same_address(entry->ifa_addr, address))
            continue;
        if (strlen(entry->ifa_name) >= capacity) {
            result = -ENAMETOOLONG;
            break;
        }
        strcpy(name, entry->ifa_name);
        result = (int)if_nametoindex(entry->ifa_name);
        if (result == 0)
            result = -errno;
        break;
    }
    freeifaddrs(list);
    return result;
}

int stampede_interface_of(const struct sockaddr_storage *address, char *name, size_t capacity)
{
    struct ifreq requests[256];
    struct ifconf list = { .ifc_len = sizeof(requests), .ifc_req = requests };
    int result = -ENOENT, fd, i;
    if (address->ss_family == AF_INET6)
        return interface_of6(address, name, capacity);
    if (address->ss_family != AF_INET)
        return -EAFNOSUPPORT;
    fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (ioctl(fd, SIOCGIFCONF, &list) < 0) {
        result = -errno;
        close(fd);
        return result;
    }
    for (i = 0; i < list.ifc_len / (int)sizeof(struct ifreq); i++) {
        char *label;
        if (!same_address(&requests[i].ifr_addr, address))
            continue;
        /* An alias's label (eth0:1) names its device before the colon. */
        label = strchr(requests[i].ifr_name, ':');
        if (label)
            *label = 0;
        if (strlen(requests[i].ifr_name) >= capacity) {
            result = -ENAMETOOLONG;
            break;
        }
        strcpy(name, requests[i].ifr_name);
        result = ioctl(fd, SIOCGIFINDEX, &requests[i]) < 0 ? -errno : requests[i].ifr_ifindex;
        break;
    }
    close(fd);
    return result;
}

/* Set by signal handlers, read by every worker thread: lock-free atomics, which are both
 * async-signal-safe and visible across threads (volatile sig_atomic_t is only the former). */
static atomic_int stop_flag;
static atomic_int reload_flag;
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "signal handlers need lock-free atomics");

static void on_reload_signal(int signal_number)
{
    (void)signal_number;
    atomic_store(&reload_flag, 1);
}

int stampede_reload_requested(void)
{
    return atomic_exchange(&reload_flag, 0);
}

static void on_stop_signal(int signal_number)
{
    (void)signal_number;
    atomic_store(&stop_flag, 1);
}

void stampede_install_stop_signals(void)
{
    struct sigaction action;
    memset(&action, 0, sizeof(action));
    action.sa_handler = on_stop_signal;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, NULL);
    sigaction(SIGTERM, &action, NULL);
    /* SIGHUP re-reads the remap rules, as in.tftpd does; it never ends the server. */
    action.sa_handler = on_reload_signal;
    sigaction(SIGHUP, &action, NULL);
    signal(SIGPIPE, SIG_IGN);
}

int stampede_stop_requested(void)
{
    return atomic_load(&stop_flag);
}

void stampede_request_stop(void)
{
    atomic_store(&stop_flag, 1);
}

int64_t stampede_monotonic_ns(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return nanoseconds(now);
}
