/* tandem serve: the connection budget, the accept thread and the first-line check (see conn.h). */
#define _GNU_SOURCE /* accept4, EPOLLRDHUP */
#include <errno.h>
#include <linux/sockios.h> /* SIOCINQ */
#include <linux/tcp.h>     /* TCP_INFO with tcpi_bytes_received (not in glibc's netinet/tcp.h) */
#include <netinet/in.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "serve/conn.h"

#define REFUSING_MAX 256      /* sockets held here only to answer an error, at most */
#define LINGER_NS 2000000000ull /* how long an answered socket is drained before its close */
#define SV_CONN_PIPELINE 8      /* pipelined heads followed */

typedef enum slot_state {
    ST_PENDING, /* held here: its first request's headers are not complete yet */
    ST_REFUSE,  /* held here: will be answered `http`/`msg` once its request begins */
    ST_LINGER,  /* answered and half-closed here; drained until the peer closes */
    ST_MHD,     /* in libmicrohttpd */
    ST_WAIT,    /* in libmicrohttpd, suspended between requests: its next head is watched here */
    ST_WLINGER, /* in libmicrohttpd, suspended: a bad later head was answered here; drained
                   until the peer closes, then resumed (libmicrohttpd sees the end and closes) */
} slot_state;

struct sv_slot {
    int fd;
    slot_state state;
    bool in_request, in_body, shut;
    bool dead;        /* closed here; freed at the end of the accept thread's round */
    unsigned requests;
    uint64_t t_open;  /* accept, hand-over to libmicrohttpd, or the answer (ST_LINGER) */
    uint64_t t_first; /* ST_PENDING: its first byte (0: none yet) */
    int peeked;       /* ST_PENDING: bytes seen at the last look */
    bool recheck;     /* ST_PENDING: bytes arrived that were not looked at yet */
    uint64_t t_idle;  /* when it became idle */
    uint64_t t_body;  /* the end of the current request's headers */
    uint64_t body_bytes;
    struct MHD_Connection *conn; /* ST_MHD, ST_WAIT, ST_WLINGER: once libmicrohttpd told */
    uint64_t rd_base; /* bytes read from the socket by libmicrohttpd when the current request's
                         head was checked here */
    uint64_t wire;    /* bytes of that request on the wire (head and Content-Length body);
                         UINT64_MAX: not known (chunked): its answer closes the connection */
    bool req_close;   /* that request asked for the connection to be closed */
    bool ck_known;    /* that request's body is chunked, its first chunk at rd_base + ck_rel */
    uint64_t ck_rel, ck_size;
    bool sent_100;    /* ST_PENDING, ST_WAIT: 100 Continue sent for the head being waited for */
    /* heads pipelined behind the current request, seen with it: the good ones (their sizes,
     * n_pipe of them, pipe_pos used), then the first bad one (next_http > 0) */
    uint64_t pipe_wire[SV_CONN_PIPELINE];
    bool pipe_close[SV_CONN_PIPELINE];
    int n_pipe, pipe_pos;
    int pipe_ck;      /* the pipelined head with a chunked body (the last one), or -1 */
    uint64_t pipe_ck_rel, pipe_ck_size;
    int next_http;
    const char *next_msg;
    int http;         /* ST_REFUSE */
    char msg[160];
    struct sockaddr_storage addr;
    socklen_t addrlen;
    struct sv_worker *w;  /* ST_MHD, ST_WAIT, ST_WLINGER: the HTTP thread whose daemon has it */
    sv_slot *prev, *next; /* the idle list, longest idle first */
};

/* A connection on its way to an HTTP thread. */
typedef struct handover {
    int fd;
    struct sockaddr_storage addr;
    socklen_t alen;
} handover;

struct pending_resume {
    struct MHD_Connection *c;
    struct sv_worker *w;
};

/* An HTTP thread: one libmicrohttpd daemon without a thread of its own, run from here, and the
 * waiting sockets (ST_WAIT, ST_WLINGER) of its connections in the same epoll set, so that a
 * later head that arrives is judged and its connection resumed by the thread that serves it
 * (no hand-off to another thread and back). */
typedef struct sv_worker {
    sv_conns *cs;
    struct MHD_Daemon *d;
    int ep, wake, mhd_fd;
    pthread_t thread;
    bool started, stop; /* stop: cs->mu */
    handover *q;        /* connections handed to it, for MHD_add_connection (cs->mu) */
    int nq, cap_q;
} sv_worker;

struct sv_conns {
    sv_conns_options opt;
    int listen_fd, ep, wake;
    sv_worker *workers;
    int n_workers, next_worker;
    pthread_t thread;
    bool started, stop;
    pthread_mutex_t mu;
    sv_slot **by_fd;
    int cap_fd;
    sv_slot idle; /* sentinel of the idle list */
    int admitted; /* pending and in libmicrohttpd, not shut down */
    int refusing; /* ST_REFUSE and ST_LINGER */
    sv_slot *dead; /* closed slots that an event of this round may still name */
    uint64_t paused_until; /* out of descriptors: the listening socket rests until then */
    sv_conns_stats st;
    struct pending_resume *resume; /* ST_WAIT connections to resume once cs->mu is released */
    int n_resume, cap_resume;
    char peek[SV_CONN_PEEK]; /* the accept thread's */
};

/* ---- slots (cs->mu held) ------------------------------------------------------------------ */

static void idle_remove(sv_slot *s) {
    if (!s->next) return;
    s->prev->next = s->next;
    s->next->prev = s->prev;
    s->prev = s->next = NULL;
}

static void idle_append(sv_conns *cs, sv_slot *s, uint64_t now) {
    idle_remove(s);
    s->t_idle = now;
    s->prev = cs->idle.prev;
    s->next = &cs->idle;
    cs->idle.prev->next = s;
    cs->idle.prev = s;
}

static bool table_fit(sv_conns *cs, int fd) {
    if (fd < cs->cap_fd) return true;
    int cap = cs->cap_fd ? cs->cap_fd : 1024;
    while (cap <= fd) cap *= 2;
    sv_slot **p = realloc(cs->by_fd, (size_t)cap * sizeof *p);
    if (!p) return false;
    memset(p + cs->cap_fd, 0, (size_t)(cap - cs->cap_fd) * sizeof *p);
    cs->by_fd = p;
    cs->cap_fd = cap;
    return true;
}

/* Forgets a slot held here. Its socket is closed, and the slot freed, by bury() after the
 * accept thread's round, outside cs->mu: an event of the same epoll round may still point to
 * the slot, and a close (a FIN or a reset sent) is not done under the lock that the HTTP
 * threads take at every request (evictions close thousands of sockets a second). Until then
 * the descriptor stays open, so its number is not reused. */
static void drop_own(sv_conns *cs, sv_slot *s) {
    idle_remove(s);
    if (s->state == ST_PENDING) cs->admitted--;
    else cs->refusing--;
    cs->by_fd[s->fd] = NULL;
    s->dead = true;
    s->next = cs->dead;
    cs->dead = s;
}

/* The slots dropped so far, for bury() (cs->mu held). */
static sv_slot *take_dead(sv_conns *cs) {
    sv_slot *d = cs->dead;
    cs->dead = NULL;
    return d;
}

/* Closes the sockets of dropped slots (also leaving the epoll set: the descriptors are not
 * duplicated) and frees the slots; cs->mu not held. */
static void bury(sv_slot *d) {
    while (d) {
        sv_slot *s = d;
        d = s->next;
        close(s->fd);
        free(s);
    }
}

/* Resumes a connection suspended in libmicrohttpd and wakes its HTTP thread: a daemon without
 * a thread of its own is not woken by MHD_resume_connection (0.9.75 has no inter-thread
 * channel in its epoll set then). */
static void resume_and_wake(struct MHD_Connection *c, sv_worker *w) {
    MHD_resume_connection(c);
    uint64_t one = 1;
    if (w) (void)!write(w->wake, &one, sizeof one);
}

/* Queues a suspended connection for MHD_resume_connection, which runs once cs->mu is released
 * (libmicrohttpd's locks are kept out from under it). Out of memory, it is resumed at once:
 * libmicrohttpd (0.9.75) calls no callback of ours with its lock held, and a connection it
 * closes meanwhile waits for cs->mu before its slot goes. */
