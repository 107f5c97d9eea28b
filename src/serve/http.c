/* tandem serve: HTTP requests — routing, limits, the KServe v2 / Triton endpoints. */
#define _GNU_SOURCE /* strcasestr, POLLRDHUP */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include <jansson.h>

#include "serve/server_impl.h"

#define SV_JSON_DEPTH 64
#define SV_JSON_TREE_FACTOR 16 /* bytes of jansson's tree per byte of JSON text, at most */

/* ---- answers ---------------------------------------------------------------------------------- */

static void answer(sv_conn *c, int http, char *body, size_t len, const char *ctype) {
    free(c->resp);
    c->http = http;
    c->resp = body;
    c->resp_len = body ? len : 0;
    c->json_len = 0;
    c->ctype = ctype;
    c->answered = true;
}

static void answer_buf(sv_conn *c, int http, sv_buf *b) {
    size_t len = 0;
    char *p = sv_buf_take(b, &len);
    if (!p) {
        answer(c, 500, sv_strdup("{\"error\":\"out of memory\"}"), 25, "application/json");
        return;
    }
    answer(c, http, p, len, "application/json");
}

static void answer_error(sv_conn *c, sv_error *e) {
    sv_buf b = {0};
    if (c->oa_shape) {
        sv_openai_error_json(&b, e->http, e->msg, NULL, NULL);
        answer_buf(c, e->http, &b);
        sv_error_free(e);
        return;
    }
    sv_buf_str(&b, "{\"error\":");
    sv_buf_json_str(&b, e->msg, strlen(e->msg));
    sv_buf_str(&b, "}");
    answer_buf(c, e->http, &b);
    sv_error_free(e);
}

static enum MHD_Result send_answer(sv_conn *c) {
    sv_server *s = c->srv;
    char *body = c->resp;
    size_t len = c->resp_len;
    c->resp = NULL;
    const char *enc = NULL;
    if (len > 1024 && len < (1u << 30) && (c->accept_gzip || c->accept_deflate)) {
        char *z = NULL;
        size_t zlen = 0;
        sv_error *e = sv_deflate(body, len, c->accept_gzip, &z, &zlen);
        if (!e) {
            free(body);
            body = z;
            len = zlen;
            enc = c->accept_gzip ? "gzip" : "deflate";
        }
        sv_error_free(e);
    }
    struct MHD_Response *r =
        body ? MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE)
             : MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    if (c->ctype && len) MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, c->ctype);
    if (c->json_len) {
        char n[32];
        snprintf(n, sizeof n, "%zu", c->json_len);
        MHD_add_response_header(r, "Inference-Header-Content-Length", n);
    }
    if (enc) MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_ENCODING, enc);
    if (c->http == 503) MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    pthread_mutex_lock(&s->mu);
    bool draining = s->draining;
    pthread_mutex_unlock(&s->mu);
    if (!c->close_after && sv_conns_close_after(s->conns, c->slot)) c->close_after = true;
    if (draining || c->close_after || s->opt.no_keep_alive)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result ret = MHD_queue_response(c->conn, (unsigned)c->http, r);
    MHD_destroy_response(r);
    return ret;
}

