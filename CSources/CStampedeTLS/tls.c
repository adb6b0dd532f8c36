#include "CStampedeTLS.h"

#include <errno.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#ifndef TCP_ULP
#define TCP_ULP 31
#endif

// ECDHE first (forward secrecy, cheap), then what firmware without elliptic curves can use:
// DHE-RSA, then RSA key exchange, AES-GCM before CBC-SHA256 (EDK2's TlsDxe offers those).
static const char firmware_suites[] =
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
    "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
    "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305:"
    "DHE-RSA-AES128-GCM-SHA256:DHE-RSA-AES256-GCM-SHA384:"
    "DHE-RSA-AES128-SHA256:DHE-RSA-AES256-SHA256:"
    "AES128-GCM-SHA256:AES256-GCM-SHA384:AES128-SHA256:AES256-SHA256";
static const char modern_suites[] =
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
    "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
    "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305";

const char *stampede_tls_cipher_list(int profile)
{
    return profile == STAMPEDE_TLS_MODERN ? modern_suites : firmware_suites;
}

// The key exchange groups offered, the server's order: X25519, then the NIST curves that EDK2's
// TlsDxe has where it has elliptic curves at all. DHE-RSA's group is the one OpenSSL sizes to the
// key (dh_auto); nothing else is taken, whatever OpenSSL's defaults come to be.
const char stampede_tls_groups[] = "X25519:P-256:P-384";

void stampede_tls_error(char *text, size_t capacity)
{
    // The first error queued is the cause; those after it say where it was noticed.
    unsigned long code = ERR_peek_error();
    if (capacity == 0) return;
    text[0] = 0;
    if (code != 0) {
        const char *reason = ERR_reason_error_string(code);
        if (reason != NULL) snprintf(text, capacity, "%s", reason);
        else ERR_error_string_n(code, text, capacity);
    }
    ERR_clear_error();
}

// Never a prompt on the terminal for an encrypted key: the load fails and says so.
static int no_passphrase(char *buffer, int size, int rwflag, void *user)
{
    (void)buffer; (void)size; (void)rwflag; (void)user;
    return -1;
}

// http/1.1 when the client offers it; no ALPN otherwise (a client that offers only h2 gets
// HTTP/1.1 without the extension, as nginx does, rather than a failed handshake).
static int select_protocol(SSL *ssl, const unsigned char **out, unsigned char *out_length, const unsigned char *in,
                           unsigned int in_length, void *arg)
{
    static const unsigned char ours[] = "\x08http/1.1";
    unsigned char *chosen = NULL;
    (void)ssl; (void)arg;
    if (SSL_select_next_proto(&chosen, out_length, ours, sizeof(ours) - 1, in, in_length) != OPENSSL_NPN_NEGOTIATED) {
        return SSL_TLSEXT_ERR_NOACK;
    }
    *out = chosen;
    return SSL_TLSEXT_ERR_OK;
}

// The leaf and its intermediates, from PEM text: the chain the context presents.
static int use_chain(SSL_CTX *context, const void *pem, size_t count)
{
    BIO *input = BIO_new_mem_buf(pem, (int)count);
    if (input == NULL) return 0;
    X509 *leaf = PEM_read_bio_X509_AUX(input, NULL, no_passphrase, NULL);
    int used = leaf != NULL && SSL_CTX_use_certificate(context, leaf) == 1;
    X509_free(leaf);
    if (used) {
        SSL_CTX_clear_chain_certs(context);
        X509 *authority;
        while ((authority = PEM_read_bio_X509(input, NULL, no_passphrase, NULL)) != NULL) {
            if (SSL_CTX_add0_chain_cert(context, authority) != 1) {
                X509_free(authority);
                used = 0;
                break;
            }
        }
        // The end of the text: no start line, which is no error.
        if (used && ERR_GET_REASON(ERR_peek_last_error()) == PEM_R_NO_START_LINE) ERR_clear_error();
    }
    BIO_free(input);
    return used;
}

static int use_key(SSL_CTX *context, const void *pem, size_t count)
{
    BIO *input = BIO_new_mem_buf(pem, (int)count);
    if (input == NULL) return 0;
    EVP_PKEY *key = PEM_read_bio_PrivateKey(input, NULL, no_passphrase, NULL);
    int used = key != NULL && SSL_CTX_use_PrivateKey(context, key) == 1;
    EVP_PKEY_free(key);
    BIO_free(input);
    return used;
}

