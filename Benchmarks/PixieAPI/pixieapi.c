/*
 * pixiecore's API for the machines rack (make bench-machines), as Tests/interop/pixieapi.py
 * serves it, in a few microseconds of CPU an answer: the bench's API stands for a service on a
 * host of its own, but shares the two cores with the server and the storm, and the Python server
 * took a core for the seconds 20,000 machines ask in, starving both.
 *
 *   GET  PREFIX/v1/boot/MAC[?...]  200 with the machine's answer, 404 for a machine not listed
 *   POST PREFIX/v1/done/MAC        204, the machine taken out of the answers
 *   anything else                  404
 *
 * each after --delay-ms (the API's own time). Keep-alive as HTTP/1.1's default; a request that
 * says Connection: close is answered and its connection closed. A connection's next request is
 * read after its answer went (Stampede's client asks one at a time on a connection). The answers:
 * a file of lines "MAC BODY" (MAC as aa:bb:cc:dd:ee:ff, BODY the JSON answer, one line). One
 * thread, epoll; the answers waiting are a queue in the order they are due (every delay is the
 * same), its connections edge-triggered so that an answer costs a recv, a send and no
 * epoll_ctl. "ready" on stdout once it listens on 127.0.0.1:PORT.
 *
 *   pixieapi --port 8081 --answers FILE [--prefix /pixiecore] [--delay-ms 20]
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define HEAD_LIMIT 8192
#define MAC_LENGTH 17

struct answer {
    char mac[MAC_LENGTH + 1];
    char *response; /* the whole 200, written once */
    size_t length;
    int listed;
};

struct connection {
    int fd;
    unsigned generation;
    char head[HEAD_LIMIT];
    size_t filled;
    int waiting;        /* an answer is due: nothing more is read until it went */
    int close_after;    /* the request said Connection: close */
    const char *unsent; /* what the socket did not take yet */
    size_t unsent_length;
    char own[4096];     /* a response written for this request (a 404, a 204, one that closes) */
};

struct due {
    int64_t at;
    int fd;
    unsigned generation;
    int status;
    struct answer *answer;
};

static struct answer *answers;
static size_t answer_count, table_size;
static struct connection **connections;
static size_t connection_slots;
static struct due *queue;
static size_t queue_head, queue_tail, queue_size;
static int epoll_fd;
/* PREFIX/v1/boot/ and PREFIX/v1/done/, and --delay-ms in nanoseconds. */
static char boot[256], done[256];
static int64_t delay = 20 * 1000000LL;

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static uint64_t hash(const char *mac) {
    uint64_t h = 1469598103934665603ULL;
    for (int i = 0; i < MAC_LENGTH; i++) h = (h ^ (unsigned char)mac[i]) * 1099511628211ULL;
    return h;
}

static struct answer *find(const char *mac) {
    for (size_t i = hash(mac) % table_size;; i = (i + 1) % table_size) {
        if (answers[i].mac[0] == 0) return NULL;
        if (memcmp(answers[i].mac, mac, MAC_LENGTH) == 0) return &answers[i];
    }
}

static void load(const char *path) {
    FILE *file = fopen(path, "r");
    if (!file) { perror(path); exit(1); }
    size_t lines = 0;
    for (int c; (c = getc(file)) != EOF;) lines += c == '\n';
    rewind(file);
    table_size = lines * 2 + 16;
    answers = calloc(table_size, sizeof *answers);
    char *line = NULL;
    size_t capacity = 0;
    ssize_t length;
    while ((length = getline(&line, &capacity, file)) > 0) {
        while (length > 0 && (line[length - 1] == '\n' || line[length - 1] == '\r')) line[--length] = 0;
        if (length < MAC_LENGTH + 2 || line[MAC_LENGTH] != ' ') { fprintf(stderr, "%s: not MAC BODY: %s\n", path, line); exit(1); }
        for (int i = 0; i < MAC_LENGTH; i++) line[i] = (char)tolower((unsigned char)line[i]);
        const char *body = line + MAC_LENGTH + 1;
        size_t i = hash(line) % table_size;
        while (answers[i].mac[0] && memcmp(answers[i].mac, line, MAC_LENGTH) != 0) i = (i + 1) % table_size;
        struct answer *a = &answers[i];
        memcpy(a->mac, line, MAC_LENGTH);
        free(a->response);
        size_t body_length = strlen(body);
        a->response = malloc(body_length + 128);
        a->length = (size_t)sprintf(a->response, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                                    body_length, body);
        a->listed = 1;
        answer_count++;
    }
    free(line);
    fclose(file);
}

