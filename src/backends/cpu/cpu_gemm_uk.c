/* The GEMM micro-kernels of tdm_sgemm (cpu_gemm.c), one per level (cpu_simd.h): an MR x NR
 * tile of C stays in vector registers while kc steps of an A panel (MR floats a step) and a
 * B panel (NR floats a step) stream from cache.
 *   portable  4 x 8   two 4-float vectors a row (SSE2, NEON, any GCC target)
 *   avx2      6 x 16  12 accumulators, 2 B vectors, 1 broadcast (of 16 registers)
 *   avx512   12 x 32  24 accumulators, 2 B vectors, 1 broadcast (of 32 registers)
 * Per element of C, every variant adds the kc products in the same order; they differ only
 * where a multiply and an add become one FMA. */
#include <stdint.h>

#include "backends/cpu/cpu_simd.h"

typedef float v4f __attribute__((vector_size(16)));
typedef float v4f_u __attribute__((vector_size(16), aligned(4), may_alias));

/* Writes an MR x NR accumulator tile held in `acc` (row-major, NR floats per row) to C. */
static inline void store_tile_scalar(const float *acc, int nr, float *c, int64_t ldc, int m,
                                     int n, float alpha, float beta) {
    for (int i = 0; i < m; i++) {
        float *cr = c + i * ldc;
        const float *ar = acc + i * nr;
        if (beta == 0.0f) {
            for (int j = 0; j < n; j++) cr[j] = alpha * ar[j];
        } else {
            for (int j = 0; j < n; j++) cr[j] = alpha * ar[j] + beta * cr[j];
        }
    }
}

void tdm_gemm_uk_portable(int64_t kc, const float *restrict pa, const float *restrict pb,
                          float *restrict c, int64_t ldc, int m, int n, float alpha, float beta) {
    v4f c00 = {0}, c01 = {0}, c10 = {0}, c11 = {0}, c20 = {0}, c21 = {0}, c30 = {0}, c31 = {0};
    for (int64_t k = 0; k < kc; k++) {
        v4f b0 = *(const v4f *)(pb);
        v4f b1 = *(const v4f *)(pb + 4);
        float a0 = pa[0], a1 = pa[1], a2 = pa[2], a3 = pa[3];
        c00 += b0 * a0;
        c01 += b1 * a0;
        c10 += b0 * a1;
        c11 += b1 * a1;
        c20 += b0 * a2;
        c21 += b1 * a2;
        c30 += b0 * a3;
        c31 += b1 * a3;
        pa += 4;
        pb += 8;
    }
    if (m == 4 && n == 8) {
        v4f r[8] = {c00, c01, c10, c11, c20, c21, c30, c31};
        for (int i = 0; i < 4; i++) {
            v4f_u *p0 = (v4f_u *)(c + i * ldc), *p1 = (v4f_u *)(c + i * ldc + 4);
            if (beta == 0.0f) {
                *p0 = r[2 * i] * alpha;
                *p1 = r[2 * i + 1] * alpha;
            } else {
                *p0 = r[2 * i] * alpha + *p0 * beta;
                *p1 = r[2 * i + 1] * alpha + *p1 * beta;
            }
        }
        return;
    }
    float acc[4 * 8] __attribute__((aligned(16)));
    v4f *av = (v4f *)acc;
    av[0] = c00, av[1] = c01, av[2] = c10, av[3] = c11;
    av[4] = c20, av[5] = c21, av[6] = c30, av[7] = c31;
    store_tile_scalar(acc, 8, c, ldc, m, n, alpha, beta);
}

#ifdef TDM_SIMD_X86
typedef float v8f __attribute__((vector_size(32)));
typedef float v8f_u __attribute__((vector_size(32), aligned(4), may_alias));