SSL_CTX *stampede_tls_context(const void *certificate, size_t certificate_length, const void *key, size_t key_length,
                              int profile, int kernel_tls, int *which, char *error, size_t capacity)
{
    static const unsigned char session_context[] = "stampede";
    SSL_CTX *context = SSL_CTX_new(TLS_server_method());
    ERR_clear_error();
    *which = 0;
    if (context == NULL) {
        stampede_tls_error(error, capacity);
        return NULL;
    }
    SSL_CTX_set_default_passwd_cb(context, no_passphrase);
    SSL_CTX_set_min_proto_version(context, TLS1_2_VERSION);
    SSL_CTX_set_max_proto_version(context, TLS1_3_VERSION);
    // No session tickets: a ticket is sealed with a key OpenSSL never rotates, so whoever reads it
    // decrypts every recorded TLS 1.2 session that used one. Resumption goes by session ID, from
    // the server's own cache, for as long as nginx keeps one (5 minutes); firmware never resumes.
    // A client that closes without close_notify (firmware does, once its file is read) is an EOF.
    uint64_t options = SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION |
                       SSL_OP_NO_TICKET | SSL_OP_IGNORE_UNEXPECTED_EOF;
    if (kernel_tls) options |= SSL_OP_ENABLE_KTLS;
    SSL_CTX_set_options(context, options);
    SSL_CTX_set_mode(context, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS);
    SSL_CTX_set_session_cache_mode(context, SSL_SESS_CACHE_SERVER);
    SSL_CTX_set_timeout(context, 300);
    SSL_CTX_set_session_id_context(context, session_context, sizeof(session_context) - 1);
    SSL_CTX_set_dh_auto(context, 1);
    SSL_CTX_set_alpn_select_cb(context, select_protocol, NULL);
    if (SSL_CTX_set_cipher_list(context, stampede_tls_cipher_list(profile)) != 1 ||
        SSL_CTX_set1_groups_list(context, stampede_tls_groups) != 1) {
        stampede_tls_error(error, capacity);
        SSL_CTX_free(context);
        return NULL;
    }
    if (!use_chain(context, certificate, certificate_length)) {
        *which = STAMPEDE_TLS_CERTIFICATE;
        stampede_tls_error(error, capacity);
        SSL_CTX_free(context);
        return NULL;
    }
    if (!use_key(context, key, key_length)) {
        *which = STAMPEDE_TLS_KEY;
        stampede_tls_error(error, capacity);
        SSL_CTX_free(context);
        return NULL;
    }
    if (SSL_CTX_check_private_key(context) != 1) {
        *which = STAMPEDE_TLS_KEY;
        ERR_clear_error();
        snprintf(error, capacity, "the key is not the certificate's (it does not match its public key)");
        SSL_CTX_free(context);
        return NULL;
    }
    return context;
}

SSL_CTX *stampede_tls_client_context(const char *ca_file, char *error, size_t capacity)
{
    static const unsigned char protocols[] = "\x08http/1.1";
    ERR_clear_error();
    SSL_CTX *context = SSL_CTX_new(TLS_client_method());
    if (context == NULL) {
        stampede_tls_error(error, capacity);
        return NULL;
    }
    SSL_CTX_set_min_proto_version(context, TLS1_2_VERSION);
    SSL_CTX_set_max_proto_version(context, TLS1_2_VERSION);
    SSL_CTX_set_mode(context, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS);
    SSL_CTX_set_session_cache_mode(context, SSL_SESS_CACHE_OFF);
    SSL_CTX_set_verify(context, SSL_VERIFY_PEER, NULL);
    SSL_CTX_set_alpn_protos(context, protocols, sizeof(protocols) - 1);
    if (SSL_CTX_load_verify_locations(context, ca_file, NULL) != 1) {
        stampede_tls_error(error, capacity);
        SSL_CTX_free(context);
        return NULL;
    }
    return context;
}

SSL *stampede_tls_client_session(SSL_CTX *context, int fd, const char *host)
{
    unsigned char address[16];
    SSL *session = SSL_new(context);
    if (session == NULL) return NULL;
    int numeric = inet_pton(AF_INET, host, address) == 1 || inet_pton(AF_INET6, host, address) == 1;
    int named = numeric ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(session), host)
                        : SSL_set1_host(session, host) && SSL_set_tlsext_host_name(session, host);
    if (!named || SSL_set_fd(session, fd) != 1) {
        SSL_free(session);
        return NULL;
    }
    SSL_set_connect_state(session);
    return session;
}

void stampede_tls_context_free(SSL_CTX *context)
{
    SSL_CTX_free(context);
}

static int64_t seconds_of(const ASN1_TIME *time)
{
    struct tm when;
    if (time == NULL || ASN1_TIME_to_tm(time, &when) != 1) return -1;
    return (int64_t)timegm(&when);
}

