/* The engine's top log-probabilities scan (src/llm/engine.c: log_probs, the k largest logits of
 * a row for a request's `top_logprobs`, through tdm_sampler_top_values) on real rows, against
 * the scan it replaced (one logit at a time, each inserted behind those it does not beat: the
 * loop here): TSC ticks a row (each row's best of 20), and whether both give the same entries.
 *
 *   cc -O3 -std=c11 -D_GNU_SOURCE -Isrc -Iinclude -Ibuild/gen bench/llm/logprobs_scan.c \
 *      build/libtandem.a -ldnnl -lprotobuf-c -lOpenCL -ljansson -fopenmp -lpthread -ldl -lm \
 *      -o build/logprobs_scan
 *   build/logprobs_scan ROWS_FILE [K=5]
 * ROWS_FILE: rows of 49,152 logits (bench/llm/logits_dump.c). */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <x86intrin.h>

#include "llm/sampler.h"

/* the scan before session 48, as log_probs had it (its entries' type, tdm_llm_logprob) */
typedef struct {
    int32_t token;
    float logprob;
} entry;

__attribute__((noinline)) static int one_at_a_time(const float *lg, size_t vocab, int k,
                                                   entry *top) {
    int n = 0;
    for (size_t i = 0; i < vocab && k > 0; i++) {
        float v = lg[i];
        if (n == k && v <= top[n - 1].logprob) continue;
        int j = n < k ? n++ : n - 1;
        while (j > 0 && top[j - 1].logprob < v) {
            top[j] = top[j - 1];
            j--;
        }
        top[j].token = (int32_t)i;
        top[j].logprob = v;
    }
    return n;
}

int main(int argc, char **argv) {
    const size_t V = 49152;
    if (argc < 2) {
        fprintf(stderr, "usage: logprobs_scan ROWS_FILE [K=5]\n");
        return 2;
    }
    int k = argc > 2 ? atoi(argv[2]) : 5;
    if (k < 1 || k > 20) return 2;
    FILE *f = fopen(argv[1], "rb");
    if (!f) return 1;
    fseek(f, 0, SEEK_END);
    long bytes = ftell(f);
    fseek(f, 0, SEEK_SET);
    size_t n_rows = bytes > 0 ? (size_t)bytes / (V * sizeof(float)) : 0;
    float *rows = n_rows ? malloc(n_rows * V * sizeof *rows) : NULL;
    if (!rows || fread(rows, sizeof *rows, n_rows * V, f) != n_rows * V) return 1;
    fclose(f);
    unsigned long long sum[2] = {0, 0};
    bool same = true;
    for (size_t r = 0; r < n_rows; r++) {
        int32_t ids[20];
        float vals[20];
        entry top[20];
        for (int s = 0; s < 2; s++) {
            unsigned long long best = ~0ull;
            for (int rep = 0; rep < 20; rep++) {
                unsigned long long t0 = __rdtsc();
                if (s) tdm_sampler_top_values(rows + r * V, V, k, ids, vals);
                else one_at_a_time(rows + r * V, V, k, top);
                unsigned long long t = __rdtsc() - t0;
                best = t < best ? t : best;
            }
            sum[s] += best;
        }
        for (int j = 0; j < k; j++)
            same = same && top[j].token == ids[j] &&
                   !memcmp(&top[j].logprob, &vals[j], sizeof vals[j]);
    }
    printf("%zu rows, top %d: one at a time %llu TSC ticks a row, sixteen passed over %llu; same "
           "entries: %s\n", n_rows, k, sum[0] / n_rows, sum[1] / n_rows, same ? "yes" : "NO");
    free(rows);
    return same ? 0 : 1;
}
