/* The destination address of a received datagram: the recvmsg_out layout is the engine's, the
 * PKTINFO decoding is CStampedeSys's, shared with the Glibc backend. */
#include "ring_private.h"

#include <CStampedeSys.h>

void stampede_ring_local_address(struct io_uring_recvmsg_out *out, struct msghdr *template_message,
                                 struct sockaddr_storage *local)
{
    struct cmsghdr *c;
    for (c = io_uring_recvmsg_cmsg_firsthdr(out, template_message); c;
         c = io_uring_recvmsg_cmsg_nexthdr(out, template_message, c))
        if (stampede_pktinfo_decode(c, local))
            return;
}
