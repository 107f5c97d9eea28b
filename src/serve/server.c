/* tandem serve: start-up, the control thread, graceful shutdown (see server.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "serve/server_impl.h"

sv_serve_options sv_serve_defaults(void) {
    sv_serve_options o;
    memset(&o, 0, sizeof o);
    o.host = "127.0.0.1";
    o.http_port = 8000;
    o.metrics_port = 8002;
    o.max_body_bytes = (size_t)64 << 20;
    o.http_threads = 4;
    o.connection_timeout_s = 60;
    o.request_timeout_s = 120;
    o.header_timeout_s = 5;
    o.min_upload_rate = (size_t)16 << 10;
    o.max_json_bytes = (size_t)8 << 20;
    o.shutdown_timeout_s = 30;
    o.exit_on_error = true;
    o.log = stderr;
    return o;
}

void sv_log(sv_server *s, const char *fmt, ...) {
    FILE *f = s->opt.log;
    if (!f) return;
    time_t t = time(NULL);
    struct tm tm;
    char ts[32];
    localtime_r(&t, &tm);
    strftime(ts, sizeof ts, "%Y-%m-%d %H:%M:%S", &tm);
    va_list ap;
    va_start(ap, fmt);
    flockfile(f);
    fprintf(f, "%s tandem serve: ", ts);
    vfprintf(f, fmt, ap);
    fputc('\n', f);
    fflush(f);
    funlockfile(f);
    va_end(ap);
}

static void repo_log(void *user, const char *fmt, ...) {
    sv_server *s = user;
    char msg[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    sv_log(s, "%s", msg);
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
    sv_server *s = cls;
    char msg[600];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r')) msg[--n] = 0;
    sv_log(s, "http: %s", msg);
}

/* ---- control thread --------------------------------------------------------------------------- */

static void *control_main(void *arg) {
    sv_server *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->jobs_head && !s->ctl_stop) pthread_cond_wait(&s->cv, &s->mu);
        sv_conn *c = s->jobs_head;
        if (!c) break;
        s->jobs_head = c->job_next;
        if (!s->jobs_head) s->jobs_tail = NULL;
        pthread_mutex_unlock(&s->mu);
        sv_http_run_job(c);
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---- daemons ---------------------------------------------------------------------------------- */

/* The descriptor limit, raised to the hard limit first (each connection takes one). */
static long raise_fd_limit(sv_server *s) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl)) return 1024;
    if (rl.rlim_cur < rl.rlim_max) {
        rlim_t old = rl.rlim_cur;
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl)) rl.rlim_cur = old;
        else sv_log(s, "descriptor limit raised from %llu to %llu", (unsigned long long)old,
                    (unsigned long long)rl.rlim_cur);
    }
    return rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > (1u << 30) ? (1l << 30) : (long)rl.rlim_cur;
}

/* Defaults that depend on the machine: connections from the descriptor limit (an eighth kept
 * for models, files and the metrics port), request memory an eighth of RAM. */
static void machine_defaults(sv_server *s) {
    long fds = raise_fd_limit(s);
    if (s->opt.max_connections <= 0) {
        long n = fds - fds / 8 - 64;
        s->opt.max_connections = n < 16 ? 16 : n > 65536 ? 65536 : (int)n;
    }
    if (!s->opt.request_memory) {
        long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
        size_t ram = pages > 0 && psz > 0 ? (size_t)pages * (size_t)psz : (size_t)4 << 30;
        s->opt.request_memory = ram / 8;
        if (s->opt.request_memory < 2 * s->opt.max_body_bytes) s->opt.request_memory = 2 * s->opt.max_body_bytes;
    }
    if (s->opt.request_memory < s->opt.max_body_bytes)
        sv_log(s, "note: --request-memory (%zu MiB) is below --max-body-mb (%zu MiB): larger "
               "bodies are refused with 503", s->opt.request_memory >> 20, s->opt.max_body_bytes >> 20);
    if (s->opt.header_timeout_s <= 0) s->opt.header_timeout_s = 5;
    if (s->opt.max_json_bytes == 0) s->opt.max_json_bytes = (size_t)8 << 20;
}

/* The HTTP port's listening socket (the accept thread of conn.c takes it). */
static int listen_socket(sv_server *s, int port, int *bound) {
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    int rc = getaddrinfo(s->opt.host, ps, &hints, &ai);
    if (rc) {
        sv_log(s, "cannot resolve host '%s': %s", s->opt.host, gai_strerror(rc));
        return -1;
    }
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 4096)) {
        sv_log(s, "cannot listen on %s:%d (%s; is the port in use?)", s->opt.host, port, strerror(errno));
        if (fd >= 0) close(fd);
        freeaddrinfo(ai);
        return -1;
    }
    freeaddrinfo(ai);
    struct sockaddr_storage a;
    socklen_t alen = sizeof a;
    *bound = port;
    if (!getsockname(fd, (struct sockaddr *)&a, &alen))
        *bound = a.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&a)->sin6_port)
                                         : ntohs(((struct sockaddr_in *)&a)->sin_port);
    return fd;
}

