/* tandem bench: latency and throughput of a model on random inputs; with --scenario, the
 * LoadGen-like scenarios of cmd_bench_scenario.c. Public API only. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "cmd_bench.h"
#include "cmd_generate.h"

#define MAX_INPUTS BENCH_MAX_INPUTS
#define MAX_RUNS BENCH_MAX_RUNS

static void bench_usage(FILE *f) {
    fprintf(f,
            "usage: tandem bench MODEL [--devices LIST] [--threads N] [--batch N] [--warmup N|Ss]\n"
            "                    [--iterations N | --duration S] [--input NAME=FILE.npy]...\n"
            "                    [--shape NAME:d0,d1,...] [--seed N] [--int-range LO,HI]\n"
            "                    [--opt-level N] [--json] [--mode latency|throughput|pipeline]\n"
            "                    [--cuts LIST] [--micro-batch N] [--placement P] [--affinity RULES]\n"
            "                    [--precision P] [--trace FILE] [--scenario NAME [scenario options]]\n"
            "       tandem bench MODEL_DIR --llm [LLM options]  (see tandem bench --llm --help)\n\n"
            "Runs MODEL on its inputs (from .npy files, the others random): warm-up runs, then\n"
            "timed synchronous runs. Prints the inputs (which are random, and their values), the\n"
            "latency (p50, p90, p99, mean, min, max in ms), the throughput (items/s = batch *\n"
            "runs/s) and per-device figures (utilisation, memory, copies).\n"
            "  --devices LIST     comma-separated devices in order of preference (default cpu)\n"
            "  --threads N        intra-op threads (default: all cores)\n"
            "  --batch N          size of every input's dynamic leading dimension (default 1);\n"
            "                     other dynamic dims are 1 unless --shape gives them\n"
            "  --input NAME=FILE  input NAME from a .npy file instead of random data (repeatable)\n"
            "  --shape NAME:DIMS  full shape of random input NAME (repeatable)\n"
            "  --warmup N|Ss      untimed runs first (default 3); with an s suffix (2s, 0.5s)\n"
            "                     warm up for that many seconds\n"
            "  --iterations N     timed runs (default 10)\n"
            "  --duration S       time runs until S seconds have passed (at least one run)\n"
            "  --opt-level N      0 = no graph passes, 1 = default, 2 = all\n"
            "  --mode M           latency (one plan over the devices) or throughput (a replica per\n"
            "                     device; batches split by measured speed, or a pipeline when\n"
            "                     the cost model predicts it faster) or pipeline (the model cut\n"
            "                     into stages, one per device, micro-batches flowing through)\n"
            "  --cuts LIST        --mode pipeline: where stages 2, 3, ... start (node names or\n"
            "                     #positions, comma-separated; default: balanced by the cost model)\n"
            "  --micro-batch N    --mode pipeline: rows per micro-batch (default: automatic)\n"
            "  --placement P      auto (default: cost model), first, or a device name\n"
            "  --affinity RULES   \"Op=DEVICE;/regex/=DEVICE;#a-b=DEVICE\" (see tandem plan)\n"
            "  --device-memory B  memory budgets DEV=SIZE[,DEV=SIZE] (see tandem plan)\n"
            "  --residency LIST   mapped, streamed, layers, window=K (see tandem run --help);\n"
            "                     with budgets the MiB uploaded per run and the peak are printed\n"
            "  --free-dims LIST   NAME=SIZE[,NAME=SIZE]: the inputs' symbolic dimensions fixed\n"
            "                     before planning (as ONNX Runtime's free-dimension overrides)\n"
            "  --precision P      arithmetic: fp32 (default), tf32, fp16, bf16 (cpu: fp32,\n"
            "                     or bf16 with AVX512_BF16 / AMX)\n"
            "  --trace FILE       write a Chrome trace (Perfetto) of the timed runs\n"
            "  --seed N           seed of the random inputs (default 1; input i uses N + i)\n"
            "  --int-range LO,HI  random integers in [LO, HI] (default: [0, 1] for int32/int64,\n"
            "                     [0, 7] for the other integers, [0, 255] for uint8); random\n"
            "                     floats are in [-1, 1)\n"
            "  --json             print one JSON object instead of text\n"
            "  --llm              MODEL_DIR is a language model folder: prefill and decode tokens/s\n"
            "                     as llama-bench reports them (tandem bench --llm --help)\n"
            "\nScenarios (after MLPerf LoadGen; a query is one run of batch --batch):\n"
            "  --scenario single-stream  one query at a time: p50/p90/p99/max latency, QPS\n"
            "  --scenario offline        all queries issued at once (asynchronous runs):\n"
            "                            samples per second\n"
            "  --scenario server         Poisson arrivals at --qps (seeded by --seed); latency\n"
            "                            from the scheduled arrival; PASS if p99 <= bound\n"
            "  --scenario multi-stream   every --interval-ms, --samples-per-query samples\n"
            "                            issued together; a query's latency is its slowest\n"
            "                            sample's; p99\n"
            "  --duration S          run for at least S seconds (default 10)\n"
            "  --min-queries N       and at least N queries (default 100; multi-stream 10)\n"
            "  --iterations N        exactly N queries, no minimum duration\n"
            "  --qps X               server: mean arrival rate (required)\n"
            "  --latency-bound-ms X  server: bound on the 99th percentile (default 100)\n"
            "  --samples-per-query N multi-stream: samples per query (default 8)\n"
            "  --interval-ms X       multi-stream: query period (default 50)\n"
            "  --progress            a progress line on stderr (default: when it is a TTY)\n"
            "The summary has counts, latencies, throughput and, per device, utilisation, memory\n"
            "in use and peak, runs in flight, copies and bytes copied (tdm_session_monitor).\n");
}

double bench_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Strict integer option: all characters used, lo <= v <= hi. */
static bool parse_long(const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

int bench_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_percentile(const double *v, long n, double p) {
    if (n == 1) return v[0];
    double pos = p / 100.0 * (double)(n - 1);
    long lo = (long)pos;
    if (lo >= n - 1) return v[n - 1];
    double frac = pos - (double)lo;
    return v[lo] + (v[lo + 1] - v[lo]) * frac;
}

void bench_json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\') fprintf(f, "\\%c", *c);
        else if (*c == '\n') fputs("\\n", f);
        else if (*c == '\t') fputs("\\t", f);
        else if (*c < 0x20) fprintf(f, "\\u%04x", *c);
        else fputc(*c, f);
    }
    fputc('"', f);
}