static void end(struct connection *c) {
    close(c->fd);
    connections[c->fd] = NULL;
    free(c);
}

/* Sends what is left of the answer; 0 when the connection ended. */
static int flush(struct connection *c) {
    while (c->unsent_length > 0) {
        ssize_t sent = send(c->fd, c->unsent, c->unsent_length, MSG_NOSIGNAL);
        if (sent < 0 && errno == EINTR) continue;
        if (sent < 0 && errno == EAGAIN) return 1;  /* the rest on EPOLLOUT's edge */
        if (sent <= 0) { end(c); return 0; }
        c->unsent += sent;
        c->unsent_length -= (size_t)sent;
    }
    if (c->close_after) { end(c); return 0; }
    c->waiting = 0;
    return 1;
}

static void push(struct due due) {
    if (queue_tail - queue_head == queue_size) {
        size_t larger = queue_size ? queue_size * 2 : 1024;
        struct due *grown = malloc(larger * sizeof *grown);
        for (size_t i = queue_head; i < queue_tail; i++) grown[i - queue_head] = queue[i % queue_size];
        free(queue);
        queue = grown;
        queue_tail -= queue_head;
        queue_head = 0;
        queue_size = larger;
    }
    queue[queue_tail++ % queue_size] = due;
}

static int read_requests(struct connection *c);

/* The answer due now, on its connection if that is still the one it was for. */
static void answer_due(struct due *due) {
    struct connection *c = (size_t)due->fd < connection_slots ? connections[due->fd] : NULL;
    if (!c || c->generation != due->generation) return;
    if (due->status == 200 && due->answer->listed && !c->close_after) {
        c->unsent = due->answer->response;
        c->unsent_length = due->answer->length;
    } else if (due->status == 200 && due->answer->listed) {
        /* Asked with Connection: close: the answer written again with the field. */
        const char *body = strstr(due->answer->response, "\r\n\r\n") + 4;
        int length = snprintf(c->own, sizeof c->own, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                              "Connection: close\r\n\r\n%s", strlen(body), body);
        if (length < 0 || (size_t)length >= sizeof c->own) { end(c); return; }
        c->unsent = c->own;
        c->unsent_length = (size_t)length;
    } else {
        int status = due->status == 200 ? 404 : due->status;
        c->unsent_length = (size_t)snprintf(c->own, sizeof c->own, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: 0\r\n%s\r\n",
                                            status, status == 204 ? "No Content" : "Not Found",
                                            c->close_after ? "Connection: close\r\n" : "");
        c->unsent = c->own;
    }
    if (flush(c) && !c->waiting) read_requests(c);
}

/* Reads the connection's next request when it has one whole: its answer queued. 0: ended. */
static int read_requests(struct connection *c) {
    for (;;) {
        char *end_of_head = c->filled ? memmem(c->head, c->filled, "\r\n\r\n", 4) : NULL;
        if (end_of_head) {
            size_t head_length = (size_t)(end_of_head - c->head) + 4;
            *end_of_head = 0;
            char method[8] = {0}, target[512] = {0};
            if (sscanf(c->head, "%7s %511s", method, target) != 2) { end(c); return 0; }
            for (char *p = c->head; *p; p++) *p = (char)tolower((unsigned char)*p);
            c->close_after = strstr(c->head, "\r\nconnection: close") != NULL;
            char *query = strchr(target, '?');
            if (query) *query = 0;
            struct due due = {.at = now_ns() + delay, .fd = c->fd, .generation = c->generation, .status = 404};
            size_t boot_length = strlen(boot), done_length = strlen(done);
            if (strcmp(method, "GET") == 0 && strncmp(target, boot, boot_length) == 0 && strlen(target + boot_length) == MAC_LENGTH) {
                for (char *p = target + boot_length; *p; p++) *p = (char)tolower((unsigned char)*p);
                due.answer = find(target + boot_length);
                if (due.answer) due.status = 200;
            } else if (strcmp(method, "POST") == 0 && strncmp(target, done, done_length) == 0 && strlen(target + done_length) == MAC_LENGTH) {
                for (char *p = target + done_length; *p; p++) *p = (char)tolower((unsigned char)*p);
                struct answer *a = find(target + done_length);
                if (a) a->listed = 0;
                due.status = 204;
            }
            /* No request here has a body (Stampede's POST says Content-Length: 0). */
            memmove(c->head, c->head + head_length, c->filled - head_length);
            c->filled -= head_length;
            c->waiting = 1;
            push(due);
            return 1;
        }
        if (c->filled == sizeof c->head) { end(c); return 0; }
        ssize_t count = recv(c->fd, c->head + c->filled, sizeof c->head - c->filled, 0);
        if (count < 0 && errno == EINTR) continue;
        if (count < 0 && errno == EAGAIN) return 1;
        if (count <= 0) { end(c); return 0; }
        c->filled += (size_t)count;
    }
}