static void conns_log(void *user, const char *fmt, ...) {
    sv_server *s = user;
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    sv_log(s, "%s", msg);
}

/* The HTTP port: connections come from the accept thread (conn.c), within the budget. */
static bool start_http(sv_server *s, int *bound) {
    int fd = listen_socket(s, s->opt.http_port, bound);
    if (fd < 0) return false;
    sv_conns_options co = {
        .max_connections = s->opt.max_connections,
        .max_per_ip = s->opt.max_connections_per_ip,
        .idle_timeout_s = s->opt.connection_timeout_s > 0 ? s->opt.connection_timeout_s : 60,
        .header_timeout_s = s->opt.header_timeout_s,
        .min_upload_rate = s->opt.min_upload_rate,
        .rate_grace_s = s->opt.header_timeout_s,
        .check_heads = !s->opt.no_head_checks,
        .log = conns_log,
        .log_user = s,
    };
    sv_error *e = sv_conns_create(&co, fd, &s->conns);
    if (e) {
        sv_log(s, "%s", e->msg);
        sv_error_free(e);
        return false;
    }
    /* one daemon per HTTP thread, each run by conn.c's thread (which also watches its
     * waiting connections); the budget is kept by conn.c, libmicrohttpd's own limit only
     * leaves room for connections that were shut down and are not closed yet */
    int threads = s->opt.http_threads;
    unsigned flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG |
                     MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC;
    unsigned limit = (unsigned)s->opt.max_connections * 2u + 64u;
    s->http = calloc((size_t)threads, sizeof *s->http);
    if (!s->http) {
        sv_log(s, "out of memory");
        return false;
    }
    for (; s->n_http < threads; s->n_http++) {
        struct MHD_Daemon *d = MHD_start_daemon(
            flags, 0, NULL, NULL, sv_http_handler, s,
            MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s, /* first, so that every message comes here */
            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->opt.connection_timeout_s,
            MHD_OPTION_CONNECTION_LIMIT, limit,
            /* libmicrohttpd 0.9.75 zeroes a connection's whole pool before each request: 256
             * KiB cost ~10% of an HTTP thread at 6,000 requests/s; 64 KiB is the first
             * request's head limit (SV_CONN_PEEK) anyway */
            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)SV_CONN_PEEK,
            MHD_OPTION_NOTIFY_COMPLETED, sv_http_completed, s,
            MHD_OPTION_NOTIFY_CONNECTION, sv_conns_notify, s->conns,
            MHD_OPTION_END);
        if (!d) {
            sv_log(s, "cannot start the HTTP daemon");
            return false;
        }
        s->http[s->n_http] = d;
    }
    e = sv_conns_run(s->conns, s->http, s->n_http);
    if (e) {
        sv_log(s, "%s", e->msg);
        sv_error_free(e);
        return false;
    }
    return true;
}

/* The metrics port: libmicrohttpd listens itself (one thread, a small connection limit). */
static struct MHD_Daemon *start_metrics(sv_server *s, int port, int *bound) {
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    int rc = getaddrinfo(s->opt.host, ps, &hints, &ai);
    if (rc) {
        sv_log(s, "cannot resolve host '%s': %s", s->opt.host, gai_strerror(rc));
        return NULL;
    }
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    struct MHD_Daemon *d = MHD_start_daemon(
        flags, (uint16_t)port, NULL, NULL, sv_metrics_handler, s,
        MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s, /* first, so that every message comes here */
        MHD_OPTION_SOCK_ADDR, ai->ai_addr,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->opt.connection_timeout_s,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)64,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64 * 1024),
        MHD_OPTION_NOTIFY_COMPLETED, sv_http_completed, s,
        MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!d) {
        sv_log(s, "cannot listen on %s:%d (is the port in use?)", s->opt.host, port);
        return NULL;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    *bound = di ? di->port : port;
    return d;
}

static bool wait_until(sv_server *s, int *counter, uint64_t deadline_ns) {
    pthread_mutex_lock(&s->mu);
    while (*counter > 0) {
        if (deadline_ns) {
            uint64_t now = sv_now_ns();
            if (now >= deadline_ns) break;
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            uint64_t wait = deadline_ns - now;
            if (wait > 200000000ull) wait = 200000000ull;
            ts.tv_nsec += (long)(wait % 1000000000ull);
            ts.tv_sec += (time_t)(wait / 1000000000ull) + ts.tv_nsec / 1000000000L;
            ts.tv_nsec %= 1000000000L;
            pthread_cond_timedwait(&s->cv, &s->mu, &ts);
        } else {
            pthread_cond_wait(&s->cv, &s->mu);
        }
    }
    bool done = *counter <= 0;
    pthread_mutex_unlock(&s->mu);
    return done;
}