/* Strict floating option in (0, hi]. */
static bool parse_pos_double(const char *s, double hi, double *out) {
    char *end;
    errno = 0;
    double d = strtod(s, &end);
    if (errno || end == s || *end || !(d > 0) || d > hi) return false;
    *out = d;
    return true;
}

/* Scenario options; returns 1 when `o` was one (i advanced), 0 when not, 2 on a bad value. */
static int parse_scenario_opt(int argc, char **argv, int *i, struct bench_args *a) {
    const char *o = argv[*i];
    if (!strcmp(o, "--progress")) {
        a->progress = true;
        return 1;
    }
    if (*i + 1 >= argc) return 0;
    const char *val = argv[*i + 1];
    long v;
    if (!strcmp(o, "--scenario")) {
        if (strcmp(val, "single-stream") && strcmp(val, "offline") && strcmp(val, "server") &&
            strcmp(val, "multi-stream")) {
            fprintf(stderr, "tandem: bench: --scenario expects single-stream, offline, server or "
                            "multi-stream, got '%s'\n", val);
            return 2;
        }
        a->scenario = val;
    } else if (!strcmp(o, "--qps") || !strcmp(o, "--latency-bound-ms") ||
               !strcmp(o, "--interval-ms")) {
        double d;
        if (!parse_pos_double(val, 1e6, &d)) {
            fprintf(stderr, "tandem: bench: %s expects a number in (0, 1e6], got '%s'\n", o, val);
            return 2;
        }
        if (!strcmp(o, "--qps")) a->qps = d;
        else if (!strcmp(o, "--interval-ms")) a->interval_ms = d;
        else a->latency_bound_ms = d;
    } else if (!strcmp(o, "--min-queries") || !strcmp(o, "--samples-per-query")) {
        long hi = !strcmp(o, "--min-queries") ? MAX_RUNS : 4096;
        if (!parse_long(val, 1, hi, &v)) {
            fprintf(stderr, "tandem: bench: %s expects an integer in [1, %ld], got '%s'\n", o, hi,
                    val);
            return 2;
        }
        if (!strcmp(o, "--min-queries")) a->min_queries = v;
        else a->samples_per_query = v;
    } else if (!strcmp(o, "--warmup") && val[0] && val[strlen(val) - 1] == 's') {
        char num[64];
        size_t len = strlen(val) - 1;
        double d;
        if (len == 0 || len >= sizeof num) return 2;
        memcpy(num, val, len);
        num[len] = 0;
        if (!parse_pos_double(num, 3600, &d)) {
            fprintf(stderr, "tandem: bench: --warmup expects N runs or S seconds ('2s'), got '%s'\n",
                    val);
            return 2;
        }
        a->warmup_s = d;
        a->warmup = 0;
    } else {
        return 0;
    }
    (*i)++;
    return 1;
}

