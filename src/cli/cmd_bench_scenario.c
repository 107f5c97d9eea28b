/* tandem bench --scenario: load patterns after MLPerf LoadGen, on the public API only.
 *
 *  single-stream  one query at a time (synchronous runs); latency percentiles and QPS.
 *  offline        every query issued at once through tdm_session_run_async; samples/s from
 *                 the first issue to the last completion.
 *  server         queries arrive as a Poisson process at --qps (exponential gaps from a
 *                 seeded generator, scheduled up front); each is issued asynchronously at its
 *                 arrival time (or at once when the issuer is late) and its latency runs from
 *                 the scheduled arrival, so time spent queued behind earlier queries counts.
 *                 PASS when the 99th percentile is within --latency-bound-ms; "kept up" when
 *                 the completions kept pace with the arrivals.
 *  multi-stream   every --interval-ms a query of --samples-per-query samples is issued
 *                 together; the query's latency is its slowest sample's. A query starts when
 *                 its period starts or, if the previous query overran, when that one ends.
 *
 * A query (sample) is one run of the model at batch --batch. Runs end when both --duration
 * and --min-queries are reached (--iterations N: exactly N queries). */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "cmd_bench.h"

#define DEFAULT_DURATION_S 10.0
#define DEFAULT_MIN_QUERIES 100
#define DEFAULT_MIN_QUERIES_MULTI 10

/* ---- completions of asynchronous runs ---- */

typedef struct completions {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    long done, failed;
    long wake_at;        /* a waiter wants to know when `done` reaches this (0: nobody) */
    double *done_at;     /* per sample: completion time (bench_now_s) */
    char first_error[256];
} completions;

typedef struct sample_ref {
    completions *c;
    long index;
} sample_ref;

static void on_complete(void *user, tdm_status *st, size_t n, tdm_tensor **outs) {
    sample_ref *r = user;
    completions *c = r->c;
    double t = bench_now_s();
    for (size_t i = 0; i < n; i++) tdm_tensor_free(outs[i]);
    pthread_mutex_lock(&c->mu);
    c->done_at[r->index] = t;
    c->done++;
    if (st) {
        if (!c->failed++)
            snprintf(c->first_error, sizeof c->first_error, "%s", tdm_status_message(st));
    }
    /* wake the issuing thread only when what it waits for happened: on a loaded machine a
     * wake-up per completion costs the worker its processor */
    if (c->wake_at && c->done >= c->wake_at) pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    tdm_status_free(st);
}

/* ---- progress line ---- */

typedef struct progress {
    bool on;
    bool printed;
    double last, start;
    const char *name;
} progress;

static void progress_show(progress *p, long issued, long done, long total) {
    if (!p->on) return;
    double now = bench_now_s();
    if (now - p->last < 1.0) return;
    p->last = now;
    p->printed = true;
    fprintf(stderr, "\r%s: %.0f s, %ld/%ld issued, %ld done   ", p->name, now - p->start, issued,
            total, done);
    fflush(stderr);
}

static void progress_end(progress *p) {
    if (p->printed) fputc('\n', stderr);
}

/* Waits until `target` samples completed (showing progress). */
static void wait_done(completions *c, progress *p, long issued, long target, long total) {
    pthread_mutex_lock(&c->mu);
    c->wake_at = target;
    while (c->done < target) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 250000000;
        if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&c->cv, &c->mu, &ts);
        long d = c->done;
        pthread_mutex_unlock(&c->mu);
        progress_show(p, issued, d, total);
        pthread_mutex_lock(&c->mu);
    }
    c->wake_at = 0;
    pthread_mutex_unlock(&c->mu);
}

static void sleep_until(double t) {
    struct timespec ts;
    ts.tv_sec = (time_t)t;
    ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
    if (ts.tv_nsec >= 1000000000) ts.tv_nsec = 999999999;
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
}

/* splitmix64: the arrival process is reproducible from --seed */
static double rand_unit(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) * (1.0 / 9007199254740992.0); /* [0, 1) */
}

/* ---- results ---- */

typedef struct result {
    long queries, samples, failed;
    double wall_s;          /* first issue to last completion */
    double *lat_ms;         /* per query, sorted at the end */
    double qps, samples_per_s;
    /* server */
    double scheduled_qps;
    bool kept_up, pass;
    long max_outstanding;
    /* multi-stream */
    long overruns;
    char error[256];
} result;

