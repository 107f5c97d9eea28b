/* tandem serve: a language model of the repository (engine and tokenizer) and its metrics
 * (see openai.h). */
#define _GNU_SOURCE /* POLLRDHUP */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "serve/openai.h"
#include "serve/repo.h"
#include "serve/sched.h"

/* ---- loading ---------------------------------------------------------------------------------- */

/* An integer parameter within [lo, hi]; absent = untouched. */
static sv_error *param_int(const sv_model_config *cfg, const char *key, int64_t lo, int64_t hi,
                           int64_t *out) {
    const char *p = sv_config_param(cfg, key);
    if (!p) return NULL;
    int64_t v;
    if (!sv_parse_i64(p, &v) || v < lo || v > hi)
        return sv_err(400, "model '%s': parameter %s '%s' must be an integer in [%lld, %lld]",
                      cfg->name, key, p, (long long)lo, (long long)hi);
    *out = v;
    return NULL;
}

static sv_error *param_bool(const sv_model_config *cfg, const char *key, bool *out) {
    const char *p = sv_config_param(cfg, key);
    if (!p) return NULL;
    if (!strcmp(p, "true") || !strcmp(p, "1")) *out = true;
    else if (!strcmp(p, "false") || !strcmp(p, "0")) *out = false;
    else return sv_err(400, "model '%s': parameter %s '%s' must be true or false", cfg->name, key, p);
    return NULL;
}

/* Whether the peer of a socket has gone (as http.c's client_gone: FIN, hang-up or error; bytes
 * waiting to be read are left alone). */
static bool fd_gone(int fd) {
    struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) != 1 || (p.revents & POLLNVAL)) return false;
    if (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) return true;
    if (p.revents & POLLIN) {
        char b;
        ssize_t k = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
        return k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
    }
    return false;
}

static void *sweeper_main(void *arg) {
    sv_llm *m = arg;
    uint64_t ids[256];
    pthread_mutex_lock(&m->mu);
    while (!m->sweeper_stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += SV_SWEEP_MS * 1000000L;
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&m->cv, &m->mu, &ts);
        int n = 0;
        for (sv_llm_link *l = m->reqs.next; l != &m->reqs && n < 256; l = l->next)
            if (l->live && l->fd >= 0 && fd_gone(l->fd)) {
                l->fd = -1;
                ids[n++] = l->id;
            }
        m->gone += (uint64_t)n;
        pthread_mutex_unlock(&m->mu);
        for (int i = 0; i < n; i++) tdm_llm_engine_cancel(m->engine, ids[i]);
        pthread_mutex_lock(&m->mu);
    }
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