/* Resumes a suspended connection whose answer is ready (any thread). */
static void resume(sv_conn *c) {
    sv_server *s = c->srv;
    struct MHD_Connection *conn = c->conn;
    c->suspended = false;
    c->answered = true;
    sv_conns_resume(c->slot, conn); /* c may be gone after this */
    pthread_mutex_lock(&s->mu);
    s->suspended--;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static void suspend(sv_conn *c) {
    pthread_mutex_lock(&c->srv->mu);
    c->srv->suspended++;
    pthread_mutex_unlock(&c->srv->mu);
    c->suspended = true;
    MHD_suspend_connection(c->conn);
}

void sv_http_answer(sv_conn *c, int http, char *body, size_t len, const char *ctype) {
    answer(c, http, body, len, ctype);
}

enum MHD_Result sv_http_send_answer(sv_conn *c) { return send_answer(c); }
void sv_http_suspend(sv_conn *c) { suspend(c); }
void sv_http_resume(sv_conn *c) { resume(c); }

/* ---- routing ---------------------------------------------------------------------------------- */

static int split(const char *url, char parts[8][256]) {
    int n = 0;
    const char *p = url;
    while (*p) {
        while (*p == '/') p++;
        if (!*p) break;
        size_t len = strcspn(p, "/");
        if (n == 8 || len >= 256) return -1;
        memcpy(parts[n], p, len);
        parts[n][len] = 0;
        n++;
        p += len;
    }
    return n;
}

static sv_route route(sv_conn *c, const char *method, const char *url, bool metrics_port) {
    bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    bool post = !strcmp(method, "POST");
    char p[8][256];
    int n = split(url, p);
    if (n < 0) return R_NOT_FOUND;
    if (metrics_port) {
        if (n == 1 && !strcmp(p[0], "metrics")) return get ? R_METRICS : R_BAD_METHOD;
        return R_NOT_FOUND;
    }
    if (n >= 1 && !strcmp(p[0], "v1")) { /* OpenAI's API */
        c->oa_shape = true;
        if (n == 2 && !strcmp(p[1], "completions")) return post ? R_OA_COMPLETIONS : R_BAD_METHOD;
        if (n == 3 && !strcmp(p[1], "chat") && !strcmp(p[2], "completions"))
            return post ? R_OA_CHAT : R_BAD_METHOD;
        if (n == 2 && !strcmp(p[1], "models")) return get ? R_OA_MODELS : R_BAD_METHOD;
        if (n == 3 && !strcmp(p[1], "models")) {
            snprintf(c->model, sizeof c->model, "%s", p[2]);
            return get ? R_OA_MODEL : R_BAD_METHOD;
        }
        return R_NOT_FOUND;
    }
    if (n == 0 || strcmp(p[0], "v2")) return R_NOT_FOUND;
    if (n == 1) return get ? R_SERVER_META : R_BAD_METHOD;
    if (n == 3 && !strcmp(p[1], "health")) {
        if (!get) return R_BAD_METHOD;
        if (!strcmp(p[2], "live")) return R_LIVE;
        if (!strcmp(p[2], "ready")) return R_READY;
        return R_NOT_FOUND;
    }
    if (!strcmp(p[1], "repository")) {
        if (n == 3 && !strcmp(p[2], "index")) return post ? R_REPO_INDEX : R_BAD_METHOD;
        if (n == 5 && !strcmp(p[2], "models")) {
            snprintf(c->model, sizeof c->model, "%s", p[3]);
            if (!strcmp(p[4], "load")) return post ? R_REPO_LOAD : R_BAD_METHOD;
            if (!strcmp(p[4], "unload")) return post ? R_REPO_UNLOAD : R_BAD_METHOD;
        }
        return R_NOT_FOUND;
    }
    if (!strcmp(p[1], "systemsharedmemory") || !strcmp(p[1], "cudasharedmemory") ||
        !strcmp(p[1], "trace") || !strcmp(p[1], "logging"))
        return R_UNSUPPORTED;
    if (strcmp(p[1], "models")) return R_NOT_FOUND;
    if (n == 3 && !strcmp(p[2], "stats")) return get ? R_ALL_STATS : R_BAD_METHOD;
    if (n < 3) return R_NOT_FOUND;
    snprintf(c->model, sizeof c->model, "%s", p[2]);
    int k = 3;
    if (n >= 5 && !strcmp(p[3], "versions")) {
        size_t vl = strlen(p[4]);
        if (vl >= sizeof c->version) return R_NOT_FOUND;
        memcpy(c->version, p[4], vl + 1);
        k = 5;
    }
    if (n == k) return get ? R_MODEL_META : R_BAD_METHOD;
    if (n != k + 1) return R_NOT_FOUND;
    const char *what = p[k];
    if (!strcmp(what, "ready")) return get ? R_MODEL_READY : R_BAD_METHOD;
    if (!strcmp(what, "config")) return get ? R_MODEL_CONFIG : R_BAD_METHOD;
    if (!strcmp(what, "stats")) return get ? R_MODEL_STATS : R_BAD_METHOD;
    if (!strcmp(what, "infer")) return post ? R_INFER : R_BAD_METHOD;
    if (!strcmp(what, "trace")) return R_UNSUPPORTED;
    return R_NOT_FOUND;
}

/* ---- bodies ----------------------------------------------------------------------------------- */

/* 503 (with Retry-After) when the request-memory budget is spent. */
static sv_error *mem_refused(sv_server *s) {
    return sv_err(503, "the server's memory for request bodies (--request-memory %zu MiB) is "
                  "taken by other requests; retry later", s->opt.request_memory >> 20);
}

/* 413 for JSON larger than the JSON limit: a parsed JSON tree takes about 15 times its text
 * (an inference request's tensor "data" arrays are not counted: they are not made a tree). */
static sv_error *json_too_big(sv_server *s, uint64_t n) {
    return sv_err(413, "the JSON part of the request has %llu bytes, more than the %zu-byte limit "
                  "for JSON (--max-json-mb); send large tensors with the binary tensor data "
                  "extension (binary_data_size and the Inference-Header-Content-Length header)",
                  (unsigned long long)n, s->opt.max_json_bytes);
}

/* Takes the request body, inflated when it came compressed. */
sv_error *sv_http_take_body(sv_conn *c, char **out, size_t *len) {
    if (c->encoding == '?') return sv_err(415, "unsupported Content-Encoding (gzip, deflate or identity)");
    if (!c->body.p) sv_buf_add(&c->body, "", 0);
    char *raw = sv_buf_take(&c->body, len);
    if (!raw) return sv_err(500, "out of memory");
    if (!c->encoding) {
        *out = raw;
        return NULL;
    }
    /* the inflated body counts too: its largest size while inflating, then its real one */
    sv_server *s = c->srv;
    if (!sv_budget_take(&s->mem, s->opt.max_body_bytes)) {
        free(raw);
        return mem_refused(s);
    }
    sv_error *e = sv_inflate(raw, *len, c->encoding == 'g', s->opt.max_body_bytes, out, len);
    free(raw);
    sv_budget_give(&s->mem, e ? s->opt.max_body_bytes : s->opt.max_body_bytes - *len);
    if (!e) c->mem += *len;
    return e;
}

/* Parses an optional JSON object body (control requests). NULL root for an empty body. */
static sv_error *json_body(sv_conn *c, json_t **root) {
    char *b;
    size_t len;
    sv_error *e = sv_http_take_body(c, &b, &len);
    if (e) return e;
    *root = NULL;
    if (len > c->srv->opt.max_json_bytes) {
        free(b);
        return json_too_big(c->srv, len);
    }
    size_t ws = strspn(b, " \t\r\n");
    if (ws == len) {
        free(b);
        return NULL;
    }
    if (sv_json_depth(b, len, SV_JSON_DEPTH) > SV_JSON_DEPTH) {
        free(b);
        return sv_err(400, "the JSON nests deeper than %d levels", SV_JSON_DEPTH);
    }
    json_error_t jerr;
    *root = json_loadb(b, len, JSON_REJECT_DUPLICATES, &jerr);
    free(b);
    if (!*root) return sv_err(400, "malformed JSON at line %d, column %d: %s", jerr.line, jerr.column, jerr.text);
    if (!json_is_object(*root)) {
        json_decref(*root);
        *root = NULL;
        return sv_err(400, "the request body must be a JSON object");
    }
    return NULL;
}

/* ---- endpoints -------------------------------------------------------------------------------- */

static void server_metadata(sv_conn *c) {
    sv_buf b = {0};
    sv_buf_printf(&b, "{\"name\":\"tandem\",\"version\":\"%s\",\"extensions\":[\"binary_tensor_data\","
                  "\"model_repository\",\"model_configuration\",\"statistics\","
                  "\"schedule_policy\"]}", tdm_version_string());
    answer_buf(c, 200, &b);
}

static void io_metadata(sv_buf *b, const sv_model_config *cfg, const sv_io_config *io) {
    sv_buf_str(b, "{\"name\":");
    sv_buf_json_str(b, io->name, strlen(io->name));
    sv_buf_printf(b, ",\"datatype\":\"%s\",\"shape\":[", sv_dtype_v2_name(io->dtype));
    bool first = true;
    if (cfg->max_batch_size > 0) {
        sv_buf_str(b, "-1");
        first = false;
    }
    for (int i = 0; i < io->rank; i++, first = false)
        sv_buf_printf(b, "%s%lld", first ? "" : ",", (long long)io->dims[i]);
    sv_buf_str(b, "]}");
}

static void model_metadata(sv_conn *c, sv_version *v) {
    const sv_model_config *cfg = v->cfg;
    sv_buf b = {0};
    sv_buf_str(&b, "{\"name\":");
    sv_buf_json_str(&b, cfg->name, strlen(cfg->name));
    sv_buf_str(&b, ",\"versions\":[");
    if (c->version[0]) sv_buf_printf(&b, "\"%s\"", v->vstr);
    else sv_repo_model_versions_json(c->srv->repo, cfg->name, &b);
    sv_buf_str(&b, "],\"platform\":");
    sv_buf_json_str(&b, cfg->platform, strlen(cfg->platform));
    sv_buf_str(&b, ",\"inputs\":[");
    for (int i = 0; i < cfg->n_inputs; i++) {
        if (i) sv_buf_str(&b, ",");
        io_metadata(&b, cfg, &cfg->inputs[i]);
    }
    sv_buf_str(&b, "],\"outputs\":[");
    for (int i = 0; i < cfg->n_outputs; i++) {
        if (i) sv_buf_str(&b, ",");
        io_metadata(&b, cfg, &cfg->outputs[i]);
    }
    sv_buf_str(&b, "]}");
    answer_buf(c, 200, &b);
}

static void statistics(sv_conn *c, bool all) {
    sv_server *s = c->srv;
    sv_buf b = {0};
    sv_version **v = NULL;
    int n = 0;
    if (!all && c->version[0]) {
        sv_version *one;
        sv_error *e = sv_repo_get(s->repo, c->model, c->version, &one);
        if (e) {
            answer_error(c, e);
            return;
        }
        v = malloc(sizeof *v);
        if (v) v[n++] = one;
        else sv_version_unref(s->repo, one);
    } else {
        n = sv_repo_versions(s->repo, &v);
        if (!all) {
            int k = 0;
            for (int i = 0; i < n; i++) {
                if (!strcmp(v[i]->model_name, c->model)) v[k++] = v[i];
                else sv_version_unref(s->repo, v[i]);
            }
            n = k;
            if (!n) {
                sv_version *probe;
                sv_error *e = sv_repo_get(s->repo, c->model, NULL, &probe);
                if (!e) sv_version_unref(s->repo, probe); /* loaded meanwhile: report nothing */
                else {
                    free(v);
                    answer_error(c, e);
                    return;
                }
            }
        }
    }
    sv_buf_str(&b, "{\"model_stats\":[");
    for (int i = 0; i < n; i++) {
        if (i) sv_buf_str(&b, ",");
        sv_stats_json(&v[i]->stats, v[i]->model_name, v[i]->vstr, &b);
        sv_version_unref(s->repo, v[i]);
    }
    sv_buf_str(&b, "]}");
    free(v);
    answer_buf(c, 200, &b);
}

static void repo_index(sv_conn *c) {
    json_t *root = NULL;
    sv_error *e = json_body(c, &root);
    if (e) {
        answer_error(c, e);
        return;
    }
    bool ready_only = false;
    json_t *r = root ? json_object_get(root, "ready") : NULL;
    if (r && !json_is_boolean(r)) {
        json_decref(root);
        answer_error(c, sv_err(400, "'ready' must be true or false"));
        return;
    }
    ready_only = r && json_is_true(r);
    json_decref(root);
    sv_buf b = {0};
    sv_repo_index_json(c->srv->repo, ready_only, &b);
    answer_buf(c, 200, &b);
}

static void infer_done(sv_request *r, void *user) {
    sv_conn *c = user;
    free(c->resp);
    c->http = r->http;
    c->resp = r->resp;
    c->resp_len = r->resp ? r->resp_len : 0;
    c->json_len = r->json_len;
    c->ctype = r->json_len ? "application/octet-stream" : "application/json";
    r->resp = NULL;
    resume(c);
}

/* sv_request.gone: whether the client of a queued request has gone away. The scheduler asks
 * only while the request is queued, i.e. while its connection is suspended: MHD neither reads
 * nor closes a suspended connection's socket (it only notices a closed one once resumed), so
 * the descriptor is still this connection's and cannot have been reused for another.
 * Gone: the peer shut down its side (FIN: POLLRDHUP, or a read of 0 bytes), or the socket
 * reports a hang-up or an error (RST). Bytes waiting to be read (a pipelined request) are
 * left alone. An HTTP/1.1 client that half-closes and still waits for the answer would be
 * taken as gone; clients do not do that (curl, tritonclient, browsers). */
static bool client_gone(sv_request *r, void *user) {
    (void)r;
    const sv_conn *c = user;
    if (c->fd < 0) return false;
    struct pollfd p = {.fd = c->fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) != 1) return false; /* nothing to report (or EINTR: next time) */
    if (p.revents & POLLNVAL) return false; /* not ours to judge */
    if (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) return true;
    if (p.revents & POLLIN) {
        char b;
        ssize_t k = recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
        return k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
    }
    return false;
}