static long query_target(const struct bench_args *a, double per_query_s, long def_min) {
    if (a->iterations_set) return a->iterations;
    double dur = a->duration_set ? a->duration : DEFAULT_DURATION_S;
    long minq = a->min_queries > 0 ? a->min_queries : def_min;
    double by_time = per_query_s > 0 ? ceil(dur / per_query_s) : 0;
    if (by_time > (double)BENCH_MAX_RUNS) by_time = (double)BENCH_MAX_RUNS;
    return (long)by_time > minq ? (long)by_time : minq;
}

static tdm_status *issue(struct bench_ctx *c, sample_ref *ref) {
    return tdm_session_run_async(c->s, c->n_in, c->names, (const tdm_tensor *const *)c->ins,
                                 c->n_out, NULL, on_complete, ref);
}

/* Collects failures of asynchronous samples into r; 1 when some failed. */
static int take_failures(completions *cp, result *r) {
    r->failed = cp->failed;
    if (cp->failed) snprintf(r->error, sizeof r->error, "%s", cp->first_error);
    return cp->failed ? 1 : 0;
}

static int run_single_stream(struct bench_ctx *c, progress *pg, result *r) {
    const struct bench_args *a = c->a;
    double dur = a->iterations_set ? 0 : a->duration_set ? a->duration : DEFAULT_DURATION_S;
    long minq = a->iterations_set ? a->iterations
                                  : a->min_queries > 0 ? a->min_queries : DEFAULT_MIN_QUERIES;
    long cap = 1024;
    r->lat_ms = malloc((size_t)cap * sizeof *r->lat_ms);
    tdm_tensor **outs = calloc(c->n_out + 1, sizeof *outs);
    if (!r->lat_ms || !outs) {
        free(outs);
        snprintf(r->error, sizeof r->error, "out of memory");
        return 1;
    }
    double t0 = bench_now_s(), now = t0;
    while (r->queries < minq || now - t0 < dur) {
        if (a->iterations_set && r->queries >= a->iterations) break;
        if (r->queries == cap) {
            if (cap >= BENCH_MAX_RUNS) break;
            double *g = realloc(r->lat_ms, (size_t)cap * 2 * sizeof *g);
            if (!g) break;
            r->lat_ms = g;
            cap *= 2;
        }
        double q0 = bench_now_s();
        tdm_status *st = tdm_session_run(c->s, c->n_in, c->names,
                                         (const tdm_tensor *const *)c->ins, c->n_out, NULL, outs);
        now = bench_now_s();
        if (st) {
            snprintf(r->error, sizeof r->error, "%s", tdm_status_message(st));
            tdm_status_free(st);
            r->failed = 1;
            break;
        }
        for (size_t j = 0; j < c->n_out; j++) tdm_tensor_free(outs[j]), outs[j] = NULL;
        r->lat_ms[r->queries++] = (now - q0) * 1e3;
        progress_show(pg, r->queries, r->queries, minq);
    }
    free(outs);
    r->samples = r->queries;
    r->wall_s = now - t0;
    return r->failed ? 1 : 0;
}