static void queue_resume(sv_conns *cs, struct MHD_Connection *c, sv_worker *w) {
    if (cs->n_resume == cs->cap_resume) {
        int cap = cs->cap_resume ? 2 * cs->cap_resume : 64;
        struct pending_resume *p = realloc(cs->resume, (size_t)cap * sizeof *p);
        if (!p) {
            resume_and_wake(c, w);
            return;
        }
        cs->resume = p;
        cs->cap_resume = cap;
    }
    cs->resume[cs->n_resume++] = (struct pending_resume){c, w};
}

static void run_resumes(sv_conns *cs) {
    pthread_mutex_lock(&cs->mu);
    while (cs->n_resume) {
        struct pending_resume r = cs->resume[--cs->n_resume];
        pthread_mutex_unlock(&cs->mu);
        resume_and_wake(r.c, r.w);
        pthread_mutex_lock(&cs->mu);
    }
    pthread_mutex_unlock(&cs->mu);
}

void sv_conns_resume(sv_slot *s, struct MHD_Connection *c) {
    resume_and_wake(c, s ? s->w : NULL);
}

/* A suspended connection (ST_WAIT, ST_WLINGER) goes back to libmicrohttpd. */
static void release_waiting(sv_conns *cs, sv_slot *s) {
    epoll_ctl(s->w->ep, EPOLL_CTL_DEL, s->fd, NULL);
    s->state = ST_MHD;
    queue_resume(cs, s->conn, s->w);
}

/* Makes libmicrohttpd close a connection: it reads the end of the stream and closes. */
static void shut_mhd(sv_conns *cs, sv_slot *s) {
    if (s->state == ST_WAIT || s->state == ST_WLINGER) {
        if (!s->shut) shutdown(s->fd, SHUT_RDWR);
        release_waiting(cs, s);
    }
    if (s->shut) return;
    s->shut = true;
    idle_remove(s);
    shutdown(s->fd, SHUT_RDWR);
    cs->admitted--;
}

size_t sv_conns_error_answer(char *buf, size_t cap, int http, const char *msg) {
    const char *reason = http == 400 ? "Bad Request" : http == 408 ? "Request Timeout"
                       : http == 414 ? "URI Too Long"
                       : http == 431 ? "Request Header Fields Too Large"
                       : http == 505 ? "HTTP Version Not Supported" : "Service Unavailable";
    sv_buf body = {0};
    sv_buf_str(&body, "{\"error\":");
    sv_buf_json_str(&body, msg, strlen(msg));
    sv_buf_str(&body, "}");
    int n = snprintf(buf, cap, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\nConnection: close\r\n%s\r\n%s", http, reason,
                     body.len, http == 503 ? "Retry-After: 1\r\n" : "", body.p ? body.p : "");
    sv_buf_free(&body);
    return n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
}

/* Reads what has arrived (at most 256 KiB); false when the peer closed or more is coming. */
static bool drain(int fd) {
    char b[4096];
    for (int i = 0; i < 64; i++) {
        ssize_t k = recv(fd, b, sizeof b, MSG_DONTWAIT);
        if (k < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
        if (k == 0) return false;
    }
    return false;
}

/* Answers a socket held here with an error and keeps it half-closed for a moment, so that the
 * client reads the answer instead of a reset. */
static void answer_and_linger(sv_conns *cs, sv_slot *s, int http, const char *msg, uint64_t now) {
    char buf[600];
    size_t n = sv_conns_error_answer(buf, sizeof buf, http, msg);
    drain(s->fd);
    (void)!send(s->fd, buf, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    shutdown(s->fd, SHUT_WR);
    idle_remove(s);
    if (s->state == ST_WAIT) { /* libmicrohttpd's: it closes the socket once resumed */
        if (!s->shut) cs->admitted--;
        s->shut = true;
        s->state = ST_WLINGER;
        s->t_open = now;
        return;
    }
    if (s->state == ST_PENDING) {
        cs->admitted--;
        cs->refusing++;
    }
    s->state = ST_LINGER;
    s->t_open = now;
}

/* A request head that has not arrived within --header-timeout: 408, then linger. */
static void late_head(sv_conns *cs, sv_slot *s, uint64_t now) {
    char msg[120];
    cs->st.header_timeouts++;
    snprintf(msg, sizeof msg, "the request headers did not arrive within %d s (--header-timeout)",
             cs->opt.header_timeout_s);
    answer_and_linger(cs, s, 408, msg, now);
}

static bool same_ip(const struct sockaddr_storage *a, const struct sockaddr_storage *b) {
    if (a->ss_family != b->ss_family) return false;
    if (a->ss_family == AF_INET)
        return !memcmp(&((const struct sockaddr_in *)a)->sin_addr,
                       &((const struct sockaddr_in *)b)->sin_addr, sizeof(struct in_addr));
    if (a->ss_family == AF_INET6)
        return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                       &((const struct sockaddr_in6 *)b)->sin6_addr, sizeof(struct in6_addr));
    return false;
}

static int count_ip(sv_conns *cs, const struct sockaddr_storage *a) {
    int n = 0;
    for (int fd = 0; fd < cs->cap_fd; fd++) {
        sv_slot *s = cs->by_fd[fd];
        if (s && !s->shut && s->state != ST_REFUSE && s->state != ST_LINGER &&
            same_ip(&s->addr, a))
            n++;
    }
    return n;
}

/* Closes the connection idle longest to make room; false when none is idle. */
static bool evict_one(sv_conns *cs) {
    sv_slot *s = cs->idle.next;
    if (s == &cs->idle) return false;
    cs->st.evicted_idle++;
    if (s->state == ST_MHD || s->state == ST_WAIT) shut_mhd(cs, s);
    else drop_own(cs, s);
    return true;
}

/* A new connection: admitted (pending), or held to be refused, or closed at once. */
static void admit(sv_conns *cs, int fd, const struct sockaddr_storage *addr, socklen_t alen,
                  uint64_t now) {
    cs->st.accepted++;
    int http = 0;
    char msg[160] = "";
    if (cs->opt.max_per_ip > 0 && count_ip(cs, addr) >= cs->opt.max_per_ip) {
        cs->st.refused_per_ip++;
        http = 503;
        snprintf(msg, sizeof msg, "too many connections from this address (--max-connections-per-ip "
                 "%d)", cs->opt.max_per_ip);
    } else if (cs->admitted >= cs->opt.max_connections && !evict_one(cs)) {
        cs->st.refused_full++;
        http = 503;
        snprintf(msg, sizeof msg, "the server has no free connection (--max-connections %d); "
                 "retry later", cs->opt.max_connections);
    }
    sv_slot *s = (http && cs->refusing >= REFUSING_MAX) || !table_fit(cs, fd) ? NULL
                                                                                : calloc(1, sizeof *s);
    if (!s) {
        close(fd);
        return;
    }
    s->fd = fd;
    s->state = http ? ST_REFUSE : ST_PENDING;
    s->t_open = now;
    s->http = http;
    memcpy(s->msg, msg, sizeof msg);
    memcpy(&s->addr, addr, sizeof *addr);
    s->addrlen = alen;
    /* edge-triggered: an event per arrival, so that a request head that is not complete
     * yet can wait here without waking the thread again and again */
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | EPOLLET, .data.ptr = s};
    if (epoll_ctl(cs->ep, EPOLL_CTL_ADD, fd, &ev)) {
        close(fd);
        free(s);
        return;
    }
    cs->by_fd[fd] = s;
    if (http) {
        cs->refusing++;
    } else {
        cs->admitted++;
        idle_append(cs, s, now);
    }
}

/* Header lines of a complete header block [b, end): what libmicrohttpd would answer with an
 * HTML page (a line without a colon after a name, a NUL before the colon) or take apart in its
 * pool beyond what check_request counts (a line folded onto the one before: RFC 9112 5.2 lets
 * a server refuse it). The error message, or NULL. */