/* Parses and queues an inference request; the connection waits suspended for the answer. */
static bool infer(sv_conn *c) {
    sv_server *s = c->srv;
    int64_t header_len = -1;
    const char *h = MHD_lookup_connection_value(c->conn, MHD_HEADER_KIND, "Inference-Header-Content-Length");
    sv_error *e = sv_infer_header_len(h, &header_len);
    if (e) {
        answer_error(c, e);
        return false;
    }
    char *body;
    size_t len;
    e = sv_http_take_body(c, &body, &len);
    if (e) {
        answer_error(c, e);
        return false;
    }
    size_t jlen = header_len >= 0 && (uint64_t)header_len < len ? (size_t)header_len : len;
    size_t tree_text = sv_infer_tree_len(body, jlen);
    if (tree_text > s->opt.max_json_bytes) {
        free(body);
        answer_error(c, json_too_big(s, tree_text));
        return false;
    }
    sv_version *v = NULL;
    if ((e = sv_repo_get(s->repo, c->model, c->version, &v))) {
        free(body);
        answer_error(c, e);
        return false;
    }
    if (v->llm) {
        free(body);
        sv_version_unref(s->repo, v);
        answer_error(c, sv_err(400, "'%s' is a language model: use OpenAI's API (POST "
                               "/v1/completions or /v1/chat/completions)", c->model));
        return false;
    }
    /* jansson's tree of the JSON part lives while it is read into the tensors; the "data"
     * arrays read straight into them take at most 4 bytes per byte of text (8-byte elements,
     * each 2 characters or more with its comma) */
    size_t tree = tree_text * SV_JSON_TREE_FACTOR + (jlen - tree_text) * 4;
    if (!sv_budget_take(&s->mem, tree)) {
        free(body);
        sv_version_unref(s->repo, v);
        answer_error(c, mem_refused(s));
        return false;
    }
    sv_request *r = NULL;
    e = sv_infer_parse(v, v->cfg, body, len, header_len, &r);
    sv_budget_give(&s->mem, tree);
    if (e) {
        sv_version_unref(s->repo, v);
        answer_error(c, e);
        return false;
    }
    c->ver = v;
    c->req = r;
    r->t_recv = c->t_recv;
    r->notify = infer_done;
    r->notify_user = c;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    c->fd = ci ? (int)ci->connect_fd : -1;
    r->gone = client_gone;
    suspend(c);
    if ((e = sv_sched_submit(v->sched, r))) {
        answer_error(c, e);
        resume(c);
    }
    return true;
}