int stampede_tls_certificate_dates(SSL_CTX *context, int64_t *not_before, int64_t *not_after)
{
    X509 *leaf = SSL_CTX_get0_certificate(context);
    if (leaf == NULL) return -1;
    *not_before = seconds_of(X509_get0_notBefore(leaf));
    *not_after = seconds_of(X509_get0_notAfter(leaf));
    return 0;
}

int stampede_tls_certificate_key(SSL_CTX *context, char *type, size_t capacity, int *bits)
{
    X509 *leaf = SSL_CTX_get0_certificate(context);
    EVP_PKEY *key = leaf == NULL ? NULL : X509_get0_pubkey(leaf);
    if (key == NULL) return -1;
    const char *name = EVP_PKEY_get0_type_name(key);
    snprintf(type, capacity, "%s", name == NULL ? "unknown" : name);
    *bits = EVP_PKEY_get_bits(key);
    return 0;
}

int stampede_tls_certificate_names(SSL_CTX *context, char *names, size_t capacity)
{
    X509 *leaf = SSL_CTX_get0_certificate(context);
    size_t used = 0;
    if (leaf == NULL || capacity == 0) return -1;
    names[0] = 0;
    GENERAL_NAMES *alternatives = X509_get_ext_d2i(leaf, NID_subject_alt_name, NULL, NULL);
    for (int i = 0; alternatives != NULL && i < sk_GENERAL_NAME_num(alternatives); i++) {
        const GENERAL_NAME *name = sk_GENERAL_NAME_value(alternatives, i);
        char text[64] = "";
        if (name->type == GEN_DNS) {
            snprintf(text, sizeof(text), "%.*s", ASN1_STRING_length(name->d.dNSName), (const char *)ASN1_STRING_get0_data(name->d.dNSName));
        } else if (name->type == GEN_IPADD) {
            const unsigned char *ip = ASN1_STRING_get0_data(name->d.iPAddress);
            int length = ASN1_STRING_length(name->d.iPAddress);
            if (length == 4) snprintf(text, sizeof(text), "%u.%u.%u.%u", ip[0], ip[1], ip[2], ip[3]);
            else if (length == 16) {
                size_t at = 0;
                for (int b = 0; b < 16; b += 2) at += (size_t)snprintf(text + at, sizeof(text) - at, b ? ":%x" : "%x", ip[b] << 8 | ip[b + 1]);
            }
        }
        if (text[0] == 0) continue;
        used += (size_t)snprintf(names + used, capacity - used, "%s%s", used ? ", " : "", text);
        if (used >= capacity) break;
    }
    GENERAL_NAMES_free(alternatives);
    if (names[0] == 0) X509_NAME_oneline(X509_get_subject_name(leaf), names, (int)capacity);
    return 0;
}

SSL *stampede_tls_session(SSL_CTX *context, int fd)
{
    SSL *session = SSL_new(context);
    if (session == NULL) return NULL;
    if (SSL_set_fd(session, fd) != 1) {
        SSL_free(session);
        return NULL;
    }
    SSL_set_accept_state(session);
    return session;
}

// What a failed call means for the loop, from SSL_get_error and errno: -EINTR when a signal
// interrupted the system call under it (the caller makes the same call again at once: under
// edge-triggered epoll no new edge would come).
static int failure(SSL *session, int result)
{
    int saved = errno;
    switch (SSL_get_error(session, result)) {
    case SSL_ERROR_WANT_READ:
    case SSL_ERROR_WANT_WRITE:
        return -EAGAIN;
    case SSL_ERROR_ZERO_RETURN:
        return 0;
    case SSL_ERROR_SYSCALL:
        ERR_clear_error();
        if (saved == EINTR) return -EINTR;
        if (saved == EAGAIN) return -EAGAIN;
        return -ECONNRESET;  // EOF or a reset: the client went away
    default:
        return -EPROTO;
    }
}

int stampede_tls_handshake(SSL *session)
{
    int outcome;
    do {
        ERR_clear_error();
        int result = SSL_do_handshake(session);
        if (result == 1) return 1;
        outcome = failure(session, result);
    } while (outcome == -EINTR);
    if (outcome == -EPROTO && ERR_GET_REASON(ERR_peek_error()) == SSL_R_HTTP_REQUEST) {
        ERR_clear_error();
        return -EBADMSG;
    }
    return outcome == 0 ? -ECONNRESET : outcome;
}

