/* PKTINFO control messages: replies from a listener leave from the address the request came to. */
#include "ring_private.h"

#include <string.h>

size_t stampede_ring_pktinfo(uint8_t *buffer, size_t capacity, const struct sockaddr_storage *from)
{
    struct msghdr message;
    struct cmsghdr *c;
    memset(&message, 0, sizeof(message));
    memset(buffer, 0, capacity);
    message.msg_control = buffer;
    message.msg_controllen = capacity;
    c = CMSG_FIRSTHDR(&message);
    if (from->ss_family == AF_INET) {
        struct in_pktinfo info;
        memset(&info, 0, sizeof(info));
        info.ipi_spec_dst = ((const struct sockaddr_in *)from)->sin_addr;
        if (info.ipi_spec_dst.s_addr == htonl(INADDR_ANY))
            return 0;
        c->cmsg_level = IPPROTO_IP;
        c->cmsg_type = IP_PKTINFO;
        c->cmsg_len = CMSG_LEN(sizeof(info));
        memcpy(CMSG_DATA(c), &info, sizeof(info));
        return CMSG_SPACE(sizeof(info));
    }
    if (from->ss_family == AF_INET6) {
        struct in6_pktinfo info;
        const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)from;
        memset(&info, 0, sizeof(info));
        info.ipi6_addr = sin6->sin6_addr;
        info.ipi6_ifindex = sin6->sin6_scope_id;
        if (IN6_IS_ADDR_UNSPECIFIED(&info.ipi6_addr))
            return 0;
        c->cmsg_level = IPPROTO_IPV6;
        c->cmsg_type = IPV6_PKTINFO;
        c->cmsg_len = CMSG_LEN(sizeof(info));
        memcpy(CMSG_DATA(c), &info, sizeof(info));
        return CMSG_SPACE(sizeof(info));
    }
    return 0;
}

void stampede_ring_local_address(struct io_uring_recvmsg_out *out, struct msghdr *template_message,
                                 struct sockaddr_storage *local)
{
    struct cmsghdr *c;
    for (c = io_uring_recvmsg_cmsg_firsthdr(out, template_message); c;
         c = io_uring_recvmsg_cmsg_nexthdr(out, template_message, c)) {
        if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_PKTINFO) {
            struct in_pktinfo info;
            struct sockaddr_in *sin = (struct sockaddr_in *)local;
            memcpy(&info, CMSG_DATA(c), sizeof(info));
            sin->sin_family = AF_INET;
            sin->sin_addr = info.ipi_addr;
            return;
        }
        if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_PKTINFO) {
            struct in6_pktinfo info;
            struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)local;
            memcpy(&info, CMSG_DATA(c), sizeof(info));
            sin6->sin6_family = AF_INET6;
            sin6->sin6_addr = info.ipi6_addr;
            if (IN6_IS_ADDR_LINKLOCAL(&info.ipi6_addr))
                sin6->sin6_scope_id = info.ipi6_ifindex;
            return;
        }
    }
}
