/* The proxyDHCP's sockets (StampedeProxyDHCP), and at the end the DHCPv6 responder's. Port 67 is heard through a packet socket and
 * answered through a raw one: no UDP socket of ours is bound to port 67, so a DHCP server on the
 * same host keeps every datagram the kernel owes it (a unicast goes to one UDP socket only, and
 * one bound to a device would win it), and binds the port whether or not it shares it. ISC dhcpd
 * and pixiecore's no-bind mode hear DHCP the same way. */
#include "CStampedeSys.h"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/filter.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

static int closing(int fd)
{
    int error = -errno;
    close(fd);
    return error;
}

/* Classic BPF over the packet from its IP header (a SOCK_DGRAM packet socket's view): IPv4, UDP,
 * not a fragment, to `port`; and either a limited broadcast that came in on one of `interfaces`,
 * or sent to one of `addresses` (network byte order), whichever interface it came in on (a
 * relay's, routed). Everything else is dropped in the kernel before it is queued or copied. */
static int attach_filter(int fd, const uint32_t *addresses, const int32_t *interfaces, int count, uint16_t port)
{
    struct sock_filter program[16 + 2 * STAMPEDE_MAX_BOOT_NETWORKS];
    const int drop = 14 + 2 * count, accept = drop + 1, broadcast = 13 + count;
    int pc = 0;
#define AT(code, k) (program[pc] = (struct sock_filter)BPF_STMT(code, k), pc++)
#define JUMP(code, k, yes, no) \
    (program[pc] = (struct sock_filter)BPF_JUMP(code, k, (uint8_t)((yes) - pc - 1), (uint8_t)((no) - pc - 1)), pc++)
    AT(BPF_LD | BPF_B | BPF_ABS, 0);
    AT(BPF_ALU | BPF_AND | BPF_K, 0xf0);
    JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x40, pc + 1, drop);            /* IPv4 */
    AT(BPF_LD | BPF_B | BPF_ABS, 9);
    JUMP(BPF_JMP | BPF_JEQ | BPF_K, IPPROTO_UDP, pc + 1, drop);
    AT(BPF_LD | BPF_H | BPF_ABS, 6);
    JUMP(BPF_JMP | BPF_JSET | BPF_K, 0x3fff, drop, pc + 1);         /* more fragments, or an offset */
    AT(BPF_LDX | BPF_B | BPF_MSH, 0);                               /* X: the IP header's length */
    AT(BPF_LD | BPF_H | BPF_IND, 2);                                /* UDP's destination port */
    JUMP(BPF_JMP | BPF_JEQ | BPF_K, port, pc + 1, drop);
    AT(BPF_LD | BPF_W | BPF_ABS, 16);                               /* the destination address */
    JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0xffffffffu, broadcast, pc + 1);
    for (int i = 0; i < count; i++)
        JUMP(BPF_JMP | BPF_JEQ | BPF_K, ntohl(addresses[i]), accept, pc + 1);
    AT(BPF_JMP | BPF_JA, (uint32_t)(drop - pc - 1));
    AT(BPF_LD | BPF_W | BPF_ABS, (uint32_t)(SKF_AD_OFF + SKF_AD_IFINDEX));
    for (int i = 0; i < count; i++)
        JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)interfaces[i], accept, pc + 1);
    AT(BPF_RET | BPF_K, 0);
    AT(BPF_RET | BPF_K, 0xffff);
#undef AT
#undef JUMP
    struct sock_fprog filter = {.len = (unsigned short)pc, .filter = program};
    return setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &filter, sizeof(filter));
}

int stampede_dhcp_listener(const uint32_t *addresses, const int32_t *interfaces, int count, uint16_t port, int receive_buffer)
{
    if (count < 1 || count > STAMPEDE_MAX_BOOT_NETWORKS)
        return -EINVAL;
    /* Protocol 0 until the filter is on: a packet socket of ETH_P_IP would queue every IP packet
     * of the host from the moment it is made. */
    int fd = socket(AF_PACKET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (attach_filter(fd, addresses, interfaces, count, port) < 0)
        return closing(fd);
    stampede_grow_socket_buffer(fd, 1, receive_buffer);
    struct sockaddr_ll all = {.sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_IP), .sll_ifindex = 0};
    if (bind(fd, (struct sockaddr *)&all, sizeof(all)) < 0)
        return closing(fd);
    return fd;
}