/* Returns -1 when parsed (continue), else the exit code. */
static int bench_parse(int argc, char **argv, struct bench_args *a) {
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        bool has_val = i + 1 < argc;
        long v;
        int sc = parse_scenario_opt(argc, argv, &i, a);
        if (sc == 2) return 2;
        if (sc == 1) continue;
        int took = cli_inputs_option(&a->in, "bench", argc, argv, &i);
        if (took < 0) return 2;
        if (took) continue;
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
            bench_usage(stdout);
            return 0;
        } else if (!strcmp(o, "--json")) {
            a->json = true;
        } else if (!strcmp(o, "--devices") && has_val) {
            a->devices = argv[++i];
        } else if (!strcmp(o, "--trace") && has_val) {
            a->trace = argv[++i];
        } else if (!strcmp(o, "--mode") && has_val) {
            a->mode = argv[++i];
            if (strcmp(a->mode, "latency") && strcmp(a->mode, "throughput") &&
                strcmp(a->mode, "pipeline")) {
                fprintf(stderr, "tandem: bench: --mode expects latency, throughput or pipeline\n");
                return 2;
            }
        } else if (!strcmp(o, "--placement") && has_val) {
            a->placement = argv[++i];
        } else if (!strcmp(o, "--affinity") && has_val) {
            a->affinity = argv[++i];
        } else if (!strcmp(o, "--device-memory") && has_val) {
            a->device_memory = argv[++i];
        } else if (!strcmp(o, "--residency") && has_val) {
            a->residency = argv[++i];
        } else if (!strcmp(o, "--free-dims") && has_val) {
            a->free_dims = argv[++i];
        } else if (!strcmp(o, "--precision") && has_val) {
            a->precision = argv[++i];
        } else if (!strcmp(o, "--cuts") && has_val) {
            a->cuts = argv[++i];
        } else if (!strcmp(o, "--micro-batch") && has_val) {
            char *end = NULL;
            a->micro_batch = strtol(argv[++i], &end, 10);
            if (!*argv[i] || *end || a->micro_batch < 0 || a->micro_batch > INT_MAX) {
                fprintf(stderr, "tandem: bench: --micro-batch expects a number >= 0\n");
                return 2;
            }
        } else if (!strcmp(o, "--duration") && has_val) {
            char *end;
            errno = 0;
            double d = strtod(argv[++i], &end);
            if (errno || end == argv[i] || *end || !(d > 0) || d > 86400) {
                fprintf(stderr, "tandem: bench: --duration expects seconds in (0, 86400]\n");
                return 2;
            }
            a->duration = d;
            a->duration_set = true;
            a->iterations = 0, a->iterations_set = false;
        } else if ((!strcmp(o, "--threads") || !strcmp(o, "--batch") || !strcmp(o, "--warmup") ||
                    !strcmp(o, "--iterations") || !strcmp(o, "--opt-level")) && has_val) {
            const char *val = argv[++i];
            long lo = 1, hi = 1 << 20;
            if (!strcmp(o, "--threads") || !strcmp(o, "--warmup")) lo = 0;
            if (!strcmp(o, "--iterations")) hi = MAX_RUNS;
            if (!strcmp(o, "--opt-level")) lo = 0, hi = 2;
            if (!parse_long(val, lo, hi, &v)) {
                fprintf(stderr, "tandem: bench: %s expects an integer in [%ld, %ld], got '%s'\n", o,
                        lo, hi, val);
                return 2;
            }
            if (!strcmp(o, "--threads")) a->threads = v;
            else if (!strcmp(o, "--batch")) a->batch = v;
            else if (!strcmp(o, "--warmup")) a->warmup = v, a->warmup_s = 0;
            else if (!strcmp(o, "--opt-level")) a->opt = v;
            else {
                a->iterations = v, a->duration = 0;
                a->iterations_set = true, a->duration_set = false;
            }
        } else if (o[0] == '-') {
            fprintf(stderr, "tandem: bench: unknown option or missing value '%s'\n", o);
            bench_usage(stderr);
            return 2;
        } else if (!a->model) {
            a->model = o;
        } else {
            fprintf(stderr, "tandem: bench: unexpected argument '%s'\n", o);
            return 2;
        }
    }
    if (!a->model) {
        bench_usage(stderr);
        return 2;
    }
    return -1;
}

