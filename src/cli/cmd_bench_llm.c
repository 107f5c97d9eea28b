/* tandem bench MODEL_DIR --llm: a language model's prefill and decode speed, reported as
 * llama-bench does (pp P and tg G tokens/s, mean ± standard deviation over repetitions), plus
 * decode at a depth (tg G after a D-token context) and the peak resident memory. Prompts are
 * random token ids (seeded). Public API only. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "cli.h"
#include "cmd_bench.h"
#include "cmd_generate.h"
#include "tandem/generator.h"

static void llm_usage(FILE *f) {
    fprintf(f,
            "usage: tandem bench MODEL_DIR --llm [--prompt-tokens P] [--gen-tokens G] [--depth [D0,]D]\n"
            "                    [--repetitions R] [--warmup W] [--threads N] [--seed S] [--json]\n"
            "                    [--kv-type auto|f32|f16|int8|int4] [--profile]\n"
            "       tandem bench MODEL_DIR --llm --streams N [--prompt-tokens P] [--gen-tokens G]\n"
            "                    [--repetitions R] [--threads N] [--seed S] [--json]\n"
            "                    [--kv-type auto|f32|f16|int8|int4] [--profile]\n\n"
            "Measures a language model folder (see tandem generate) as llama-bench does: pp P is\n"
            "the prefill of a P-token prompt in one run (tokens/s); tg G is G decode steps of one\n"
            "token each from an empty context; with --depth D, also G decode steps after a D-token\n"
            "context. Each figure is the mean ± standard deviation of R repetitions after W\n"
            "untimed warm-ups. Prompts are random token ids (seeded); eos tokens do not stop.\n"
            "Prints the peak resident memory (RSS) of the process at the end.\n"
            "  --llm              this benchmark (MODEL_DIR is a model folder)\n"
            "  --prompt-tokens P  prompt length of the pp test (default 512; 0 = no pp test)\n"
            "  --gen-tokens G     decode steps of the tg tests (default 128; 0 = none)\n"
            "  --depth D          also decode G tokens after a D-token context (e.g. 1000)\n"
            "  --depth D0,D       the same after D0 and after D tokens, in turn in each repetition,\n"
            "                     and their ratio per repetition (tg @ dD / tg @ dD0: median,\n"
            "                     min-max): paired in time, so a machine whose speed drifts\n"
            "                     moves both sides of each ratio alike. With --depth, the KV bytes\n"
            "                     a step reads per position and the ratio a decoder bound by the\n"
            "                     bytes it reads (weights + rows at the runs' mean positions)\n"
            "                     would reach are printed too\n"
            "  --repetitions R    timed repetitions of each test (default 5)\n"
            "  --warmup W         untimed warm-up rounds of every test first (default 1)\n"
            "  --threads N        intra-op threads (default: all cores)\n"
            "  --seed S           seed of the random prompts (default 1)\n"
            "  --json             print one JSON object instead of the table\n"
            "  --kv-type T        KV cache type (tandem generate --kv-type): auto (the model's),\n"
            "                     f32, f16 (must be the model's), int8 (8-bit), int4 (4-bit)\n"
            "  --profile          also the decode steps' time per op type and per node (as tandem\n"
            "                     profile prints it) for each tg test, over the steps of its last\n"
            "                     repetition: where a deeper context's time goes. Its bookkeeping\n"
            "                     (clocks, each node's FLOPs and bytes) costs every step a little.\n"
            "                     With --streams: the engine's steps of the batched way's median\n"
            "                     repetition (1 stream alone with --streams 1), prompts' included\n"
            "  --device DEV       run the decoder on DEV (tandem generate --device); the KV cache\n"
            "                     stays in host memory\n"
            "  --device-memory B  memory budget (tandem generate --device-memory, e.g. test:0=25%%)\n"
            "  --residency R      weights' residency (streamed, layers, mapped, window=K)\n"
            "                     With --device, the device's peak and the bytes uploaded per\n"
            "                     decoded token (tg tests) are printed\n"
            "  --streams N        instead: N concurrent requests through the LLM engine (continuous\n"
            "                     batching over a paged KV cache; GenAI folders): aggregate tokens/s,\n"
            "                     decode tokens/s (the tokens after each first one over the time\n"
            "                     some stream was decoding), time to first token and inter-token\n"
            "                     latency of 1 stream, N streams batched, and N streams one request\n"
            "                     at a time (no batching), taking turns R times (default 3; the\n"
            "                     median is reported); the prompts default to 16 tokens here.\n"
            "                     --kv-type is the engine's paged cache there: auto (the model's),\n"
            "                     f32, f16 (also from a float32 model: half the cache bytes), or\n"
            "                     int8 / int4 (a float32 model: tandem's 8- / 4-bit rows)\n");
}

typedef struct llm_args {
    const char *dir;
    long pp, tg, depth, depth0, reps, warmup, threads, streams; /* depth0 < 0: none */
    bool pp_set, reps_set;
    unsigned long long seed;
    bool json, profile;
    const char *device, *device_memory, *residency, *kv_type;
} llm_args;