static const char *header_lines_bad(const char *b, const char *end) {
    if (memchr(b, 0, (size_t)(end - b))) return "a request header contains a NUL byte";
    while (b < end) {
        const char *nl = memchr(b, '\n', (size_t)(end - b));
        if (!nl) nl = end;
        size_t len = (size_t)(nl - b);
        if (len && b[len - 1] == '\r') len--;
        if (len && (b[0] == ' ' || b[0] == '\t'))
            return "a request header line begins with a blank (obsolete line folding is not "
                   "accepted)";
        if (len) {
            const char *colon = memchr(b, ':', len);
            if (!colon || colon == b || memchr(b, ' ', (size_t)(colon - b)))
                return "a request header line has no 'name:' (malformed header)";
        }
        b = nl + 1;
    }
    return NULL;
}

/* Whether a header value found by head_value, `len` bytes after blanks, has blanks after it
 * (libmicrohttpd keeps them: "chunked " is not chunked there, "5 " not a number). */
static bool trailing_blank(const char *v, size_t len) {
    return v[len] == ' ' || v[len] == '\t';
}

/* The value of header `name` in the header block [b, end) (first occurrence), or NULL; its
 * length (surrounding blanks trimmed) in *len. *count: how many lines carry the name. */
static const char *head_value(const char *b, const char *end, const char *name, size_t *len,
                              int *count) {
    size_t nl_len = strlen(name);
    const char *found = NULL;
    *count = 0;
    while (b < end) {
        const char *nl = memchr(b, '\n', (size_t)(end - b));
        if (!nl) nl = end;
        size_t n = (size_t)(nl - b);
        if (n && b[n - 1] == '\r') n--;
        if (n > nl_len && b[nl_len] == ':' && !strncasecmp(b, name, nl_len)) {
            ++*count;
            if (!found) {
                const char *v = b + nl_len + 1, *ve = b + n;
                while (v < ve && (*v == ' ' || *v == '\t')) v++;
                while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t')) ve--;
                found = v;
                *len = (size_t)(ve - v);
            }
        }
        b = nl + 1;
    }
    return found;
}

/* Chunked framing (RFC 9112 7.1), judged before libmicrohttpd parses it. What passes here must
 * pass libmicrohttpd 0.9.75's parser (else it answers with an HTML page), so this is stricter:
 * a chunk-size line is 1 to 15 hexadecimal digits followed at once by ';' (an extension, up to
 * the end of the line), CRLF or LF, in at most CHUNK_LINE_MAX bytes; a chunk's data is followed
 * by CRLF or LF; a trailer line is "name:value" (no blank or control byte before the colon, no
 * line folding, no NUL, no CR but before its LF), all of them in at most CHUNK_TRAILERS_MAX
 * bytes. The limits are small next to libmicrohttpd's read buffer, which must hold a whole
 * framing step while the chunk's last byte is held back (sv_conns_chunk_data), and next to
 * the room the head check leaves in its pool (check_request). */
#define CHUNK_LINE_MAX 1024
#define CHUNK_TRAILERS_MAX 1024
#define CHUNK_TRAILER_LINES 16

static bool trailer_line_ok(const char *b, size_t len) {
    const char *colon = memchr(b, ':', len);
    if (!colon || colon == b || memchr(b, 0, len)) return false;
    for (const char *p = b; p < colon; p++)
        if ((unsigned char)*p <= ' ' || *p == 0x7f) return false;
    for (const char *p = colon; p < b + len; p++)
        if (*p == '\r') return false;
    return true;
}

/* One step of a chunked body's framing at [b, b+n): the line end after a chunk's data (when
 * after_data), then a chunk-size line, and after the last one (size 0) the trailer section up to
 * its empty line. 1: complete and good, *size the next chunk's size and *used the step's bytes;
 * 0: not complete yet; -1: malformed (*msg). */
static int chunk_step(const char *b, size_t n, bool after_data, uint64_t *size, size_t *used,
                      const char **msg) {
    size_t i = 0;
    if (after_data) {
        if (n == 0) return 0;
        if (b[0] == '\r' && n == 1) return 0;
        if (b[0] != '\n' && (b[0] != '\r' || b[1] != '\n')) {
            *msg = "a chunk is longer than its size: no CRLF after its data (bad chunked encoding)";
            return -1;
        }
        i = b[0] == '\n' ? 1 : 2;
    }
    size_t line = i;
    uint64_t v = 0;
    for (; i < n; i++) {
        char ch = b[i];
        int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
              : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
        if (d < 0) break;
        if (i - line >= 15) {
            *msg = "a chunk size has more than 15 hexadecimal digits (bad chunked encoding)";
            return -1;
        }
        v = v * 16 + (uint64_t)d;
    }
    if (i == n) return 0;
    if (i == line) {
        *msg = "a chunk-size line does not begin with a hexadecimal size (bad chunked encoding)";
        return -1;
    }
    const char *nl = NULL;
    if (b[i] == ';') { /* an extension, ignored */
        nl = memchr(b + i, '\n', n - i);
        if ((size_t)((nl ? nl : b + n) - (b + line)) >= CHUNK_LINE_MAX) {
            *msg = "a chunk-size line is longer than 1024 bytes";
            return -1;
        }
        if (!nl) return 0;
    } else if (b[i] == '\r') {
        if (i + 1 == n) return 0;
        if (b[i + 1] == '\n') nl = b + i + 1;
    } else if (b[i] == '\n') {
        nl = b + i;
    }
    if (!nl) {
        *msg = "a chunk size is followed by something other than ';' or the end of its line (bad "
               "chunked encoding)";
        return -1;
    }
    i = (size_t)(nl - b) + 1;
    if (v) {
        *size = v;
        *used = i;
        return 1;
    }
    for (size_t t0 = i, lines = 0;; lines++) { /* the last chunk: trailers, then an empty line */
        nl = memchr(b + i, '\n', n - i);
        if ((size_t)((nl ? nl : b + n) - (b + t0)) >= CHUNK_TRAILERS_MAX ||
            lines > CHUNK_TRAILER_LINES) {
            *msg = "the trailer section of the chunked body is larger than 1024 bytes or 16 lines";
            return -1;
        }
        if (!nl) return 0;
        size_t len = (size_t)(nl - (b + i));
        if (len && b[i + len - 1] == '\r') len--;
        if (!len) {
            *size = 0;
            *used = (size_t)(nl - b) + 1;
            return 1;
        }
        if (!trailer_line_ok(b + i, len)) {
            *msg = "a trailer line of the chunked body is not 'name: value'";
            return -1;
        }
        i = (size_t)(nl - b) + 1;
    }
}

/* What a good head tells about its request: its bytes on the wire, whether it asks for the
 * connection to be closed after the answer, and with a chunked body where the data of its
 * first chunk begins (from the start of the head) and its size. */
typedef struct head_info {
    uint64_t wire; /* head and Content-Length body; UINT64_MAX with a chunked body */
    bool close;
    bool chunked;
    uint64_t ck_rel, ck_size;
} head_info;

/* Whether the comma-separated list [v, v+len) has the token `tok` (any case). */
static bool has_token(const char *v, size_t len, const char *tok) {
    size_t tl = strlen(tok);
    for (size_t i = 0; i + tl <= len; i++)
        if (!strncasecmp(v + i, tok, tl) && (i == 0 || v[i - 1] == ',' || v[i - 1] == ' ') &&
            (i + tl == len || v[i + tl] == ',' || v[i + tl] == ' '))
            return true;
    return false;
}

/* Checks a request head [b, b+n) (a connection's first, or a later one of a kept-alive
 * connection): 0 when it is complete and good (*hi filled), -1 when more must come (-2: a
 * chunked request that asks for 100 Continue and whose body has not begun), else the HTTP
 * status of the error (*msg). A chunked request is complete with its first chunk-size line
 * (with the trailers, for an empty body): libmicrohttpd parses that line before it hands any
 * data to the handler, which follows the framing from there (sv_conns_chunk_data). */