/* Creates the inputs (from --input files, else random). Returns 0 or an exit code (message
 * printed). */
static int make_inputs(tdm_env *env, const tdm_model *m, const struct bench_args *a,
                       tdm_tensor **ins, const char **names, FILE *info) {
    size_t n = tdm_model_input_count(m);
    bool batch_used = false;
    if (cli_inputs_check(&a->in, "bench", m)) return 1;
    for (size_t i = 0; i < n; i++) {
        tdm_value_desc d;
        tdm_status *st = tdm_model_input(m, i, &d);
        if (st) return cli_fail(st, "bench");
        names[i] = d.name;
        bool random = false;
        int rc = cli_input_make(env, &a->in, "bench", &d, a->batch, i, &ins[i], &random,
                                &batch_used);
        if (rc) return rc;
        /* (a file's batch, or a symbolic one that --free-dims fixed to the batch) */
        if ((!random || d.dim_params[0]) && a->batch > 1 && tdm_tensor_rank(ins[i]) > 0 &&
            tdm_tensor_dims(ins[i])[0] == a->batch)
            batch_used = true;
        char shape[256], vals[96];
        cli_shape_str(tdm_tensor_rank(ins[i]), tdm_tensor_dims(ins[i]), shape, sizeof shape);
        const char *from = random ? cli_random_values(d.dtype, a->in.has_int_range
                                                                   ? a->in.int_range : NULL,
                                                      vals, sizeof vals)
                                  : "from file";
        if (a->json) {
            fprintf(info, "%s{\"name\": ", i ? ", " : "");
            bench_json_string(info, d.name);
            fprintf(info, ", \"dtype\": \"%s\", \"shape\": %s, \"random\": %s, \"values\": ",
                    tdm_dtype_name(d.dtype), shape, random ? "true" : "false");
            bench_json_string(info, from);
            fputc('}', info);
        } else {
            fprintf(info, "%s%s %s %s (%s%s)", i ? ", " : "", d.name, tdm_dtype_name(d.dtype),
                    shape, random ? "random, " : "", from);
        }
    }
    if (a->batch > 1 && !batch_used) {
        fprintf(stderr,
                "tandem: bench: --batch %ld, but no input has a dynamic leading dimension "
                "(give the shapes with --shape NAME:%ld,...)\n",
                a->batch, a->batch);
        return 1;
    }
    return 0;
}

