#include "CStampedeSys.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <syslog.h>
#include <unistd.h>

/* Process-level plumbing for running as in.tftpd does: sockets handed over by inetd or systemd,
 * detaching into the background, syslog. */

/* 0 until asked, and again in a forked child: getpid is a system call, and every log line
 * names the process. */
static pid_t known_pid;
static pthread_once_t pid_reset_registered = PTHREAD_ONCE_INIT;

static void forget_pid(void)
{
    known_pid = 0;
}

static void register_pid_reset(void)
{
    pthread_atfork(NULL, NULL, forget_pid);
}

int stampede_name_thread(const char *name)
{
    return pthread_setname_np(pthread_self(), name);
}

int stampede_process_id(void)
{
    pid_t pid = __atomic_load_n(&known_pid, __ATOMIC_RELAXED);
    if (pid == 0) {
        pthread_once(&pid_reset_registered, register_pid_reset);
        pid = getpid();
        __atomic_store_n(&known_pid, pid, __ATOMIC_RELAXED);
    }
    return pid;
}

int stampede_fd_is_datagram_socket(int fd)
{
    int type = 0;
    socklen_t length = sizeof(type);
    return getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &length) == 0 && type == SOCK_DGRAM;
}

int stampede_passed_socket_kind(int fd)
{
    int type = 0, listening = 0;
    socklen_t length = sizeof(type);
    struct sockaddr_storage address;
    socklen_t address_length = sizeof(address);

    if (fcntl(fd, F_GETFD) < 0)
        return -errno;
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &length) < 0)
        return -errno;
    if (getsockname(fd, (struct sockaddr *)&address, &address_length) < 0)
        return -errno;
    if (address.ss_family != AF_INET && address.ss_family != AF_INET6)
        return -EAFNOSUPPORT;
    if (type == SOCK_DGRAM)
        return 1;
    length = sizeof(listening);
    if (type == SOCK_STREAM && getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &length) == 0 && listening)
        return 2;
    return -EINVAL;
}

int stampede_adopt_tcp_listener(int fd)
{
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0 || fcntl(fd, F_SETFD, FD_CLOEXEC) < 0)
        return -errno;
    return fd;
}

int stampede_adopt_listener(int fd, int receive_buffer)
{
    int one = 1, flags;
    struct sockaddr_storage address;
    socklen_t length = sizeof(address);

    if (!stampede_fd_is_datagram_socket(fd))
        return -ENOTSOCK;
    if (getsockname(fd, (struct sockaddr *)&address, &length) < 0)
        return -errno;
    if (address.ss_family != AF_INET && address.ss_family != AF_INET6)
        return -EAFNOSUPPORT;
    flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0 || fcntl(fd, F_SETFD, FD_CLOEXEC) < 0)
        return -errno;
    stampede_grow_socket_buffer(fd, 1, receive_buffer);
    /* Replies and transfers come from the address each request was sent to: PKTINFO tells it.
     * On a dual-stack IPv6 socket (inetd's usual), IPv4 clients arrive as ::ffff:a.b.c.d. */
    if (address.ss_family == AF_INET6) {
        if (setsockopt(fd, IPPROTO_IPV6, IPV6_RECVPKTINFO, &one, sizeof(one)) < 0)
            return -errno;
    } else if (setsockopt(fd, IPPROTO_IP, IP_PKTINFO, &one, sizeof(one)) < 0) {
        return -errno;
    }
    stampede_receive_timestamps(fd);
    return fd;
}

int stampede_detach(int *null_fd)
{
    int ready[2], status = 0;
    char byte = 0;
    pid_t child;

    *null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (*null_fd < 0)
        return -errno;
    if (pipe2(ready, O_CLOEXEC) < 0)
        return -errno;
    child = fork();
    if (child < 0)
        return -errno;
    if (child > 0) {
        /* The parent stays until the child says it serves, so that a bad address or a missing
         * directory still fails the command that started it, with the child's exit status. */
        ssize_t n;

        close(ready[1]);
        do
            n = read(ready[0], &byte, 1);
        while (n < 0 && errno == EINTR);
        if (n == 1 && byte == 'R')
            _exit(0);
        while (waitpid(child, &status, 0) < 0 && errno == EINTR)
            ;
        _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 1);
    }
    close(ready[0]);
    if (setsid() < 0)
        return -errno;
    return ready[1];
}

void stampede_detach_done(int ready_fd, int null_fd)
{
    char byte = 'R';

    dup2(null_fd, 0);
    dup2(null_fd, 1);
    dup2(null_fd, 2);
    if (null_fd > 2)
        close(null_fd);
    while (write(ready_fd, &byte, 1) < 0 && errno == EINTR)
        ;
    close(ready_fd);
}

void stampede_open_syslog(const char *identity)
{
    /* LOG_NDELAY: connect to /dev/log now, before a chroot (-s) hides it. */
    openlog(identity, LOG_PID | LOG_NDELAY, LOG_DAEMON);
}

void stampede_syslog(int priority, const char *message)
{
    syslog(priority, "%s", message);
}