/* load/unload wait for the control thread */
static void queue_job(sv_conn *c) {
    sv_server *s = c->srv;
    suspend(c);
    pthread_mutex_lock(&s->mu);
    c->job_next = NULL;
    if (s->jobs_tail) s->jobs_tail->job_next = c;
    else s->jobs_head = c;
    s->jobs_tail = c;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void sv_http_run_job(sv_conn *c) {
    sv_server *s = c->srv;
    json_t *root = NULL;
    sv_error *e = json_body(c, &root);
    const char *cfg = NULL;
    size_t cfg_len = 0;
    json_t *params = root ? json_object_get(root, "parameters") : NULL;
    if (!e && params && !json_is_object(params)) e = sv_err(400, "'parameters' must be an object");
    if (!e && params && c->route == R_REPO_LOAD) {
        const char *key;
        json_t *val;
        json_object_foreach(params, key, val) {
            if (!strcmp(key, "config")) {
                if (!json_is_string(val)) {
                    e = sv_err(400, "parameter 'config' must be a string holding the JSON config");
                    break;
                }
                cfg = json_string_value(val);
                cfg_len = json_string_length(val);
            } else if (!strncmp(key, "file:", 5)) {
                e = sv_err(400, "file overrides ('%s') are not supported: a load reads only the "
                           "repository", key);
                break;
            }
        }
    }
    if (!e) {
        e = c->route == R_REPO_LOAD ? sv_repo_load(s->repo, c->model, cfg, cfg_len)
                                    : sv_repo_unload(s->repo, c->model);
    }
    json_decref(root);
    if (e) answer_error(c, e);
    else answer(c, 200, NULL, 0, NULL);
    resume(c);
}

/* The HTTP port's connection budget and the request-memory budget. */
static void budget_metrics(sv_server *s, sv_buf *b) {
    if (!s->conns) return;
    sv_conns_stats st;
    sv_conns_get_stats(s->conns, &st);
    sv_buf_printf(b, "# HELP tandem_http_connections Open connections of the HTTP port (pending: "
                  "their first request head is not complete yet)\n# TYPE tandem_http_connections gauge\n"
                  "tandem_http_connections{state=\"open\"} %d\ntandem_http_connections{state=\"pending\"} %d\n",
                  st.admitted, st.pending);
    sv_buf_printf(b, "# HELP tandem_http_connections_closed_total Connections the server closed, by "
                  "reason\n# TYPE tandem_http_connections_closed_total counter\n");
    const struct { const char *reason; uint64_t n; } closed[] = {
        {"idle_for_new_client", st.evicted_idle}, {"header_timeout", st.header_timeouts},
        {"idle_timeout", st.idle_timeouts}, {"slow_body", st.slow_bodies},
    };
    for (size_t i = 0; i < sizeof closed / sizeof closed[0]; i++)
        sv_buf_printf(b, "tandem_http_connections_closed_total{reason=\"%s\"} %llu\n", closed[i].reason,
                      (unsigned long long)closed[i].n);
    sv_buf_printf(b, "# HELP tandem_http_connections_refused_total New connections answered with an "
                  "error and closed, by reason\n# TYPE tandem_http_connections_refused_total counter\n"
                  "tandem_http_connections_refused_total{reason=\"full\"} %llu\n"
                  "tandem_http_connections_refused_total{reason=\"per_ip\"} %llu\n"
                  "tandem_http_connections_refused_total{reason=\"bad_first_request\"} %llu\n"
                  "tandem_http_connections_refused_total{reason=\"bad_later_request\"} %llu\n",
                  (unsigned long long)st.refused_full, (unsigned long long)st.refused_per_ip,
                  (unsigned long long)st.bad_first_line, (unsigned long long)st.later_bad);
    sv_buf_printf(b, "# HELP tandem_http_later_heads_total Heads of later requests on kept-alive "
                  "connections, by how tandem checked them (--check-heads; unchecked: the answer before "
                  "it closed the connection)\n"
                  "# TYPE tandem_http_later_heads_total counter\n"
                  "tandem_http_later_heads_total{how=\"already_there\"} %llu\n"
                  "tandem_http_later_heads_total{how=\"waited\"} %llu\n"
                  "tandem_http_later_heads_total{how=\"unchecked\"} %llu\n"
                  "# HELP tandem_http_waiting_connections Kept-alive connections waiting for their "
                  "next request head\n# TYPE tandem_http_waiting_connections gauge\n"
                  "tandem_http_waiting_connections %d\n",
                  (unsigned long long)st.later_checked, (unsigned long long)st.later_waited,
                  (unsigned long long)st.later_unsynced, st.waiting);
    sv_buf_printf(b, "# HELP tandem_http_chunked_framing_total Chunked request bodies whose "
                  "framing was malformed (answered 400 in JSON) or could not be followed before "
                  "libmicrohttpd parsed it\n# TYPE tandem_http_chunked_framing_total counter\n"
                  "tandem_http_chunked_framing_total{result=\"malformed\"} %llu\n"
                  "tandem_http_chunked_framing_total{result=\"unfollowed\"} %llu\n",
                  (unsigned long long)st.chunks_bad, (unsigned long long)st.chunks_unfollowed);
    sv_buf_printf(b, "# HELP tandem_request_memory_bytes Request bodies being received and parsed "
                  "(--request-memory)\n# TYPE tandem_request_memory_bytes gauge\n"
                  "tandem_request_memory_bytes{value=\"used\"} %zu\n"
                  "tandem_request_memory_bytes{value=\"peak\"} %zu\n"
                  "tandem_request_memory_bytes{value=\"limit\"} %zu\n",
                  atomic_load(&s->mem.used), atomic_load(&s->mem.peak), s->mem.limit);
}

static void metrics(sv_conn *c) {
    sv_server *s = c->srv;
    sv_buf b = {0};
    pthread_mutex_lock(&s->metrics_mu);
    sv_metrics_render(s->repo, &s->mstate, &b);
    pthread_mutex_unlock(&s->metrics_mu);
    budget_metrics(s, &b);
    size_t len = 0;
    char *p = sv_buf_take(&b, &len);
    answer(c, p ? 200 : 500, p, len, "text/plain; version=0.0.4; charset=utf-8");
}

/* Answers the request, or queues it and suspends the connection: then returns true and the
 * caller must not touch c (another thread may be answering it). */
static bool dispatch(sv_conn *c) {
    sv_server *s = c->srv;
    sv_version *v = NULL;
    sv_error *e = NULL;
    switch (c->route) {
    case R_NOT_FOUND: answer_error(c, sv_err(404, "Not Found")); return false;
    case R_BAD_METHOD: answer_error(c, sv_err(405, "method not allowed for this endpoint")); return false;
    case R_UNSUPPORTED: answer_error(c, sv_err(501, "this Triton extension is not supported by tandem")); return false;
    case R_LIVE: answer(c, 200, NULL, 0, NULL); return false;
    case R_READY: {
        pthread_mutex_lock(&s->mu);
        bool ready = s->ready && !s->draining;
        pthread_mutex_unlock(&s->mu);
        answer(c, ready ? 200 : 400, NULL, 0, NULL);
        return false;
    }
    case R_SERVER_META: server_metadata(c); return false;
    case R_MODEL_META:
    case R_MODEL_READY:
    case R_MODEL_CONFIG:
        e = sv_repo_get(s->repo, c->model, c->version, &v);
        if (c->route == R_MODEL_READY) {
            answer(c, e ? 400 : 200, NULL, 0, NULL);
            sv_error_free(e);
        } else if (e) {
            answer_error(c, e);
        } else if (c->route == R_MODEL_META) {
            model_metadata(c, v);
        } else {
            sv_buf b = {0};
            sv_config_to_json(v->cfg, &b);
            answer_buf(c, 200, &b);
        }
        sv_version_unref(s->repo, v);
        return false;
    case R_MODEL_STATS: statistics(c, false); return false;
    case R_ALL_STATS: statistics(c, true); return false;
    case R_INFER: return infer(c);
    case R_REPO_INDEX: repo_index(c); break;
    case R_REPO_LOAD:
    case R_REPO_UNLOAD: queue_job(c); return true;
    case R_METRICS: metrics(c); break;
    case R_OA_COMPLETIONS:
    case R_OA_CHAT:
    case R_OA_MODELS:
    case R_OA_MODEL: break; /* handle() sends them to openai.c */
    }
    return false;
}

/* ---- MHD callbacks ---------------------------------------------------------------------------- */

static bool header_has(struct MHD_Connection *conn, const char *name, const char *token) {
    const char *v = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, name);
    if (!v) return false;
    size_t n = strlen(token);
    for (const char *p = v; (p = strcasestr(p, token)); p += n)
        if ((p == v || p[-1] == ' ' || p[-1] == ',') && (!p[n] || p[n] == ',' || p[n] == ';' || p[n] == ' '))
            return true;
    return false;
}

