/* tandem bench: pieces shared by the basic timing loop (cmd_bench.c) and the LoadGen-like
 * scenarios (cmd_bench_scenario.c). Public API only. */
#ifndef TDM_CLI_CMD_BENCH_H
#define TDM_CLI_CMD_BENCH_H

#include <stdbool.h>
#include <stdio.h>

#include "cli.h"
#include "tandem/tandem.h"

#define BENCH_MAX_INPUTS 256
#define BENCH_MAX_RUNS 10000000L

struct bench_args {
    const char *model, *devices, *trace, *mode, *scenario;
    const char *cuts;    /* --mode pipeline: stage cut points */
    const char *placement, *affinity; /* tdm_session_options.placement / affinity */
    const char *device_memory, *residency; /* tdm_session_options: budgets, residency */
    const char *free_dims; /* tdm_session_options.free_dims: NAME=SIZE[,NAME=SIZE] */
    const char *precision; /* accelerators' arithmetic (tdm_session_options.precision) */
    long micro_batch;    /* --mode pipeline: rows per micro-batch (0 = automatic) */
    cli_inputs in;       /* --input, --shape, --seed, --int-range */
    long threads, batch, warmup, iterations, opt;
    double warmup_s;     /* > 0: warm up for this many seconds instead of `warmup` runs */
    double duration;     /* > 0: time-bound instead of iterations */
    bool duration_set, iterations_set;
    long min_queries;    /* scenarios: at least this many queries (0 = default) */
    double qps;          /* server: mean arrival rate */
    double latency_bound_ms; /* server: bound on the 99th percentile */
    long samples_per_query;  /* multi-stream */
    double interval_ms;      /* multi-stream: query period */
    bool json, progress;
};

/* A session with its random inputs, ready to run. */
struct bench_ctx {
    const struct bench_args *a;
    tdm_env *env;
    tdm_session *s;
    size_t n_in, n_out;
    const char **names;
    tdm_tensor **ins;
    const char *inputs_json; /* the inputs' description (JSON list items or text) */
    double load_ms;
    double warm_ms;  /* time of the fastest warm-up run (0 without warm-up) */
    long warm_runs;
};

double bench_now_s(void);
int bench_cmp_double(const void *a, const void *b);
/* Percentile with linear interpolation between closest ranks (sorted input, n >= 1). */
double bench_percentile(const double *v, long n, double p);
void bench_json_string(FILE *f, const char *s);
/* The monitoring figures of every device of the session: a JSON array, or a table. */
void bench_print_devices(tdm_session *s, FILE *f, bool json);

/* Runs a[->scenario] after warm-up; prints the summary. Returns the exit code. */
int bench_scenario(struct bench_ctx *c);

#endif