static int parse(int argc, char **argv, llm_args *a) {
    a->pp = 512, a->tg = 128, a->reps = 5, a->warmup = 1, a->seed = 1, a->depth0 = -1;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        long *dst = NULL, lo = 0;
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
            llm_usage(stdout);
            return 0;
        } else if (!strcmp(o, "--llm")) {
            continue;
        } else if (!strcmp(o, "--json")) {
            a->json = true;
            continue;
        } else if (!strcmp(o, "--profile")) {
            a->profile = true;
            continue;
        } else if (!strcmp(o, "--prompt-tokens")) {
            dst = &a->pp;
            a->pp_set = true;
        } else if (!strcmp(o, "--streams")) {
            dst = &a->streams, lo = 1;
        } else if (!strcmp(o, "--gen-tokens")) {
            dst = &a->tg;
        } else if (!strcmp(o, "--depth") && i + 1 < argc && strchr(argv[i + 1], ',')) {
            char *end, *e2;
            errno = 0;
            long d0 = strtol(argv[i + 1], &end, 10), d1 = *end == ',' ? strtol(end + 1, &e2, 10) : -1;
            if (errno || end == argv[i + 1] || *end != ',' || e2 == end + 1 || *e2 || d0 < 0 ||
                d1 <= d0 || d1 > (1L << 24)) {
                fprintf(stderr, "tandem: bench --llm: --depth '%s': expected D or D0,D with "
                        "0 <= D0 < D\n", argv[i + 1]);
                return 2;
            }
            a->depth0 = d0, a->depth = d1;
            i++;
            continue;
        } else if (!strcmp(o, "--depth")) {
            dst = &a->depth;
        } else if (!strcmp(o, "--repetitions")) {
            dst = &a->reps, lo = 1;
            a->reps_set = true;
        } else if (!strcmp(o, "--warmup")) {
            dst = &a->warmup;
        } else if (!strcmp(o, "--threads")) {
            dst = &a->threads;
        } else if (!strcmp(o, "--device") || !strcmp(o, "--device-memory") ||
                   !strcmp(o, "--residency") || !strcmp(o, "--kv-type")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "tandem: bench --llm: %s expects a value\n", o);
                return 2;
            }
            const char **sv = !strcmp(o, "--device")      ? &a->device
                              : !strcmp(o, "--residency") ? &a->residency
                              : !strcmp(o, "--kv-type")   ? &a->kv_type
                                                          : &a->device_memory;
            *sv = argv[++i];
            continue;
        } else if (!strcmp(o, "--seed")) {
            if (i + 1 >= argc) break;
            char *end;
            errno = 0;
            a->seed = strtoull(argv[++i], &end, 10);
            if (errno || *end || end == argv[i]) {
                fprintf(stderr, "tandem: bench --llm: --seed '%s': expected an integer\n", argv[i]);
                return 2;
            }
            continue;
        } else if (o[0] == '-') {
            fprintf(stderr, "tandem: bench --llm: unknown option '%s'\n", o);
            llm_usage(stderr);
            return 2;
        } else if (!a->dir) {
            a->dir = o;
            continue;
        } else {
            fprintf(stderr, "tandem: bench --llm: unexpected argument '%s'\n", o);
            return 2;
        }
        char *end;
        errno = 0;
        long v = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : -1;
        if (i + 1 >= argc || errno || *end || end == argv[i + 1] || v < lo || v > (1L << 24)) {
            fprintf(stderr, "tandem: bench --llm: %s expects an integer >= %ld\n", o, lo);
            return 2;
        }
        *dst = v;
        i++;
    }
    if (!a->dir) {
        llm_usage(stderr);
        return 2;
    }
    if (a->depth0 >= 0 && a->tg == 0) {
        fprintf(stderr, "tandem: bench --llm: --depth D0,D needs decode steps (--gen-tokens > 0)\n");
        return 2;
    }
    if (a->profile && !a->streams && a->tg == 0) {
        fprintf(stderr, "tandem: bench --llm: --profile measures the tg tests' decode steps (not "
                "with --gen-tokens 0)\n");
        return 2;
    }
    if (a->pp == 0 && a->tg == 0) {
        fprintf(stderr, "tandem: bench --llm: nothing to measure (--prompt-tokens 0 --gen-tokens 0)\n");
        return 2;
    }
    return -1;
}