/* offline, server and multi-stream: every sample is an asynchronous run */
static int run_async(struct bench_ctx *c, progress *pg, result *r, const char *sc) {
    const struct bench_args *a = c->a;
    bool server = !strcmp(sc, "server"), multi = !strcmp(sc, "multi-stream");
    long per_q = multi ? (a->samples_per_query > 0 ? a->samples_per_query : 8) : 1;
    double interval_s = (a->interval_ms > 0 ? a->interval_ms : 50) / 1e3;
    long nq;
    if (server) nq = query_target(a, 1.0 / a->qps, DEFAULT_MIN_QUERIES);
    else if (multi) nq = query_target(a, interval_s, DEFAULT_MIN_QUERIES_MULTI);
    else nq = query_target(a, c->warm_ms / 1e3, DEFAULT_MIN_QUERIES);
    if (nq > BENCH_MAX_RUNS / per_q) nq = BENCH_MAX_RUNS / per_q;
    long ns = nq * per_q;
    completions cp = {.done = 0};
    pthread_mutex_init(&cp.mu, NULL);
    pthread_cond_init(&cp.cv, NULL);
    cp.done_at = calloc((size_t)ns, sizeof *cp.done_at);
    double *start_at = calloc((size_t)nq, sizeof *start_at); /* scheduled (server) or issued */
    sample_ref *refs = calloc((size_t)ns, sizeof *refs);
    r->lat_ms = calloc((size_t)nq, sizeof *r->lat_ms);
    long issued = 0;
    int rc = 0;
    if (!cp.done_at || !start_at || !refs || !r->lat_ms) {
        snprintf(r->error, sizeof r->error, "out of memory for %ld queries", nq);
        rc = 1;
        goto out;
    }
    for (long k = 0; k < ns; k++) refs[k] = (sample_ref){&cp, k};
    /* arrivals start a millisecond ahead (time to schedule them); other scenarios issue their
     * first query at once, so that no latency is measured from a start still to come */
    double t0 = bench_now_s() + (server ? 0.001 : 0.0);
    if (server) { /* arrival times up front: the process does not depend on the system */
        uint64_t rng = a->in.seed ^ 0x5e77e5ull;
        double t = t0;
        for (long q = 0; q < nq; q++) {
            t += -log(1.0 - rand_unit(&rng)) / a->qps;
            start_at[q] = t;
        }
    }
    for (long q = 0; q < nq && !rc; q++) {
        if (server) {
            sleep_until(start_at[q]); /* returns at once when late */
        } else if (multi) {
            sleep_until(t0 + (double)q * interval_s);
            if (q > 0) wait_done(&cp, pg, issued, issued, ns); /* previous query finished */
            start_at[q] = bench_now_s();
        } else {
            start_at[q] = t0;
        }
        for (long j = 0; j < per_q; j++) {
            tdm_status *st = issue(c, &refs[q * per_q + j]);
            if (st) {
                snprintf(r->error, sizeof r->error, "%s", tdm_status_message(st));
                tdm_status_free(st);
                rc = 1;
                break;
            }
            issued++;
        }
        pthread_mutex_lock(&cp.mu);
        long outstanding = issued - cp.done;
        long d = cp.done;
        pthread_mutex_unlock(&cp.mu);
        if (outstanding > r->max_outstanding) r->max_outstanding = outstanding;
        progress_show(pg, issued, d, ns);
    }
    wait_done(&cp, pg, issued, issued, ns); /* the session must not be freed under them */
    if (rc) goto out;
    rc = take_failures(&cp, r);
    double first = server ? start_at[0] : t0, last = first;
    for (long q = 0; q < nq; q++) {
        double slowest = 0;
        for (long j = 0; j < per_q; j++)
            if (cp.done_at[q * per_q + j] > slowest) slowest = cp.done_at[q * per_q + j];
        if (slowest > last) last = slowest;
        r->lat_ms[q] = (slowest - start_at[q]) * 1e3;
        if (multi && r->lat_ms[q] > interval_s * 1e3) r->overruns++;
    }
    r->queries = nq;
    r->samples = ns;
    r->wall_s = last - first;
    if (server) {
        double span = start_at[nq - 1] - t0;
        r->scheduled_qps = span > 0 ? (double)nq / span : a->qps;
        double achieved = r->wall_s > 0 ? (double)nq / r->wall_s : 0;
        r->kept_up = achieved >= 0.9 * r->scheduled_qps;
    }
out:
    pthread_mutex_destroy(&cp.mu);
    pthread_cond_destroy(&cp.cv);
    free(cp.done_at);
    free(start_at);
    free(refs);
    return rc;
}

