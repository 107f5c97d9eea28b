/* The quantised KV caches' row routines alone (k_llm_gqa_i8.c: scores and p.V for 3 heads of a
 * kv group over 1,000 cache rows, SmolLM2-135M's decode at depth 1000 for one layer and kv head),
 * from L1/L2, best of 2,000 calls each: the arithmetic without the memory. Head size D
 * (default 64), ISA cap (default: the CPU's level; avx2, avx512_core, portable, ...), cache
 * int8 (default) or int4, ROWS (default 1000; 16 shows a call's fixed cost).
 *
 *   cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude -Isrc -Ibuild/gen bench/llm/attn_rows.c \
 *      build/libtandem.a -ldnnl -lprotobuf-c -lOpenCL -ljansson -fopenmp -lpthread -ldl -lm \
 *      -o build/attn_rows
 *   build/attn_rows [D=64] [ISA|all] [int8|int4] [ROWS=1000] */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/cpu/k_llm.h"

enum { G = 3, CALLS = 2000 };

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static float frand(void) { return (float)rand() / (float)RAND_MAX - 0.5f; }

int main(int argc, char **argv) {
    int d = argc > 1 ? atoi(argv[1]) : 64;
    if (d < 1 || d > 512) return 2;
    tdm_cpu_isa level = tdm_cpu_isa_detect(), cap;
    if (argc > 2 && tdm_cpu_isa_parse(argv[2], &cap)) level = tdm_cpu_isa_min(level, cap);
    bool q4 = argc > 3 && strcmp(argv[3], "int4") == 0;
    int N = argc > 4 ? atoi(argv[4]) : 1000;
    if (N < 1 || N > 1000000) return 2;
    const tdm_llm_i8_fns *f = q4 ? tdm_llm_i4_fns_for(level) : tdm_llm_i8_fns_for(level);
    int64_t rs = q4 ? TDM_KV_I4_ROW(d) : TDM_KV_I8_ROW(d), ld = N + 16;
    int8_t *k = aligned_alloc(64, (size_t)((N * rs + 63) / 64 * 64));
    float x[512], *q = malloc(sizeof(float) * G * (size_t)d), *out = malloc(sizeof(float) * G * (size_t)ld);
    float *p = malloc(sizeof(float) * G * (size_t)ld), *y = malloc(sizeof(float) * G * (size_t)d);
    if (!k || !q || !out || !p || !y) return 1;
    for (int t = 0; t < N; t++) {
        for (int i = 0; i < d; i++) x[i] = frand();
        f->quantize_row(x, d, k + t * rs);
    }
    for (int i = 0; i < G * d; i++) q[i] = frand();
    for (int i = 0; i < G * ld; i++) p[i] = 1e-3f;
    for (int i = 0; i < G * d; i++) y[i] = 0.0f;
    const float *qp[G] = {q, q + d, q + 2 * d};
    double best_s = 1e9, best_p = 1e9;
    for (int r = 0; r < CALLS; r++) {
        double t0 = now();
        f->scores(qp, G, k, rs, N, d, 0.125f, out, ld, NULL);
        double t1 = now();
        f->pv(p, ld, G, k, rs, N, d, y, d);
        double t2 = now();
        best_s = t1 - t0 < best_s ? t1 - t0 : best_s;
        best_p = t2 - t1 < best_p ? t2 - t1 : best_p;
    }
    printf("%s cache, head size %d, %s: scores %.2f us, p.V %.2f us (%d rows x %d heads, best of %d; check %g)\n",
           q4 ? "int4" : "int8", d, tdm_cpu_isa_name(f->isa), 1e6 * best_s, 1e6 * best_p, N, G, CALLS,
           (double)(out[5] + y[7]));
    free(k), free(q), free(out), free(p), free(y);
    return 0;
}