/* Counts the framing headers of a request: Content-Length and Transfer-Encoding. */
typedef struct framing {
    int n_length, n_encoding;
    bool bad_length; /* a Content-Length that is not one decimal number */
    bool bad_coding; /* a Transfer-Encoding other than exactly "chunked" */
    char coding[64]; /* its value */
} framing;

static enum MHD_Result count_framing(void *cls, enum MHD_ValueKind kind, const char *key,
                                     const char *value) {
    framing *f = cls;
    (void)kind;
    if (!strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH)) {
        int64_t n;
        f->n_length++;
        if (!value || !sv_parse_i64(value, &n) || n < 0) f->bad_length = true;
    } else if (!strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING)) {
        f->n_encoding++;
        const char *v = value ? value : "";
        v += strspn(v, " \t");
        size_t n = strlen(v); /* blanks after it are kept: "chunked " is not chunked there */
        if (n != 7 || strncasecmp(v, "chunked", 7)) f->bad_coding = true;
        if (f->bad_coding)
            snprintf(f->coding, sizeof f->coding, "%.*s", (int)(n < 60 ? n : 60), v);
    }
    return MHD_YES;
}

/* A request whose length is ambiguous (several Content-Length headers, Content-Length with
 * Transfer-Encoding, a Content-Length that is not a number) is refused and its connection
 * closed: a proxy in front may have framed it differently (request smuggling). */
