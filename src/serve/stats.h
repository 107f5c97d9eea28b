/*
 * Per model-version statistics: Triton's statistics extension (JSON) and the Prometheus
 * counters, plus sliding windows of recent latencies for the p50/p90/p99 summaries.
 * Thread-safe: every function locks the object.
 */
#ifndef TDM_SERVE_STATS_H
#define TDM_SERVE_STATS_H

#include <pthread.h>

#include "serve/sv.h"

#define SV_WINDOW 2048 /* latencies kept per summary */

typedef struct sv_dur {
    uint64_t count, ns;
} sv_dur;

typedef struct sv_window {
    uint32_t us[SV_WINDOW];
    size_t n, pos;
    uint64_t sum_us, count; /* over all time, for the summary's _sum and _count */
} sv_window;

typedef enum sv_phase { SV_REQ, SV_QUEUE, SV_IN, SV_INFER, SV_OUT, SV_N_PHASES } sv_phase;

typedef struct sv_batch_stat {
    int64_t size;
    sv_dur in, infer, out;
} sv_batch_stat;

typedef struct sv_stats {
    pthread_mutex_t mu;
    uint64_t last_inference_ms;
    uint64_t inference_count; /* items (batch elements) */
    uint64_t execution_count; /* model runs */
    sv_dur success, fail, queue, in, infer, out;
    size_t n_batch;
    sv_batch_stat *batch; /* sorted by size */
    sv_window win[SV_N_PHASES];
} sv_stats;

void sv_stats_init(sv_stats *s);
void sv_stats_destroy(sv_stats *s);

/* One request ended. Durations in ns; compute phases are the batch's. */
void sv_stats_request(sv_stats *s, bool ok, uint64_t total_ns, uint64_t queue_ns, uint64_t in_ns,
                      uint64_t infer_ns, uint64_t out_ns);
/* One model execution of `batch` items. */
void sv_stats_execution(sv_stats *s, int64_t batch, uint64_t in_ns, uint64_t infer_ns,
                        uint64_t out_ns);

/* Appends {"name":..,"version":..,...} (one entry of model_stats). */
void sv_stats_json(sv_stats *s, const char *name, const char *version, sv_buf *b);

/* A copy of the counters and windows for rendering metrics without holding the lock. */
void sv_stats_snapshot(sv_stats *s, sv_stats *copy);

/* Quantile q (0..1) of a window in microseconds; 0 when empty. */
double sv_window_quantile(const sv_window *w, double q);

#endif