int main(int argc, char **argv) {
    int port = 0;
    const char *path = NULL, *prefix = "";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--port") == 0) port = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--answers") == 0) path = argv[i + 1];
        else if (strcmp(argv[i], "--prefix") == 0) prefix = argv[i + 1];
        else if (strcmp(argv[i], "--delay-ms") == 0) delay = atoll(argv[i + 1]) * 1000000LL;
        else { fprintf(stderr, "unknown option %s\n", argv[i]); return 64; }
    }
    if (port <= 0 || port > 65535 || !path || delay < 0 || argc % 2 == 0) {
        fprintf(stderr, "usage: pixieapi --port PORT --answers FILE [--prefix P] [--delay-ms MS]\n");
        return 64;
    }
    load(path);
    snprintf(boot, sizeof boot, "%s/v1/boot/", prefix);
    snprintf(done, sizeof done, "%s/v1/done/", prefix);

    int listener = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (bind(listener, (struct sockaddr *)&address, sizeof address) != 0 || listen(listener, 4096) != 0) { perror("listen"); return 1; }
    epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event event = {.events = EPOLLIN, .data.fd = listener};
    epoll_ctl(epoll_fd, EPOLL_CTL_ADD, listener, &event);
    printf("ready (%zu answers)\n", answer_count);
    fflush(stdout);

    unsigned generation = 0;
    struct epoll_event events[256];
    for (;;) {
        int timeout = -1;
        if (queue_head < queue_tail) {
            int64_t wait = queue[queue_head % queue_size].at - now_ns();
            timeout = wait <= 0 ? 0 : (int)((wait + 999999) / 1000000);
        }
        int count = epoll_wait(epoll_fd, events, 256, timeout);
        if (count < 0 && errno != EINTR) { perror("epoll_wait"); return 1; }
        for (int i = 0; i < count; i++) {
            int fd = events[i].data.fd;
            if (fd == listener) {
                int accepted;
                while ((accepted = accept4(listener, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
                    if ((size_t)accepted >= connection_slots) {
                        size_t slots = (size_t)accepted * 2 + 64;
                        connections = realloc(connections, slots * sizeof *connections);
                        memset(connections + connection_slots, 0, (slots - connection_slots) * sizeof *connections);
                        connection_slots = slots;
                    }
                    setsockopt(accepted, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    struct connection *c = calloc(1, sizeof *c);
                    c->fd = accepted;
                    c->generation = ++generation;
                    connections[accepted] = c;
                    /* Edge-triggered, never changed: a connection is read to EAGAIN whenever it
                     * is not waiting for its answer, and always after its answer went. */
                    struct epoll_event added = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, .data.fd = accepted};
                    epoll_ctl(epoll_fd, EPOLL_CTL_ADD, accepted, &added);
                }
                continue;
            }
            struct connection *c = connections[fd];
            if (!c) continue;
            if (c->waiting && c->unsent_length > 0) {
                if (flush(c) && !c->waiting) read_requests(c);
            } else if (!c->waiting) {
                read_requests(c);
            }
        }
        for (int64_t now = now_ns(); queue_head < queue_tail && queue[queue_head % queue_size].at <= now;) {
            struct due due = queue[queue_head++ % queue_size];  /* taken before its answer may queue another */
            answer_due(&due);
        }
    }
}
