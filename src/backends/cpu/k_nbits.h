/* Block-quantized weight products for com.microsoft MatMulNBits (k_nbits.c; the SIMD
 * variants in k_nbits_simd.c). Private to the CPU backend; the unit test calls
 * tdm_nbits_matmul directly under each ISA level.
 *
 *   tdm_nbits_w w = {N, K, nb, bs, bits, b, scales, zp};
 *   size_t need = tdm_nbits_scratch_bytes(simd, &w, int8, M);
 *   tdm_nbits_matmul(simd, pool, &w, int8, M, A, bias, Y, scratch);   (scratch: need bytes)
 *
 * Y[m, n] = sum_k A[m, k] * (q[n, k] - zp[n, k / bs]) * s[n, k / bs] (+ bias[n]).
 * Rows M <= TDM_NBITS_DECODE_ROWS take the decode path: the packed weights are read once per
 * call for all rows, with A quantized per block to int8 (int8 = true, accuracy_level 4:
 * VNNI / AVX2 byte products) or kept in float (the codes dequantized in registers); larger M
 * dequantizes B in row chunks into a float panel for oneDNN's sgemm (the packed form with
 * int8 activations keeps the decode path for any M: each row as it is alone). */
#ifndef TDM_CPU_K_NBITS_H
#define TDM_CPU_K_NBITS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/threadpool.h"
#include "ops/nbits_pack.h"

struct tdm_cpu_simd;

typedef struct tdm_nbits_w {
    int64_t N, K;
    int64_t nb;          /* blocks per row: ceil(K / bs) */
    int64_t bs;          /* block size: a power of 2, >= 16 */
    int bits;            /* 2, 4 or 8 */
    const uint8_t *b;    /* [N][nb][bs * bits / 8], codes packed low bits first */
    const float *scales; /* [N * nb] */
    const float *zp;     /* [N * nb] zero points as floats; NULL = 2^(bits - 1) */
    /* the packed form (MatMulNBitsPacked, ops/nbits_pack.h) instead of b, scales and zp
     * when pk is not NULL */
    const tdm_nbits_pk *pk;
    const uint8_t *P;
} tdm_nbits_w;

/* Most rows that take the decode (matrix-vector) path: up to 16, the rows of the LLM engine's
 * decode steps at its default max_batch (SmolLM2 int8, 16 streams on 2 threads: 138 tokens
 * per CPU second through the decode path against 71 through the panels). */
#define TDM_NBITS_DECODE_ROWS 16

/* Whether tdm_nbits_matmul runs these M rows through the decode loops (each row then equals
 * the row alone): up to TDM_NBITS_DECODE_ROWS, and past it on the packed form where
 * tdm_nbits_pk_any_rows says so (floats up to a bound, k_nbits.c); else dequantised panels. */
bool tdm_nbits_rows_path(const struct tdm_cpu_simd *simd, const tdm_nbits_w *w, bool int8,
                         int64_t M);

/* Bytes of scratch tdm_nbits_matmul needs for these rows (a 64-byte aligned block). */
size_t tdm_nbits_scratch_bytes(const struct tdm_cpu_simd *simd, const tdm_nbits_w *w, bool int8,
                               int64_t M);
/* Y[M, N] = A[M, K] . dequant(B)^T + bias (bias may be NULL). simd picks the variants (its
 * level; NULL = portable); pool may be NULL. Never fails. */
void tdm_nbits_matmul(const struct tdm_cpu_simd *simd, tdm_threadpool *pool, const tdm_nbits_w *w,
                      bool int8, int64_t M, const float *A, const float *bias, float *Y,
                      void *scratch);

/* ---- the bf16 prefill (k_nbits_bf16.c; accuracy_level 4, AVX512_BF16 CPUs) ---- */

/* oneDNN's engine is made and the CPU has AVX512_BF16 (as oneDNN sees it). */
bool tdm_nbits_bf16_usable(void);
void tdm_nbits_to_bf16(const float *x, int64_t n, uint16_t *y);
/* Rows r0..r1 of the panel of B's rows from n0, dequantized to bf16, K per row. */
void tdm_nbits_deq_bf16(const tdm_nbits_w *w, int64_t n0, int64_t r0, int64_t r1,
                        uint16_t *panel);
/* Y[M, N] (row stride ldy) = A (bf16 [M, K], row stride lda) . B (bf16 [N, K])^T on this
 * thread (oneDNN matmul); false when oneDNN cannot (the caller takes the float path). */
bool tdm_nbits_gemm_bf16(const uint16_t *A, int64_t lda, const uint16_t *B, int64_t M, int64_t N,
                         int64_t K, float *Y, int64_t ldy);

/* ---- between k_nbits.c and k_nbits_simd.c ---- */

