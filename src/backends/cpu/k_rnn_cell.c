/* CPU kernels, rnn family: the recurrence cores for float (tdm_sgemm) and double (a local
 * row-dot-row product; double recurrences are rare and small). */
#include <math.h>
#include <string.h>

#include "backends/cpu/cpu_simd.h"
#include "backends/cpu/k_rnn_impl.h"
#include "core/alloc.h"
#include "core/checked.h"

typedef struct dgemm_nt_args {
    int64_t N, K;
    const double *A, *B;
    int64_t lda, ldb;
    double beta;
    double *C;
    int64_t ldc;
} dgemm_nt_args;

/* Rows [m0, m1) of C = A * B^T + beta * C; both operands are read along contiguous rows. */
static void dgemm_nt_rows(void *arg, int64_t m0, int64_t m1) {
    const dgemm_nt_args *g = arg;
    for (int64_t m = m0; m < m1; m++) {
        const double *a = g->A + m * g->lda;
        double *c = g->C + m * g->ldc;
        for (int64_t n = 0; n < g->N; n++) {
            const double *b = g->B + n * g->ldb;
            double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
            int64_t k = 0;
            for (; k + 4 <= g->K; k += 4) {
                s0 += a[k] * b[k];
                s1 += a[k + 1] * b[k + 1];
                s2 += a[k + 2] * b[k + 2];
                s3 += a[k + 3] * b[k + 3];
            }
            for (; k < g->K; k++) s0 += a[k] * b[k];
            double s = (s0 + s1) + (s2 + s3);
            c[n] = g->beta == 0 ? s : s + g->beta * c[n];
        }
    }
}

static void dgemm_nt(tdm_kernel_ctx *ctx, int64_t M, int64_t N, int64_t K, const double *A,
                     int64_t lda, const double *B, int64_t ldb, double beta, double *C,
                     int64_t ldc) {
    if (M <= 0 || N <= 0) return;
    dgemm_nt_args g = {N, K, A, B, lda, ldb, beta, C, ldc};
    int64_t work = N * (K > 0 ? K : 1);
    int64_t grain = work >= 65536 ? 1 : 65536 / work;
    tdm_parallel_for(ctx->pool, M, grain, dgemm_nt_rows, &g);
}

#define T float
#define SFX f32
#define RT_EXP expf
#define RT_TANH tanhf
#define RT_LOG1P log1pf
#define RT_FABS fabsf
#define RT_GEMM_NT(ctx, M, N, K, A, lda, B, ldb, beta, C, ldc)                             \
    tdm_sgemm(tdm_cpu_simd_of(ctx), (ctx)->pool, false, true, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc)
#include "backends/cpu/k_rnn_tmpl.h"
#undef T
#undef SFX
#undef RT_EXP
#undef RT_TANH
#undef RT_LOG1P
#undef RT_FABS
#undef RT_GEMM_NT

#define T double
#define SFX f64
#define RT_EXP exp
#define RT_TANH tanh
#define RT_LOG1P log1p
#define RT_FABS fabs
#define RT_GEMM_NT(ctx, M, N, K, A, lda, B, ldb, beta, C, ldc)                             \
    dgemm_nt(ctx, M, N, K, A, lda, B, ldb, beta, C, ldc)
#include "backends/cpu/k_rnn_tmpl.h"
#undef T
#undef SFX
#undef RT_EXP
#undef RT_TANH
#undef RT_LOG1P
#undef RT_FABS
#undef RT_GEMM_NT
