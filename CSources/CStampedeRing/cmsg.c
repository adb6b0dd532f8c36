/* A listener's datagram's control messages: the recvmsg_out layout is the engine's, the PKTINFO
 * and receive-time decoding CStampedeSys's, shared with the Glibc backend. */
#include "ring_private.h"

#include <CStampedeSys.h>
#include <string.h>

void stampede_ring_controls(struct io_uring_recvmsg_out *out, struct msghdr *template_message,
                            struct sockaddr_storage *local, int64_t *received)
{
    struct cmsghdr *c;
    memset(local, 0, sizeof(*local));
    *received = 0;
    for (c = io_uring_recvmsg_cmsg_firsthdr(out, template_message); c;
         c = io_uring_recvmsg_cmsg_nexthdr(out, template_message, c)) {
        struct sockaddr_storage address;
        if (stampede_pktinfo_decode(c, &address))
            *local = address;
        else
            (void)stampede_receive_time_decode(c, received);
    }
}
