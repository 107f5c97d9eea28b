/* A measurement for a future 4-bit key cache layout, not a design in the library: the decode
 * scores of 3 heads over N cache rows (head size 64, SmolLM2-135M's kv group) with the keys
 * laid out transposed in groups of 16 rows, beside the library's VNNI scores over the row
 * layout (k_llm_gqa_i8_avx512.c: four rows' codes transposed in registers by two unpack steps,
 * then each head's sets of rows folded by lane shuffles). Same bytes a row (36), same sums:
 * the program checks that both give the same scores, bit for bit, then times each (best of
 * 2,000 calls, from L1 / L2).
 *
 * The transposed group of 16 rows (576 bytes): 8 chunks of 64 bytes, chunk j the dword lane i
 * = row i's codes of values 8 jj .. 8 jj + 7 of scale group g (j = 4 g + jj), values 8 jj ..
 * 8 jj + 3 in the low nibbles of its 4 bytes and 8 jj + 4 .. 8 jj + 7 in the high ones; then
 * 64 bytes of scales, dword lane i = row i's two bfloat16 scales (group 0 low, group 1 high).
 * A 64-byte load gives two vectors of codes (AND 15; 16-bit shift by 4, AND 15) whose lanes
 * are the 16 rows, and each goes through vpdpbusd against the query's dword broadcast: no
 * transposition, no fold, the scales a plain load (no gather).
 *
 *   cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude -Isrc -Ibuild/gen bench/llm/scores_kt.c \
 *      build/libtandem.a -ldnnl -lprotobuf-c -lOpenCL -ljansson -fopenmp -lpthread -ldl -lm \
 *      -o build/scores_kt
 *   build/scores_kt [ROWS=1000]   (needs AVX-512 VNNI; ROWS a multiple of 16) */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/cpu/k_llm.h"

#if defined(__x86_64__)
#include <immintrin.h>

enum { G = 3, D = 64, RS = 36, CALLS = 2000 };

#define TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")))

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static float frand(void) { return (float)rand() / (float)RAND_MAX - 0.5f; }

/* code of value i (0..63) of a row in the library's layout: group i / 32, 16 bytes a group,
 * values 0..15 in the low nibbles, 16..31 in the high ones */
static int row_code(const int8_t *r, int i) {
    uint8_t b = (uint8_t)r[16 * (i / 32) + (i % 16)];
    return (i % 32) < 16 ? b & 15 : b >> 4;
}

/* rows [16 b, 16 b + 16) of the row layout into group b of the transposed one */
static void transpose_group(const int8_t *rows, uint8_t *out) {
    memset(out, 0, 576);
    for (int i = 0; i < 16; i++) {
        const int8_t *r = rows + i * RS;
        for (int j = 0; j < 8; j++) {
            int g = j / 4, jj = j % 4;
            for (int k = 0; k < 4; k++) {
                int lo = row_code(r, 32 * g + 8 * jj + k), hi = row_code(r, 32 * g + 8 * jj + 4 + k);
                out[64 * j + 4 * i + k] = (uint8_t)(lo | hi << 4);
            }
        }
        memcpy(out + 512 + 4 * i, r + 32, 4); /* both groups' scales */
    }
}

typedef struct {
    int32_t qd[G][16]; /* per head: the query's dwords, 2 a chunk (low then high nibbles) */
    int32_t corr[G][2];
    float qs[G][2];
} kt_query;

static void kt_prepare(const float *const *q, float scale, kt_query *k) {
    for (int h = 0; h < G; h++) {
        int8_t c[D];
        float s[2];
        tdm_llm_q8_query(q[h], D, c, s);
        for (int j = 0; j < 8; j++) {
            int g = j / 4, jj = j % 4;
            for (int half = 0; half < 2; half++) {
                int8_t b[4];
                for (int t = 0; t < 4; t++) b[t] = c[32 * g + 8 * jj + 4 * half + t];
                memcpy(&k->qd[h][2 * j + half], b, 4);
            }
        }
        for (int g = 0; g < 2; g++) {
            int sum = 0;
            for (int i = 0; i < 32; i++) sum += c[32 * g + i];
            k->corr[h][g] = 8 * sum;
            k->qs[h][g] = s[g] * scale;
        }
    }
}