#define TDM_TRY_CLI(expr)                                                                \
    do {                                                                                 \
        tdm_status *st_ = (expr);                                                        \
        if (st_) return st_;                                                             \
    } while (0)

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* the process's CPU time (all its threads): steadier than wall time on a loaded machine */
static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t mix(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void random_ids(int32_t *ids, size_t n, size_t vocab, uint64_t seed) {
    for (size_t i = 0; i < n; i++) ids[i] = (int32_t)(mix(&seed) % vocab);
}

typedef struct figure {
    double mean, sd;
    double *v;
} figure;

static void summarize(figure *f, size_t n) {
    double s = 0, q = 0;
    for (size_t i = 0; i < n; i++) s += f->v[i];
    f->mean = s / (double)n;
    for (size_t i = 0; i < n; i++) q += (f->v[i] - f->mean) * (f->v[i] - f->mean);
    f->sd = n > 1 ? sqrt(q / (double)(n - 1)) : 0;
}

/* g decode runs of one token after `ctx` context tokens (ids[0..ctx), at least 1): the last
 * context token's run, then g - 1 generated ones; tokens/s, and tokens per second of the
 * process's CPU time (*cps). profile: not NULL, the per-node times of those runs (the
 * generator profiles) as tdm_session_explain's table (caller frees). */
static tdm_status *decode_run(tdm_generator *gen, const int32_t *ids, size_t ctx, size_t g,
                              double *tps, double *cps, char **profile) {
    tdm_generator_reset(gen);
    double t0 = now_s(), c0 = cpu_s();
    size_t warm = ctx > 1 ? ctx - 1 : 0; /* a context's prefill is not timed */
    if (warm) {
        TDM_TRY_CLI(tdm_generator_append(gen, ids, warm));
        t0 = now_s();
        c0 = cpu_s();
    }
    if (profile) tdm_session_reset_measurements(tdm_generator_session(gen));
    TDM_TRY_CLI(tdm_generator_append(gen, ids + warm, 1)); /* the first decode step */
    for (size_t i = 0; i < g; i++) { /* the first samples; each later one feeds a token */
        int32_t t;
        TDM_TRY_CLI(tdm_generator_next(gen, &t));
    }
    double dt = now_s() - t0, dc = cpu_s() - c0;
    *tps = dt > 0 ? (double)g / dt : 0;
    *cps = dc > 0 ? (double)g / dc : 0;
    if (profile) {
        tdm_string_free(*profile);
        *profile = NULL;
        TDM_TRY_CLI(tdm_session_explain(tdm_generator_session(gen), TDM_EXPLAIN_PROFILE, profile));
    }
    return NULL;
}

/* Bytes uploaded so far into the devices with memory of their own, and their highest peak. */
/* Bytes uploaded to the devices other than the CPU so far (*pinned: of them, from registered
 * host memory: the streamed weights), and their highest peak. */
static int64_t uploaded(tdm_generator *gen, int64_t *peak, int64_t *pinned) {
    tdm_session *s = tdm_generator_session(gen);
    int64_t up = 0;
    for (size_t i = 0; s && i < tdm_session_monitor_count(s); i++) {
        tdm_device_monitor m;
        tdm_status *st = tdm_session_monitor(s, i, &m, sizeof m);
        if (st) {
            tdm_status_free(st);
            continue;
        }
        if (!strcmp(m.device, "cpu")) continue;
        up += m.bytes_uploaded;
        if (pinned) *pinned += m.bytes_uploaded_pinned;
        if (peak && m.memory_peak > *peak) *peak = m.memory_peak;
    }
    return up;
}

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

/* q[0..2]: the median (the mean of the middle two for an even n), least and largest of v */
static void median_min_max(const double *v, size_t n, double q[3]) {
    double *s = malloc(n * sizeof *s);
    q[0] = q[1] = q[2] = 0;
    if (!s || !n) {
        free(s);
        return;
    }
    memcpy(s, v, n * sizeof *s);
    qsort(s, n, sizeof *s, cmp_double);
    q[0] = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    q[1] = s[0], q[2] = s[n - 1];
    free(s);
}

static void print_row(const char *dir, const char *test, const figure *f) {
    printf("| %-30s | %-20s | %10.2f ± %-8.2f |\n", dir, test, f->mean, f->sd);
}

static void json_figure(const char *name, long tokens, long depth, const figure *f, size_t n,
                        bool last) {
    printf("  \"%s\": {\"tokens\": %ld, \"depth\": %ld, \"tokens_per_s\": {\"mean\": %.3f, "
           "\"stddev\": %.3f, \"samples\": [", name, tokens, depth, f->mean, f->sd);
    for (size_t i = 0; i < n; i++) printf("%s%.3f", i ? ", " : "", f->v[i]);
    printf("]}}%s\n", last ? "" : ",");
}

int cmd_bench_llm(int argc, char **argv) {
    llm_args a;
    memset(&a, 0, sizeof a);
    int rc = parse(argc, argv, &a);
    if (rc >= 0) return rc;
    if (a.streams > 0) /* cmd_bench_llm_streams.c */
        return cmd_bench_llm_streams(a.dir, a.streams, a.threads, a.pp_set ? a.pp : 16, a.tg,
                                     a.reps_set ? a.reps : 3, a.seed, a.json, a.kv_type,
                                     a.profile);
    tdm_env_options eo = {0};
    eo.api_version = TDM_API_VERSION;
    eo.threads = (int)a.threads;
    tdm_env *env = NULL;
    tdm_generator *gen = NULL;
    size_t reps = (size_t)a.reps;
    size_t longest = (size_t)(a.pp > a.depth ? a.pp : a.depth) + (size_t)a.tg + 2;
    int32_t *ids = calloc(longest + 1, sizeof *ids);
    figure pp = {0, 0, calloc(reps, sizeof(double))}, tg = {0, 0, calloc(reps, sizeof(double))},
           td = {0, 0, calloc(reps, sizeof(double))}, tgc = {0, 0, calloc(reps, sizeof(double))},
           tdc = {0, 0, calloc(reps, sizeof(double))}, tb = {0, 0, calloc(reps, sizeof(double))},
           tbc = {0, 0, calloc(reps, sizeof(double))}, ratio = {0, 0, calloc(reps, sizeof(double))};
    bool paired = a.depth0 >= 0 && a.tg && a.depth;
    char *prof[3] = {NULL, NULL, NULL}; /* --profile: tg, tg @ depth0, tg @ depth */
    tdm_status *st = !ids || !pp.v || !tg.v || !td.v || !tgc.v || !tdc.v ? NULL : tdm_env_create(&eo, &env);
    if (!ids || !pp.v || !tg.v || !td.v || !tgc.v || !tdc.v || !tb.v || !tbc.v || !ratio.v) {
        fprintf(stderr, "tandem: bench --llm: out of memory\n");
        rc = 1;
        goto done;
    }
    if (!st) {
        tdm_generator_options go;
        memset(&go, 0, sizeof go);
        go.struct_size = sizeof go;
        go.threads = (int)a.threads;
        go.max_length = (int)longest;
        go.ignore_eos = true;
        go.device = a.device;
        go.device_memory = a.device_memory;
        go.residency = a.residency;
        go.kv_type = a.kv_type;
        go.profile = a.profile;
        st = tdm_generator_create(env, a.dir, &go, &gen);
    }
    if (!st && (size_t)tdm_generator_max_length(gen) < longest - 1) {
        fprintf(stderr, "tandem: bench --llm: the model's context (%d tokens) is shorter than the "
                "tests need (%zu)\n", tdm_generator_max_length(gen), longest - 1);
        rc = 1;
        goto done;
    }
    /* warm-up (and the vocabulary size, known after a first run) */
    int32_t zero = 0;
    size_t vocab = 0;
    if (!st) st = tdm_generator_append(gen, &zero, 1);
    if (!st) vocab = tdm_generator_vocab_size(gen);
    double ignore;
    for (long w = 0; !st && w < a.warmup; w++) {
        if (a.pp) {
            random_ids(ids, (size_t)a.pp, vocab, a.seed);
            tdm_generator_reset(gen);
            st = tdm_generator_append(gen, ids, (size_t)a.pp);
        }
        if (!st && a.tg) {
            random_ids(ids, 2, vocab, a.seed);
            st = decode_run(gen, ids, 1, (size_t)(a.tg < 8 ? a.tg : 8), &ignore, &ignore, NULL);
        }
        if (!st && a.tg && a.depth) {
            random_ids(ids, (size_t)a.depth + 1, vocab, a.seed);
            st = decode_run(gen, ids, (size_t)a.depth + 1, (size_t)(a.tg < 8 ? a.tg : 8), &ignore,
                            &ignore, NULL);
        }
    }
    int64_t tg_up = 0, tg_tokens = 0, tg_pinned = 0; /* uploads of the timed tg tests */
    for (size_t r = 0; !st && r < reps; r++) {
        bool last = a.profile && r + 1 == reps; /* the profiled repetition */
        if (a.pp) {
            random_ids(ids, (size_t)a.pp, vocab, a.seed + 1 + r);
            tdm_generator_reset(gen);
            double t0 = now_s();
            st = tdm_generator_append(gen, ids, (size_t)a.pp);
            double dt = now_s() - t0;
            pp.v[r] = dt > 0 ? (double)a.pp / dt : 0;
        }
        if (!st && a.tg) {
            random_ids(ids, 1, vocab, a.seed + 100 + r);
            int64_t pin0 = 0, pin1 = 0, up0 = uploaded(gen, NULL, &pin0);
            st = decode_run(gen, ids, 1, (size_t)a.tg, &tg.v[r], &tgc.v[r], last ? &prof[0] : NULL);
            tg_up += uploaded(gen, NULL, &pin1) - up0;
            tg_pinned += pin1 - pin0;
            tg_tokens += a.tg;
        }
        if (!st && paired) { /* just before the deep one: the pair shares the machine's state */
            random_ids(ids, (size_t)a.depth0 + 1, vocab, a.seed + 300 + r);
            st = decode_run(gen, ids, (size_t)a.depth0 + 1, (size_t)a.tg, &tb.v[r], &tbc.v[r],
                            last ? &prof[1] : NULL);
        }
        if (!st && a.tg && a.depth) {
            random_ids(ids, (size_t)a.depth + 1, vocab, a.seed + 200 + r);
            st = decode_run(gen, ids, (size_t)a.depth + 1, (size_t)a.tg, &td.v[r], &tdc.v[r],
                            last ? &prof[2] : NULL);
            if (!st && paired) ratio.v[r] = tb.v[r] > 0 ? td.v[r] / tb.v[r] : 0;
        }
    }
    if (st) {
        rc = cli_fail(st, "bench --llm");
        goto done;
    }
    int64_t dev_peak = 0;
    uploaded(gen, &dev_peak, NULL);
    double up_tok = tg_tokens ? (double)tg_up / (double)tg_tokens : 0;
    summarize(&pp, reps);
    summarize(&tg, reps);
    summarize(&td, reps);
    summarize(&tgc, reps);
    summarize(&tdc, reps);
    summarize(&tb, reps);
    summarize(&tbc, reps);
    double rq[3] = {0, 0, 0}; /* the paired ratios' median, min, max */
    if (paired) median_min_max(ratio.v, reps, rq);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double rss_mib = (double)ru.ru_maxrss / 1024.0; /* Linux: KiB */
    int64_t wbytes = tdm_generator_weight_bytes_per_token(gen);
    /* the KV rows a step reads, at the mean position of a tg run after `depth` tokens; and the
     * depth ratio a decoder bound by the bytes it reads (weights + rows) would give */
    int64_t kvpos = tdm_generator_kv_bytes_per_position(gen);
    long d0 = paired ? a.depth0 : 0;
    double kv_at = (double)kvpos * ((double)a.depth + (double)(a.tg + 1) / 2);
    double kv_at0 = (double)kvpos * ((double)d0 + (double)(a.tg + 1) / 2);
    double bytes_bound = wbytes > 0 ? ((double)wbytes + kv_at0) / ((double)wbytes + kv_at) : 0;
    if (a.json) {
        printf("{\n  \"model\": ");
        bench_json_string(stdout, a.dir);
        printf(", \"isa\": ");
        bench_json_string(stdout, tdm_env_device_isa(env, 0) ? tdm_env_device_isa(env, 0) : "");
        printf(", \"threads\": %ld, \"repetitions\": %zu, \"kv_cache\": \"%s\", \"kv_type\": \"%s\",\n",
               a.threads, reps, tdm_generator_form(gen), tdm_generator_kv_type(gen));
        if (a.pp) json_figure("pp", a.pp, 0, &pp, reps, false);
        if (a.tg) json_figure("tg", a.tg, 0, &tg, reps, false);
        if (a.tg && a.depth) json_figure("tg_depth", a.tg, a.depth, &td, reps, false);
        if (paired) {
            json_figure("tg_depth0", a.tg, a.depth0, &tb, reps, false);
            printf("  \"tg_depth_ratio\": {\"depths\": [%ld, %ld], \"median\": %.4f, \"min\": %.4f, "
                   "\"max\": %.4f, \"samples\": [", a.depth0, a.depth, rq[0], rq[1], rq[2]);
            for (size_t i = 0; i < reps; i++) printf("%s%.4f", i ? ", " : "", ratio.v[i]);
            printf("]},\n");
        }
        /* tokens per second of the process's CPU time */
        if (a.tg) json_figure("tg_cpu", a.tg, 0, &tgc, reps, false);
        if (a.tg && a.depth) json_figure("tg_depth_cpu", a.tg, a.depth, &tdc, reps, false);
        if (paired) json_figure("tg_depth0_cpu", a.tg, a.depth0, &tbc, reps, false);
        if (a.device)
            printf("  \"device\": \"%s\", \"device_peak_bytes\": %lld, \"bytes_uploaded_per_token\": "
                   "%.1f, \"bytes_uploaded_pinned_per_token\": %.1f,\n", a.device, (long long)dev_peak,
                   up_tok, tg_tokens ? (double)tg_pinned / (double)tg_tokens : 0.0);
        /* the weights a decode step reads (packed forms as held), and at the tg rate */
        printf("  \"weight_bytes_per_token\": %lld,", (long long)wbytes);
        if (a.tg) printf(" \"tg_weight_gbps\": %.3f,", (double)wbytes * tg.mean / 1e9);
        printf(" \"kv_bytes_per_position\": %lld,", (long long)kvpos);
        if (a.tg && a.depth) printf(" \"tg_depth_bytes_bound\": %.4f,", bytes_bound);
        if (a.profile) { /* the tables as strings, by test */
            static const char *const key[3] = {"tg", "tg_depth0", "tg_depth"};
            printf("\n  \"profile\": {");
            for (int k = 0, n = 0; k < 3; k++) {
                if (!prof[k]) continue;
                printf("%s\"%s\": ", n++ ? ", " : "", key[k]);
                bench_json_string(stdout, prof[k]);
            }
            printf("},");
        }
        printf("\n  \"peak_rss_mib\": %.1f\n}\n", rss_mib);
    } else {
        char test[64];
        printf("| %-30s | %-20s | %21s |\n", "model", "test", "t/s");
        printf("| %.30s | %.20s | %.21s |\n", "------------------------------", "--------------------",
               "---------------------");
        if (a.pp) {
            snprintf(test, sizeof test, "pp%ld", a.pp);
            print_row(a.dir, test, &pp);
        }
        if (a.tg) {
            snprintf(test, sizeof test, "tg%ld", a.tg);
            print_row(a.dir, test, &tg);
        }
        if (paired) {
            snprintf(test, sizeof test, "tg%ld @ d%ld", a.tg, a.depth0);
            print_row(a.dir, test, &tb);
        }
        if (a.tg && a.depth) {
            snprintf(test, sizeof test, "tg%ld @ d%ld", a.tg, a.depth);
            print_row(a.dir, test, &td);
        }
        if (a.tg) {
            snprintf(test, sizeof test, "tg%ld (cpu)", a.tg);
            print_row(a.dir, test, &tgc);
        }
        if (paired) {
            snprintf(test, sizeof test, "tg%ld @ d%ld (cpu)", a.tg, a.depth0);
            print_row(a.dir, test, &tbc);
        }
        if (a.tg && a.depth) {
            snprintf(test, sizeof test, "tg%ld @ d%ld (cpu)", a.tg, a.depth);
            print_row(a.dir, test, &tdc);
        }
        if (paired)
            printf("tg%ld @ d%ld / tg%ld @ d%ld, paired in each repetition: median %.3f (%.3f-%.3f)\n",
                   a.tg, a.depth, a.tg, a.depth0, rq[0], rq[1], rq[2]);
        printf("threads %ld, %zu repetitions, KV cache: %s %s; peak RSS %.1f MiB; CPU ISA %s\n"
               "(cpu: tokens per second of the process's CPU time)\n", a.threads,
               reps, tdm_generator_form(gen), tdm_generator_kv_type(gen), rss_mib,
               tdm_env_device_isa(env, 0) ? tdm_env_device_isa(env, 0) : "?");
        if (wbytes > 0 && a.tg)
            printf("weights read per decoded token %.2f MB (the packed forms as held): %.2f GB/s at "
                   "tg%ld's mean\n", (double)wbytes / 1e6, (double)wbytes * tg.mean / 1e9, a.tg);
        if (wbytes > 0 && a.tg && a.depth)
            printf("KV cache read per decoded token %.2f MB at d%ld (%lld bytes a position): a decoder "
                   "bound by the bytes it reads would run tg%ld @ d%ld at %.3f of tg%ld @ d%ld\n",
                   kv_at / 1e6, a.depth, (long long)kvpos, a.tg, a.depth, bytes_bound, a.tg, d0);
        if (a.device)
            printf("%s: peak %.2f MiB; uploaded %.3f MiB per decoded token (tg tests)\n", a.device,
                   (double)dev_peak / 1048576, up_tok / 1048576);
        for (int k = 0; k < 3; k++) {
            if (!prof[k]) continue;
            printf("\n== the %ld decode steps of tg%ld", a.tg, a.tg);
            if (k) printf(" @ d%ld", k == 1 ? a.depth0 : a.depth);
            printf(", last repetition ==\n%s", prof[k]);
        }
    }
    rc = 0;
done:
    for (int k = 0; k < 3; k++) tdm_string_free(prof[k]);
    tdm_generator_free(gen);
    tdm_env_free(env);
    free(ids);
    free(pp.v);
    free(tg.v);
    free(td.v);
    free(tgc.v);
    free(tdc.v);
    free(tb.v);
    free(tbc.v);
    free(ratio.v);
    return rc;
}