TDM_TARGET_AVX2 void tdm_gemm_uk_avx2(int64_t kc, const float *restrict pa,
                                      const float *restrict pb, float *restrict c, int64_t ldc,
                                      int m, int n, float alpha, float beta) {
    v8f c00 = {0}, c01 = {0}, c10 = {0}, c11 = {0}, c20 = {0}, c21 = {0};
    v8f c30 = {0}, c31 = {0}, c40 = {0}, c41 = {0}, c50 = {0}, c51 = {0};
    for (int64_t k = 0; k < kc; k++) {
        v8f b0 = *(const v8f *)(pb);
        v8f b1 = *(const v8f *)(pb + 8);
        v8f a;
        a = pa[0] - (v8f){0};
        c00 += a * b0;
        c01 += a * b1;
        a = pa[1] - (v8f){0};
        c10 += a * b0;
        c11 += a * b1;
        a = pa[2] - (v8f){0};
        c20 += a * b0;
        c21 += a * b1;
        a = pa[3] - (v8f){0};
        c30 += a * b0;
        c31 += a * b1;
        a = pa[4] - (v8f){0};
        c40 += a * b0;
        c41 += a * b1;
        a = pa[5] - (v8f){0};
        c50 += a * b0;
        c51 += a * b1;
        pa += 6;
        pb += 16;
    }
    if (m == 6 && n == 16) {
        v8f r[12] = {c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51};
        for (int i = 0; i < 6; i++) {
            v8f_u *p0 = (v8f_u *)(c + i * ldc), *p1 = (v8f_u *)(c + i * ldc + 8);
            if (beta == 0.0f) {
                *p0 = r[2 * i] * alpha;
                *p1 = r[2 * i + 1] * alpha;
            } else {
                *p0 = r[2 * i] * alpha + *p0 * beta;
                *p1 = r[2 * i + 1] * alpha + *p1 * beta;
            }
        }
        return;
    }
    float acc[6 * 16] __attribute__((aligned(32)));
    v8f *av = (v8f *)acc;
    av[0] = c00, av[1] = c01, av[2] = c10, av[3] = c11, av[4] = c20, av[5] = c21;
    av[6] = c30, av[7] = c31, av[8] = c40, av[9] = c41, av[10] = c50, av[11] = c51;
    store_tile_scalar(acc, 16, c, ldc, m, n, alpha, beta);
}

typedef float v16f __attribute__((vector_size(64)));
typedef float v16f_u __attribute__((vector_size(64), aligned(4), may_alias));

/* one row of the 12 x 32 tile: broadcast A's value, two FMAs */
#define UK16_ROW(i)                                                                      \
    a = pa[i] - (v16f){0};                                                               \
    c##i##0 += a * b0;                                                                   \
    c##i##1 += a * b1;

TDM_TARGET_AVX512 void tdm_gemm_uk_avx512(int64_t kc, const float *restrict pa,
                                          const float *restrict pb, float *restrict c,
                                          int64_t ldc, int m, int n, float alpha, float beta) {
    v16f c00 = {0}, c01 = {0}, c10 = {0}, c11 = {0}, c20 = {0}, c21 = {0};
    v16f c30 = {0}, c31 = {0}, c40 = {0}, c41 = {0}, c50 = {0}, c51 = {0};
    v16f c60 = {0}, c61 = {0}, c70 = {0}, c71 = {0}, c80 = {0}, c81 = {0};
    v16f c90 = {0}, c91 = {0}, c100 = {0}, c101 = {0}, c110 = {0}, c111 = {0};
    for (int64_t k = 0; k < kc; k++) {
        v16f b0 = *(const v16f_u *)(pb);
        v16f b1 = *(const v16f_u *)(pb + 16);
        v16f a;
        UK16_ROW(0) UK16_ROW(1) UK16_ROW(2) UK16_ROW(3) UK16_ROW(4) UK16_ROW(5)
        UK16_ROW(6) UK16_ROW(7) UK16_ROW(8) UK16_ROW(9) UK16_ROW(10) UK16_ROW(11)
        pa += 12;
        pb += 32;
    }
    v16f r[24] = {c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51,
                  c60, c61, c70, c71, c80, c81, c90, c91, c100, c101, c110, c111};
    if (m == 12 && n == 32) {
        for (int i = 0; i < 12; i++) {
            v16f_u *p0 = (v16f_u *)(c + i * ldc), *p1 = (v16f_u *)(c + i * ldc + 16);
            if (beta == 0.0f) {
                *p0 = r[2 * i] * alpha;
                *p1 = r[2 * i + 1] * alpha;
            } else {
                *p0 = r[2 * i] * alpha + *p0 * beta;
                *p1 = r[2 * i + 1] * alpha + *p1 * beta;
            }
        }
        return;
    }
    float acc[12 * 32] __attribute__((aligned(64)));
    v16f *av = (v16f *)acc;
    for (int i = 0; i < 24; i++) av[i] = r[i];
    store_tile_scalar(acc, 32, c, ldc, m, n, alpha, beta);
}
#undef UK16_ROW
#endif
