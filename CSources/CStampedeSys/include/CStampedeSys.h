/*
 * CStampedeSys: the Linux calls and macros Swift cannot import directly.
 *
 * Every function returns a non-negative result or a negative errno, never sets errno for the
 * caller to read. Nothing here knows about TFTP; nothing here calls back into Swift.
 */
#ifndef C_STAMPEDE_SYS_H
#define C_STAMPEDE_SYS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <netinet/in.h>

/* struct mmsghdr is behind _GNU_SOURCE, which Swift's Glibc module does not set. Same layout. */
typedef struct {
    struct msghdr msg_hdr;
    unsigned int msg_len;
} stampede_mmsghdr;

int stampede_recvmmsg(int fd, stampede_mmsghdr *messages, unsigned int count);
int stampede_sendmmsg(int fd, stampede_mmsghdr *messages, unsigned int count);

/* Room a control buffer needs for one IP_PKTINFO or IPV6_PKTINFO message. */
size_t stampede_pktinfo_space(void);

struct cmsghdr;
/* Decodes one control message if it is IP_PKTINFO or IPV6_PKTINFO into `local` (the port is
 * left 0): the local address a reply to the datagram comes from, which for a broadcast or
 * multicast request is not the address it was sent to. Returns 1 if it was one, else 0. Shared
 * by both backends' receive paths. */
int stampede_pktinfo_decode(const struct cmsghdr *control, struct sockaddr_storage *local);

/* Room a listener's receive control buffer needs: PKTINFO and the kernel's receive time. */
size_t stampede_receive_control_space(void);

/* Decodes one control message if it is SCM_TIMESTAMPNS (SO_TIMESTAMPNS: when the kernel took the
 * datagram) into `received_ns`, on the monotonic clock of stampede_monotonic_ns. Returns 1 if it
 * was one, else 0. */
int stampede_receive_time_decode(const struct cmsghdr *control, int64_t *received_ns);

/* A listener's datagram's control messages, in one walk: the address to answer from (PKTINFO,
 * port 0) into `local` and when the kernel took it (monotonic ns) into `received_ns`; each zero
 * where its message is missing. The Glibc backend's; the io_uring engine walks its own layout. */
void stampede_listener_controls(const struct msghdr *message, struct sockaddr_storage *local, int64_t *received_ns);

/* Asks the kernel to stamp each datagram `fd` receives with the time it took it (SO_TIMESTAMPNS;
 * best effort). Listeners have it on. */
void stampede_receive_timestamps(int fd);

/* Writes a PKTINFO control message that makes sendmsg use `local` as the source address.
 * Returns the control length to store in msg_controllen (0 for an unspecified address). */
size_t stampede_pktinfo_control(void *buffer, size_t capacity, const struct sockaddr_storage *local);

/* UDP segmentation offload (UDP_SEGMENT, Linux 4.18): one send of a run of equal datagrams to
 * one peer, cut at the device (or in software where it cannot). */

/* The most datagrams one segmented send may carry (the kernel's UDP_MAX_SEGMENTS), and the most
 * bytes of UDP payload it may carry in all. */
enum { STAMPEDE_SEGMENTS_MAX = 64, STAMPEDE_SEGMENTED_BYTES_MAX = 65507 };

/* Room a control buffer needs for one UDP_SEGMENT message. */
size_t stampede_segment_space(void);

/* 0 if this kernel takes UDP_SEGMENT on a UDP socket of `family` (asked of a socket, not by a
 * send: the probe needs no route), else a negative errno. */
int stampede_segment_probe(int family);

/* Appends a UDP_SEGMENT control message (datagrams of `segment_size` bytes of UDP payload) after
 * the first `used` bytes of `buffer`. Returns the new control length, or 0 without room. */
size_t stampede_segment_control(void *buffer, size_t capacity, size_t used, uint16_t segment_size);

/* Is `error` (positive) a segmented send the socket's path refused, where the same datagrams sent
 * one by one go out: a segment larger than the path MTU (EINVAL), a device or a route that cannot
 * segment (EIO), more than the kernel takes (EMSGSIZE)? */
int stampede_segmentation_refused(int error);

/* Reserves the first `length` bytes of `fd` with fallocate(2) itself: 0, or a negative errno
 * (EOPNOTSUPP where the file system cannot; glibc's posix_fallocate would then write a byte into
 * every block). */
int stampede_fallocate(int fd, int64_t length);