static int check_request(const char *b, size_t n, const char **msg, head_info *hi) {
    static const char h2[] = "PRI * HTTP/2";
    if (!memcmp(b, h2, n < sizeof h2 - 1 ? n : sizeof h2 - 1)) {
        if (n < sizeof h2 - 1) return -1;
        *msg = "HTTP/2 is not supported: use HTTP/1.1";
        return 505;
    }
    const char *nl = memchr(b, '\n', n < SV_CONN_LINE ? n : SV_CONN_LINE);
    if (!nl) {
        if (n < SV_CONN_LINE) return -1; /* the line is not complete yet */
        *msg = "the request line is longer than 8192 bytes";
        return 414;
    }
    size_t len = (size_t)(nl - b);
    if (len && b[len - 1] == '\r') len--;
    if (!(len >= 9 && (!memcmp(b + len - 9, " HTTP/1.1", 9) || !memcmp(b + len - 9, " HTTP/1.0", 9)))) {
        if (memmem(b, len, " HTTP/", 6)) {
            *msg = "only HTTP/1.0 and HTTP/1.1 are supported";
            return 505;
        }
        *msg = "the first line is not an HTTP/1.x request line (HTTP/0.9 is not supported)";
        return 400;
    }
    /* METHOD SP URI SP HTTP/1.x (more blanks between them are taken): libmicrohttpd answers a
     * line without a URI, or a method with a blank or control byte, with an HTML page (or
     * closes the connection) */
    size_t m = 0, u;
    while (m < len - 9 && (unsigned char)b[m] > ' ' && b[m] != 0x7f) m++;
    for (u = m; u < len - 9 && b[u] == ' '; u++) {}
    if (m == 0 || b[m] != ' ' || u == len - 9) {
        *msg = "the request line is not 'METHOD URI HTTP/1.x'";
        return 400;
    }
    const char *hdr = nl + 1;
    const char *end = memmem(hdr - 1, n - (size_t)(hdr - 1 - b), "\n\r\n", 3);
    const char *end2 = memmem(hdr - 1, n - (size_t)(hdr - 1 - b), "\n\n", 2);
    if (!end || (end2 && end2 < end)) end = end2;
    if (!end) {
        if (n < SV_CONN_PEEK) return -1; /* the headers are not complete yet */
        *msg = "the request headers are larger than 65536 bytes";
        return 431;
    }
    if ((*msg = header_lines_bad(hdr, end + 1))) return 400;
    /* libmicrohttpd 0.9.75 keeps a request's head in its connection's pool (SV_CONN_PEEK
     * bytes): the read buffer (half the pool, or up to 4 KiB more than a longer head; with the
     * body bytes that came along) and beside it about 64 bytes for each line, and for the
     * first Cookie header a copy of it and 64 bytes for each ';' or ',' in it; it answers a
     * head that does not fit (many short lines) with an HTML page. What passes here also
     * leaves 4 KiB for the answer's head and a chunked body's trailers. */
    size_t vlen = 0;
    int count = 0;
    size_t lines = 0, cookie = 0;
    for (const char *p = b; (p = memchr(p, '\n', (size_t)(end + 1 - p))); p++) lines++;
    const char *ck = head_value(hdr, end + 1, "Cookie", &vlen, &count);
    if (ck) {
        const char *ce = memchr(ck, '\n', (size_t)(end + 1 - ck));
        cookie = (size_t)((ce ? ce : end + 1) - ck) + 8 + 64;
        for (const char *p = ck; p < ce; p++) cookie += *p == ';' || *p == ',' ? 64 : 0;
    }
    size_t hb = (size_t)(end + 3 - b), rb = hb + 4096 > SV_CONN_PEEK / 2 ? hb + 4096 : SV_CONN_PEEK / 2;
    if (rb + 64 * lines + cookie + 4096 > SV_CONN_PEEK) {
        *msg = "the request head is too large: at most 448 lines in 28 KiB, fewer in a longer "
               "head or with cookies, and about 56 KB with a few lines";
        return 431;
    }
    /* what libmicrohttpd would refuse with an HTML page once the head is complete: an HTTP/1.1
     * request without Host, a Content-Length that is not a number; and a chunked body whose
     * framing is broken in the part that has arrived with the head */
    if (!memcmp(b + len - 9, " HTTP/1.1", 9) && !head_value(hdr, end + 1, "Host", &vlen, &count)) {
        *msg = "an HTTP/1.1 request needs a Host header";
        return 400;
    }
    const char *cl = head_value(hdr, end + 1, "Content-Length", &vlen, &count);
    if (cl) {
        bool digits = vlen > 0 && vlen <= 18 && !trailing_blank(cl, vlen);
        for (size_t i = 0; digits && i < vlen; i++) digits = cl[i] >= '0' && cl[i] <= '9';
        if (!digits) {
            *msg = "the Content-Length header is not a non-negative integer";
            return 400;
        }
    }
    const char *body = end[1] == '\r' ? end + 3 : end + 2;
    hi->wire = (uint64_t)(body - b) + (cl ? strtoull(cl, NULL, 10) : 0);
    const char *te = head_value(hdr, end + 1, "Transfer-Encoding", &vlen, &count);
    if (te) hi->wire = UINT64_MAX;
    if (te && count == 1 && vlen == 7 && !strncasecmp(te, "chunked", 7) && !cl &&
        !trailing_blank(te, vlen)) {
        const char *p = body, *e = b + n;
        uint64_t size = 0;
        size_t used = 0;
        int r = chunk_step(p, (size_t)(e - p), false, &size, &used, msg);
        if (r < 0) return 400;
        if (r == 0) {
            if (n >= SV_CONN_PEEK) {
                *msg = "the request head and its first chunk-size line are larger than 65536 bytes";
                return 431;
            }
            const char *ex = head_value(hdr, end + 1, "Expect", &vlen, &count);
            return p == e && ex && vlen == 12 && !strncasecmp(ex, "100-continue", 12) &&
                           !memcmp(b + len - 9, " HTTP/1.1", 9) ? -2 : -1;
        }
        hi->chunked = true;
        hi->ck_rel = (uint64_t)(p + used - b);
        hi->ck_size = size;
        for (p += used; size && (uint64_t)(e - p) > size;) { /* the rest that has arrived */
            p += size;
            r = chunk_step(p, (size_t)(e - p), true, &size, &used, msg);
            if (r < 0) return 400;
            if (r == 0) break;
            p += used;
        }
    }
    const char *conn = head_value(hdr, end + 1, "Connection", &vlen, &count);
    bool http10 = !memcmp(b + len - 9, " HTTP/1.0", 9);
    hi->close = conn ? has_token(conn, vlen, "close") ||
                           (http10 && !has_token(conn, vlen, "keep-alive"))
                     : http10;
    if (count > 1) hi->close = true; /* several lines: not worth judging, do not wait */
    return 0;
}

/* Bytes libmicrohttpd has read from a TCP socket: the kernel's count of bytes received less
 * those still unread (asked twice around, so that an arrival in between is not miscounted);
 * false when the kernel does not tell. Only while libmicrohttpd does not read the socket. */
static bool app_read(int fd, uint64_t *out, int *unread) {
    for (int i = 0; i < 4; i++) {
        int q1 = 0, q2 = 0;
        struct tcp_info ti;
        memset(&ti, 0, sizeof ti);
        socklen_t len = sizeof ti;
        if (ioctl(fd, SIOCINQ, &q1) < 0 || getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) < 0 ||
            len < offsetof(struct tcp_info, tcpi_bytes_received) + sizeof ti.tcpi_bytes_received ||
            ioctl(fd, SIOCINQ, &q2) < 0)
            return false;
        if (q1 == q2 && q1 >= 0 && (uint64_t)q1 <= ti.tcpi_bytes_received) {
            *out = ti.tcpi_bytes_received - (uint64_t)q1;
            *unread = q1;
            return true;
        }
    }
    return false;
}

/* A good head [b, b+k) becomes the slot's current request; a head pipelined behind it in the
 * same bytes is judged too. */
