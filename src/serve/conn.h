/*
 * tandem serve: the connection budget. The server accepts its own connections (one accept
 * thread) and hands them to libmicrohttpd (MHD_add_connection) once a request has begun, so
 * that it can decide who keeps a slot when the budget is spent:
 *
 *     sv_conns *cs;
 *     sv_conns_create(&opt, listen_fd, &cs);          // takes the listening socket
 *     for each HTTP thread i:
 *         d[i] = MHD_start_daemon(MHD_USE_EPOLL | MHD_USE_NO_LISTEN_SOCKET | ...,
 *                                 MHD_OPTION_NOTIFY_CONNECTION, sv_conns_notify, cs, ...);
 *     sv_conns_run(cs, d, n);                         // starts the HTTP threads and accepting
 *     ...
 *     sv_conns_stop(cs);                              // closes the listening socket
 *     sv_conns_halt(cs);                              // joins the HTTP threads
 *     MHD_stop_daemon(d[i]) for each i;
 *     sv_conns_free(cs);
 *
 * Life of a connection: accepted and held here (pending) until the head of its first request
 * (request line and headers, and with a chunked body its first chunk-size line) is complete;
 * meanwhile it is looked at as it arrives (a chunked request that expects 100 Continue gets it
 * from here). A head that
 * libmicrohttpd would refuse with one of its HTML pages is answered here with a JSON error and
 * closed: a first line that is not HTTP/1.x (HTTP/0.9, the HTTP/2 preface), not "METHOD URI
 * HTTP/1.x" or longer than SV_CONN_LINE bytes, a header line without a colon, a folded one, a
 * NUL, a head that would not fit in libmicrohttpd's pool (its bytes, ~64 bytes per line, the
 * cookies: check_request), a bad Host, Content-Length or first chunk-size line.
 * A complete, well-formed head sends the socket to libmicrohttpd (MHD_add_connection), which
 * reads it again from the start. A connection is *idle* while it has no complete request in
 * progress (pending, or kept alive between requests).
 *
 * Later requests of a kept-alive connection (check_heads): when a request ends and its
 * connection stays open, libmicrohttpd has read exactly that request's bytes (head and
 * Content-Length body; the kernel's count of bytes read from the socket, TCP_INFO less
 * SIOCINQ, tells) and the next head is not in the socket yet, the connection is suspended in
 * libmicrohttpd (from its request-completed callback, before it reads again) and watched here
 * (ST_WAIT) until the next head is complete; a good head resumes it, a bad one is answered in
 * JSON and the connection closed. A complete good head already in the socket passes at once.
 * Where the next head cannot be judged before libmicrohttpd parses it (after a chunked body,
 * whose end on the wire is not known here; a head that libmicrohttpd read together with the
 * request before it but that was not complete in the bytes seen here, or past
 * SV_CONN_PIPELINE pipelined ones), the answer before it closes the connection: the handler
 * adds "Connection: close" (sv_conns_close_after), and any answer that did not is followed by
 * a shutdown in sv_conns_request_end. libmicrohttpd parses no head unchecked then.
 *
 * Budget: at most max_connections admitted connections. A new one over the budget closes
 * the connection that has been idle longest (pending ones are closed here, libmicrohttpd's
 * are shut down, which it sees as the peer leaving); when none is idle, the new client gets
 * 503 with Retry-After and is closed. Over max_per_ip (0 = no limit) connections from one
 * address, the new client gets 503 and is closed.
 *
 * Timeouts (checked every SV_CONN_TICK_MS): a pending connection that sends nothing for
 * idle_timeout_s is closed; the head of a connection's first request must be complete
 * header_timeout_s after its first byte (else 408 in JSON), a later request's within
 * idle_timeout_s of the previous answer; a body must arrive at min_upload_rate bytes/s on
 * average, counted from the end of its headers, once rate_grace_s have passed.
 *
 * Threads: the accept thread owns the listening and the pending sockets and hands complete
 * heads to the HTTP threads round robin. Each HTTP thread runs one libmicrohttpd daemon (no
 * thread of libmicrohttpd's own) from an epoll set that holds the daemon's epoll descriptor and
 * the waiting sockets (ST_WAIT) of its connections: a later head is judged and its connection
 * resumed by the thread that serves it, without a hop through another thread. The notify
 * callback and the sv_conns_request_* calls come from the HTTP threads. One mutex guards the
 * table; the HTTP threads take it at every request, so the accept thread holds it briefly: per
 * event and per accepted connection (not for a round of events), the timeouts a slice of the
 * table at a time, and the sockets it drops are closed after the round, outside the lock. A
 * slot is removed before libmicrohttpd closes its socket (NOTIFY_CLOSED comes first), so a
 * shut-down never reaches a socket that was reused. Thread names: tdm-accept, tdm-http<i>.
 */
