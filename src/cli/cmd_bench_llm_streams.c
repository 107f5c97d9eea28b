/* tandem bench MODEL_DIR --llm --streams N: concurrent generation through the LLM engine
 * (include/tandem/engine.h). N requests of a P-token random prompt and G generated tokens each
 * (eos does not stop) are submitted at once, three ways: one stream alone, N streams with
 * continuous batching, and N streams served one request at a time (no_batching, the
 * llama.cpp-style baseline). Reported per way: aggregate generated tokens/s (all the streams'
 * tokens over the wall time from the submits to the last end), time to first token p50 / max
 * and inter-token latency p50 / p99 over the streams' gaps between tokens, decode tokens/s (the
 * tokens after each stream's first over the time some stream was decoding: the union of the
 * streams' first-to-last-token spans, so prompt processing before any first token is out, as in
 * llama-bench's tg), the steady decode rate (the tokens produced while every stream of the way
 * was decoding, from the last first token to the first stream's last, over that window: the
 * batched decode step alone, without the prompt chunks that the other rates share steps
 * with; 0 when the window is empty, e.g. when the prompts are long against the generated
 * tokens), and tokens per CPU second of the process (the work done, less sensitive to
 * a loaded machine); the ways take turns
 * R times and each way's median repetition (by tokens/s) is reported. Public API only. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "cmd_bench.h"
#include "cmd_generate.h"
#include "tandem/engine.h"

typedef struct stream {
    double t_submit, t_first, t_last, t_end;
    long tokens;
    double *gaps;             /* G - 1 inter-token times, s */
    long n_gaps;
    bool ended, failed;
    char error[200];
} stream;

typedef struct run_state {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    stream *st;
    long open;
} run_state;