/* One decode call: A prepared per the variant's layout, rows n0..n1 of B for all M rows. */
typedef struct tdm_nbits_job {
    const tdm_nbits_w *w;
    int64_t M;
    const void *a;    /* [M][kq]: int8 codes or floats in the variant's order */
    int64_t kq;       /* row stride of a, elements */
    const float *sal; /* [M][sal_stride]: int8 paths, A's scale per int32 lane of each span */
    int64_t sal_stride;
    const float *sum; /* [M][nb]: sum of A per block (the zero-point term; int8: of its model) */
    const float *sql; /* [M][sal_stride]: int8 SIMD paths, A's codes summed per lane */
    const float *bias;
    float *Y; /* [M][N] */
    int32_t lane_block[16]; /* int8 paths: lane -> block offset within a span */
} tdm_nbits_job;

typedef void (*tdm_nbits_rows_fn)(const tdm_nbits_job *j, int64_t n0, int64_t n1);
/* int8 paths: one row a[K] of A into the variant's codes q[kq] (zeros past K), sal and sql
 * (per lane, sal_stride entries), sa and sum (per block); tmp: kq bytes of scratch. sal and
 * sql NULL (8-bit codes in natural order: the packed form, whose loops read q, sa and sum
 * only): the per-lane values are skipped. */
typedef void (*tdm_nbits_quant_fn)(const tdm_nbits_w *w, const float *a, int64_t kq, int8_t *q,
                                   float *sal, float *sql, int64_t sal_stride, float *sa,
                                   float *sum, int8_t *tmp);

/* A variant: how A is laid out and the loop over rows of B. */
typedef struct tdm_nbits_variant {
    tdm_nbits_rows_fn rows;
    bool int8;      /* A as int8 codes (else floats) */
    int half;       /* A in spans of 2*half elements, evens then odds (4-bit); 0 = natural */
    int span;       /* int8 SIMD: elements per span (one vector of B) */
    int lanes;      /* int8 SIMD: int32 lanes per span (sal entries per span) */
    tdm_nbits_quant_fn quant; /* int8: A's preparation; NULL = the generic one (k_nbits.c) */
} tdm_nbits_variant;

/* A decode call on the packed form (k_nbits_pack.c; AVX2: k_nbits_pack_avx2.c): A in natural
 * order, padded with zeros to kq; panels p0..p1 of 16 rows of W for all M rows. */
typedef struct tdm_nbits_pjob {
    const tdm_nbits_pk *pk;
    const uint8_t *P;
    int64_t M;
    bool int8;
    const void *a;    /* [M][kq]: int8 codes or floats */
    int64_t kq;
    const float *sa;   /* int8: [M][nb] A's scale per block */
    const float *asum; /* [M][nb] A's sum per block (int8: of its int8 model) */
    const float *bias;
    float *Y;
    void (*rows_fn)(const struct tdm_nbits_pjob *j, int64_t p0, int64_t p1);
} tdm_nbits_pjob;
typedef void (*tdm_nbits_prows_fn)(const tdm_nbits_pjob *j, int64_t p0, int64_t p1);
/* The packed decode loop for a level and path (always one: portable last). */
tdm_nbits_prows_fn tdm_nbits_pk_pick(int level, const tdm_nbits_pk *pk, bool int8);

/* Whether the packed decode loops take rows past TDM_NBITS_DECODE_ROWS at a level (prefill):
 * with int8 activations, and with floats where the AVX-512 loop runs (k_nbits_pack.c; k_nbits.c
 * bounds the float rows). */
bool tdm_nbits_pk_any_rows(int level, const tdm_nbits_pk *pk, bool int8);

/* Rows of A's scratch the packed decode loops read for an M-row call at a level: M, or more
 * (the AMX loops' tiles of 8 or 16 rows; the caller zeroes the rows past M). */
int64_t tdm_nbits_pk_arows(int level, const tdm_nbits_pk *pk, bool int8, int64_t M);

/* The variant for a level, bits, path and block size (always one: portable last). */
const tdm_nbits_variant *tdm_nbits_pick(int level, int bits, bool int8, int64_t bs);

/* Z = sum over blocks of s * zp * sum (the zero-point term of one row n for one row m). */
static inline float tdm_nbits_zterm(const tdm_nbits_w *w, int64_t n, const float *sum) {
    const float *s = w->scales + n * w->nb;
    float z = 0.0f;
    if (w->zp) {
        const float *zp = w->zp + n * w->nb;
        for (int64_t b = 0; b < w->nb; b++) z += s[b] * zp[b] * sum[b];
    } else {
        for (int64_t b = 0; b < w->nb; b++) z += s[b] * sum[b];
        z *= (float)(1 << (w->bits - 1));
    }
    return z;
}

#endif