/* Stops accepting, lets accepted requests finish, then stops everything. */
static void shutdown_server(sv_server *s) {
    pthread_mutex_lock(&s->mu);
    s->draining = true;
    s->ready = false;
    pthread_mutex_unlock(&s->mu);
    /* no new connections: the listening socket closes (a new client is refused at once
     * instead of waiting in the backlog), and so do connections whose first request is not
     * complete; the metrics port goes on answering until the end */
    sv_conns_stop(s->conns);
    uint64_t grace = (uint64_t)(s->opt.shutdown_timeout_s > 0 ? s->opt.shutdown_timeout_s : 0) * 1000000000ull;
    if (!wait_until(s, &s->inflight, sv_now_ns() + grace + 1)) {
        sv_log(s, "%d requests still open after %d s: answering queued ones with 503",
               s->inflight, s->opt.shutdown_timeout_s);
        sv_repo_cancel_queued(s->repo, "the server is shutting down");
    }
    wait_until(s, &s->suspended, 0); /* running batches and loads finish */
    sv_conns_halt(s->conns); /* the HTTP threads end before their daemons stop */
    for (int i = 0; i < s->n_http; i++) MHD_stop_daemon(s->http[i]);
    free(s->http);
    s->http = NULL;
    s->n_http = 0;
    if (s->metrics) MHD_stop_daemon(s->metrics);
    s->metrics = NULL;
    sv_conns_free(s->conns);
    s->conns = NULL;
    pthread_mutex_lock(&s->mu);
    s->ctl_stop = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (s->ctl_started) pthread_join(s->ctl, NULL);
    s->ctl_started = false;
}

int sv_serve_main(const sv_serve_options *o) {
    sv_server *s = calloc(1, sizeof *s);
    if (!s) return 1;
    s->opt = *o;
    if (!s->opt.host) s->opt.host = "127.0.0.1";
    if (s->opt.http_threads < 1) s->opt.http_threads = 4;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_mutex_init(&s->metrics_mu, NULL);

    /* SIGTERM and SIGINT are taken by sigwait below: block them before any thread starts */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    json_object_seed(0);

    int rc = 1;
    tdm_status *st = tdm_env_create(NULL, &s->env);
    sv_error *e = st ? sv_err_status(500, st, "environment") : NULL;
    sv_repo_options ro = {s->opt.threads, repo_log, s};
    if (!e) e = sv_repo_create(s->env, s->opt.model_repository, &ro, &s->repo);
    if (e) {
        sv_log(s, "%s", e->msg);
        sv_error_free(e);
        goto out;
    }
    if (pthread_create(&s->ctl, NULL, control_main, s)) {
        sv_log(s, "cannot start the control thread");
        goto out;
    }
    s->ctl_started = true;
    machine_defaults(s);
    s->mem.limit = s->opt.request_memory;
    int http_port = 0, metrics_port = -1;
    if (!start_http(s, &http_port)) goto out;
    if (s->opt.metrics_port >= 0) {
        s->metrics = start_metrics(s, s->opt.metrics_port, &metrics_port);
        if (!s->metrics) goto out;
    }
    sv_log(s, "HTTP on %s:%d, metrics %s%s:%d%s", s->opt.host, http_port,
           s->metrics ? "on " : "off", s->metrics ? s->opt.host : "", s->metrics ? metrics_port : 0,
           s->metrics ? "/metrics" : "");
    char per_ip[48] = "";
    if (s->opt.max_connections_per_ip > 0)
        snprintf(per_ip, sizeof per_ip, ", %d per address", s->opt.max_connections_per_ip);
    sv_log(s, "connections: at most %d%s; headers within %d s; bodies at %zu bytes/s or more; "
           "request memory %zu MiB", s->opt.max_connections, per_ip, s->opt.header_timeout_s,
           s->opt.min_upload_rate, s->opt.request_memory >> 20);
    for (size_t i = 0; i < tdm_env_device_count(s->env); i++)
        sv_log(s, "device %s: %s", tdm_env_device_name(s->env, i), tdm_env_device_description(s->env, i));

    int failed = 0;
    if (s->opt.explicit_mode) {
        for (int i = 0; i < s->opt.n_load_models; i++) {
            sv_error *x = sv_repo_load(s->repo, s->opt.load_models[i], NULL, 0);
            if (x) failed++;
            sv_error_free(x);
        }
    } else {
        failed = sv_repo_load_all(s->repo);
    }
    if (failed && s->opt.exit_on_error) {
        sv_log(s, "%d model%s failed to load; stopping (use --exit-on-error false to serve the "
               "others)", failed, failed == 1 ? "" : "s");
        goto out;
    }
    pthread_mutex_lock(&s->mu);
    s->ready = true;
    pthread_mutex_unlock(&s->mu);
    sv_log(s, "ready");

    int sig = 0;
    while (sigwait(&set, &sig) == EINTR) {
    }
    sv_log(s, "signal %d: finishing accepted requests, then stopping", sig);
    rc = 0;
out:
    shutdown_server(s);
    sv_repo_free(s->repo);
    tdm_env_free(s->env);
    pthread_mutex_destroy(&s->metrics_mu);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    if (rc == 0) sv_log(s, "stopped");
    free(s);
    return rc;
}
