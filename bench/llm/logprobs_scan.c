/* The engine's top log-probabilities scan (src/llm/engine.c: log_probs, the k largest logits of
 * a row for a request's `top_logprobs`) on real rows, one logit at a time (as before session
 * 48) against the form that passes over sixteen logits none of which beats the k-th: TSC ticks
 * a row (each row's best of 20), and whether both give the same entries. The loop is a copy of
 * the engine's (static there); keep the two alike.
 *
 *   cc -O3 -std=c11 -D_GNU_SOURCE bench/llm/logprobs_scan.c -o build/logprobs_scan
 *   build/logprobs_scan ROWS_FILE [K=5]
 * ROWS_FILE: rows of 49,152 logits (bench/llm/logits_dump.c). */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <x86intrin.h>

typedef struct {
    int32_t token;
    float logprob;
} entry;
typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));

static bool none_above16(const float *x, float thr) {
    const v4f t = {thr, thr, thr, thr};
    v4i all = {-1, -1, -1, -1};
    for (int q = 0; q < 4; q++) {
        v4f v;
        memcpy(&v, x + 4 * q, sizeof v);
        all &= v <= t;
    }
    return (all[0] & all[1] & all[2] & all[3]) != 0;
}

__attribute__((noinline)) static int scan(const float *lg, size_t vocab, int k, entry *top, bool skip) {
    int n = 0;
    for (size_t i = 0; i < vocab && k > 0; i++) {
        if (skip && n == k && i % 16 == 0 && i + 16 <= vocab && none_above16(lg + i, top[n - 1].logprob)) {
            i += 15;
            continue;
        }
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
        entry top[2][20];
        for (int s = 0; s < 2; s++) {
            unsigned long long best = ~0ull;
            for (int rep = 0; rep < 20; rep++) {
                unsigned long long t0 = __rdtsc();
                scan(rows + r * V, V, k, top[s], s);
                unsigned long long t = __rdtsc() - t0;
                best = t < best ? t : best;
            }
            sum[s] += best;
        }
        same = same && !memcmp(top[0], top[1], (size_t)k * sizeof top[0][0]);
    }
    printf("%zu rows, top %d: one at a time %llu TSC ticks a row, sixteen passed over %llu; same "
           "entries: %s\n", n_rows, k, sum[0] / n_rows, sum[1] / n_rows, same ? "yes" : "NO");
    free(rows);
    return same ? 0 : 1;
}