static sv_error *check_framing(struct MHD_Connection *conn) {
    framing f = {0};
    MHD_get_connection_values(conn, MHD_HEADER_KIND, count_framing, &f);
    if (f.n_length > 1)
        return sv_err(400, "the request has %d Content-Length headers; it must have at most one",
                      f.n_length);
    if (f.bad_length) return sv_err(400, "the Content-Length header is not a non-negative integer");
    if (f.n_length && f.n_encoding)
        return sv_err(400, "the request has both Content-Length and Transfer-Encoding headers");
    if (f.n_encoding > 1) return sv_err(400, "the request has several Transfer-Encoding headers");
    /* RFC 9112 6.1: chunked is the only coding a server must know; any other, or a list, cannot
     * be framed here: 501 at once, and the connection closes */
    if (f.bad_coding)
        return sv_err(501, "Transfer-Encoding '%s' is not supported: send the body with "
                      "Content-Length or 'Transfer-Encoding: chunked' (compress it with "
                      "Content-Encoding)", f.coding);
    return NULL;
}

/* Inference requests: the JSON header's length is checked once the body is there (its tensors'
 * "data" arrays are read straight into the tensors and do not count, see infer.c); here only
 * the Inference-Header-Content-Length header's syntax. */
static sv_error *check_json_size(sv_conn *c, struct MHD_Connection *conn, int64_t content_length) {
    (void)content_length;
    if (c->route != R_INFER) return NULL;
    int64_t hl = -1;
    return sv_infer_header_len(
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Inference-Header-Content-Length"), &hl);
}

static sv_conn *begin(sv_server *s, struct MHD_Connection *conn, const char *method, const char *url,
                      bool metrics_port) {
    sv_conn *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->srv = s;
    c->conn = conn;
    c->fd = -1;
    c->t_recv = sv_now_ns();
    if (!metrics_port) {
        c->slot = sv_conns_slot(conn);
        sv_conns_request_begin(s->conns, c->slot);
    }
    pthread_mutex_lock(&s->mu);
    s->inflight++;
    bool draining = s->draining;
    pthread_mutex_unlock(&s->mu);
    c->route = route(c, method, url, metrics_port);
    const char *enc = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_ENCODING);
    if (enc && *enc && strcasecmp(enc, "identity"))
        c->encoding = !strcasecmp(enc, "gzip") ? 'g' : !strcasecmp(enc, "deflate") ? 'd' : '?';
    c->accept_gzip = header_has(conn, MHD_HTTP_HEADER_ACCEPT_ENCODING, "gzip");
    c->accept_deflate = header_has(conn, MHD_HTTP_HEADER_ACCEPT_ENCODING, "deflate");
    if (draining) {
        answer_error(c, sv_err(503, "the server is shutting down"));
        return c;
    }
    sv_error *fe = check_framing(conn);
    if (fe) {
        answer_error(c, fe);
        c->close_after = true;
        return c;
    }
    c->chunked = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                             MHD_HTTP_HEADER_TRANSFER_ENCODING) != NULL;
    const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    int64_t n = -1;
    if (cl && !sv_parse_i64(cl, &n)) n = -1;
    if (n >= 0 && (uint64_t)n > s->opt.max_body_bytes) {
        answer_error(c, sv_err(413, "the request body of %lld bytes is larger than the %zu-byte "
                               "limit (--max-body-mb)", (long long)n, s->opt.max_body_bytes));
        return c;
    }
    if ((fe = check_json_size(c, conn, n))) {
        answer_error(c, fe);
        return c;
    }
    if (n > 0) {
        /* the whole declared length is taken from the budget before a byte is read, and
         * allocated at once (its pages are only touched as the body arrives) */
        if (!sv_budget_take(&s->mem, (size_t)n)) {
            answer_error(c, mem_refused(s));
            return c;
        }
        c->mem = (size_t)n;
        if (sv_buf_reserve(&c->body, (size_t)n)) c->body.p[c->body.len] = 0;
    }
    return c;
}