static void set_request(sv_slot *s, const char *b, size_t k, const head_info *hi) {
    s->wire = hi->wire;
    s->req_close = hi->close;
    s->ck_known = hi->chunked;
    s->ck_rel = hi->ck_rel;
    s->ck_size = hi->ck_size;
    s->next_http = 0;
    s->n_pipe = s->pipe_pos = 0;
    s->pipe_ck = -1;
    uint64_t at = hi->wire;
    while (at != UINT64_MAX && k > at) {
        head_info nx = {0};
        const char *msg = NULL;
        int r = check_request(b + at, k - (size_t)at, &msg, &nx);
        if (r > 0) {
            s->next_http = r;
            s->next_msg = msg; /* a string constant */
        }
        if (r != 0 || s->n_pipe == SV_CONN_PIPELINE) break;
        if (nx.chunked) { /* its wire size is not known: the last one followed */
            s->pipe_ck = s->n_pipe;
            s->pipe_ck_rel = nx.ck_rel;
            s->pipe_ck_size = nx.ck_size;
        }
        s->pipe_wire[s->n_pipe] = nx.wire;
        s->pipe_close[s->n_pipe++] = nx.close;
        at = nx.wire == UINT64_MAX || at + nx.wire > k ? UINT64_MAX : at + nx.wire;
    }
}

/* Hands a connection whose request head is complete to an HTTP thread (round robin), which adds
 * it to its daemon. False out of memory (nothing queued). */
static bool to_worker(sv_conns *cs, sv_slot *s) {
    sv_worker *w = &cs->workers[cs->next_worker];
    if (w->nq == w->cap_q) {
        int cap = w->cap_q ? 2 * w->cap_q : 64;
        handover *q = realloc(w->q, (size_t)cap * sizeof *q);
        if (!q) return false;
        w->q = q;
        w->cap_q = cap;
    }
    w->q[w->nq++] = (handover){.fd = s->fd, .addr = s->addr, .alen = s->addrlen};
    cs->next_worker = (cs->next_worker + 1) % cs->n_workers;
    s->w = w;
    if (w->nq == 1) {
        uint64_t one = 1;
        (void)!write(w->wake, &one, sizeof one);
    }
    return true;
}

/* Looks at the request head of a pending or waiting connection; a complete good one sends it to
 * libmicrohttpd (an HTTP thread, or resumed there). A head that grows in small pieces is looked at again only when it has grown
 * by half or 4 KiB (or at the next tick): each look copies all of it. */
static void look(sv_conns *cs, sv_slot *s, uint64_t now, bool tick) {
    int avail = 0;
    if (ioctl(s->fd, FIONREAD, &avail) < 0) avail = 0;
    if (s->peeked && avail < SV_CONN_PEEK && !tick && avail < s->peeked + s->peeked / 2 &&
        avail < s->peeked + 4096) {
        s->recheck = avail > s->peeked;
        return;
    }
    ssize_t k = recv(s->fd, cs->peek, sizeof cs->peek, MSG_PEEK | MSG_DONTWAIT);
    if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        if (s->state == ST_WAIT) shut_mhd(cs, s); /* libmicrohttpd sees the end and closes */
        else drop_own(cs, s);
        return;
    }
    if (k < 0) return;
    if (!s->t_first) s->t_first = now;
    s->peeked = (int)k;
    s->recheck = false;
    const char *msg = NULL;
    head_info hi = {0};
    int http = s->state == ST_REFUSE ? s->http : check_request(cs->peek, (size_t)k, &msg, &hi);
    if (s->state == ST_REFUSE) msg = s->msg;
    else if (http > 0 && s->state == ST_WAIT) cs->st.later_bad++;
    else if (http > 0) cs->st.bad_first_line++;
    if (http == -2 && !s->sent_100) {
        /* its body is held back until it is told to go on, and the first chunk-size line must
         * be seen here: 100 Continue now (libmicrohttpd sends one more later, which clients
         * take as an informational answer like any other) */
        static const char go[] = "HTTP/1.1 100 Continue\r\n\r\n";
        (void)!send(s->fd, go, sizeof go - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        s->sent_100 = true;
    }
    if (http < 0) return; /* more to come */
    if (http > 0) {
        answer_and_linger(cs, s, http, msg, now);
        return;
    }
    set_request(s, cs->peek, (size_t)k, &hi);
    if (s->state == ST_WAIT) { /* back to libmicrohttpd, idle until its handler sees the request;
                                  rd_base is where it stopped reading (sv_conns_request_end) */
        release_waiting(cs, s);
        return;
    }
    s->rd_base = 0;
    /* to libmicrohttpd: still idle until its handler sees the request */
    epoll_ctl(cs->ep, EPOLL_CTL_DEL, s->fd, NULL);
    if (!to_worker(cs, s)) {
        drop_own(cs, s);
        return;
    }
    s->state = ST_MHD;
    s->t_open = now;
    idle_append(cs, s, now);
}

/* A readable socket held here (the accept thread) or waiting (its HTTP thread). */
static void on_readable(sv_conns *cs, sv_slot *s, uint64_t now) {
    if (s->state == ST_LINGER) {
        if (!drain(s->fd)) drop_own(cs, s);
        return;
    }
    if (s->state == ST_WLINGER) {
        if (!drain(s->fd)) {
            shutdown(s->fd, SHUT_RDWR);
            release_waiting(cs, s);
        }
        return;
    }
    look(cs, s, now, false);
}

/* One slot's timeouts, and a request head that grew without being looked at (cs->mu held). */
static void sweep_slot(sv_conns *cs, sv_slot *s, uint64_t now) {
    const uint64_t sec = 1000000000ull;
    uint64_t idle_ns = (uint64_t)cs->opt.idle_timeout_s * sec;
    uint64_t head_ns = (uint64_t)cs->opt.header_timeout_s * sec;
    uint64_t grace_ns = (uint64_t)cs->opt.rate_grace_s * sec;
    if (s->state == ST_WLINGER) {
        if (now - s->t_open > LINGER_NS) {
            shutdown(s->fd, SHUT_RDWR);
            release_waiting(cs, s);
        }
        return;
    }
    if (s->shut) return;
    switch (s->state) {
    case ST_PENDING:
        if (s->recheck) {
            look(cs, s, now, true);
            if (s->dead || s->state != ST_PENDING) break; /* closed, answered or handed over */
        }
        if (!s->t_first && now - s->t_open > idle_ns) {
            cs->st.idle_timeouts++;
            drop_own(cs, s);
        } else if (s->t_first && now - s->t_first > head_ns) {
            late_head(cs, s, now);
        }
        break;
    case ST_REFUSE:
        if (now - s->t_open > head_ns) drop_own(cs, s);
        break;
    case ST_LINGER:
        if (now - s->t_open > LINGER_NS) drop_own(cs, s);
        break;
    case ST_WLINGER:
        break;
    case ST_WAIT:
        if (s->recheck) {
            look(cs, s, now, true);
            if (s->state != ST_WAIT) break; /* resumed or answered */
        }
        if (!s->t_first && now - s->t_idle > idle_ns) {
            cs->st.idle_timeouts++;
            shut_mhd(cs, s);
        } else if (s->t_first && now - s->t_first > head_ns) {
            late_head(cs, s, now);
        }
        break;
    case ST_MHD:
        if (!s->in_request) {
            if (!s->requests && now - s->t_open > head_ns) {
                cs->st.header_timeouts++;
                shut_mhd(cs, s);
            } else if (s->requests && now - s->t_idle > idle_ns) {
                cs->st.idle_timeouts++;
                shut_mhd(cs, s);
            }
        } else if (s->in_body && cs->opt.min_upload_rate && now - s->t_body > grace_ns) {
            double secs = (double)(now - s->t_body) / 1e9;
            if ((double)s->body_bytes < (double)cs->opt.min_upload_rate * secs) {
                cs->st.slow_bodies++;
                shut_mhd(cs, s);
            }
        }
        break;
    }
}

/* All slots' timeouts, a slice of the table at a time: the HTTP threads take cs->mu at every
 * request, and a scan of thousands of connections in one hold was a tail in their latency. */
#define SWEEP_SLICE 128
static void sweep(sv_conns *cs) {
    for (int base = 0;; base += SWEEP_SLICE) {
        pthread_mutex_lock(&cs->mu);
        if (base >= cs->cap_fd) {
            pthread_mutex_unlock(&cs->mu);
            break;
        }
        uint64_t now = sv_now_ns();
        int end = base + SWEEP_SLICE < cs->cap_fd ? base + SWEEP_SLICE : cs->cap_fd;
        for (int fd = base; fd < end; fd++)
            if (cs->by_fd[fd]) sweep_slot(cs, cs->by_fd[fd], now);
        sv_slot *dead = take_dead(cs); /* this round's events are done: nothing names these */
        pthread_mutex_unlock(&cs->mu);
        bury(dead);
    }
}

