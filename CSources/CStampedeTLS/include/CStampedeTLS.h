#ifndef CSTAMPEDE_TLS_H
#define CSTAMPEDE_TLS_H

// The OpenSSL 3 calls --https makes, behind a small C contract: Swift sees two opaque pointers
// (a server context, a connection's session) and plain ints. Linked dynamically against Debian's
// libssl3, so that its security updates reach the server without a rebuild.

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct ssl_ctx_st;
struct ssl_st;

enum stampede_tls_profile {
    // TLS 1.2 and 1.3; after the ECDHE suites, the DHE-RSA and RSA ones that firmware without
    // elliptic curves (EDK2's TlsDxe in many builds) can use.
    STAMPEDE_TLS_FIRMWARE = 0,
    // TLS 1.2 with ECDHE and AEAD suites only, and TLS 1.3.
    STAMPEDE_TLS_MODERN = 1,
};

// A client context (the load generator's machines): TLS 1.2, as UEFI firmware and iPXE speak it,
// trusting the CAs of `ca_file` (PEM) and nothing else, ALPN http/1.1, no session kept between
// connections (each machine starts cold). NULL with why in `error`.
struct ssl_ctx_st *stampede_tls_client_context(const char *ca_file, char *error, size_t capacity);
// A session for a connecting socket, as a client of `host` (an address or a name: the
// certificate must name it; a name is sent as SNI).
struct ssl_st *stampede_tls_client_session(struct ssl_ctx_st *context, int fd, const char *host);

// Which file a context could not be made from.
enum stampede_tls_file { STAMPEDE_TLS_CERTIFICATE = 1, STAMPEDE_TLS_KEY = 2 };

// A server context from the text of a PEM chain (leaf first) and of a PEM key, with `profile`,
// the key exchange groups of stampede_tls_groups, ALPN http/1.1, resumption by session ID for 5
// minutes (no tickets), no renegotiation; kernel TLS asked for when `kernel_tls`. NULL on
// failure: `which` says the file (stampede_tls_file), `error` why.
struct ssl_ctx_st *stampede_tls_context(const void *certificate, size_t certificate_length, const void *key, size_t key_length,
                                        int profile, int kernel_tls, int *which, char *error, size_t capacity);
void stampede_tls_context_free(struct ssl_ctx_st *context);

// The leaf certificate's validity, in seconds since the epoch; 0, or -1 when it has none.
int stampede_tls_certificate_dates(struct ssl_ctx_st *context, int64_t *not_before, int64_t *not_after);
// The leaf's key: "RSA", "EC", ... and its bits.
int stampede_tls_certificate_key(struct ssl_ctx_st *context, char *type, size_t capacity, int *bits);
// The leaf's subject alternative names (DNS and IP), comma-separated; its subject when it has none.
int stampede_tls_certificate_names(struct ssl_ctx_st *context, char *names, size_t capacity);
// The TLS 1.2 suites a profile offers, in OpenSSL's names, in order (colon-separated).
const char *stampede_tls_cipher_list(int profile);
// The key exchange groups every profile offers, in OpenSSL's names, in order.
extern const char stampede_tls_groups[];

// A session for an accepted socket, as a server; NULL when out of memory.
struct ssl_st *stampede_tls_session(struct ssl_ctx_st *context, int fd);
// Goes on with the handshake: 1 done; -EAGAIN wants the socket; -EBADMSG the client spoke plain
// HTTP; -EPROTO it failed (why in stampede_tls_error); -ECONNRESET the client went away.
int stampede_tls_handshake(struct ssl_st *session);
// Decrypted bytes into `buffer`: > 0, 0 the client closed, -EAGAIN, -ECONNRESET, -EPROTO.
ssize_t stampede_tls_read(struct ssl_st *session, void *buffer, size_t count);
// At most one record of `bytes` (partial writes): > 0 taken, -EAGAIN (the same call again
// later, with at least as many bytes), -EPIPE, -EPROTO.
ssize_t stampede_tls_write(struct ssl_st *session, const void *bytes, size_t count);
// Through kernel TLS, straight from a file: as sendfile (> 0 taken, -EAGAIN, -EPIPE the client
// went away, or sendfile's own errno). Only when stampede_tls_kernel_send.
ssize_t stampede_tls_sendfile(struct ssl_st *session, int fd, off_t offset, size_t count);
// Whether the kernel encrypts what this session sends (kernel TLS took over after the handshake).
int stampede_tls_kernel_send(struct ssl_st *session);
// "TLSv1.2 DHE-RSA-AES128-GCM-SHA256", and whether the session was resumed.
int stampede_tls_describe(struct ssl_st *session, char *text, size_t capacity);
int stampede_tls_resumed(struct ssl_st *session);
// Whether any byte of the client's came (the handshake began; none: a port check).
int stampede_tls_began(struct ssl_st *session);
// Sends the session's close_notify (one try), before its socket closes.
void stampede_tls_shutdown(struct ssl_st *session);
// Frees the session, writing nothing: the socket may be closed already.
void stampede_tls_free(struct ssl_st *session);
// Why the last call of this thread failed, from OpenSSL's error queue (which it empties).
void stampede_tls_error(char *text, size_t capacity);

// Whether this kernel can take TLS over (the "tls" upper layer protocol: its module is there or
// loads): 1 yes, 0 no, with the errno in `reason`.
int stampede_tls_kernel_module(int *reason);

// The next certificate of PEM text: its DER in `der` (NULL: the size alone), its length
// returned; `consumed` the PEM bytes read. 0: no certificate left; -1: not a certificate (why in
// stampede_tls_error).
long stampede_tls_pem_certificate(const void *pem, size_t count, size_t *consumed, unsigned char *der, size_t capacity);
// Of a DER certificate: its subject, whether it is a CA (basic constraints), when it expires.
int stampede_tls_der_describe(const unsigned char *der, size_t count, char *subject, size_t capacity, int *authority,
                              int64_t *not_after);

#endif