/* Stores body bytes within the body limit and the memory budget; past either the rest is
 * discarded and the request answered 413 or 503 at its end. */
static void body_bytes(sv_conn *c, const char *data, size_t n) {
    sv_server *s = c->srv;
    sv_conns_body_bytes(s->conns, c->slot, n);
    if (c->too_big || c->mem_refused) return;
    if (n > s->opt.max_body_bytes - c->body.len) {
        c->too_big = true;
        sv_buf_free(&c->body);
        return;
    }
    if (c->body.len + n > c->mem) { /* chunked: the budget grows with the body */
        size_t want = c->body.len + n;
        size_t step = c->mem < ((size_t)1 << 20) ? (size_t)1 << 20 : c->mem;
        if (want < c->mem + step) want = c->mem + step;
        if (want > s->opt.max_body_bytes) want = s->opt.max_body_bytes;
        if (!sv_budget_take(&s->mem, want - c->mem)) {
            c->mem_refused = true;
            sv_buf_free(&c->body);
            return;
        }
        c->mem = want;
    }
    sv_buf_add(&c->body, data, n);
    if (c->body.oom) {
        c->too_big = true;
        sv_buf_free(&c->body);
    }
}

static enum MHD_Result handle(sv_server *s, bool metrics_port, struct MHD_Connection *conn,
                              const char *url, const char *method, const char *upload_data,
                              size_t *upload_data_size, void **con_cls) {
    sv_conn *c = *con_cls;
    if (!c) {
        c = begin(s, conn, method, url, metrics_port);
        if (!c) return MHD_NO;
        *con_cls = c;
        if (!c->answered) return MHD_YES;
        /* an early answer (shutdown, framing, body too large, no memory) goes before the body
         * is read; libmicrohttpd then discards the body and closes the connection */
        sv_conns_body_done(s->conns, c->slot);
        return send_answer(c);
    }
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        if (c->chunk_bad) return MHD_YES; /* answered: nothing more is taken (see below) */
        if (s->opt.request_timeout_s > 0 &&
            sv_now_ns() - c->t_recv > (uint64_t)s->opt.request_timeout_s * 1000000000ull)
            return MHD_NO; /* a body that trickles in for too long: drop the connection */
        if (c->chunked && !metrics_port) {
            /* the framing after this chunk is judged before libmicrohttpd parses it: the last
             * byte may be held back until it has arrived; a malformed one is answered in JSON
             * (libmicrohttpd would send its HTML page), the connection suspended meanwhile */
            const char *bad = NULL;
            size_t take = sv_conns_chunk_data(s->conns, c->slot, &c->ck, upload_data, n, &bad);
            if (bad) {
                c->chunk_bad = true;
                sv_conns_body_done(s->conns, c->slot);
                MHD_suspend_connection(conn);
                sv_conns_chunk_bad(s->conns, c->slot, conn, bad);
                return MHD_YES;
            }
            *upload_data_size = n - take;
            n = take;
        } else {
            *upload_data_size = 0;
        }
        body_bytes(c, upload_data, n);
        return MHD_YES;
    }
    sv_conns_body_done(s->conns, c->slot);
    if (c->answered) return send_answer(c);
    if (c->suspended) return MHD_YES; /* not expected: MHD calls us only after a resume */
    if (c->too_big) {
        answer_error(c, sv_err(413, "the request body is larger than the %zu-byte limit "
                               "(--max-body-mb)", s->opt.max_body_bytes));
        return send_answer(c);
    }
    if (c->mem_refused) {
        answer_error(c, mem_refused(s));
        return send_answer(c);
    }
    if (SV_ROUTE_OPENAI(c->route)) return sv_openai_handle(c);
    if (dispatch(c)) return MHD_YES; /* answered later, after a resume */
    return send_answer(c);
}