typedef struct sink {
    run_state *rs;
    stream *s;
    long cap_gaps;
} sink;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double cpu_s(void) { /* the process's CPU time: the work, whatever the machine's load */
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void on_event(void *user, const tdm_llm_event *ev) {
    sink *k = user;
    double t = now_s();
    pthread_mutex_lock(&k->rs->mu);
    stream *s = k->s;
    if (ev->finish == TDM_LLM_FINISH_NONE) {
        if (s->tokens == 0) s->t_first = t;
        else if (s->n_gaps < k->cap_gaps) s->gaps[s->n_gaps++] = t - s->t_last;
        s->t_last = t;
        s->tokens++;
    } else {
        s->ended = true;
        s->t_end = t;
        if (ev->finish == TDM_LLM_FINISH_ERROR) {
            s->failed = true;
            snprintf(s->error, sizeof s->error, "%s", tdm_status_message(ev->status));
        }
        k->rs->open--;
        pthread_cond_broadcast(&k->rs->cv);
    }
    pthread_mutex_unlock(&k->rs->mu);
}

static uint64_t mix(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int cmp_span(const void *a, const void *b) {
    double x = ((const double *)a)[0], y = ((const double *)b)[0];
    return (x > y) - (x < y);
}

/* The length of the union of n [start, end] spans (pairs in `sp`, sorted here). */
static double span_union(double *sp, long n) {
    qsort(sp, (size_t)n, 2 * sizeof *sp, cmp_span);
    double len = 0, lo = 0, hi = 0;
    for (long i = 0; i < n; i++) {
        if (i == 0 || sp[2 * i] > hi) {
            len += hi - lo;
            lo = sp[2 * i], hi = sp[2 * i + 1];
        } else if (sp[2 * i + 1] > hi) {
            hi = sp[2 * i + 1];
        }
    }
    return n ? len + hi - lo : 0;
}

typedef struct way {
    const char *name;
    long streams;
    bool no_batching;
    double tps, ttft_p50, ttft_max, itl_p50, itl_p99, wall;
    double decode_tps, decode_s; /* tokens after the first over the union of decode spans */
    double steady_tps, steady_s; /* tokens while every stream decoded, over that window */
    double cpu;           /* CPU seconds of the process during the timed round */
    long steps;
    const char *kv_dtype; /* the engine's paged cache */
    bool profile;         /* the engine's session profiles the timed round's steps */
    char *prof;           /* then their tdm_session_explain table (tdm_string_free) */
} way;

/* One way: `n` streams on a fresh engine. Returns the exit code (0 = measured). */
static int run_way(tdm_env *env, const char *dir, long threads, long pp, long tg,
                           uint64_t seed, const char *kv_type, way *w) {
    long n = w->streams;
    tdm_llm_engine_options o;
    memset(&o, 0, sizeof o);
    o.struct_size = sizeof o;
    o.threads = (int)threads;
    o.max_batch = (int)(n > 1 ? n : 1);
    o.max_length = (int)(pp + tg + 1);
    o.block_size = 16;
    o.kv_blocks = n * ((pp + tg + 1 + 15) / 16 + 1);
    o.no_batching = w->no_batching;
    o.no_prefix_cache = true; /* random prompts share nothing anyway */
    o.kv_type = kv_type;
    o.profile = w->profile;
    tdm_llm_engine *e = NULL;
    tdm_status *st = tdm_llm_engine_create(env, dir, &o, &e);
    if (st) return cli_fail(st, "bench --llm --streams");
    int rc = 0;
    size_t vocab = tdm_llm_engine_vocab_size(e);
    run_state rs;
    pthread_mutex_init(&rs.mu, NULL);
    pthread_cond_init(&rs.cv, NULL);
    rs.st = calloc((size_t)n, sizeof *rs.st);
    sink *sinks = calloc((size_t)n, sizeof *sinks);
    int32_t *ids = calloc((size_t)pp, sizeof *ids);
    double *all_gaps = calloc((size_t)(n * tg + 1), sizeof *all_gaps);
    double *ttft = calloc((size_t)n, sizeof *ttft);
    double *spans = calloc((size_t)(2 * n), sizeof *spans);
    bool oom = !rs.st || !sinks || !ids || !all_gaps || !ttft || !spans;
    for (long i = 0; !oom && i < n; i++) {
        rs.st[i].gaps = calloc((size_t)tg + 1, sizeof(double));
        oom = !rs.st[i].gaps;
    }
    if (oom) {
        fprintf(stderr, "tandem: bench --llm --streams: out of memory\n");
        rc = 1;
    }
    /* warm-up: the same streams for 4 tokens (the runs of the step shapes the timed round
     * has, prefill and decode, plan their memory) */
    if (!rc) {
        rs.open = n;
        for (long i = 0; i < n; i++) sinks[i] = (sink){&rs, &rs.st[i], tg + 1};
        for (long i = 0; !st && i < n; i++) {
            tdm_llm_request_params p;
            memset(&p, 0, sizeof p);
            p.struct_size = sizeof p;
            p.max_tokens = 4;
            p.ignore_eos = true;
            uint64_t x = seed + 500 + (uint64_t)i, id;
            for (long j = 0; j < pp; j++) ids[j] = (int32_t)(mix(&x) % vocab);
            st = tdm_llm_engine_submit(e, ids, (size_t)pp, &p, on_event, &sinks[i], &id);
            if (st) {
                pthread_mutex_lock(&rs.mu);
                rs.open -= n - i;
                pthread_mutex_unlock(&rs.mu);
            }
        }
        pthread_mutex_lock(&rs.mu);
        while (rs.open > 0) pthread_cond_wait(&rs.cv, &rs.mu);
        pthread_mutex_unlock(&rs.mu);
        for (long i = 0; i < n; i++) {
            double *g = rs.st[i].gaps;
            memset(&rs.st[i], 0, sizeof rs.st[i]);
            rs.st[i].gaps = g;
        }
    }
    if (w->profile) tdm_session_reset_measurements(tdm_llm_engine_session(e)); /* not the warm-up */
    tdm_llm_engine_stats s0;
    tdm_llm_engine_get_stats(e, &s0);
    double t0 = now_s(), c0 = cpu_s();
    rs.open = 0;
    for (long i = 0; !rc && !st && i < n; i++) {
        tdm_llm_request_params p;
        memset(&p, 0, sizeof p);
        p.struct_size = sizeof p;
        p.max_tokens = (int)tg;
        p.ignore_eos = true;
        uint64_t x = seed + 1 + (uint64_t)i, id;
        for (long j = 0; j < pp; j++) ids[j] = (int32_t)(mix(&x) % vocab);
        sinks[i] = (sink){&rs, &rs.st[i], tg + 1};
        rs.st[i].t_submit = now_s();
        pthread_mutex_lock(&rs.mu);
        rs.open++;
        pthread_mutex_unlock(&rs.mu);
        st = tdm_llm_engine_submit(e, ids, (size_t)pp, &p, on_event, &sinks[i], &id);
        if (st) {
            pthread_mutex_lock(&rs.mu);
            rs.open--;
            pthread_mutex_unlock(&rs.mu);
        }
    }
    pthread_mutex_lock(&rs.mu);
    while (rs.open > 0) pthread_cond_wait(&rs.cv, &rs.mu);
    pthread_mutex_unlock(&rs.mu);
    double t1 = now_s(), c1 = cpu_s();
    tdm_llm_engine_stats s1;
    tdm_llm_engine_get_stats(e, &s1);
    tdm_dtype kvt = TDM_UNDEFINED;
    tdm_llm_engine_kv_cache(e, &kvt, NULL);
    w->kv_dtype = tdm_dtype_name(kvt);
    if (!st && w->profile) /* every request has ended: the engine runs nothing */
        st = tdm_session_explain(tdm_llm_engine_session(e), TDM_EXPLAIN_PROFILE, &w->prof);
    tdm_llm_engine_free(e);
    if (st) rc = cli_fail(st, "bench --llm --streams");
    if (!rc) {
        long total = 0, ng = 0, ns = 0, decoded = 0;
        for (long i = 0; i < n; i++) {
            stream *s = &rs.st[i];
            if (s->failed && !rc) {
                fprintf(stderr, "tandem: bench --llm --streams: stream %ld: %s\n", i, s->error);
                rc = 1;
            }
            total += s->tokens;
            ttft[i] = s->t_first - s->t_submit;
            for (long j = 0; j < s->n_gaps; j++) all_gaps[ng++] = s->gaps[j];
            if (s->tokens > 1) {
                spans[2 * ns] = s->t_first, spans[2 * ns + 1] = s->t_last, ns++;
                decoded += s->tokens - 1;
            }
        }
        qsort(ttft, (size_t)n, sizeof *ttft, bench_cmp_double);
        qsort(all_gaps, (size_t)ng, sizeof *all_gaps, bench_cmp_double);
        w->wall = t1 - t0;
        w->cpu = c1 - c0;
        w->tps = w->wall > 0 ? (double)total / w->wall : 0;
        w->decode_s = span_union(spans, ns);
        w->decode_tps = w->decode_s > 0 ? (double)decoded / w->decode_s : 0;
        /* the window in which every stream was decoding: [the last first token, the first
         * last token]; a stream's token times are its first plus the running sum of gaps */
        double lo = 0, hi = INFINITY;
        for (long i = 0; i < n; i++) {
            lo = rs.st[i].t_first > lo ? rs.st[i].t_first : lo;
            hi = rs.st[i].t_last < hi ? rs.st[i].t_last : hi;
        }
        long in_window = 0;
        for (long i = 0; hi > lo && i < n; i++) {
            double t = rs.st[i].t_first;
            for (long j = 0; j < rs.st[i].n_gaps; j++) {
                t += rs.st[i].gaps[j];
                in_window += t > lo && t <= hi;
            }
        }
        w->steady_s = hi > lo ? hi - lo : 0;
        w->steady_tps = w->steady_s > 0 ? (double)in_window / w->steady_s : 0;
        w->ttft_p50 = bench_percentile(ttft, n, 50) * 1e3;
        w->ttft_max = ttft[n - 1] * 1e3;
        w->itl_p50 = ng ? bench_percentile(all_gaps, ng, 50) * 1e3 : 0;
        w->itl_p99 = ng ? bench_percentile(all_gaps, ng, 99) * 1e3 : 0;
        w->steps = (long)(s1.steps_total - s0.steps_total);
    }
    for (long i = 0; rs.st && i < n; i++) free(rs.st[i].gaps);
    free(rs.st);
    free(sinks);
    free(ids);
    free(all_gaps);
    free(ttft);
    free(spans);
    pthread_mutex_destroy(&rs.mu);
    pthread_cond_destroy(&rs.cv);
    return rc;
}

int cmd_bench_llm_streams(const char *dir, long streams, long threads, long pp, long tg,
                          long reps, unsigned long long seed, bool json, const char *kv_type,
                          bool profile) {
    if (pp < 1) pp = 1;
    if (tg < 2) tg = 2;
    tdm_env_options eo = {0};
    eo.api_version = TDM_API_VERSION;
    eo.threads = (int)threads;
    tdm_env *env = NULL;
    tdm_status *st = tdm_env_create(&eo, &env);
    way ways[3];
    memset(ways, 0, sizeof ways);
    ways[0] = (way){.name = "1 stream", .streams = 1};
    ways[1] = (way){.name = "batched", .streams = streams};
    ways[2] = (way){.name = "one at a time", .streams = streams, .no_batching = true};
    int n_ways = streams > 1 ? 3 : 1;
    int profiled = n_ways > 1 ? 1 : 0; /* --profile: the batched way (1 stream alone: its own) */
    ways[profiled].profile = profile;
    if (st) return cli_fail(st, "bench --llm --streams");
    int rc = 0;
    /* the ways in turn, reps times (the load of a shared machine drifts): each way's median
     * repetition by tokens/s is reported */
    way *all = calloc((size_t)(reps * n_ways), sizeof *all);
    if (!all) {
        tdm_env_free(env);
        fprintf(stderr, "tandem: bench --llm --streams: out of memory\n");
        return 1;
    }
    for (long r = 0; !rc && r < reps; r++)
        for (int i = 0; !rc && i < n_ways; i++) {
            all[r * n_ways + i] = ways[i];
            rc =
                run_way(env, dir, threads, pp, tg, seed + (uint64_t)r * 1000, kv_type,
                        &all[r * n_ways + i]);
        }
    for (int i = 0; !rc && i < n_ways; i++) {
        /* sort way i's repetitions by tokens/s (insertion: a few) and take the middle one */
        for (long r = 1; r < reps; r++)
            for (long q = r; q > 0 && all[q * n_ways + i].tps < all[(q - 1) * n_ways + i].tps;
                 q--) {
                way t = all[q * n_ways + i];
                all[q * n_ways + i] = all[(q - 1) * n_ways + i];
                all[(q - 1) * n_ways + i] = t;
            }
        ways[i] = all[(reps / 2) * n_ways + i];
        all[(reps / 2) * n_ways + i].prof = NULL; /* kept in ways[i] */
    }
    for (long k = 0; k < reps * n_ways; k++) tdm_string_free(all[k].prof);
    free(all);
    if (rc) {
        tdm_env_free(env);
        return rc;
    }
    const char *isa = tdm_env_device_isa(env, 0) ? tdm_env_device_isa(env, 0) : "?";
    if (json) {
        printf("{\n  \"model\": ");
        bench_json_string(stdout, dir);
        printf(
            ", \"threads\": %ld, \"prompt_tokens\": %ld, \"gen_tokens\": %ld, \"streams\": %ld,\n"
            "  \"repetitions\": %ld, \"kv_type\": \"%s\", \"isa\": ",
            threads, pp, tg, streams, reps, ways[0].kv_dtype);
        bench_json_string(stdout, isa);
        printf(", \"ways\": [\n");
        for (int i = 0; i < n_ways; i++)
            printf(
                "    {\"name\": \"%s\", \"streams\": %ld, \"batching\": %s, \"tokens_per_s\": %.3f, "
                "\"decode_tokens_per_s\": %.3f, \"decode_s\": %.6f, "
                "\"steady_decode_tokens_per_s\": %.3f, \"steady_s\": %.6f, "
                "\"wall_s\": %.6f, \"cpu_s\": %.6f, \"tokens_per_cpu_s\": %.3f, \"steps\": %ld, "
                "\"ttft_ms\": {\"p50\": %.3f, \"max\": %.3f}, "
                "\"itl_ms\": {\"p50\": %.3f, \"p99\": %.3f}}%s\n",
                ways[i].name, ways[i].streams, ways[i].no_batching ? "false" : "true", ways[i].tps,
                ways[i].decode_tps, ways[i].decode_s, ways[i].steady_tps, ways[i].steady_s,
                ways[i].wall, ways[i].cpu,
                ways[i].cpu > 0 ? (double)(ways[i].streams * tg) / ways[i].cpu : 0, ways[i].steps,
                ways[i].ttft_p50, ways[i].ttft_max, ways[i].itl_p50, ways[i].itl_p99,
                i + 1 < n_ways ? "," : "");
        printf("  ],\n  \"batched_over_one\": %.3f, \"batched_over_one_at_a_time\": %.3f,\n"
               "  \"decode_batched_over_one\": %.3f, \"decode_batched_over_one_at_a_time\": %.3f,\n"
               "  \"steady_batched_over_one\": %.3f",
               n_ways > 1 && ways[0].tps > 0 ? ways[1].tps / ways[0].tps : 1.0,
               n_ways > 2 && ways[2].tps > 0 ? ways[1].tps / ways[2].tps : 1.0,
               n_ways > 1 && ways[0].decode_tps > 0 ? ways[1].decode_tps / ways[0].decode_tps : 1.0,
               n_ways > 2 && ways[2].decode_tps > 0 ? ways[1].decode_tps / ways[2].decode_tps
                                                     : 1.0,
               n_ways > 1 && ways[0].steady_tps > 0 ? ways[1].steady_tps / ways[0].steady_tps : 0.0);
        if (ways[profiled].prof) { /* --profile: the profiled way's steps */
            printf(",\n  \"profile\": {");
            bench_json_string(stdout, ways[profiled].name);
            printf(": ");
            bench_json_string(stdout, ways[profiled].prof);
            printf("}");
        }
        printf("\n}\n");
    } else {
        printf("| %-14s | %7s | %10s | %10s | %10s | %6s | %9s | %9s | %9s | %9s |\n", "way",
               "streams", "tokens/s", "decode t/s", "tok/cpu-s", "steps", "ttft p50", "ttft max",
               "itl p50", "itl p99");
        printf("|----------------|---------|------------|------------|------------|--------|"
               "-----------|-----------|-----------|-----------|\n");
        for (int i = 0; i < n_ways; i++)
            printf("| %-14s | %7ld | %10.2f | %10.2f | %10.2f | %6ld | %7.1fms | %7.1fms | "
                   "%7.2fms | %7.2fms |\n",
                   ways[i].name, ways[i].streams, ways[i].tps, ways[i].decode_tps,
                   ways[i].cpu > 0 ? (double)(ways[i].streams * tg) / ways[i].cpu : 0,
                   ways[i].steps, ways[i].ttft_p50, ways[i].ttft_max, ways[i].itl_p50,
                   ways[i].itl_p99);
        if (n_ways > 1)
            printf("prompt %ld, %ld generated tokens per stream, threads %ld, KV %s, CPU ISA %s, "
                   "median of %ld: "
                   "batched / 1 stream %.2fx (decode %.2fx), batched / one at a time %.2fx "
                   "(decode %.2fx); steady decode (every stream decoding) %.2f against %.2f tok/s: "
                   "%.2fx\n",
                   pp, tg, threads, ways[0].kv_dtype, isa, reps, ways[0].tps > 0 ? ways[1].tps / ways[0].tps : 0,
                   ways[0].decode_tps > 0 ? ways[1].decode_tps / ways[0].decode_tps : 0,
                   ways[2].tps > 0 ? ways[1].tps / ways[2].tps : 0,
                   ways[2].decode_tps > 0 ? ways[1].decode_tps / ways[2].decode_tps : 0,
                   ways[1].steady_tps, ways[0].steady_tps,
                   ways[0].steady_tps > 0 ? ways[1].steady_tps / ways[0].steady_tps : 0);
        if (ways[profiled].prof)
            printf("\n== the engine's %ld steps of the %s way (median repetition; its prompts' "
                   "steps too) ==\n%s",
                   ways[profiled].steps, ways[profiled].name, ways[profiled].prof);
    }
    for (int i = 0; i < n_ways; i++) tdm_string_free(ways[i].prof);
    tdm_env_free(env);
    return 0;
}