/* ---- the accept thread -------------------------------------------------------------------- */

/* Accepts what the listening socket has (64 at most). cs->mu is taken for each connection
 * only, not for the accept4 calls nor the whole batch: a burst of new connections (clients
 * evicted and coming back) does not hold the HTTP threads at their next request. */
static void accept_batch(sv_conns *cs) {
    for (int k = 0; k < 64; k++) {
        struct sockaddr_storage a;
        socklen_t alen = sizeof a;
        int fd = accept4(cs->listen_fd, (struct sockaddr *)&a, &alen, SOCK_NONBLOCK | SOCK_CLOEXEC);
        pthread_mutex_lock(&cs->mu);
        uint64_t now = sv_now_ns();
        if (fd >= 0) {
            admit(cs, fd, &a, alen, now);
            pthread_mutex_unlock(&cs->mu);
            continue;
        }
        /* out of descriptors: make room for the next round (the evicted socket is closed at
         * its end), or, with nothing to close, rest the listening socket for a tick */
        if ((errno == EMFILE || errno == ENFILE) && !evict_one(cs)) {
            struct epoll_event off = {.events = 0, .data.ptr = &cs->listen_fd};
            epoll_ctl(cs->ep, EPOLL_CTL_MOD, cs->listen_fd, &off);
            cs->paused_until = now + (uint64_t)SV_CONN_TICK_MS * 1000000ull;
        }
        pthread_mutex_unlock(&cs->mu);
        break;
    }
}

static void *accept_main(void *arg) {
    sv_conns *cs = arg;
    struct epoll_event evs[64];
    uint64_t last_sweep = sv_now_ns();
    for (;;) {
        int n = epoll_wait(cs->ep, evs, 64, SV_CONN_TICK_MS);
        pthread_mutex_lock(&cs->mu);
        bool stop = cs->stop;
        pthread_mutex_unlock(&cs->mu);
        if (stop) break;
        /* cs->mu is taken per event, not for the round: the HTTP threads take it at every
         * request. A slot closed by an earlier event of the round stays allocated (dead) until
         * the round ends; the HTTP threads free only slots in libmicrohttpd, and a slot handed
         * to them in this round was handed by its own event (an epoll round names a
         * descriptor once) */
        for (int i = 0; i < n; i++) {
            void *p = evs[i].data.ptr;
            if (p == &cs->listen_fd) {
                accept_batch(cs);
            } else if (p != &cs->wake) {
                sv_slot *s = p; /* held here, unless closed earlier in this round */
                pthread_mutex_lock(&cs->mu);
                if (!s->dead && s->state != ST_MHD) on_readable(cs, s, sv_now_ns());
                pthread_mutex_unlock(&cs->mu);
            }
        }
        pthread_mutex_lock(&cs->mu);
        uint64_t now = sv_now_ns();
        if (cs->paused_until && now >= cs->paused_until) {
            struct epoll_event on = {.events = EPOLLIN, .data.ptr = &cs->listen_fd};
            epoll_ctl(cs->ep, EPOLL_CTL_MOD, cs->listen_fd, &on);
            cs->paused_until = 0;
        }
        sv_slot *dead = take_dead(cs);
        pthread_mutex_unlock(&cs->mu);
        bury(dead);
        if (now - last_sweep >= (uint64_t)SV_CONN_TICK_MS * 1000000ull) {
            sweep(cs);
            last_sweep = now;
        }
        run_resumes(cs); /* outside the lock: libmicrohttpd's threads take it in callbacks */
    }
    return NULL;
}

/* ---- the HTTP threads ----------------------------------------------------------------------- */

static void *worker_main(void *arg) {
    sv_worker *w = arg;
    sv_conns *cs = w->cs;
    struct epoll_event evs[64];
    handover *spare = NULL; /* swapped with w->q each round */
    int spare_cap = 0;
    for (;;) {
        MHD_UNSIGNED_LONG_LONG to = 0;
        int ms = MHD_get_timeout(w->d, &to) == MHD_YES ? (to < 1000 ? (int)to : 1000) : 1000;
        int n = epoll_wait(w->ep, evs, 64, ms);
        bool woken = false;
        pthread_mutex_lock(&cs->mu);
        uint64_t now = sv_now_ns();
        for (int i = 0; i < n; i++) {
            void *p = evs[i].data.ptr;
            woken |= p == &w->wake;
            if (p == &w->wake || p == &w->mhd_fd) continue;
            /* a waiting connection of this daemon: its slot is freed only by MHD_run below */
            sv_slot *s = p;
            if (s->w == w && (s->state == ST_WAIT || s->state == ST_WLINGER)) on_readable(cs, s, now);
        }
        handover *q = w->q;
        int nq = w->nq, cap = w->cap_q;
        w->q = spare;
        w->cap_q = spare_cap;
        w->nq = 0;
        spare = q;
        spare_cap = cap;
        bool stop = w->stop;
        pthread_mutex_unlock(&cs->mu);
        uint64_t v;
        if (woken) (void)!read(w->wake, &v, sizeof v);
        for (int i = 0; i < nq; i++) {
            if (MHD_add_connection(w->d, q[i].fd, (const struct sockaddr *)&q[i].addr, q[i].alen) ==
                MHD_YES)
                continue;
            /* refused (it closed the socket, and no notify came): forget the slot */
            pthread_mutex_lock(&cs->mu);
            sv_slot *s = q[i].fd < cs->cap_fd ? cs->by_fd[q[i].fd] : NULL;
            if (s && s->state == ST_MHD && !s->conn) {
                idle_remove(s);
                if (!s->shut) cs->admitted--;
                cs->by_fd[s->fd] = NULL;
                free(s);
            }
            pthread_mutex_unlock(&cs->mu);
        }
        run_resumes(cs);
        MHD_run(w->d);
        if (stop) break;
    }
    free(spare);
    return NULL;
}

/* ---- libmicrohttpd's side ------------------------------------------------------------------ */

void sv_conns_notify(void *cls, struct MHD_Connection *connection, void **socket_context,
                     enum MHD_ConnectionNotificationCode toe) {
    sv_conns *cs = cls;
    if (!cs) return;
    pthread_mutex_lock(&cs->mu);
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
        int fd = ci ? (int)ci->connect_fd : -1;
        sv_slot *s = fd >= 0 && fd < cs->cap_fd ? cs->by_fd[fd] : NULL;
        *socket_context = s && s->state == ST_MHD ? s : NULL;
        if (s && s->state == ST_MHD) s->conn = connection;
    } else {
        sv_slot *s = *socket_context;
        *socket_context = NULL;
        if (s) {
            idle_remove(s);
            if (!s->shut) cs->admitted--;
            if (s->fd < cs->cap_fd && cs->by_fd[s->fd] == s) cs->by_fd[s->fd] = NULL;
            free(s);
        }
    }
    pthread_mutex_unlock(&cs->mu);
}

sv_slot *sv_conns_slot(struct MHD_Connection *connection) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

void sv_conns_request_begin(sv_conns *cs, sv_slot *s) {
    if (!cs || !s) return;
    pthread_mutex_lock(&cs->mu);
    idle_remove(s);
    s->in_request = s->in_body = true;
    s->requests++;
    s->t_body = sv_now_ns();
    s->body_bytes = 0;
    pthread_mutex_unlock(&cs->mu);
}

void sv_conns_body_bytes(sv_conns *cs, sv_slot *s, size_t n) {
    if (!cs || !s) return;
    pthread_mutex_lock(&cs->mu);
    s->body_bytes += n;
    pthread_mutex_unlock(&cs->mu);
}

void sv_conns_body_done(sv_conns *cs, sv_slot *s) {
    if (!cs || !s) return;
    pthread_mutex_lock(&cs->mu);
    s->in_body = false;
    pthread_mutex_unlock(&cs->mu);
}