enum MHD_Result sv_http_handler(void *cls, struct MHD_Connection *conn, const char *url,
                                const char *method, const char *version, const char *upload_data,
                                size_t *upload_data_size, void **con_cls) {
    return handle(cls, false, conn, url, method, upload_data, upload_data_size, con_cls);
}

enum MHD_Result sv_metrics_handler(void *cls, struct MHD_Connection *conn, const char *url,
                                   const char *method, const char *version, const char *upload_data,
                                   size_t *upload_data_size, void **con_cls) {
    return handle(cls, true, conn, url, method, upload_data, upload_data_size, con_cls);
}

void sv_http_completed(void *cls, struct MHD_Connection *connection, void **con_cls,
                       enum MHD_RequestTerminationCode toe) {
    sv_server *s = cls;
    sv_conn *c = *con_cls;
    if (!c) return;
    *con_cls = NULL;
    if (c->oa) sv_openai_completed(c, toe);
    sv_request_free(c->req);
    if (c->ver) sv_version_unref(s->repo, c->ver);
    sv_buf_free(&c->body);
    free(c->resp);
    sv_budget_give(&s->mem, c->mem);
    pthread_mutex_lock(&s->mu);
    bool draining = s->draining;
    pthread_mutex_unlock(&s->mu);
    sv_conns_request_end(s->conns, c->slot, connection,
                         toe == MHD_REQUEST_TERMINATED_COMPLETED_OK && !c->close_after &&
                             !s->opt.no_keep_alive && !draining);
    free(c);
    pthread_mutex_lock(&s->mu);
    s->inflight--;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}
