/* The sampler's cost a token (src/llm/sampler.c: tdm_sampler_pick) on a row of SmolLM2's
 * vocabulary size (49,152), for greedy, temperature alone, top-p alone, top-k + top-p:
 * best of 200 picks each, in microseconds. The logits are Gaussian of spread SIGMA (default 3:
 * a peaked row, a small nucleus; 1: a flat one, a nucleus of thousands) plus 20 spikes of
 * 3 SIGMA. A decode step of SmolLM2 at 2 threads takes ~3-4 ms: what a pick costs is lost
 * from every sampled token (the engine thread picks one stream after the other).
 *
 *   cc -O2 -std=c11 -D_GNU_SOURCE -Isrc -Iinclude -Ibuild/gen bench/llm/sampler_bench.c \
 *      build/libtandem.a -ldnnl -lprotobuf-c -lOpenCL -ljansson -fopenmp -lpthread -ldl -lm \
 *      -o build/sampler_bench
 *   build/sampler_bench [SIGMA=3 | ROWS_FILE] [ISA=avx512_core]
 * ROWS_FILE: real rows of 49,152 logits (bench/llm/logits_dump.c writes them); each figure is
 * then the mean over the rows of each row's best of 20 picks, and the last two (greedy with a
 * log-probability) stay on the drawn row.
 * ISA picks the exp, max and near rows' variants as the engine does from the CPU device's level
 * (tdm_sampler_exp_row_for, tdm_sampler_max_row_for, tdm_sampler_near_row_for: portable, avx2,
 * avx512_core; the best this CPU runs at or below). Last, a greedy pick with the chosen token's log-probability as the
 * engine computes it for `logprobs` requests: the pick's maximum reused (tdm_sampler_last_max)
 * against a second pass for it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "llm/sampler.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
    const size_t V = 49152;
    FILE *rf = argc > 1 ? fopen(argv[1], "rb") : NULL; /* real rows (logits_dump) */
    double sigma = argc > 1 && !rf ? atof(argv[1]) : 3.0;
    const char *isa = argc > 2 ? argv[2] : "avx512_core";
    if (!(sigma > 0) || sigma > 100) return 2;
    size_t n_rows = 1;
    float *rows = NULL;
    if (rf) {
        fseek(rf, 0, SEEK_END);
        long bytes = ftell(rf);
        fseek(rf, 0, SEEK_SET);
        n_rows = bytes > 0 ? (size_t)bytes / (V * sizeof(float)) : 0;
        rows = n_rows ? malloc(n_rows * V * sizeof *rows) : NULL;
        if (!rows || fread(rows, sizeof *rows, n_rows * V, rf) != n_rows * V) return 1;
        fclose(rf);
    }
    float *x = malloc(V * sizeof *x);
    if (!x) return 1;
    uint64_t r = 1;
    for (size_t i = 0; i < V; i++) { /* Box-Muller on a 64-bit LCG */
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        double u1 = ((double)(r >> 11) + 1.0) * 0x1.0p-53;
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        double u2 = (double)(r >> 11) * 0x1.0p-53;
        x[i] = (float)(sigma * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
    }
    for (int i = 0; i < 20; i++) x[(size_t)i * 2459 % V] += (float)(3.0 * sigma);
    static const struct {
        float t;
        int k;
        float p;
    } cf[] = {{0, 0, 0}, {0.7f, 0, 0}, {0.7f, 0, 0.9f}, {1.0f, 0, 0.95f}, {1.5f, 0, 0.99f}, {0.7f, 40, 0.9f}};
    for (size_t c = 0; c < sizeof cf / sizeof cf[0]; c++) {
        tdm_sampling sp = {cf[c].t, cf[c].k, cf[c].p, 0, 7};
        tdm_sampler s;
        tdm_status *st = tdm_sampler_init(&s, NULL, V, &sp);
        if (st) return 1;
        tdm_sampler_set_exp_row(&s, tdm_sampler_exp_row_for(isa));
        tdm_sampler_set_max_row(&s, tdm_sampler_max_row_for(isa));
        tdm_sampler_set_near_row(&s, tdm_sampler_near_row_for(isa));
        double best_sum = 0;
        long check = 0;
        for (size_t row = 0; row < n_rows; row++) { /* each row's best of 200 (file: of 20) */
            const float *xr = rows ? rows + row * V : x;
            double best = 1e9;
            for (int k = 0; k < (rows ? 20 : 200); k++) {
                double t0 = now();
                check += tdm_sampler_pick(&s, xr, NULL, 0, NULL, 0);
                double t = now() - t0;
                best = t < best ? t : best;
            }
            best_sum += best;
        }
        printf("temperature %.1f top_k %2d top_p %.2f, exp row %s: %8.1f us a pick (check %ld)\n", cf[c].t,
               cf[c].k, cf[c].p, s.exp_row == tdm_sampler_exp_row ? "portable" : isa,
               1e6 * best_sum / (double)n_rows, check);
        tdm_sampler_free(&s);
    }
    for (int again = 0; again < 2; again++) { /* greedy + the log-probability of the pick */
        tdm_sampling sp = {0, 0, 0, 0, 7};
        tdm_sampler s;
        if (tdm_sampler_init(&s, NULL, V, &sp)) return 1;
        tdm_exp_row_fn er = tdm_sampler_exp_row_for(isa);
        tdm_max_row_fn mr = tdm_sampler_max_row_for(isa);
        tdm_sampler_set_exp_row(&s, er);
        tdm_sampler_set_max_row(&s, mr);
        double best = 1e9, check = 0;
        for (int k = 0; k < 200; k++) {
            double t0 = now();
            int32_t t = tdm_sampler_pick(&s, x, NULL, 0, NULL, 0);
            float mx = again ? mr(x, V, NULL) : tdm_sampler_last_max(&s);
            check += x[t] - mx - log(er(x, V, mx, 1.0f, NULL));
            double dt = now() - t0;
            best = dt < best ? dt : best;
        }
        printf("greedy + log-probability, max %s: %8.1f us a pick (check %.3f)\n",
               again ? "found again" : "of the pick", 1e6 * best, check);
        tdm_sampler_free(&s);
    }
    free(x);
    free(rows);
    return 0;
}
