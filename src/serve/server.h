/*
 * tandem serve: a KServe v2 / Triton-compatible HTTP inference server.
 *
 *     sv_serve_options o = sv_serve_defaults();
 *     o.model_repository = "models";
 *     return sv_serve_main(&o);   // until SIGTERM or SIGINT
 *
 * Threads: libmicrohttpd runs the HTTP side on an internal thread pool; an inference request
 * is parsed there, queued in its model's scheduler and its connection is suspended; the
 * instance thread that ran the batch builds the answer and resumes the connection. Loads and
 * unloads run on one control thread (their connections are suspended meanwhile). Metrics are
 * served by a second daemon on their own port.
 *
 * Connections are accepted by the server's own thread and handed to libmicrohttpd when their
 * first request begins (conn.h: the connection budget, idle connections closed first).
 *
 * Shutdown (SIGTERM/SIGINT): the listening sockets close, new requests on open connections
 * are refused with 503, accepted requests finish (up to shutdown_timeout_s; then queued ones
 * are answered 503 and running batches finish), then everything is freed.
 */
#ifndef TDM_SERVE_SERVER_H
#define TDM_SERVE_SERVER_H

#include <stdio.h>

#include "serve/repo.h"

typedef struct sv_serve_options {
    const char *model_repository;
    const char *host;          /* default "127.0.0.1" */
    int http_port;             /* default 8000; 0 = a free port (printed) */
    int metrics_port;          /* default 8002; 0 = a free port; -1 = no metrics */
    size_t max_body_bytes;     /* default 64 MiB */
    int http_threads;          /* default 4 */
    int connection_timeout_s;  /* idle connections close after this; default 60 */
    int request_timeout_s;     /* a request body must arrive within this; default 120 */
    int header_timeout_s;      /* a request's headers must be complete within this; default 5 */
    bool no_keep_alive;        /* close the connection after each answer, so that every request
                                  head is checked by the accept thread (conn.c); default false */
    bool no_head_checks;       /* let libmicrohttpd read later heads of a kept-alive connection
                                  unchecked (its HTML errors); default false: conn.c checks them */
    size_t min_upload_rate;    /* bytes/s a body must average after header_timeout_s;
                                  default 16 KiB/s; 0 = none */
    int max_connections;       /* open connections; 0 = from the descriptor limit (default) */
    int max_connections_per_ip;/* 0 = no limit (default) */
    size_t request_memory;     /* bytes for request bodies being received and parsed, all
                                  requests together; 0 = an eighth of RAM (default) */
    size_t max_json_bytes;     /* largest JSON part of an inference request; default 8 MiB */
    int shutdown_timeout_s;    /* grace period for accepted requests; default 30 */
    int threads;               /* intra-op threads per instance; 0 = cores / instances */
    bool exit_on_error;        /* a model that fails at start-up stops the server (default) */
    bool explicit_mode;        /* load only `load_models` at start-up */
    int n_load_models;
    const char *const *load_models;
    FILE *log;                 /* default stderr */
} sv_serve_options;

sv_serve_options sv_serve_defaults(void);
/* Runs the server until SIGTERM or SIGINT. Returns a process exit code. */
int sv_serve_main(const sv_serve_options *o);

/* ---- internals shared by the server's files ---------------------------------------------- */

typedef struct sv_server sv_server;

/* zlib: inflate with a bound on the output (413 beyond it); deflate an answer. */
sv_error *sv_inflate(const char *in, size_t len, bool gzip, size_t limit, char **out, size_t *out_len);
sv_error *sv_deflate(const char *in, size_t len, bool gzip, char **out, size_t *out_len);

/* Prometheus text of all metrics. `state` keeps the previous scrape for utilisation. */
typedef struct sv_metrics_state {
    uint64_t last_ns;
    uint64_t cpu_busy, cpu_total; /* /proc/stat jiffies at the last scrape */
    double cpu_util;
    int n_dev;
    char dev[16][32];
    uint64_t dev_busy[16];
    double dev_util[16];
} sv_metrics_state;
void sv_metrics_render(sv_repo *repo, sv_metrics_state *state, sv_buf *b);

#endif