ssize_t stampede_dhcp_receive(int fd, void *buffer, size_t capacity, int32_t *interface, int32_t *delivery)
{
    struct sockaddr_ll from;
    socklen_t length = sizeof(from);
    /* MSG_TRUNC: the whole length, so that a packet longer than `capacity` is known for one. */
    ssize_t count = recvfrom(fd, buffer, capacity, MSG_TRUNC, (struct sockaddr *)&from, &length);
    if (count < 0)
        return -errno;
    *interface = from.sll_ifindex;
    *delivery = from.sll_pkttype == PACKET_HOST ? STAMPEDE_DELIVERY_HOST
              : from.sll_pkttype == PACKET_BROADCAST ? STAMPEDE_DELIVERY_BROADCAST : STAMPEDE_DELIVERY_OTHER;
    return count;
}

int stampede_dhcp_sender(void)
{
    int one = 1;
    /* IPPROTO_RAW: it sends whole IP packets (IP_HDRINCL) and receives none. */
    int fd = socket(AF_INET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_RAW);
    if (fd < 0)
        return -errno;
    if (setsockopt(fd, SOL_SOCKET, SO_BROADCAST, &one, sizeof(one)) < 0)
        return closing(fd);
    return fd;
}

ssize_t stampede_dhcp_send(int fd, const void *packet, size_t length, int32_t interface)
{
    if (length < 20)
        return -EINVAL;
    struct sockaddr_in to = {.sin_family = AF_INET};
    memcpy(&to.sin_addr, (const unsigned char *)packet + 16, 4);
    struct iovec vector = {.iov_base = (void *)packet, .iov_len = length};
    union {
        char bytes[CMSG_SPACE(sizeof(struct in_pktinfo))];
        struct cmsghdr align;
    } control;
    memset(&control, 0, sizeof(control));
    struct msghdr message = {.msg_name = &to, .msg_namelen = sizeof(to), .msg_iov = &vector, .msg_iovlen = 1};
    if (interface > 0) {
        /* A limited broadcast leaves by the boot network's interface, from its address. */
        message.msg_control = control.bytes;
        message.msg_controllen = sizeof(control.bytes);
        struct cmsghdr *header = CMSG_FIRSTHDR(&message);
        header->cmsg_level = IPPROTO_IP;
        header->cmsg_type = IP_PKTINFO;
        header->cmsg_len = CMSG_LEN(sizeof(struct in_pktinfo));
        struct in_pktinfo info = {.ipi_ifindex = interface};
        memcpy(&info.ipi_spec_dst, (const unsigned char *)packet + 12, 4);
        memcpy(CMSG_DATA(header), &info, sizeof(info));
    }
    ssize_t sent = sendmsg(fd, &message, MSG_DONTWAIT);
    return sent < 0 ? -errno : sent;
}

int stampede_boot_server_socket(const struct sockaddr_storage *address, int receive_buffer)
{
    int fd = socket(address->ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (address->ss_family == AF_INET6) {
        /* IPv6 only: an IPv4 network's boot server is a socket of its own. */
        int one = 1;
        if (setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one)) < 0)
            return closing(fd);
    } else {
        /* Don't fragment clear, as the raw sender's packets: a ROM that cannot take DF is answered. */
        int dont = IP_PMTUDISC_DONT;
        if (setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &dont, sizeof(dont)) < 0)
            return closing(fd);
    }
    stampede_grow_socket_buffer(fd, 1, receive_buffer);
    if (bind(fd, (const struct sockaddr *)address,
             address->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in)) < 0)
        return closing(fd);
    return fd;
}

/* The IPv6 form: a machine's Solicit goes to ff02::1:2 out of `device` (IPV6_MULTICAST_IF), its
 * answers come back to `address`, unicast. */
static int dhcp6_client_socket(const struct sockaddr_storage *address, const char *device, int receive_buffer)
{
    int one = 1;
    int index = device && device[0] ? (int)if_nametoindex(device) : 0;
    int fd = socket(AF_INET6, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one)) < 0 ||
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
        (index > 0 && setsockopt(fd, IPPROTO_IPV6, IPV6_MULTICAST_IF, &index, sizeof(index)) < 0))
        return closing(fd);
    if (device && device[0] && setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, device, (socklen_t)strlen(device)) < 0)
        return closing(fd);
    stampede_grow_socket_buffer(fd, 1, receive_buffer);
    if (bind(fd, (const struct sockaddr *)address, sizeof(struct sockaddr_in6)) < 0)
        return closing(fd);
    return fd;
}

