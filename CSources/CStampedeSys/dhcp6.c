/* The DHCPv6 boot responder's sockets (StampedeProxyDHCP's ProxyDHCPv6Server): UDP port 547 on
 * every address, joined to All_DHCP_Relay_Agents_and_Servers (ff02::1:2) on each boot network's
 * interface, and the boot server's port 4011 on each boot network's IPv6 address. */
#include "CStampedeSys.h"

#include <arpa/inet.h>
#include <errno.h>
#include <net/if.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

static int closing6(int fd)
{
    int error = -errno;
    close(fd);
    return error;
}

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
        return closing6(fd);
    stampede_grow_socket_buffer(fd, 1, receive_buffer);
    memset(&any, 0, sizeof(any));
    any.sin6_family = AF_INET6;
    any.sin6_port = htons(port);
    if (bind(fd, (const struct sockaddr *)&any, sizeof(any)) < 0)
        return closing6(fd);
    for (i = 0; i < count; i++) {
        struct ipv6_mreq group;
        memset(&group, 0, sizeof(group));
        inet_pton(AF_INET6, "ff02::1:2", &group.ipv6mr_multiaddr);
        group.ipv6mr_interface = (unsigned)interfaces[i];
        if (setsockopt(fd, IPPROTO_IPV6, IPV6_JOIN_GROUP, &group, sizeof(group)) < 0)
            return closing6(fd);
    }
    return fd;
}

int stampede_boot_server_socket6(const struct sockaddr_storage *address, int receive_buffer)
{
    int one = 1;
    int fd = socket(AF_INET6, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one)) < 0)
        return closing6(fd);
    stampede_grow_socket_buffer(fd, 1, receive_buffer);
    if (bind(fd, (const struct sockaddr *)address, sizeof(struct sockaddr_in6)) < 0)
        return closing6(fd);
    return fd;
}

ssize_t stampede_dhcp6_receive(int fd, void *buffer, size_t capacity, struct sockaddr_storage *peer, int32_t *interface)
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
    for (c = CMSG_FIRSTHDR(&message); c; c = CMSG_NXTHDR(&message, c)) {
        if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_PKTINFO) {
            struct in6_pktinfo info;
            memcpy(&info, CMSG_DATA(c), sizeof(info));
            *interface = (int32_t)info.ipi6_ifindex;
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