static void print_result(struct bench_ctx *c, const char *sc, result *r) {
    const struct bench_args *a = c->a;
    long n = r->queries;
    qsort(r->lat_ms, (size_t)n, sizeof *r->lat_ms, bench_cmp_double);
    double sum = 0;
    for (long q = 0; q < n; q++) sum += r->lat_ms[q];
    double p50 = bench_percentile(r->lat_ms, n, 50), p90 = bench_percentile(r->lat_ms, n, 90),
           p99 = bench_percentile(r->lat_ms, n, 99), mean = sum / (double)n;
    r->qps = r->wall_s > 0 ? (double)n / r->wall_s : 0;
    r->samples_per_s = r->wall_s > 0 ? (double)r->samples / r->wall_s : 0;
    bool server = !strcmp(sc, "server"), multi = !strcmp(sc, "multi-stream");
    r->pass = p99 <= a->latency_bound_ms && !r->failed;
    long threads = a->threads > 0 ? a->threads : sysconf(_SC_NPROCESSORS_ONLN);
    const char *devices = a->devices ? a->devices : "cpu";
    const char *mode = a->mode ? a->mode : "latency";
    if (a->json) {
        printf("{\"scenario\": \"%s\", \"model\": ", sc);
        bench_json_string(stdout, a->model);
        printf(", \"settings\": {\"devices\": ");
        bench_json_string(stdout, devices);
        printf(", \"mode\": \"%s\", \"batch\": %ld, \"threads\": %ld, \"opt_level\": %ld, "
               "\"duration_s\": %.3f, \"min_queries\": %ld, \"iterations\": %ld, "
               "\"warmup_runs\": %ld, \"seed\": %llu",
               mode, a->batch, threads, a->opt,
               a->iterations_set ? 0 : a->duration_set ? a->duration : DEFAULT_DURATION_S,
               a->min_queries, a->iterations_set ? a->iterations : 0, c->warm_runs, a->in.seed);
        if (server) printf(", \"qps\": %.4f, \"latency_bound_ms\": %.4f", a->qps, a->latency_bound_ms);
        if (multi)
            printf(", \"samples_per_query\": %ld, \"interval_ms\": %.4f",
                   a->samples_per_query > 0 ? a->samples_per_query : 8,
                   a->interval_ms > 0 ? a->interval_ms : 50);
        printf("}, \"session_create_ms\": %.3f, \"inputs\": [%s], ", c->load_ms, c->inputs_json);
        printf("\"counts\": {\"queries\": %ld, \"samples\": %ld, \"items\": %ld, \"failed\": %ld",
               r->queries, r->samples, r->samples * a->batch, r->failed);
        if (multi) printf(", \"overruns\": %ld", r->overruns);
        printf("}, \"duration_s\": %.4f, \"latency_ms\": {\"p50\": %.4f, \"p90\": %.4f, "
               "\"p99\": %.4f, \"max\": %.4f, \"min\": %.4f, \"mean\": %.4f}, "
               "\"throughput\": {\"queries_per_s\": %.4f, \"samples_per_s\": %.4f, "
               "\"items_per_s\": %.4f}",
               r->wall_s, p50, p90, p99, r->lat_ms[n - 1], r->lat_ms[0], mean, r->qps,
               r->samples_per_s, r->samples_per_s * (double)a->batch);
        if (server)
            printf(", \"server\": {\"scheduled_qps\": %.4f, \"achieved_qps\": %.4f, "
                   "\"kept_up\": %s, \"max_outstanding\": %ld, \"result\": \"%s\"}",
                   r->scheduled_qps, r->qps, r->kept_up ? "true" : "false", r->max_outstanding,
                   r->pass ? "PASS" : "FAIL");
        printf(", \"per_device\": ");
        bench_print_devices(c->s, stdout, true);
        if (r->failed) {
            printf(", \"error\": ");
            bench_json_string(stdout, r->error);
        }
        printf("}\n");
        return;
    }
    printf("scenario: %s   model: %s\n", sc, a->model);
    printf("devices: %s  mode: %s  threads: %ld  batch: %ld  opt-level: %ld  warm-up runs: %ld\n",
           devices, mode, threads, a->batch, a->opt, c->warm_runs);
    printf("inputs: %s\n", c->inputs_json);
    if (server)
        printf("target: %.2f qps (Poisson, seed %llu), latency bound %.3f ms at p99\n", a->qps,
               a->in.seed, a->latency_bound_ms);
    if (multi)
        printf("queries: %ld samples every %.3f ms\n",
               a->samples_per_query > 0 ? a->samples_per_query : 8,
               a->interval_ms > 0 ? a->interval_ms : 50);
    printf("  %-22s %ld queries, %ld samples, %ld failed, in %.3f s\n", "counts", r->queries,
           r->samples, r->failed, r->wall_s);
    printf("  %-22s p50 %.3f  p90 %.3f  p99 %.3f  max %.3f  mean %.3f\n",
           server ? "latency (ms, arrival)" : multi ? "query latency (ms)" : "latency (ms)", p50,
           p90, p99, r->lat_ms[n - 1], mean);
    printf("  %-22s %.2f queries/s, %.2f samples/s, %.2f items/s\n", "throughput", r->qps,
           r->samples_per_s, r->samples_per_s * (double)a->batch);
    if (!strcmp(sc, "offline") && !a->iterations_set &&
        r->wall_s < (a->duration_set ? a->duration : DEFAULT_DURATION_S))
        printf("  %-22s ran %.3f s, shorter than --duration: the query count came from the\n"
               "  %-22s warm-up speed (more warm-up, --min-queries or --iterations fix it)\n",
               "note", r->wall_s, "");
    if (multi) printf("  %-22s %ld of %ld queries took longer than the interval\n", "overruns",
                      r->overruns, r->queries);
    if (server) {
        printf("  %-22s achieved %.2f qps of %.2f scheduled; at most %ld queries outstanding\n",
               "server", r->qps, r->scheduled_qps, r->max_outstanding);
        if (!r->kept_up)
            printf("  %-22s the system could not keep up with %.2f qps\n", "warning", a->qps);
        printf("  %-22s %s (p99 %.3f ms %s bound %.3f ms)\n", "result", r->pass ? "PASS" : "FAIL",
               p99, p99 <= a->latency_bound_ms ? "<=" : ">", a->latency_bound_ms);
    }
    bench_print_devices(c->s, stdout, false);
    if (r->failed) printf("  %-22s %s\n", "first error", r->error);
}