sv_error *sv_llm_create(tdm_env *env, const sv_model_config *cfg, const char *name, const char *dir,
                        int threads, sv_llm **out) {
    tdm_llm_engine_options o;
    memset(&o, 0, sizeof o);
    o.struct_size = sizeof o;
    o.threads = threads;
    int64_t v, mb = 0, waiting = 1024;
    sv_error *e = NULL;
    v = o.threads;
    if (!e && !(e = param_int(cfg, "intra_op_thread_count", 0, 1024, &v))) o.threads = (int)v;
    if (!e && !(e = param_int(cfg, "threads", 0, 1024, &v))) o.threads = (int)v;
    v = 0;
    if (!e && !(e = param_int(cfg, "max_batch", 0, 4096, &v))) o.max_batch = (int)v;
    v = 0;
    if (!e && !(e = param_int(cfg, "max_step_tokens", 0, 1 << 20, &v))) o.max_step_tokens = (int)v;
    v = 0;
    if (!e && !(e = param_int(cfg, "block_size", 0, 4096, &v))) o.block_size = (int)v;
    v = 0;
    if (!e && !(e = param_int(cfg, "max_length", 0, 1 << 24, &v))) o.max_length = (int)v;
    if (!e) e = param_int(cfg, "kv_blocks", 0, (int64_t)1 << 32, &o.kv_blocks);
    if (!e) e = param_int(cfg, "kv_memory_mb", 0, (int64_t)1 << 24, &mb);
    if (!e) e = param_int(cfg, "max_waiting", 1, 1 << 20, &waiting);
    if (!e) e = param_bool(cfg, "no_batching", &o.no_batching);
    if (!e) e = param_bool(cfg, "no_prefix_cache", &o.no_prefix_cache);
    if (e) return e;
    /* checked by the engine (auto, f32, f16), its error a 400 naming the values */
    o.kv_type = sv_config_param(cfg, "kv_cache_dtype");
    o.kv_bytes = (size_t)mb << 20;
    sv_llm *m = calloc(1, sizeof *m);
    if (!m || !(m->name = sv_strdup(name))) {
        free(m);
        return sv_err(500, "out of memory");
    }
    m->max_waiting = (int)waiting;
    m->reqs.prev = m->reqs.next = &m->reqs;
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->cv, NULL);
    tdm_status *st = tdm_tokenizer_load(dir, &m->tok);
    if (st) e = sv_err_status(400, st, "the language model's tokenizer");
    if (!e && (st = tdm_llm_engine_create(env, dir, &o, &m->engine)))
        e = sv_err_status(400, st, "the language model's engine");
    if (e) {
        sv_llm_free(m);
        return e;
    }
    if (pthread_create(&m->sweeper, NULL, sweeper_main, m)) {
        sv_llm_free(m);
        return sv_err(500, "cannot start a thread");
    }
    m->sweeper_started = true;
    m->max_length = tdm_llm_engine_max_length(m->engine);
    m->created = (int64_t)(sv_wall_ms() / 1000);
    m->eos = tdm_tokenizer_special_id(m->tok, "eos");
    *out = m;
    return NULL;
}

void sv_llm_cancel_all(sv_llm *m) {
    if (!m) return;
    /* the ids are collected first: the engine is not called with the model's lock held */
    pthread_mutex_lock(&m->mu);
    size_t n = 0;
    for (sv_llm_link *l = m->reqs.next; l != &m->reqs; l = l->next) n++;
    uint64_t *ids = malloc((n ? n : 1) * sizeof *ids);
    size_t k = 0;
    for (sv_llm_link *l = m->reqs.next; ids && l != &m->reqs; l = l->next)
        if (l->live) ids[k++] = l->id;
    pthread_mutex_unlock(&m->mu);
    for (size_t i = 0; i < k; i++) tdm_llm_engine_cancel(m->engine, ids[i]);
    free(ids);
}

void sv_llm_drain(sv_llm *m) {
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    m->closed = true;
    pthread_mutex_unlock(&m->mu);
    sv_llm_cancel_all(m);
    pthread_mutex_lock(&m->mu);
    while (m->active > 0) pthread_cond_wait(&m->cv, &m->mu);
    pthread_mutex_unlock(&m->mu);
}

void sv_llm_free(sv_llm *m) {
    if (!m) return;
    if (m->sweeper_started) {
        pthread_mutex_lock(&m->mu);
        m->sweeper_stop = true;
        pthread_cond_broadcast(&m->cv);
        pthread_mutex_unlock(&m->mu);
        pthread_join(m->sweeper, NULL);
    }
    tdm_llm_engine_free(m->engine); /* delivers the end events of what is left */
    tdm_tokenizer_free(m->tok);
    pthread_mutex_destroy(&m->mu);
    pthread_cond_destroy(&m->cv);
    free(m->name);
    free(m);
}

/* ---- metrics ---------------------------------------------------------------------------------- */

static const double bounds[SV_LLM_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1,
                                              0.15, 0.25, 0.5, 1, 2.5, 5, 10, 30};

void sv_hist_add(sv_hist *h, double s) {
    int i = 0;
    while (i < SV_LLM_BUCKETS && s > bounds[i]) i++;
    h->count[i]++;
    h->sum += s;
    h->n++;
}