ssize_t stampede_tls_read(SSL *session, void *buffer, size_t count)
{
    int outcome;
    do {
        size_t read = 0;
        ERR_clear_error();
        int result = SSL_read_ex(session, buffer, count, &read);
        if (result == 1) return (ssize_t)read;
        outcome = failure(session, result);
    } while (outcome == -EINTR);
    return outcome;
}

ssize_t stampede_tls_write(SSL *session, const void *bytes, size_t count)
{
    int outcome;
    do {
        size_t written = 0;
        ERR_clear_error();
        int result = SSL_write_ex(session, bytes, count, &written);
        if (result == 1) return (ssize_t)written;
        outcome = failure(session, result);
    } while (outcome == -EINTR);
    return outcome == 0 || outcome == -ECONNRESET ? -EPIPE : outcome;
}

ssize_t stampede_tls_sendfile(SSL *session, int fd, off_t offset, size_t count)
{
    for (;;) {
        ERR_clear_error();
        ossl_ssize_t sent = SSL_sendfile(session, fd, offset, count, 0);
        if (sent >= 0) return sent;
        // SSL_sendfile is sendfile(2) on the kernel's TLS socket: its errno says what went wrong
        // (OpenSSL queues an error as well, which says no more).
        int saved = errno;
        ERR_clear_error();
        if (saved == EINTR) continue;
        if (saved == EAGAIN) return -EAGAIN;
        return saved == EPIPE || saved == ECONNRESET ? -EPIPE : -(saved ? saved : EIO);
    }
}

int stampede_tls_kernel_send(SSL *session)
{
    return BIO_get_ktls_send(SSL_get_wbio(session)) ? 1 : 0;
}

int stampede_tls_describe(SSL *session, char *text, size_t capacity)
{
    return snprintf(text, capacity, "%s %s", SSL_get_version(session), SSL_get_cipher_name(session));
}

int stampede_tls_resumed(SSL *session)
{
    return SSL_session_reused(session);
}

int stampede_tls_began(SSL *session)
{
    // Bytes the session read from its socket: none, and no ClientHello came (a port check).
    // (SSL_in_before says no more once SSL_do_handshake has been called.)
    return BIO_number_read(SSL_get_rbio(session)) > 0 ? 1 : 0;
}

void stampede_tls_shutdown(SSL *session)
{
    // One try: a client that does not read its close_notify does not hold the loop.
    SSL_set_quiet_shutdown(session, 0);
    (void)SSL_shutdown(session);
    ERR_clear_error();
}

void stampede_tls_free(SSL *session)
{
    // Memory alone: with quiet shutdown set, SSL_free never writes to the socket (which may be
    // closed, and its number another file's, by now).
    SSL_set_quiet_shutdown(session, 1);
    SSL_free(session);
}

int stampede_tls_kernel_module(int *reason)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        *reason = errno;
        return 0;
    }
    // On a socket that is not connected, a kernel that has the layer says ENOTCONN; one that
    // has not (no module, none to load) says ENOENT.
    int result = setsockopt(fd, IPPROTO_TCP, TCP_ULP, "tls", sizeof("tls"));
    int saved = errno;
    close(fd);
    *reason = result == 0 ? 0 : saved;
    return result == 0 || saved == ENOTCONN;
}

long stampede_tls_pem_certificate(const void *pem, size_t count, size_t *consumed, unsigned char *der, size_t capacity)
{
    ERR_clear_error();
    BIO *input = BIO_new_mem_buf(pem, (int)count);
    if (input == NULL) return -1;
    X509 *certificate = PEM_read_bio_X509(input, NULL, no_passphrase, NULL);
    *consumed = count - (size_t)BIO_pending(input);
    BIO_free(input);
    if (certificate == NULL) {
        if (ERR_GET_REASON(ERR_peek_error()) == PEM_R_NO_START_LINE) {
            ERR_clear_error();
            *consumed = count;
            return 0;
        }
        return -1;
    }
    int length = i2d_X509(certificate, NULL);
    if (der != NULL && length > 0 && (size_t)length <= capacity) {
        unsigned char *at = der;
        i2d_X509(certificate, &at);
    }
    X509_free(certificate);
    return length;
}

int stampede_tls_der_describe(const unsigned char *der, size_t count, char *subject, size_t capacity, int *authority,
                              int64_t *not_after)
{
    const unsigned char *at = der;
    X509 *certificate = d2i_X509(NULL, &at, (long)count);
    if (certificate == NULL) {
        ERR_clear_error();
        return -1;
    }
    X509_NAME_oneline(X509_get_subject_name(certificate), subject, (int)capacity);
    *authority = X509_check_ca(certificate) ? 1 : 0;
    *not_after = seconds_of(X509_get0_notAfter(certificate));
    X509_free(certificate);
    return 0;
}