TARGET static void kt_scores(const kt_query *kq, const uint8_t *kt, int64_t n, float *out, int64_t ld) {
    const __m512i nib = _mm512_set1_epi8(15), hi16 = _mm512_set1_epi32((int)0xffff0000u);
    for (int64_t b = 0; b < n / 16; b++) {
        const uint8_t *blk = kt + 576 * b;
        __m512i acc[G][2][2];
#pragma GCC unroll 4
        for (int h = 0; h < G; h++)
            for (int g = 0; g < 2; g++) acc[h][g][0] = acc[h][g][1] = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int jj = 0; jj < 4; jj++)
#pragma GCC unroll 2
            for (int g = 0; g < 2; g++) {
                int j = 4 * g + jj;
                __m512i x = _mm512_load_si512((const void *)(blk + 64 * j));
                __m512i lo = _mm512_and_si512(x, nib), hi = _mm512_and_si512(_mm512_srli_epi16(x, 4), nib);
#pragma GCC unroll 4
                for (int h = 0; h < G; h++) {
                    acc[h][g][0] = _mm512_dpbusd_epi32(acc[h][g][0], lo, _mm512_set1_epi32(kq->qd[h][2 * j]));
                    acc[h][g][1] = _mm512_dpbusd_epi32(acc[h][g][1], hi, _mm512_set1_epi32(kq->qd[h][2 * j + 1]));
                }
            }
        __m512i sc = _mm512_load_si512((const void *)(blk + 512));
        __m512 s0 = _mm512_castsi512_ps(_mm512_slli_epi32(sc, 16));
        __m512 s1 = _mm512_castsi512_ps(_mm512_and_si512(sc, hi16));
#pragma GCC unroll 4
        for (int h = 0; h < G; h++) {
            __m512 v0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_add_epi32(acc[h][0][0], acc[h][0][1]),
                                                                          _mm512_set1_epi32(kq->corr[h][0]))),
                                      _mm512_set1_ps(kq->qs[h][0]));
            __m512 v1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_add_epi32(acc[h][1][0], acc[h][1][1]),
                                                                          _mm512_set1_epi32(kq->corr[h][1]))),
                                      _mm512_set1_ps(kq->qs[h][1]));
            _mm512_storeu_ps(out + h * ld + 16 * b, _mm512_add_ps(_mm512_mul_ps(v0, s0), _mm512_mul_ps(v1, s1)));
        }
    }
}

int main(int argc, char **argv) {
    int N = argc > 1 ? atoi(argv[1]) : 1000;
    N = (N + 15) / 16 * 16;
    if (N < 16 || N > 1000000) return 2;
    if (!__builtin_cpu_supports("avx512vnni")) {
        printf("needs AVX-512 VNNI\n");
        return 0;
    }
    const tdm_llm_i8_fns *f = tdm_llm_i4_fns_for(tdm_cpu_isa_detect());
    if (TDM_KV_I4_ROW(D) != RS) return 2;
    int64_t ld = N + 16;
    int8_t *k = aligned_alloc(64, (size_t)N * RS + 64);
    uint8_t *kt = aligned_alloc(64, (size_t)N / 16 * 576);
    float x[D], *q = malloc(sizeof(float) * G * D);
    float *o1 = malloc(sizeof(float) * G * (size_t)ld), *o2 = malloc(sizeof(float) * G * (size_t)ld);
    if (!k || !kt || !q || !o1 || !o2) return 1;
    for (int t = 0; t < N; t++) {
        for (int i = 0; i < D; i++) x[i] = frand();
        f->quantize_row(x, D, k + t * RS);
    }
    for (int b = 0; b < N / 16; b++) transpose_group(k + 16 * b * RS, kt + 576 * b);
    for (int i = 0; i < G * D; i++) q[i] = frand();
    const float *qp[G] = {q, q + D, q + 2 * D};
    kt_query kq;
    double best_l = 1e9, best_t = 1e9, best_tq = 1e9;
    for (int r = 0; r < CALLS; r++) {
        double t0 = now();
        f->scores(qp, G, k, RS, N, D, 0.125f, o1, ld, NULL);
        double t1 = now();
        kt_prepare(qp, 0.125f, &kq);
        double t2 = now();
        kt_scores(&kq, kt, N, o2, ld);
        double t3 = now();
        best_l = t1 - t0 < best_l ? t1 - t0 : best_l;
        best_tq = t2 - t1 < best_tq ? t2 - t1 : best_tq;
        best_t = t3 - t2 < best_t ? t3 - t2 : best_t;
    }
    int diff = 0;
    for (int h = 0; h < G; h++)
        for (int t = 0; t < N; t++) diff += memcmp(&o1[h * ld + t], &o2[h * ld + t], sizeof(float)) != 0;
    printf("int4 scores, %d rows x %d heads, head size %d, %s: row layout (library) %.2f us, "
           "transposed groups %.2f us (+ %.2f us the scalar query preparation here); %d of %d "
           "scores differ\n",
           N, G, D, tdm_cpu_isa_name(f->isa), 1e6 * best_l, 1e6 * best_t, 1e6 * best_tq, diff, G * N);
    free(k), free(kt), free(q), free(o1), free(o2);
    return diff != 0;
}
#else
int main(void) {
    printf("x86-64 only\n");
    return 0;
}
#endif