/* Raises a socket's receive queue (`receive` != 0) or send queue to hold at least `bytes`, as
 * setsockopt counts them (the kernel doubles them for its bookkeeping); never lowers it, and 0
 * leaves it alone. SO_*BUFFORCE passes rmem_max / wmem_max when privileged; otherwise the kernel
 * caps it there. Best effort: a queue that cannot grow stays as it was. */
void stampede_grow_socket_buffer(int fd, int receive, int bytes);

/* A request listener: SO_REUSEPORT, PKTINFO on, IPV6_V6ONLY for IPv6, a receive buffer of at
 * least `receive_buffer` bytes (forced when privileged), non-blocking. Returns the fd. */
int stampede_listener_socket(const struct sockaddr_storage *address, int receive_buffer);

/* The proxyDHCP's sockets (dhcp.c): port 67 heard through a packet socket and answered through a
 * raw one, never bound, so that a DHCP server on the same host keeps what the kernel owes it. */
#define STAMPEDE_MAX_BOOT_NETWORKS 16
/* How a packet reached this host, from the packet socket's view of its link-layer destination. */
enum { STAMPEDE_DELIVERY_HOST = 0, STAMPEDE_DELIVERY_BROADCAST = 1, STAMPEDE_DELIVERY_OTHER = 2 };

/* A packet socket that hears UDP `port` on IPv4: limited broadcasts that come in on one of
 * `interfaces`, and packets sent to one of `addresses` (network byte order) on any interface;
 * `count` of each, at most STAMPEDE_MAX_BOOT_NETWORKS. Needs CAP_NET_RAW. Non-blocking. Returns
 * the descriptor or a negative errno. */
int stampede_dhcp_listener(const uint32_t *addresses, const int32_t *interfaces, int count, uint16_t port, int receive_buffer);

/* The next packet of a `stampede_dhcp_listener`, from its IP header on, into `buffer`: its whole
 * length (more than `capacity` when it was cut), the interface it came in on, and how it was
 * delivered (STAMPEDE_DELIVERY_*); or a negative errno (-EAGAIN: none). */
ssize_t stampede_dhcp_receive(int fd, void *buffer, size_t capacity, int32_t *interface, int32_t *delivery);

/* A raw socket that sends whole IPv4 packets (IPPROTO_RAW) and receives none; SO_BROADCAST.
 * Needs CAP_NET_RAW. Returns the descriptor or a negative errno. */
int stampede_dhcp_sender(void);

/* Sends `packet` (an IPv4 header first) to its destination address; `interface` > 0 sends it out
 * of that interface, from the packet's source address (a limited broadcast). Non-blocking: the
 * bytes sent, or a negative errno. */
ssize_t stampede_dhcp_send(int fd, const void *packet, size_t length, int32_t interface);

/* A PXE boot server's socket (port 4011): UDP on `address`, non-blocking; on IPv4 the
 * don't-fragment bit clear, on IPv6 IPv6 only. Returns the descriptor or a negative errno. */
int stampede_boot_server_socket(const struct sockaddr_storage *address, int receive_buffer);

/* A DHCP client's socket, as the storm's machines use one. IPv4: SO_REUSEADDR, SO_BROADCAST,
 * IP_PKTINFO, bound to `device` when given (its broadcasts alone, and out of it), then to
 * `address` (0.0.0.0:68). IPv6: IPv6 only, SO_REUSEADDR, its multicasts out of `device`, bound
 * to it and to `address` (this host's address there, port 546). Returns the descriptor or a
 * negative errno. */
int stampede_dhcp_client_socket(const struct sockaddr_storage *address, const char *device, int receive_buffer);

/* The DHCPv6 boot responder's sockets (dhcp.c). A UDP socket on [::]:`port` (547), IPv6 only,
 * PKTINFO on, joined to ff02::1:2 on each of `interfaces`; -errno (EADDRINUSE: a DHCPv6 server of
 * this host holds the port). */
int stampede_dhcp6_socket(uint16_t port, const int32_t *interfaces, int count, int receive_buffer);
/* The next datagram: its length (capacity + 1 when it was longer), its source in `peer`, the
 * interface it came in on and the address it was sent to (PKTINFO; 0 and :: when not said), or
 * -errno (-EAGAIN: none). */
ssize_t stampede_dhcp6_receive(int fd, void *buffer, size_t capacity, struct sockaddr_storage *peer, int32_t *interface,
                               uint8_t destination[16]);
/* One datagram to `to` (an IPv6 address, its scope for a link-local one): the bytes sent or -errno. */
ssize_t stampede_dhcp6_send(int fd, const void *bytes, size_t length, const struct sockaddr_storage *to);
/* The Ethernet address of `interface` (SIOCGIFHWADDR), or -errno. */
int stampede_hardware_address(const char *interface, uint8_t address[6]);