void sv_conns_request_end(sv_conns *cs, sv_slot *s, struct MHD_Connection *c, bool keep) {
    if (!cs || !s) return;
    pthread_mutex_lock(&cs->mu);
    s->in_request = s->in_body = false;
    s->ck_known = false; /* set again with the next head checked */
    bool check = keep && cs->opt.check_heads && !s->shut && !cs->stop && !s->req_close &&
                 s->state == ST_MHD;
    uint64_t base = s->rd_base, wire = s->wire;
    pthread_mutex_unlock(&cs->mu);
    /* libmicrohttpd does not read this socket while its callback runs: whether it has read
     * exactly this request, and whether the next head is here already */
    enum { WAIT, HERE, PIPELINED, BAD_NEXT, UNSYNCED, NONE } v = check ? WAIT : NONE;
    if (check && wire == UINT64_MAX) v = UNSYNCED; /* a chunked body, answered without
                                                      sv_conns_close_after (a stream) */
    uint64_t rd = 0;
    head_info hi = {0};
    char b[4096];
    ssize_t k = 0;
    int unread = 0;
    if (v == WAIT) {
        if (!app_read(s->fd, &rd, &unread) || rd - base < wire) {
            v = UNSYNCED;
        } else if (rd - base > wire) { /* it read on: the next head was pipelined */
            v = s->pipe_pos < s->n_pipe ? PIPELINED : s->next_http > 0 ? BAD_NEXT : UNSYNCED;
        } else if (unread > 0) { /* else nothing is there: wait */
            const char *msg = NULL;
            k = recv(s->fd, b, sizeof b, MSG_PEEK | MSG_DONTWAIT);
            if (k == 0) v = NONE; /* the peer is done: libmicrohttpd reads the end and closes */
            else if (k > 0 && check_request(b, (size_t)k, &msg, &hi) == 0) v = HERE;
        }
    }
    /* it stops before reading the next head (or, for BAD_NEXT, parsing it) */
    if (v == WAIT || v == BAD_NEXT) MHD_suspend_connection(c);
    bool resume_now = false;
    pthread_mutex_lock(&cs->mu);
    if (v == UNSYNCED) {
        /* the next head cannot be checked before libmicrohttpd parses it: the answer has
         * been sent; the connection closes (the client sends its next request again) */
        cs->st.later_unsynced++;
        shut_mhd(cs, s);
    } else if (v == HERE) {
        cs->st.later_checked++;
        s->rd_base = rd;
        set_request(s, b, (size_t)k, &hi);
    } else if (v == PIPELINED) {
        cs->st.later_checked++;
        s->rd_base = base + wire;
        s->wire = s->pipe_wire[s->pipe_pos];
        s->ck_known = s->pipe_pos == s->pipe_ck;
        s->ck_rel = s->pipe_ck_rel;
        s->ck_size = s->pipe_ck_size;
        s->req_close = s->pipe_close[s->pipe_pos++];
    } else if (v == BAD_NEXT) {
        /* answered here; libmicrohttpd, resumed once the peer is gone, cannot send its page
         * on the shut-down socket */
        cs->st.later_bad++;
        s->conn = c;
        s->state = ST_WAIT;
        if (s->shut || cs->stop) {
            s->state = ST_MHD;
            resume_now = true;
        } else {
            struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | EPOLLET, .data.ptr = s};
            if (epoll_ctl(s->w->ep, EPOLL_CTL_ADD, s->fd, &ev)) {
                s->state = ST_MHD;
                shut_mhd(cs, s);
                resume_now = true;
            } else {
                answer_and_linger(cs, s, s->next_http, s->next_msg, sv_now_ns());
            }
        }
    } else if (v == WAIT) {
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | EPOLLET, .data.ptr = s};
        if (s->shut || cs->stop) {
            resume_now = true; /* shut down meanwhile (it reads the end), or the server stops */
        } else if (epoll_ctl(s->w->ep, EPOLL_CTL_ADD, s->fd, &ev)) {
            s->wire = UINT64_MAX;
            resume_now = true;
        } else {
            cs->st.later_waited++;
            s->conn = c;
            s->rd_base = rd; /* it reads no more until resumed */
            s->state = ST_WAIT;
            s->t_first = 0;
            s->peeked = 0;
            s->recheck = false;
            s->sent_100 = false;
        }
    }
    if (!s->shut) idle_append(cs, s, sv_now_ns());
    pthread_mutex_unlock(&cs->mu);
    if (resume_now) resume_and_wake(c, s->w);
}

bool sv_conns_close_after(sv_conns *cs, sv_slot *s) {
    if (!cs || !s || !cs->opt.check_heads) return false;
    pthread_mutex_lock(&cs->mu);
    bool shut = s->shut; /* closing anyway (answered here, evicted, timed out) */
    bool known = s->state == ST_MHD && s->wire != UINT64_MAX;
    uint64_t base = s->rd_base, wire = s->wire;
    bool judged = s->pipe_pos < s->n_pipe || s->next_http > 0;
    pthread_mutex_unlock(&cs->mu);
    uint64_t rd = 0;
    int unread = 0;
    /* unknown: a chunked body, where the next head begins is not known; else libmicrohttpd
     * (which does not read the socket while its handler runs) may have read into a head not
     * judged here */
    if (shut) return true;
    bool close = !known || !app_read(s->fd, &rd, &unread) || (rd - base > wire && !judged);
    if (close) {
        pthread_mutex_lock(&cs->mu);
        cs->st.later_unsynced++;
        pthread_mutex_unlock(&cs->mu);
    }
    return close;
}

/* libmicrohttpd versions whose upload callback gets a pointer into its read buffer, followed
 * there by the raw bytes it has read past the data (read in 0.9.75 to 0.9.77's
 * process_request_body), and whose chunked parser accepts what chunk_step accepts. */
#if MHD_VERSION >= 0x00097500 && MHD_VERSION < 0x00097800
#define FOLLOW_CHUNKS 1
#else
#define FOLLOW_CHUNKS 0
#endif

/* The chunked body of `t` cannot be followed (any more). */
static void chunk_lost(sv_conns *cs, sv_chunks *t) {
    t->off = true; /* libmicrohttpd follows the framing alone */
    pthread_mutex_lock(&cs->mu);
    cs->st.chunks_unfollowed++;
    pthread_mutex_unlock(&cs->mu);
}

/* t->rd: the bytes libmicrohttpd has read from the socket (*fresh: just asked). */
static bool chunk_read(sv_slot *s, sv_chunks *t, bool *fresh) {
    int unread = 0;
    uint64_t rd = 0;
    if (!app_read(s->fd, &rd, &unread) || rd < t->rd) return false;
    t->rd = rd;
    *fresh = true;
    return true;
}

size_t sv_conns_chunk_data(sv_conns *cs, sv_slot *s, sv_chunks *t, const char *data, size_t n,
                           const char **bad) {
    *bad = NULL;
    if (!cs || !s || t->off || !n) return n;
    if (!t->on) { /* the first data of the body: where the head check left it */
        pthread_mutex_lock(&cs->mu);
        bool known = FOLLOW_CHUNKS && s->ck_known && s->state == ST_MHD;
        t->at = s->rd_base + s->ck_rel;
        t->end = t->at + s->ck_size;
        if (!known) cs->st.chunks_unfollowed++;
        pthread_mutex_unlock(&cs->mu);
        t->on = true;
        t->off = !known;
        if (t->off) return n;
    }
    /* [data, data + n) is the raw stream from t->at; libmicrohttpd has read up to rd (it does
     * not read while its callback runs), all of it in its buffer from `data` on. t->rd is what
     * it had read at an earlier call: a bound that only grows, asked again (three system
     * calls) only when the bytes it covers do not settle the call */
    bool fresh = false;
    if ((t->rd < t->at + n && !chunk_read(s, t, &fresh)) || t->at + n > t->rd ||
        t->end < t->at + n) {
        chunk_lost(cs, t);
        return n;
    }
    if (t->at + n < t->end) { /* within the chunk */
        t->at += n;
        return n;
    }
    uint64_t size = 0;
    size_t used = 0;
    int r = chunk_step(data + n, (size_t)(t->rd - t->end), true, &size, &used, bad);
    if (r == 0 && !fresh) {
        if (!chunk_read(s, t, &fresh)) {
            chunk_lost(cs, t);
            return n;
        }
        r = chunk_step(data + n, (size_t)(t->rd - t->end), true, &size, &used, bad);
    }
    if (r > 0) { /* the next chunk's data (or the end of the body) follows a good step */
        t->at = t->end + used;
        t->end = t->at + size;
        t->off = size == 0;
        return n;
    }
    /* the step after the chunk is not complete, or malformed: libmicrohttpd would parse it as
     * soon as the chunk's data is taken; it keeps the last byte, and calls again with it once
     * more has arrived */
    if (r < 0) {
        pthread_mutex_lock(&cs->mu);
        cs->st.chunks_bad++;
        pthread_mutex_unlock(&cs->mu);
    }
    t->at += n - 1;
    return n - 1;
}

