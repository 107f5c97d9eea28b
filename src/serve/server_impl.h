/* tandem serve: the server object shared by http.c (requests) and server.c (lifecycle). */
#ifndef TDM_SERVE_SERVER_IMPL_H
#define TDM_SERVE_SERVER_IMPL_H

#include <pthread.h>

#include <microhttpd.h>

#include "serve/budget.h"
#include "serve/conn.h"
#include "serve/server.h"

typedef enum sv_route {
    R_NOT_FOUND,
    R_BAD_METHOD,
    R_UNSUPPORTED,
    R_LIVE,
    R_READY,
    R_SERVER_META,
    R_MODEL_META,
    R_MODEL_READY,
    R_MODEL_CONFIG,
    R_MODEL_STATS,
    R_ALL_STATS,
    R_INFER,
    R_REPO_INDEX,
    R_REPO_LOAD,
    R_REPO_UNLOAD,
    R_METRICS,
    /* OpenAI's API (openai.c); errors in OpenAI's shape */
    R_OA_COMPLETIONS,
    R_OA_CHAT,
    R_OA_MODELS,
    R_OA_MODEL,
} sv_route;

#define SV_ROUTE_OPENAI(r) ((r) >= R_OA_COMPLETIONS && (r) <= R_OA_MODEL)

/* One HTTP request (MHD's per-request context). */
typedef struct sv_conn {
    sv_server *srv;
    struct MHD_Connection *conn;
    int fd;           /* the connection's socket while an inference waits (client_gone); -1 */
    sv_route route;
    char model[256], version[32];
    uint64_t t_recv;
    sv_buf body;
    bool too_big;     /* the body passed the limit: the rest is discarded, then 413 */
    bool close_after; /* close the connection after the answer (ambiguous framing) */
    bool chunked;     /* Transfer-Encoding: chunked */
    bool chunk_bad;   /* its framing is malformed: answered by conn.c, the rest not taken */
    sv_chunks ck;     /* its framing, followed (conn.c) */
    char encoding;    /* 0, 'g' gzip, 'd' deflate, '?' unsupported */
    bool accept_gzip, accept_deflate;
    bool suspended;
    bool answered;    /* the answer below is ready to send */
    int http;
    char *resp;
    size_t resp_len, json_len;
    const char *ctype;
    sv_request *req;
    sv_version *ver;
    sv_slot *slot;    /* the connection's place in the budget (NULL on the metrics port) */
    size_t mem;       /* bytes taken from the request-memory budget */
    bool mem_refused; /* the body did not fit in the budget: it is discarded, then 503 */
    struct sv_conn *job_next; /* control queue (load/unload) */
    struct oa_req *oa;        /* an OpenAI request in progress (openai.c) */
    bool oa_shape;            /* a /v1 path: errors in OpenAI's shape */
} sv_conn;

struct sv_server {
    sv_serve_options opt;
    tdm_env *env;
    sv_repo *repo;
    struct MHD_Daemon **http; /* one per HTTP thread (n_http), run by conn.c's threads */
    int n_http;
    struct MHD_Daemon *metrics;
    sv_conns *conns;   /* the HTTP port's connection budget */
    sv_budget mem;     /* request bodies being received and parsed */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int inflight;  /* requests whose headers arrived and that are not completed */
    int suspended; /* connections waiting for an answer */
    bool draining;
    bool ready;
    /* control thread (loads and unloads, one at a time) */
    pthread_t ctl;
    bool ctl_started, ctl_stop;
    sv_conn *jobs_head, *jobs_tail;
    pthread_mutex_t metrics_mu;
    sv_metrics_state mstate;
};

/* MHD callbacks (http.c). */
enum MHD_Result sv_http_handler(void *cls, struct MHD_Connection *connection, const char *url,
                                const char *method, const char *version, const char *upload_data,
                                size_t *upload_data_size, void **con_cls);
/* The same for the metrics port (only GET /metrics there). */
enum MHD_Result sv_metrics_handler(void *cls, struct MHD_Connection *connection, const char *url,
                                   const char *method, const char *version, const char *upload_data,
                                   size_t *upload_data_size, void **con_cls);
void sv_http_completed(void *cls, struct MHD_Connection *connection, void **con_cls,
                       enum MHD_RequestTerminationCode toe);
/* Runs one queued load/unload (control thread). */
void sv_http_run_job(sv_conn *c);

/* For openai.c (http.c): the request body (inflated, within the memory budget); setting the
 * answer; sending it; suspending a connection and resuming it (any thread; c may be gone
 * after resume). */
sv_error *sv_http_take_body(sv_conn *c, char **out, size_t *len);
void sv_http_answer(sv_conn *c, int http, char *body, size_t len, const char *ctype);
enum MHD_Result sv_http_send_answer(sv_conn *c);
void sv_http_suspend(sv_conn *c);
void sv_http_resume(sv_conn *c);

/* openai.c: answers an OpenAI route (after the body has arrived); the request-completed
 * notification (a client that went away cancels its request); an error body in OpenAI's
 * shape. */
enum MHD_Result sv_openai_handle(sv_conn *c);
void sv_openai_completed(sv_conn *c, enum MHD_RequestTerminationCode toe);
void sv_openai_error_json(sv_buf *b, int http, const char *msg, const char *param, const char *code);

void sv_log(sv_server *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
