/* Latency of one model on a device list with a placement and affinity rules, through the
 * public API (bench/run_mixed.py builds and drives it). Random inputs (dynamic dims = 1,
 * integer inputs 0), 3 warm-up runs, then synchronous runs for SECONDS; prints
 * {"p50_ms":..,"mean_ms":..,"runs":..} as JSON.
 *
 *   mixed_bench MODEL DEVICES PLACEMENT AFFINITY THREADS SECONDS
 * PLACEMENT "auto", "first" or a device name; AFFINITY "-" for none. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tandem/tandem.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int fail(tdm_status *st) {
    fprintf(stderr, "mixed_bench: %s\n", tdm_status_message(st));
    tdm_status_free(st);
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 7) {
        fprintf(stderr, "usage: mixed_bench MODEL DEVICES PLACEMENT AFFINITY THREADS SECONDS\n");
        return 2;
    }
    tdm_env *env = NULL;
    tdm_status *st = tdm_env_create(NULL, &env);
    if (st) return fail(st);
    tdm_session_options so = {.api_version = TDM_API_VERSION, .devices = argv[2],
                              .threads = atoi(argv[5]), .opt_level = 1,
                              .placement = strcmp(argv[3], "auto") ? argv[3] : NULL,
                              .affinity = strcmp(argv[4], "-") ? argv[4] : NULL};
    tdm_session *s = NULL;
    if ((st = tdm_session_create(env, argv[1], &so, &s))) return fail(st);
    const tdm_model *m = tdm_session_model(s);
    size_t ni = tdm_model_input_count(m), no = tdm_model_output_count(m);
    if (ni > 64 || no > 64) return 2;
    tdm_tensor *ins[64] = {0}, *outs[64] = {0};
    const char *names[64];
    unsigned seed = 1;
    for (size_t i = 0; i < ni; i++) {
        tdm_value_desc d;
        if ((st = tdm_model_input(m, i, &d))) return fail(st);
        int64_t dims[TDM_MAX_RANK];
        for (int k = 0; k < d.rank; k++) dims[k] = d.dims[k] < 0 ? 1 : d.dims[k];
        names[i] = d.name;
        if ((st = tdm_tensor_create(env, d.dtype, d.rank, dims, &ins[i]))) return fail(st);
        if (d.dtype == TDM_FLOAT) {
            float *p = tdm_tensor_data(ins[i]);
            for (int64_t k = 0; k < tdm_tensor_element_count(ins[i]); k++) {
                seed = seed * 1103515245u + 12345u;
                p[k] = (float)((seed >> 16) & 0x7fff) / 32768.0f - 0.5f;
            }
        }
    }
    double seconds = atof(argv[6]);
    size_t cap = 100000, runs = 0;
    double *t = malloc(cap * sizeof *t), start = 0;
    for (int r = 0; runs < cap; r++) {
        if (r == 3) start = now();
        double t0 = now();
        if ((st = tdm_session_run(s, ni, names, (const tdm_tensor *const *)ins, no, NULL, outs)))
            return fail(st);
        double dt = now() - t0;
        for (size_t o = 0; o < no; o++) {
            tdm_tensor_free(outs[o]);
            outs[o] = NULL;
        }
        if (r >= 3) t[runs++] = dt;
        if (r >= 3 && now() - start > seconds) break;
    }
    if (getenv("MIXED_BENCH_EXPLAIN")) { /* where the nodes ran (to stderr) */
        char *text = NULL;
        if (!tdm_session_explain(s, TDM_EXPLAIN_SEGMENTS, &text)) fprintf(stderr, "%s\n", text);
        tdm_string_free(text);
    }
    double sum = 0;
    for (size_t i = 0; i < runs; i++) sum += t[i];
    qsort(t, runs, sizeof *t, cmp);
    printf("{\"p50_ms\": %.4f, \"mean_ms\": %.4f, \"runs\": %zu}\n", t[runs / 2] * 1e3,
           sum / (double)runs * 1e3, runs);
    for (size_t i = 0; i < ni; i++) tdm_tensor_free(ins[i]);
    free(t);
    tdm_session_free(s);
    tdm_env_free(env);
    return 0;
}