void sv_conns_chunk_bad(sv_conns *cs, sv_slot *s, struct MHD_Connection *c, const char *msg) {
    if (!cs || !s) return;
    bool resume_now = false;
    pthread_mutex_lock(&cs->mu);
    s->conn = c;
    s->in_body = false;
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | EPOLLET, .data.ptr = s};
    if (s->shut || cs->stop || s->state != ST_MHD) {
        if (!s->shut) shut_mhd(cs, s); /* it reads the end and closes */
        resume_now = true;
    } else if (epoll_ctl(s->w->ep, EPOLL_CTL_ADD, s->fd, &ev)) {
        shut_mhd(cs, s);
        resume_now = true;
    } else { /* answered here and drained; resumed once the peer has gone (ST_WLINGER) */
        s->state = ST_WAIT;
        answer_and_linger(cs, s, 400, msg, sv_now_ns());
    }
    pthread_mutex_unlock(&cs->mu);
    if (resume_now) resume_and_wake(c, s->w);
}

void sv_conns_get_stats(sv_conns *cs, sv_conns_stats *st) {
    pthread_mutex_lock(&cs->mu);
    *st = cs->st;
    st->admitted = cs->admitted;
    st->pending = 0;
    for (sv_slot *s = cs->idle.next; s != &cs->idle; s = s->next) {
        st->pending += s->state == ST_PENDING;
        st->waiting += s->state == ST_WAIT;
    }
    pthread_mutex_unlock(&cs->mu);
}

/* ---- lifecycle ------------------------------------------------------------------------------ */

sv_error *sv_conns_create(const sv_conns_options *o, int listen_fd, sv_conns **out) {
    sv_conns *cs = calloc(1, sizeof *cs);
    if (!cs) {
        close(listen_fd);
        return sv_err(500, "out of memory");
    }
    cs->opt = *o;
    cs->listen_fd = listen_fd;
    cs->idle.prev = cs->idle.next = &cs->idle;
    pthread_mutex_init(&cs->mu, NULL);
    cs->ep = epoll_create1(EPOLL_CLOEXEC);
    cs->wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    struct epoll_event el = {.events = EPOLLIN, .data.ptr = &cs->listen_fd};
    struct epoll_event ew = {.events = EPOLLIN, .data.ptr = &cs->wake};
    if (cs->ep < 0 || cs->wake < 0 || !table_fit(cs, 0) ||
        epoll_ctl(cs->ep, EPOLL_CTL_ADD, listen_fd, &el) ||
        epoll_ctl(cs->ep, EPOLL_CTL_ADD, cs->wake, &ew)) {
        sv_error *e = sv_err(500, "cannot set up the accept loop: %s", strerror(errno));
        sv_conns_free(cs);
        return e;
    }
    *out = cs;
    return NULL;
}

sv_error *sv_conns_run(sv_conns *cs, struct MHD_Daemon *const *ds, int n) {
    cs->workers = calloc((size_t)n, sizeof *cs->workers);
    if (!cs->workers) return sv_err(500, "out of memory");
    cs->n_workers = n;
    for (int i = 0; i < n; i++) cs->workers[i].ep = cs->workers[i].wake = -1;
    for (int i = 0; i < n; i++) {
        sv_worker *w = &cs->workers[i];
        w->cs = cs;
        w->d = ds[i];
        w->ep = epoll_create1(EPOLL_CLOEXEC);
        w->wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        const union MHD_DaemonInfo *di = MHD_get_daemon_info(ds[i], MHD_DAEMON_INFO_EPOLL_FD);
        w->mhd_fd = di ? di->epoll_fd : -1;
        struct epoll_event em = {.events = EPOLLIN, .data.ptr = &w->mhd_fd};
        struct epoll_event ew = {.events = EPOLLIN, .data.ptr = &w->wake};
        if (w->ep < 0 || w->wake < 0 || w->mhd_fd < 0 ||
            epoll_ctl(w->ep, EPOLL_CTL_ADD, w->mhd_fd, &em) ||
            epoll_ctl(w->ep, EPOLL_CTL_ADD, w->wake, &ew))
            return sv_err(500, "cannot set up an HTTP thread: %s", strerror(errno));
        if (pthread_create(&w->thread, NULL, worker_main, w))
            return sv_err(500, "cannot start an HTTP thread");
        char name[16]; /* for top -H and /proc/PID/task/TID/comm: who spends what */
        snprintf(name, sizeof name, "tdm-http%d", i % 100);
        pthread_setname_np(w->thread, name);
        w->started = true;
    }
    if (pthread_create(&cs->thread, NULL, accept_main, cs))
        return sv_err(500, "cannot start the accept thread");
    pthread_setname_np(cs->thread, "tdm-accept");
    cs->started = true;
    return NULL;
}

void sv_conns_halt(sv_conns *cs) {
    if (!cs) return;
    sv_conns_stop(cs);
    for (int i = 0; i < cs->n_workers; i++) {
        sv_worker *w = &cs->workers[i];
        if (!w->started) continue;
        pthread_mutex_lock(&cs->mu);
        w->stop = true;
        pthread_mutex_unlock(&cs->mu);
        uint64_t one = 1;
        (void)!write(w->wake, &one, sizeof one);
        pthread_join(w->thread, NULL);
        w->started = false;
    }
}

void sv_conns_stop(sv_conns *cs) {
    if (!cs) return;
    pthread_mutex_lock(&cs->mu);
    cs->stop = true;
    pthread_mutex_unlock(&cs->mu);
    if (cs->started) {
        uint64_t one = 1;
        (void)!write(cs->wake, &one, sizeof one);
        pthread_join(cs->thread, NULL);
        cs->started = false;
    }
    if (cs->listen_fd >= 0) close(cs->listen_fd);
    cs->listen_fd = -1;
    pthread_mutex_lock(&cs->mu);
    for (int fd = 0; fd < cs->cap_fd; fd++) {
        sv_slot *s = cs->by_fd[fd];
        if (!s || s->state == ST_MHD) continue;
        if (s->state == ST_WAIT || s->state == ST_WLINGER) shut_mhd(cs, s); /* back to it, shut */
        else drop_own(cs, s);
    }
    sv_slot *dead = take_dead(cs);
    pthread_mutex_unlock(&cs->mu);
    bury(dead);
    run_resumes(cs); /* libmicrohttpd must not be stopped with suspended connections */
}

void sv_conns_free(sv_conns *cs) {
    if (!cs) return;
    sv_conns_halt(cs);
    for (int fd = 0; fd < cs->cap_fd; fd++) free(cs->by_fd[fd]); /* none after MHD_stop_daemon */
    for (int i = 0; i < cs->n_workers; i++) {
        sv_worker *w = &cs->workers[i];
        for (int k = 0; k < w->nq; k++) close(w->q[k].fd); /* never added */
        free(w->q);
        if (w->ep >= 0) close(w->ep);
        if (w->wake >= 0) close(w->wake);
    }
    free(cs->workers);
    free(cs->by_fd);
    free(cs->resume);
    if (cs->ep >= 0) close(cs->ep);
    if (cs->wake >= 0) close(cs->wake);
    pthread_mutex_destroy(&cs->mu);
    free(cs);
}