int cmd_bench(int argc, char **argv) {
    for (int i = 1; i < argc; i++) /* a language model: its own options (cmd_bench_llm.c) */
        if (!strcmp(argv[i], "--llm")) return cmd_bench_llm(argc, argv);
    struct bench_args a = {0};
    a.batch = 1;
    a.warmup = 3;
    a.iterations = 10;
    a.opt = 1;
    a.latency_bound_ms = 100;
    cli_inputs_init(&a.in);
    int rc = bench_parse(argc, argv, &a);
    if (rc >= 0) return rc;

    tdm_env *env = NULL;
    tdm_session *s = NULL;
    tdm_tensor **ins = NULL, **outs = NULL;
    const char **names = NULL;
    double *lat = NULL;
    char *inputs_json = NULL;
    size_t inputs_json_len = 0, n_in = 0, n_out = 0;
    FILE *info = NULL;
    tdm_status *st = tdm_env_create(NULL, &env);
    if (st) return cli_fail(st, "bench");
    tdm_session_options so = {TDM_API_VERSION, a.devices, (int)a.threads, (int)a.opt, false};
    so.mode = !a.mode || !strcmp(a.mode, "latency") ? TDM_MODE_LATENCY
              : !strcmp(a.mode, "throughput")       ? TDM_MODE_THROUGHPUT
                                                    : TDM_MODE_PIPELINE;
    so.pipeline_cuts = a.cuts;
    so.precision = a.precision;
    so.placement = a.placement;
    so.affinity = a.affinity;
    so.device_memory = a.device_memory;
    so.residency = a.residency;
    so.free_dims = a.free_dims;
    so.micro_batch = (int)a.micro_batch;
    double t0 = bench_now_s();
    if ((st = tdm_session_create(env, a.model, &so, &s))) {
        rc = cli_fail(st, NULL);
        goto done;
    }
    double load_ms = (bench_now_s() - t0) * 1e3;
    const tdm_model *m = tdm_session_model(s);
    n_in = tdm_model_input_count(m);
    n_out = tdm_model_output_count(m);
    ins = calloc(n_in + 1, sizeof *ins);
    names = calloc(n_in + 1, sizeof *names);
    outs = calloc(n_out + 1, sizeof *outs);
    long cap = a.duration > 0 ? 1024 : a.iterations;
    lat = malloc((size_t)cap * sizeof *lat);
    info = open_memstream(&inputs_json, &inputs_json_len);
    if (!ins || !names || !outs || !lat || !info) {
        fprintf(stderr, "tandem: out of memory\n");
        rc = 1;
        goto done;
    }
    if ((rc = make_inputs(env, m, &a, ins, names, info))) goto done;
    fclose(info);
    info = NULL;

    const tdm_tensor *const *cins = (const tdm_tensor *const *)ins;
    double w0 = bench_now_s(), warm_ms = 0; /* fastest warm-up run: the steady state */
    long warm_runs = 0;
    for (; a.warmup_s > 0 ? bench_now_s() - w0 < a.warmup_s : warm_runs < a.warmup; warm_runs++) {
        double r0 = bench_now_s();
        if ((st = tdm_session_run(s, n_in, names, cins, n_out, NULL, outs))) {
            rc = cli_fail(st, "warm-up run");
            cli_note_random(stderr, &a.in, m, "bench");
            goto done;
        }
        double ms = (bench_now_s() - r0) * 1e3;
        if (!warm_runs || ms < warm_ms) warm_ms = ms;
        for (size_t j = 0; j < n_out; j++) tdm_tensor_free(outs[j]), outs[j] = NULL;
    }
    tdm_session_monitor_reset(s); /* device figures cover the timed part only */
    long runs = 0;
    if (a.trace && (st = tdm_session_trace_start(s))) {
        rc = cli_fail(st, "trace");
        goto done;
    }
    if (a.scenario) {
        struct bench_ctx c = {&a, env, s, n_in, n_out, names, ins, inputs_json, load_ms, warm_ms,
                              warm_runs};
        rc = bench_scenario(&c);
        if (a.trace && (st = tdm_session_trace_stop(s, a.trace)) && !rc) rc = cli_fail(st, "trace");
        else tdm_status_free(st);
        goto done;
    }
    double start = bench_now_s(), total = 0;
    for (;;) {
        if (a.duration > 0 ? (runs > 0 && bench_now_s() - start >= a.duration) : runs >= a.iterations)
            break;
        if (runs == cap) {
            if (cap >= MAX_RUNS) break;
            double *grown = realloc(lat, (size_t)cap * 2 * sizeof *lat);
            if (!grown) break;
            lat = grown;
            cap *= 2;
        }
        double r0 = bench_now_s();
        st = tdm_session_run(s, n_in, names, cins, n_out, NULL, outs);
        double dt = bench_now_s() - r0;
        if (st) {
            rc = cli_fail(st, "run");
            goto done;
        }
        for (size_t j = 0; j < n_out; j++) tdm_tensor_free(outs[j]), outs[j] = NULL;
        lat[runs++] = dt * 1e3;
        total += dt;
    }

    if (a.trace && (st = tdm_session_trace_stop(s, a.trace))) {
        rc = cli_fail(st, "trace");
        goto done;
    }
    double mean = total * 1e3 / (double)runs, var = 0;
    for (long r = 0; r < runs; r++) var += (lat[r] - mean) * (lat[r] - mean);
    double sd = runs > 1 ? sqrt(var / (double)(runs - 1)) : 0;
    qsort(lat, (size_t)runs, sizeof *lat, bench_cmp_double);
    double p50 = bench_percentile(lat, runs, 50), p90 = bench_percentile(lat, runs, 90),
           p99 = bench_percentile(lat, runs, 99);
    double per_s = (double)runs / total, items = per_s * (double)a.batch;
    long threads = a.threads > 0 ? a.threads : sysconf(_SC_NPROCESSORS_ONLN);
    const char *devices = a.devices ? a.devices : "cpu";
    if (a.json) {
        printf("{\"model\": ");
        bench_json_string(stdout, a.model);
        printf(", \"devices\": ");
        bench_json_string(stdout, devices);
        printf(", \"cpu_isa\": ");
        if (tdm_env_device_isa(env, 0)) bench_json_string(stdout, tdm_env_device_isa(env, 0));
        else printf("null");
        printf(", \"batch\": %ld, \"threads\": %ld, \"opt_level\": %ld, \"warmup\": %ld, "
               "\"iterations\": %ld, \"session_create_ms\": %.3f, \"inputs\": [%s], "
               "\"latency_ms\": {\"p50\": %.4f, \"p90\": %.4f, \"p99\": %.4f, \"mean\": %.4f, "
               "\"min\": %.4f, \"max\": %.4f, \"stddev\": %.4f}, \"runs_per_s\": %.4f, "
               "\"throughput_per_s\": %.4f, \"per_device\": ",
               a.batch, threads, a.opt, warm_runs, runs, load_ms, inputs_json, p50, p90, p99, mean,
               lat[0], lat[runs - 1], sd, per_s, items);
        bench_print_devices(s, stdout, true);
        printf("}\n");
    } else {
        printf("model: %s\ndevices: %s  threads: %ld  batch: %ld  opt-level: %ld  cpu isa: %s\n",
               a.model, devices, threads, a.batch, a.opt,
               tdm_env_device_isa(env, 0) ? tdm_env_device_isa(env, 0) : "-");
        printf("inputs: %s\n", inputs_json);
        printf("session created in %.1f ms; %ld warm-up runs, %ld timed runs\n", load_ms, warm_runs,
               runs);
        printf("latency (ms): p50 %.3f  p90 %.3f  p99 %.3f  mean %.3f  min %.3f  max %.3f\n", p50,
               p90, p99, mean, lat[0], lat[runs - 1]);
        printf("throughput: %.2f items/s (%.2f runs/s x batch %ld)\n", items, per_s, a.batch);
        bench_print_devices(s, stdout, false);
        if (a.device_memory) /* budgets: what streaming costs per run */
            for (size_t i = 0; i < tdm_session_monitor_count(s); i++) {
                tdm_device_monitor m;
                tdm_status *ms = tdm_session_monitor(s, i, &m, sizeof m);
                if (ms) {
                    tdm_status_free(ms);
                    continue;
                }
                if (m.bytes_uploaded)
                    printf("  %s: %.2f MiB uploaded per run, memory peak %.2f MiB\n", m.device,
                           (double)m.bytes_uploaded / 1048576 / (double)runs,
                           (double)m.memory_peak / 1048576);
            }
    }
done:
    if (info) fclose(info);
    free(inputs_json);
    for (size_t i = 0; ins && i < n_in; i++) tdm_tensor_free(ins[i]);
    for (size_t j = 0; outs && j < n_out; j++) tdm_tensor_free(outs[j]);
    free(ins);
    free(outs);
    free(names);
    free(lat);
    tdm_session_free(s);
    tdm_env_free(env);
    return rc;
}