/* The interface that holds the IPv4 or IPv6 `address`: its name into `name` (`capacity` bytes, NUL
 * included) and its index as the result; -ENOENT when no interface has the address. */
int stampede_interface_of(const struct sockaddr_storage *address, char *name, size_t capacity);

/* A transfer socket: bound to `local` (port 0, or the first free port of lo..hi starting at a
 * point picked from `seed`), connected to `peer` (NULL: left unconnected, a shared transfer
 * socket, or a client's socket that hears the server's reply from a port not yet known),
 * non-blocking, IPV6_V6ONLY unless `local` is an IPv4-mapped address. Returns the fd. */
int stampede_transfer_socket(const struct sockaddr_storage *local, const struct sockaddr_storage *peer,
                             uint16_t port_low, uint16_t port_high, uint32_t seed);

/* The bound address of a socket (to learn an ephemeral port). */
int stampede_socket_address(int fd, struct sockaddr_storage *address);

/* Datagrams the kernel dropped on their way into this socket since it was made (its receive
 * queue full, a filter's verdict: SO_MEMINFO's SK_MEMINFO_DROPS); 0 when it cannot say. */
uint32_t stampede_socket_drops(int fd);

/* O_PATH, which Swift's Glibc module hides behind _GNU_SOURCE: an fd that names a file without
 * opening it (no device is touched, no FIFO blocks). */
extern const int stampede_o_path;

/* openat2 with RESOLVE_NO_MAGICLINKS, and RESOLVE_BENEATH: `path` may not leave `directory` by
 * "..", an absolute path or a symlink (-EXDEV); or, with `in_root`, RESOLVE_IN_ROOT: `directory`
 * is the path's "/", as in a chroot ("/" and ".." stop there, absolute symlinks are read in it).
 * Returns the fd. */
int stampede_open_beneath(int directory, const char *path, int flags, unsigned int mode, int in_root);
/* stampede_open_beneath from the kernel's caches alone (RESOLVE_CACHED, no O_CREAT): -EAGAIN when
 * they cannot resolve `path` without the file system (a name not looked up lately, a network or
 * FUSE file system's entry to revalidate), never a wait on a disk; -EINVAL before Linux 5.12. */
int stampede_open_beneath_cached(int directory, const char *path, int flags, int in_root);
/* fstat from what the kernel holds (statx's AT_STATX_DONT_SYNC): a network or FUSE file system
 * is not asked again before its attribute cache expires; a local one answers as fstat does. */
int stampede_stat_cached(int fd, struct stat *out);
/* Brings `length` bytes of `fd` from `offset` into the page cache, waiting for the disk, copying
 * nothing: a shared read-only mapping made with MAP_POPULATE, then unmapped. -errno when the file
 * cannot be mapped (the caller reads it instead). */
int stampede_populate(int fd, off_t offset, size_t length);
/* Whether every page of `length` bytes of `fd` from `offset` is in the page cache (cachestat, Linux
 * 6.5): 1, 0, or -errno (-ENOSYS on an older kernel). */
int stampede_range_cached(int fd, off_t offset, size_t length);
/* pread from the page cache alone (preadv2 RWF_NOWAIT): the bytes read (fewer where the cache's
 * stop), 0 at the end of the file, -EAGAIN when the first byte is on the disk, -EOPNOTSUPP where
 * the file system cannot read without waiting, or -errno. */
ssize_t stampede_pread_cached(int fd, void *buffer, size_t length, off_t offset);
/* The magic of the file system `fd` is on (fstatfs's f_type), or -errno. */
long stampede_file_system_type(int fd);

/* epoll with the 64-bit user data as a plain tag; the packed epoll_event stays in C. */
int stampede_epoll_create(void);
/* An eventfd (nonblocking, close-on-exec) that another thread makes readable: a loop's wake. */
int stampede_eventfd(void);
int stampede_epoll_add(int epoll_fd, int fd, uint64_t tag);
/* Waits at most timeout_ns (negative: forever). Fills tags; returns how many. */
int stampede_epoll_wait(int epoll_fd, uint64_t *tags, int capacity, int64_t timeout_ns);
/* Level-triggered readability that wakes one of the epolls watching fd, not all (a listening
 * socket several event loops share, passed by systemd). */
int stampede_epoll_add_exclusive(int epoll_fd, int fd, uint64_t tag);
int stampede_epoll_remove(int epoll_fd, int fd);
/* Edge-triggered readiness for reading and writing both (a TCP connection): the caller reads or
 * writes until EAGAIN before it waits again. */