static void model_label(sv_buf *b, const char *metric, const sv_version *v, const char *more) {
    sv_buf_printf(b, "%s{model=", metric);
    sv_buf_json_str(b, v->model_name, strlen(v->model_name)); /* names are [A-Za-z0-9_.-] */
    sv_buf_printf(b, ",version=\"%s\"%s%s} ", v->vstr, more ? "," : "", more ? more : "");
}

static void header(sv_buf *b, const char *name, const char *type, const char *help) {
    sv_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void hist(sv_buf *b, const char *name, const sv_version *v, const sv_hist *h) {
    uint64_t cum = 0;
    char le[48], metric[128];
    snprintf(metric, sizeof metric, "%s_bucket", name);
    for (int i = 0; i <= SV_LLM_BUCKETS; i++) {
        cum += h->count[i];
        if (i < SV_LLM_BUCKETS) snprintf(le, sizeof le, "le=\"%g\"", bounds[i]);
        else snprintf(le, sizeof le, "le=\"+Inf\"");
        model_label(b, metric, v, le);
        sv_buf_printf(b, "%llu\n", (unsigned long long)cum);
    }
    snprintf(metric, sizeof metric, "%s_sum", name);
    model_label(b, metric, v, NULL);
    sv_buf_printf(b, "%.6f\n", h->sum);
    snprintf(metric, sizeof metric, "%s_count", name);
    model_label(b, metric, v, NULL);
    sv_buf_printf(b, "%llu\n", (unsigned long long)h->n);
}

void sv_llm_metrics(sv_version **v, int n, sv_buf *b) {
    typedef struct snap {
        tdm_llm_engine_stats st;
        tdm_dtype kv_dtype;
        int64_t kv_block_bytes;
        sv_hist ttft, itl;
        uint64_t finished[5];
        uint64_t gone;
    } snap;
    snap *s = calloc((size_t)n + 1, sizeof *s);
    if (!s) return;
    for (int i = 0; i < n; i++) {
        sv_llm *m = v[i]->llm;
        tdm_llm_engine_get_stats(m->engine, &s[i].st);
        tdm_llm_engine_kv_cache(m->engine, &s[i].kv_dtype, &s[i].kv_block_bytes);
        pthread_mutex_lock(&m->mu);
        s[i].ttft = m->ttft;
        s[i].itl = m->itl;
        memcpy(s[i].finished, m->finished, sizeof m->finished);
        s[i].gone = m->gone;
        pthread_mutex_unlock(&m->mu);
    }
    static const struct {
        const char *name, *type, *help;
    } fam[] = {
        {"tandem_llm_prompt_tokens_total", "counter", "Prompt tokens of the language model's requests"},
        {"tandem_llm_generation_tokens_total", "counter", "Tokens the language model generated"},
        {"tandem_llm_prefix_cache_hit_tokens_total", "counter",
         "Prompt tokens whose KV blocks came from the prefix cache"},
        {"tandem_llm_preemptions_total", "counter",
         "Running sequences preempted (blocks freed, recomputed later) because the KV pool was full"},
        {"tandem_llm_steps_total", "counter", "Model runs of the engine (one per step of the batch)"},
        {"tandem_llm_requests_running", "gauge", "Sequences in the running batch"},
        {"tandem_llm_requests_waiting", "gauge", "Sequences waiting (queued or preempted)"},
        {"tandem_llm_kv_blocks", "gauge",
         "KV cache blocks of the pool: used (held by sequences or the prefix cache; cached: of "
         "those, held only by the prefix cache), free"},
        {"tandem_llm_kv_cache_bytes", "gauge",
         "Bytes of the KV cache pool (blocks times the bytes of a block, which follow the "
         "pool's element type, kv_cache_dtype): used, total"},
        {"tandem_llm_client_gone_total", "counter",
         "Requests cancelled because their client went away while the connection waited (the "
         "others are noticed when a chunk cannot be sent)"},
        {"tandem_llm_requests_total", "counter",
         "Requests answered, by finish reason (stop, length, cancelled: the client went away or "
         "the model was unloaded, error)"},
    };
    for (size_t f = 0; f < sizeof fam / sizeof fam[0]; f++) {
        header(b, fam[f].name, fam[f].type, fam[f].help);
        for (int i = 0; i < n; i++) {
            const tdm_llm_engine_stats *st = &s[i].st;
            switch (f) {
            case 0: model_label(b, fam[f].name, v[i], NULL); sv_buf_printf(b, "%lld\n", (long long)st->prompt_tokens_total); break;
            case 1: model_label(b, fam[f].name, v[i], NULL); sv_buf_printf(b, "%lld\n", (long long)st->generated_tokens_total); break;
            case 2: model_label(b, fam[f].name, v[i], NULL); sv_buf_printf(b, "%lld\n", (long long)st->prefix_hit_tokens_total); break;
            case 3: model_label(b, fam[f].name, v[i], NULL); sv_buf_printf(b, "%lld\n", (long long)st->preemptions_total); break;
            case 4: model_label(b, fam[f].name, v[i], NULL); sv_buf_printf(b, "%lld\n", (long long)st->steps_total); break;
            case 5: model_label(b, fam[f].name, v[i], NULL); sv_buf_printf(b, "%d\n", st->running); break;
            case 6: model_label(b, fam[f].name, v[i], NULL); sv_buf_printf(b, "%d\n", st->waiting); break;
            case 7:
                model_label(b, fam[f].name, v[i], "state=\"used\"");
                sv_buf_printf(b, "%lld\n", (long long)st->kv_blocks_used);
                model_label(b, fam[f].name, v[i], "state=\"cached\"");
                sv_buf_printf(b, "%lld\n", (long long)st->kv_blocks_cached);
                model_label(b, fam[f].name, v[i], "state=\"free\"");
                sv_buf_printf(b, "%lld\n", (long long)(st->kv_blocks_total - st->kv_blocks_used));
                model_label(b, fam[f].name, v[i], "state=\"total\"");
                sv_buf_printf(b, "%lld\n", (long long)st->kv_blocks_total);
                break;
            case 8: {
                char l[64];
                const char *dt = tdm_dtype_name(s[i].kv_dtype);
                snprintf(l, sizeof l, "dtype=\"%s\",state=\"used\"", dt);
                model_label(b, fam[f].name, v[i], l);
                sv_buf_printf(b, "%lld\n", (long long)(st->kv_blocks_used * s[i].kv_block_bytes));
                snprintf(l, sizeof l, "dtype=\"%s\",state=\"total\"", dt);
                model_label(b, fam[f].name, v[i], l);
                sv_buf_printf(b, "%lld\n", (long long)(st->kv_blocks_total * s[i].kv_block_bytes));
                break;
            }
            case 9: model_label(b, fam[f].name, v[i], NULL); sv_buf_printf(b, "%llu\n", (unsigned long long)s[i].gone); break;
            default: {
                static const char *const why[5] = {NULL, "stop", "length", "cancelled", "error"};
                for (int k = 1; k < 5; k++) {
                    char l[32];
                    snprintf(l, sizeof l, "finish=\"%s\"", why[k]);
                    model_label(b, fam[f].name, v[i], l);
                    sv_buf_printf(b, "%llu\n", (unsigned long long)s[i].finished[k]);
                }
            }
            }
        }
    }
    header(b, "tandem_llm_time_to_first_token_seconds", "histogram",
           "Time from a request's arrival to its first generated token");
    for (int i = 0; i < n; i++) hist(b, "tandem_llm_time_to_first_token_seconds", v[i], &s[i].ttft);
    header(b, "tandem_llm_inter_token_latency_seconds", "histogram",
           "Time between consecutive generated tokens of a request");
    for (int i = 0; i < n; i++) hist(b, "tandem_llm_inter_token_latency_seconds", v[i], &s[i].itl);
    free(s);
}