int bench_scenario(struct bench_ctx *c) {
    const struct bench_args *a = c->a;
    const char *sc = a->scenario;
    if (!strcmp(sc, "server") && !(a->qps > 0)) {
        fprintf(stderr, "tandem: bench: --scenario server needs --qps\n");
        return 2;
    }
    progress pg = {a->progress || isatty(2), false, 0, bench_now_s(), sc};
    pg.last = pg.start;
    result r;
    memset(&r, 0, sizeof r);
    int rc = !strcmp(sc, "single-stream") ? run_single_stream(c, &pg, &r) : run_async(c, &pg, &r, sc);
    progress_end(&pg);
    if (r.queries > 0 && r.lat_ms) print_result(c, sc, &r);
    if (rc) fprintf(stderr, "tandem: bench: %s\n", r.error[0] ? r.error : "the scenario failed");
    free(r.lat_ms);
    return rc;
}

/* ---- per-device figures (tdm_session_monitor) ---- */

void bench_print_devices(tdm_session *s, FILE *f, bool json) {
    size_t n = tdm_session_monitor_count(s);
    if (json) fputc('[', f);
    else fprintf(f, "  %-10s %6s %10s %8s %12s %12s %8s %8s %10s %9s\n", "device", "util",
                 "busy ms", "kernels", "mem in use", "mem peak", "uploads", "downlds", "MB copied",
                 "copies/s");
    for (size_t i = 0; i < n; i++) {
        tdm_device_monitor m;
        tdm_status *st = tdm_session_monitor(s, i, &m, sizeof m);
        if (st) {
            tdm_status_free(st);
            continue;
        }
        if (json) {
            fprintf(f, "%s{\"device\": ", i ? ", " : "");
            bench_json_string(f, m.device);
            fprintf(f, ", \"utilization\": %.4f, \"busy_ms\": %.3f, \"window_ms\": %.3f, "
                       "\"kernels\": %lld, \"memory_in_use\": %lld, \"memory_peak\": %lld, "
                       "\"runs_in_flight\": %d, \"runs_queued\": %d, \"uploads\": %lld, "
                       "\"downloads\": %lld, \"bytes_uploaded\": %lld, \"bytes_downloaded\": %lld, "
                       "\"copies_per_s\": %.3f, \"copy_bytes_per_s\": %.1f}",
                    m.utilization, m.busy_ms, m.window_ms, (long long)m.kernels,
                    (long long)m.memory_in_use, (long long)m.memory_peak, m.runs_in_flight,
                    m.runs_queued, (long long)m.uploads, (long long)m.downloads,
                    (long long)m.bytes_uploaded, (long long)m.bytes_downloaded, m.copies_per_s,
                    m.copy_bytes_per_s);
        } else {
            fprintf(f, "  %-10s %5.1f%% %10.1f %8lld %12lld %12lld %8lld %8lld %10.3f %9.1f\n",
                    m.device, 100 * m.utilization, m.busy_ms, (long long)m.kernels,
                    (long long)m.memory_in_use, (long long)m.memory_peak, (long long)m.uploads,
                    (long long)m.downloads,
                    (double)(m.bytes_uploaded + m.bytes_downloaded) / 1e6, m.copies_per_s);
        }
    }
    if (json) fputc(']', f);
}
