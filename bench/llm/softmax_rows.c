/* The decode attention's softmax alone (tdm_llm_softmax, src/backends/cpu/k_llm.c): 9 heads'
 * rows of N scores (SmolLM2-135M's query heads; N the context), from L1, best of 2,000 calls:
 * what a layer's softmax costs a decode step at that depth, beside attn_rows' scores and p.V.
 *
 *   cc -O2 -std=c11 -D_GNU_SOURCE -Isrc -Iinclude -Ibuild/gen bench/llm/softmax_rows.c \
 *      build/libtandem.a -ldnnl -lprotobuf-c -lOpenCL -ljansson -fopenmp -lpthread -ldl -lm \
 *      -o build/softmax_rows
 *   build/softmax_rows [N=1000] [ISA]   (1 <= N <= 1024; ISA caps the SIMD level: avx2,
 *                                        portable, ...) */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "backends/cpu/cpu_simd.h"
#include "backends/cpu/k_llm.h"

enum { HEADS = 9, LD = 1024, CALLS = 2000 };

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1000;
    if (n < 1 || n > LD) return 2;
    tdm_cpu_isa level = tdm_cpu_isa_detect(), cap;
    if (argc > 2) {
        if (!tdm_cpu_isa_parse(argv[2], &cap)) return 2;
        level = tdm_cpu_isa_min(level, cap);
    }
    tdm_cpu_simd simd;
    tdm_cpu_simd_init(&simd, level);
    float *s = aligned_alloc(64, sizeof(float) * HEADS * LD);
    float *src = aligned_alloc(64, sizeof(float) * HEADS * LD);
    if (!s || !src) return 1;
    for (int i = 0; i < HEADS * LD; i++) src[i] = (float)(i * 7919 % 1000) / 100.0f - 5.0f;
    double best = 1e9, check = 0;
    for (int r = 0; r < CALLS; r++) {
        for (int i = 0; i < HEADS * LD; i++) s[i] = src[i];
        double t0 = now();
        for (int h = 0; h < HEADS; h++) tdm_llm_softmax(&simd, s + h * LD, n, 0.0f, NULL, false, 0.0f);
        double t = now() - t0;
        best = t < best ? t : best;
        check += s[(r % HEADS) * LD];
    }
    printf("softmax %d heads x %d, ISA %s: %.2f us (%.3f ns an element; check %.6g)\n", HEADS, n,
           tdm_cpu_isa_name(level), best * 1e6, best * 1e9 / (HEADS * n), check);
    free(s);
    free(src);
    return 0;
}
