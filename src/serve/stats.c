/* tandem serve: per model-version statistics (see stats.h). */
#include <stdlib.h>
#include <string.h>

#include "serve/stats.h"

void sv_stats_init(sv_stats *s) {
    memset(s, 0, sizeof *s);
    pthread_mutex_init(&s->mu, NULL);
}

void sv_stats_destroy(sv_stats *s) {
    pthread_mutex_destroy(&s->mu);
    free(s->batch);
    s->batch = NULL;
}

static void dur_add(sv_dur *d, uint64_t ns) {
    d->count++;
    d->ns += ns;
}

static void win_add(sv_window *w, uint64_t ns) {
    uint64_t us = ns / 1000;
    if (us > UINT32_MAX) us = UINT32_MAX;
    w->us[w->pos] = (uint32_t)us;
    w->pos = (w->pos + 1) % SV_WINDOW;
    if (w->n < SV_WINDOW) w->n++;
    w->sum_us += us;
    w->count++;
}

void sv_stats_request(sv_stats *s, bool ok, uint64_t total_ns, uint64_t queue_ns, uint64_t in_ns,
                      uint64_t infer_ns, uint64_t out_ns) {
    pthread_mutex_lock(&s->mu);
    dur_add(ok ? &s->success : &s->fail, total_ns);
    if (ok) {
        dur_add(&s->queue, queue_ns);
        dur_add(&s->in, in_ns);
        dur_add(&s->infer, infer_ns);
        dur_add(&s->out, out_ns);
        win_add(&s->win[SV_REQ], total_ns);
        win_add(&s->win[SV_QUEUE], queue_ns);
        win_add(&s->win[SV_IN], in_ns);
        win_add(&s->win[SV_INFER], infer_ns);
        win_add(&s->win[SV_OUT], out_ns);
    }
    pthread_mutex_unlock(&s->mu);
}

void sv_stats_execution(sv_stats *s, int64_t batch, uint64_t in_ns, uint64_t infer_ns,
                        uint64_t out_ns) {
    pthread_mutex_lock(&s->mu);
    s->execution_count++;
    s->inference_count += (uint64_t)batch;
    s->last_inference_ms = sv_wall_ms();
    size_t i = 0;
    while (i < s->n_batch && s->batch[i].size < batch) i++;
    if (i == s->n_batch || s->batch[i].size != batch) {
        sv_batch_stat *p = realloc(s->batch, (s->n_batch + 1) * sizeof *p);
        if (!p) {
            pthread_mutex_unlock(&s->mu);
            return;
        }
        s->batch = p;
        memmove(&p[i + 1], &p[i], (s->n_batch - i) * sizeof *p);
        memset(&p[i], 0, sizeof *p);
        p[i].size = batch;
        s->n_batch++;
    }
    dur_add(&s->batch[i].in, in_ns);
    dur_add(&s->batch[i].infer, infer_ns);
    dur_add(&s->batch[i].out, out_ns);
    pthread_mutex_unlock(&s->mu);
}

static void json_dur(sv_buf *b, const char *key, const sv_dur *d) {
    sv_buf_printf(b, "\"%s\":{\"count\":%llu,\"ns\":%llu}", key, (unsigned long long)d->count,
                  (unsigned long long)d->ns);
}

void sv_stats_json(sv_stats *s, const char *name, const char *version, sv_buf *b) {
    pthread_mutex_lock(&s->mu);
    sv_buf_str(b, "{\"name\":");
    sv_buf_json_str(b, name, strlen(name));
    sv_buf_str(b, ",\"version\":");
    sv_buf_json_str(b, version, strlen(version));
    sv_buf_printf(b, ",\"last_inference\":%llu,\"inference_count\":%llu,\"execution_count\":%llu,"
                  "\"inference_stats\":{",
                  (unsigned long long)s->last_inference_ms, (unsigned long long)s->inference_count,
                  (unsigned long long)s->execution_count);
    sv_dur zero = {0, 0};
    json_dur(b, "success", &s->success);
    sv_buf_str(b, ",");
    json_dur(b, "fail", &s->fail);
    sv_buf_str(b, ",");
    json_dur(b, "queue", &s->queue);
    sv_buf_str(b, ",");
    json_dur(b, "compute_input", &s->in);
    sv_buf_str(b, ",");
    json_dur(b, "compute_infer", &s->infer);
    sv_buf_str(b, ",");
    json_dur(b, "compute_output", &s->out);
    sv_buf_str(b, ",");
    json_dur(b, "cache_hit", &zero);
    sv_buf_str(b, ",");
    json_dur(b, "cache_miss", &zero);
    sv_buf_str(b, "},\"batch_stats\":[");
    for (size_t i = 0; i < s->n_batch; i++) {
        sv_buf_printf(b, "%s{\"batch_size\":%lld,", i ? "," : "", (long long)s->batch[i].size);
        json_dur(b, "compute_input", &s->batch[i].in);
        sv_buf_str(b, ",");
        json_dur(b, "compute_infer", &s->batch[i].infer);
        sv_buf_str(b, ",");
        json_dur(b, "compute_output", &s->batch[i].out);
        sv_buf_str(b, "}");
    }
    sv_buf_str(b, "],\"memory_usage\":[]}");
    pthread_mutex_unlock(&s->mu);
}

void sv_stats_snapshot(sv_stats *s, sv_stats *copy) {
    pthread_mutex_lock(&s->mu);
    memcpy(copy, s, sizeof *copy);
    copy->batch = NULL;
    copy->n_batch = 0;
    pthread_mutex_unlock(&s->mu);
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

double sv_window_quantile(const sv_window *w, double q) {
    if (!w->n) return 0;
    uint32_t *v = malloc(w->n * sizeof *v);
    if (!v) return 0;
    memcpy(v, w->us, w->n * sizeof *v);
    qsort(v, w->n, sizeof *v, cmp_u32);
    double pos = q * (double)(w->n - 1);
    size_t lo = (size_t)pos;
    size_t hi = lo + 1 < w->n ? lo + 1 : lo;
    double r = v[lo] + (pos - (double)lo) * ((double)v[hi] - (double)v[lo]);
    free(v);
    return r;
}