int stampede_dhcp_client_socket(const struct sockaddr_storage *address, const char *device, int receive_buffer)
{
    int one = 1;
    int fd;
    if (address->ss_family == AF_INET6)
        return dhcp6_client_socket(address, device, receive_buffer);
    fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    /* Beside a DHCP client of the host's on port 68; never SO_REUSEPORT, which would split the
     * answers between the two. */
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
        setsockopt(fd, SOL_SOCKET, SO_BROADCAST, &one, sizeof(one)) < 0 ||
        setsockopt(fd, IPPROTO_IP, IP_PKTINFO, &one, sizeof(one)) < 0)
        return closing(fd);
    /* Bound to the interface, a socket on the wildcard address hears the broadcasts of that
     * interface alone, and its broadcasts leave by it (unprivileged since Linux 5.7). */
    if (device && device[0] && setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, device, (socklen_t)strlen(device)) < 0)
        return closing(fd);
    stampede_grow_socket_buffer(fd, 1, receive_buffer);
    if (bind(fd, (const struct sockaddr *)address, sizeof(struct sockaddr_in)) < 0)
        return closing(fd);
    return fd;
}

/* The DHCPv6 boot responder (ProxyDHCPv6Server): UDP port 547 on every address, joined to
 * All_DHCP_Relay_Agents_and_Servers (ff02::1:2) on each boot network's interface; its boot
 * servers are stampede_boot_server_socket's, as IPv4's. */
int stampede_dhcp6_socket(uint16_t port, const int32_t *interfaces, int count, int receive_buffer)
{
    int one = 1, i;
    struct sockaddr_in6 any;
    int fd = socket(AF_INET6, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    /* PKTINFO: the interface a multicast came in on names its boot network. */
    if (setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one)) < 0 ||
        setsockopt(fd, IPPROTO_IPV6, IPV6_RECVPKTINFO, &one, sizeof(one)) < 0)
        return closing(fd);
    stampede_grow_socket_buffer(fd, 1, receive_buffer);
    memset(&any, 0, sizeof(any));
    any.sin6_family = AF_INET6;
    any.sin6_port = htons(port);
    if (bind(fd, (const struct sockaddr *)&any, sizeof(any)) < 0)
        return closing(fd);
    for (i = 0; i < count; i++) {
        struct ipv6_mreq group;
        memset(&group, 0, sizeof(group));
        inet_pton(AF_INET6, "ff02::1:2", &group.ipv6mr_multiaddr);
        group.ipv6mr_interface = (unsigned)interfaces[i];
        /* Two boot networks on one interface (two prefixes on one link) join it once. */
        if (setsockopt(fd, IPPROTO_IPV6, IPV6_JOIN_GROUP, &group, sizeof(group)) < 0 && errno != EADDRINUSE)
            return closing(fd);
    }
    return fd;
}

ssize_t stampede_dhcp6_receive(int fd, void *buffer, size_t capacity, struct sockaddr_storage *peer, int32_t *interface,
                               uint8_t destination[16])
{
    struct iovec vector = { buffer, capacity };
    char control[64];
    struct msghdr message;
    struct cmsghdr *c;
    ssize_t count;
    memset(&message, 0, sizeof(message));
    memset(peer, 0, sizeof(*peer));
    message.msg_name = peer;
    message.msg_namelen = sizeof(*peer);
    message.msg_iov = &vector;
    message.msg_iovlen = 1;
    message.msg_control = control;
    message.msg_controllen = sizeof(control);
    count = recvmsg(fd, &message, MSG_DONTWAIT);
    if (count < 0)
        return -errno;
    /* Cut short: as if malformed (the caller refuses more than its buffer). */
    if (message.msg_flags & MSG_TRUNC)
        return (ssize_t)capacity + 1;
    *interface = 0;
    memset(destination, 0, 16);
    for (c = CMSG_FIRSTHDR(&message); c; c = CMSG_NXTHDR(&message, c)) {
        if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_PKTINFO) {
            struct in6_pktinfo info;
            memcpy(&info, CMSG_DATA(c), sizeof(info));
            *interface = (int32_t)info.ipi6_ifindex;
            memcpy(destination, &info.ipi6_addr, 16);
        }
    }
    return count;
}

ssize_t stampede_dhcp6_send(int fd, const void *bytes, size_t length, const struct sockaddr_storage *to)
{
    ssize_t count;
    do {
        count = sendto(fd, bytes, length, MSG_DONTWAIT, (const struct sockaddr *)to, sizeof(struct sockaddr_in6));
    } while (count < 0 && errno == EINTR);
    return count < 0 ? -errno : count;
}

int stampede_hardware_address(const char *interface, uint8_t address[6])
{
    struct ifreq request;
    int fd = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0), result = 0;
    if (fd < 0)
        return -errno;
    memset(&request, 0, sizeof(request));
    strncpy(request.ifr_name, interface, IFNAMSIZ - 1);
    if (ioctl(fd, SIOCGIFHWADDR, &request) < 0)
        result = -errno;
    else
        memcpy(address, request.ifr_hwaddr.sa_data, 6);
    close(fd);
    return result;
}