#ifndef TDM_SERVE_CONN_H
#define TDM_SERVE_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <microhttpd.h>

#include "serve/sv.h"

#define SV_CONN_PEEK 65536   /* bytes of a new connection's first request looked at */
#define SV_CONN_LINE 8192    /* longest request line */
#define SV_CONN_TICK_MS 100  /* timeouts are checked this often */

typedef struct sv_conns_options {
    int max_connections;    /* > 0 */
    int max_per_ip;         /* 0 = no limit */
    int idle_timeout_s;     /* > 0 */
    int header_timeout_s;   /* > 0 */
    size_t min_upload_rate; /* bytes per second; 0 = no minimum */
    int rate_grace_s;
    bool check_heads;       /* check every head of a kept-alive connection (above) */
    void (*log)(void *user, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
    void *log_user;
} sv_conns_options;

typedef struct sv_conns sv_conns;
typedef struct sv_slot sv_slot;

/* Takes listen_fd (a listening, non-blocking socket), also on failure. */
sv_error *sv_conns_create(const sv_conns_options *o, int listen_fd, sv_conns **out);
/* Starts an HTTP thread for each of the n daemons and the accept thread. Each daemon must have
 * been started with MHD_USE_EPOLL, MHD_USE_NO_LISTEN_SOCKET, MHD_USE_ITC,
 * MHD_ALLOW_SUSPEND_RESUME, no thread of its own, and sv_conns_notify; its thread runs it
 * (MHD_run) and adds the connections handed to it. On failure, sv_conns_free stops what began. */
sv_error *sv_conns_run(sv_conns *cs, struct MHD_Daemon *const *ds, int n);
/* Stops accepting: joins the accept thread, closes the listening socket and the connections
 * still held here. Connections in libmicrohttpd stay, served by the HTTP threads. NULL-safe,
 * idempotent. */
void sv_conns_stop(sv_conns *cs);
/* Stops accepting (sv_conns_stop) and joins the HTTP threads: before MHD_stop_daemon, which
 * then closes the daemons' connections from the caller's thread. NULL-safe, idempotent. */
void sv_conns_halt(sv_conns *cs);
/* After MHD_stop_daemon. NULL-safe. */
void sv_conns_free(sv_conns *cs);

/* MHD_OPTION_NOTIFY_CONNECTION callback (cls = the sv_conns). */
void sv_conns_notify(void *cls, struct MHD_Connection *connection, void **socket_context,
                     enum MHD_ConnectionNotificationCode toe);

/* From the request handler: a request's headers are complete (the slot is no longer idle);
 * body bytes arrived; the body is complete (or will not be read); the request is finished
 * (the connection is idle again unless it closes). `slot` comes from sv_conns_slot(). */
sv_slot *sv_conns_slot(struct MHD_Connection *connection);
void sv_conns_request_begin(sv_conns *cs, sv_slot *slot);
void sv_conns_body_bytes(sv_conns *cs, sv_slot *slot, size_t n);
void sv_conns_body_done(sv_conns *cs, sv_slot *slot);
/* `keep`: the answer leaves the connection open (the request-completed callback, from
 * libmicrohttpd's thread, with toe = MHD_REQUEST_TERMINATED_COMPLETED_OK); may suspend it. */
void sv_conns_request_end(sv_conns *cs, sv_slot *slot, struct MHD_Connection *connection,
                          bool keep);

/* From the request handler, as it answers (libmicrohttpd does not read the socket meanwhile):
 * whether the answer must close the connection because the next head on it cannot be checked
 * before libmicrohttpd parses it (check_heads): after a chunked body, or when libmicrohttpd
 * has read past the request into a head not judged here (one not complete in the bytes seen
 * with the request, more than SV_CONN_PIPELINE pipelined heads). The client sends that request
 * again on a new connection, whose first head is checked. */
bool sv_conns_close_after(sv_conns *cs, sv_slot *slot);

/* A chunked body's framing, followed from the upload callback (the request's own, zeroed at
 * its start). libmicrohttpd parses the framing itself and answers a malformed one with an HTML
 * page; the head check (above) has judged the first chunk-size line, and libmicrohttpd parses
 * the framing after a chunk only right after handing over the chunk's last data byte, when the
 * raw bytes it has read past the data are in its read buffer just after them. So each upload
 * callback judges those bytes up to the next chunk's data (or the end of the body) first: when
 * the step is not complete in them, or malformed, the handler keeps the chunk's last byte
 * (libmicrohttpd calls again with it once more has arrived), and on a malformed one suspends the
 * connection and calls sv_conns_chunk_bad, which answers 400 in JSON, drains the socket until
 * the peer goes and hands the connection back to libmicrohttpd to close. Not followed (counted
 * as unfollowed; libmicrohttpd's page then) where the head was not checked here (--check-heads
 * 0), the kernel does not tell the bytes read, or libmicrohttpd's version is not one whose
 * buffer layout and parser were read (0.9.75 to 0.9.77). */
typedef struct sv_chunks {
    bool on, off;     /* started; not followed (any more) */
    uint64_t at, end; /* the raw stream: the next data byte, the end of its chunk's data */
    uint64_t rd;      /* bytes libmicrohttpd had read at the last look */
} sv_chunks;
/* `data`, `n`: the upload callback's. Returns how many bytes to take (n, or n - 1: the last is
 * held back). *bad: the framing after the chunk is malformed (the message). */
size_t sv_conns_chunk_data(sv_conns *cs, sv_slot *slot, sv_chunks *t, const char *data, size_t n,
                           const char **bad);
/* After MHD_suspend_connection from the upload callback. */
void sv_conns_chunk_bad(sv_conns *cs, sv_slot *slot, struct MHD_Connection *connection,
                        const char *msg);

/* MHD_resume_connection for a connection suspended by the request handler (any thread), and a
 * wake-up for the HTTP thread that runs its daemon. `slot`: sv_conns_slot() of it (NULL: a
 * daemon with its own thread). */
void sv_conns_resume(sv_slot *slot, struct MHD_Connection *connection);

/* Counters since start (for the log and tests). */
typedef struct sv_conns_stats {
    uint64_t accepted, evicted_idle, refused_full, refused_per_ip, bad_first_line;
    uint64_t header_timeouts, idle_timeouts, slow_bodies;
    uint64_t later_checked, later_waited, later_bad, later_unsynced; /* check_heads */
    uint64_t chunks_bad, chunks_unfollowed; /* chunked bodies (sv_conns_chunk_data) */
    int admitted, pending, waiting;
} sv_conns_stats;
void sv_conns_get_stats(sv_conns *cs, sv_conns_stats *st);

/* A complete HTTP/1.1 answer with a JSON {"error": msg} body and Connection: close (and
 * Retry-After: 1 for 503), for the sockets answered outside libmicrohttpd. */
size_t sv_conns_error_answer(char *buf, size_t cap, int http, const char *msg);

#endif