int stampede_epoll_add_edge(int epoll_fd, int fd, uint64_t tag);

/* An anonymous shared-memory file (memfd) of `size` bytes, close-on-exec: a file image's memory,
 * which HTTP sends with sendfile. Returns the fd. */
int stampede_memfd(const char *name, int64_t size);
/* Maps `size` bytes of the memfd `fd`, shared and writable, at a multiple of 2 MiB, and has the
 * kernel back each whole 2 MiB of it with one huge page (MADV_COLLAPSE, Linux 6.1), which it
 * does whatever shmem_enabled says (Debian's is "never"): sendfile then splices the image a huge
 * page at a time instead of looking up and locking each 4 KiB page. Only whole 2 MiB pieces
 * are: the caller pads a memfd whose tail it wants in one too (FileImage.residentCount). Where the
 * kernel declines (older, "deny", no huge page to be had) the image keeps small pages and
 * works the same. Returns the mapping, or MAP_FAILED with errno set. */
void *stampede_map_image(int fd, size_t size);

/* A TCP listener (SO_REUSEADDR, SO_REUSEPORT, IPV6_V6ONLY for IPv6), bound and listening,
 * non-blocking. Returns the fd. */
int stampede_tcp_listener(const struct sockaddr_storage *address, int backlog);
/* Binds a socket of the listeners' kind (`stream`: TCP) to `address` without SO_REUSEPORT and
 * closes it: 0 when nothing else holds the address (the port chosen, for port 0, in *bound), or
 * -EADDRINUSE when a socket of any process does, though SO_REUSEPORT would let the listeners
 * share it (and split its clients with that process). */
int stampede_probe_exclusive(const struct sockaddr_storage *address, int stream, struct sockaddr_storage *bound);
/* Caps the bytes a TCP socket holds written but not yet sent (TCP_NOTSENT_LOWAT): past it the
 * socket is not writable. -errno on failure. */
int stampede_tcp_unsent_limit(int fd, int bytes);
/* accept4: a non-blocking connection with TCP_NODELAY, its peer in *peer; -errno (EAGAIN: none). */
int stampede_tcp_accept(int listener, struct sockaddr_storage *peer);

/* The MTU of the interface that holds `address`, or -ENOENT. */
int stampede_interface_mtu(const struct sockaddr_storage *address);

/* SIGINT/SIGTERM set a flag that the workers read; SIGHUP another (read and cleared by
 * stampede_reload_requested); SIGPIPE is ignored. */
void stampede_install_stop_signals(void);
int stampede_reload_requested(void);
int stampede_stop_requested(void);
void stampede_request_stop(void);

/* CLOCK_MONOTONIC in nanoseconds. */
int64_t stampede_monotonic_ns(void);

/* process.c: running as in.tftpd does. */

/* Names the calling thread (pthread_setname_np, hidden behind _GNU_SOURCE): at most 15 bytes. */
int stampede_name_thread(const char *name);

/* getpid, asked of the kernel once per process: a fork's child (the detach, any other) asks
 * again. */
int stampede_process_id(void);

/* Is fd a datagram socket (fd 0: inetd mode)? 1 or 0. */
int stampede_fd_is_datagram_socket(int fd);

/* What systemd passed as fd: 1 a datagram socket, 2 a listening TCP socket (IPv4 or IPv6);
 * -EBADF when fd is not open, -EINVAL (or another -errno) for anything else. */
int stampede_passed_socket_kind(int fd);
/* Takes over a listening TCP socket: non-blocking, close-on-exec. Returns fd or -errno. */
int stampede_adopt_tcp_listener(int fd);

/* Takes over a bound datagram socket from inetd or systemd as a listener: non-blocking,
 * close-on-exec, PKTINFO on, the receive buffer raised. Returns fd, or -ENOTSOCK and the like. */
int stampede_adopt_listener(int fd, int receive_buffer);

/* Forks into the background (setsid). The parent waits for stampede_detach_done, then exits 0;
 * if the child exits first, the parent exits with its status. Returns, in the child, the fd to
 * pass to stampede_detach_done (or -errno), with /dev/null opened in *null_fd now, before a
 * chroot (-s) hides it. */
int stampede_detach(int *null_fd);
/* Points fds 0-2 at null_fd (closing it) and releases the waiting parent: the command that
 * started the server (ssh host stampede -l ...) sees its output closed and returns. */
void stampede_detach_done(int ready_fd, int null_fd);

/* openlog with facility daemon, the pid, and the connection made at once (before a chroot). */
void stampede_open_syslog(const char *identity);
void stampede_syslog(int priority, const char *message);

#endif
