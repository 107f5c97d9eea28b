/* Single-precision GEMM for the CPU backend (tdm_sgemm, declared in cpu_kernels.h).
 *
 * Blocked in the usual three levels: C is cut into column panels of NC, K into slices of
 * KC and rows into blocks of MC. A KC x NC slice of B and an MC x KC block of A are packed
 * into contiguous micro-panels (NR columns / MR rows, zero padded) so that the micro-kernel
 * streams both from cache while it keeps an MR x NR tile of C in vector registers.
 *
 * The micro-kernels (cpu_gemm_uk.c: portable 4x8, AVX2 6x16, AVX-512 12x32) come from the
 * caller's tdm_cpu_simd, chosen for the device at start-up (cpu_simd.h).
 *
 * Threads: large products are cut into tiles of C (column stripes first, then row blocks)
 * that run as independent tasks on the pool, each packing its own operands. Scratch
 * memory comes from libc (tdm_sgemm has no allocator argument); if it cannot be had, a
 * plain loop computes the result instead, so the function cannot fail. */
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_simd.h"
#include "core/alloc.h"
#include "core/threadpool.h"

#define GEMM_KC 256
#define GEMM_MC 144 /* multiple of every MR (4, 6, 12) */
#define GEMM_NC 2048

typedef float v4f __attribute__((vector_size(16)));
typedef float v4f_u __attribute__((vector_size(16), aligned(4), may_alias));

typedef struct gemm_arch {
    int mr, nr;
    tdm_simd_gemm_ukernel kernel;
} gemm_arch;

/* ---- packing ---- */

/* Packs rows [0, mc) x cols [0, kc) of op(A) (A already offset to the block's origin) into
 * MR-row panels: panel p holds, for each k, MR consecutive values. */
static void pack_a(int mr, int64_t mc, int64_t kc, const float *A, int64_t lda, bool trans,
                   float *restrict dst) {
    for (int64_t i0 = 0; i0 < mc; i0 += mr) {
        int mi = (int)(mc - i0 < mr ? mc - i0 : mr);
        if (!trans) {
            for (int i = 0; i < mi; i++) {
                const float *src = A + (i0 + i) * lda;
                for (int64_t k = 0; k < kc; k++) dst[k * mr + i] = src[k];
            }
            for (int i = mi; i < mr; i++)
                for (int64_t k = 0; k < kc; k++) dst[k * mr + i] = 0.0f;
        } else {
            if (mi == mr && mr == 6) { /* explicit copies: no memcpy call per k */
                for (int64_t k = 0; k < kc; k++) {
                    const float *src = A + k * lda + i0;
                    float *d = dst + k * 6;
                    d[0] = src[0], d[1] = src[1], d[2] = src[2];
                    d[3] = src[3], d[4] = src[4], d[5] = src[5];
                }
            } else {
                for (int64_t k = 0; k < kc; k++) {
                    const float *src = A + k * lda + i0;
                    float *d = dst + k * mr;
                    int i = 0;
                    for (; i < mi; i++) d[i] = src[i];
                    for (; i < mr; i++) d[i] = 0.0f;
                }
            }
        }
        dst += (size_t)mr * kc;
    }
}

/* Packs rows [0, kc) x cols [0, nc) of op(B) into NR-column panels: panel p holds, for each
 * k, NR consecutive values. */
static void pack_b(int nr, int64_t kc, int64_t nc, const float *B, int64_t ldb, bool trans,
                   float *restrict dst) {
    for (int64_t j0 = 0; j0 < nc; j0 += nr) {
        int nj = (int)(nc - j0 < nr ? nc - j0 : nr);
        if (!trans) {
            if (nj == nr) { /* nr is 8, 16 or 32: vector copies, no memcpy calls */
                for (int64_t k = 0; k < kc; k++) {
                    const v4f_u *src = (const v4f_u *)(B + k * ldb + j0);
                    v4f *d = (v4f *)(dst + k * nr);
                    for (int q = 0; q < nr / 4; q++) d[q] = src[q];
                }
            } else {
                for (int64_t k = 0; k < kc; k++) {
                    const float *src = B + k * ldb + j0;
                    float *d = dst + k * nr;
                    int j = 0;
                    for (; j < nj; j++) d[j] = src[j];
                    for (; j < nr; j++) d[j] = 0.0f;
                }
            }
        } else {
            for (int j = 0; j < nj; j++) {
                const float *src = B + (j0 + j) * ldb;
                for (int64_t k = 0; k < kc; k++) dst[k * nr + j] = src[k];
            }
            for (int j = nj; j < nr; j++)
                for (int64_t k = 0; k < kc; k++) dst[k * nr + j] = 0.0f;
        }
        dst += (size_t)nr * kc;
    }
}

/* ---- drivers ---- */

typedef struct gemm_args {
    bool ta, tb;
    int64_t M, N, K;
    float alpha, beta;
    const float *A, *B;
    int64_t lda, ldb, ldc;
    float *C;
    tdm_simd_dot_f32 dot; /* the device's row dot product (cpu_dot.c) */
} gemm_args;

/* Plain loops: tiny products and the fallback when scratch memory is unavailable. */
static void gemm_naive(const gemm_args *g, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
    for (int64_t i = m0; i < m1; i++) {
        float *cr = g->C + i * g->ldc;
        if (g->beta == 0.0f) {
            for (int64_t j = n0; j < n1; j++) cr[j] = 0.0f;
        } else if (g->beta != 1.0f) {
            for (int64_t j = n0; j < n1; j++) cr[j] *= g->beta;
        }
        if (!g->tb && !g->ta && g->ldb == 1 && n1 - n0 == 1) { /* B is one contiguous column */
            cr[n0] += g->alpha * g->dot(g->A + i * g->lda, g->B + n0, g->K);
        } else if (!g->tb) {
            for (int64_t k = 0; k < g->K; k++) {
                float a = g->alpha * (g->ta ? g->A[k * g->lda + i] : g->A[i * g->lda + k]);
                const float *br = g->B + k * g->ldb;
                for (int64_t j = n0; j < n1; j++) cr[j] += a * br[j];
            }
        } else {
            for (int64_t j = n0; j < n1; j++) {
                const float *br = g->B + j * g->ldb;
                float s = 0.0f;
                if (!g->ta) {
                    s = g->dot(g->A + i * g->lda, br, g->K);
                } else {
                    for (int64_t k = 0; k < g->K; k++) s += g->A[k * g->lda + i] * br[k];
                }
                cr[j] += g->alpha * s;
            }
        }
    }
}

typedef struct naive_job {
    const gemm_args *g;
    bool by_cols; /* split N (else M) */
} naive_job;

static void gemm_naive_task(void *arg, int64_t b, int64_t e) {
    const naive_job *j = arg;
    if (j->by_cols) gemm_naive(j->g, 0, j->g->M, b, e);
    else gemm_naive(j->g, b, e, 0, j->g->N);
}

/* Blocked product for the C tile [m0, m1) x [n0, n1). */
static void gemm_tile(const gemm_args *g, const gemm_arch *arch, int64_t m0, int64_t m1,
                      int64_t n0, int64_t n1) {
    const int mr = arch->mr, nr = arch->nr;
    int64_t mt = m1 - m0, nt = n1 - n0;
    int64_t mc_max = mt < GEMM_MC ? (mt + mr - 1) / mr * mr : GEMM_MC;
    int64_t nc_max = nt < GEMM_NC ? (nt + nr - 1) / nr * nr : GEMM_NC;
    int64_t kc_max = g->K < GEMM_KC ? g->K : GEMM_KC;
    float *pa = tdm_alloc(NULL, (size_t)(mc_max * kc_max) * sizeof(float));
    float *pb = tdm_alloc(NULL, (size_t)(nc_max * kc_max) * sizeof(float));
    if (!pa || !pb) {
        tdm_free(NULL, pa);
        tdm_free(NULL, pb);
        gemm_naive(g, m0, m1, n0, n1);
        return;
    }
    for (int64_t jc = n0; jc < n1; jc += nc_max) {
        int64_t nc = n1 - jc < nc_max ? n1 - jc : nc_max;
        for (int64_t pc = 0; pc < g->K; pc += kc_max) {
            int64_t kc = g->K - pc < kc_max ? g->K - pc : kc_max;
            float beta = pc == 0 ? g->beta : 1.0f;
            const float *bsrc = g->tb ? g->B + jc * g->ldb + pc : g->B + pc * g->ldb + jc;
            pack_b(nr, kc, nc, bsrc, g->ldb, g->tb, pb);
            for (int64_t ic = m0; ic < m1; ic += mc_max) {
                int64_t mc = m1 - ic < mc_max ? m1 - ic : mc_max;
                const float *asrc = g->ta ? g->A + pc * g->lda + ic : g->A + ic * g->lda + pc;
                pack_a(mr, mc, kc, asrc, g->lda, g->ta, pa);
                for (int64_t jr = 0; jr < nc; jr += nr) {
                    int nn = (int)(nc - jr < nr ? nc - jr : nr);
                    const float *bp = pb + jr * kc;
                    for (int64_t ir = 0; ir < mc; ir += mr) {
                        int mm = (int)(mc - ir < mr ? mc - ir : mr);
                        float *c = g->C + (ic + ir) * g->ldc + jc + jr;
                        arch->kernel(kc, pa + ir * kc, bp, c, g->ldc, mm, nn, g->alpha, beta);
                    }
                }
            }
        }
    }
    tdm_free(NULL, pa);
    tdm_free(NULL, pb);
}

typedef struct gemm_job {
    const gemm_args *g;
    gemm_arch arch;
    int64_t tm, tn;   /* tile size */
    int64_t n_tiles_n; /* tiles per row of tiles */
} gemm_job;

static void gemm_task(void *arg, int64_t begin, int64_t end) {
    const gemm_job *job = arg;
    const gemm_args *g = job->g;
    for (int64_t t = begin; t < end; t++) {
        int64_t m0 = t / job->n_tiles_n * job->tm, n0 = t % job->n_tiles_n * job->tn;
        int64_t m1 = m0 + job->tm < g->M ? m0 + job->tm : g->M;
        int64_t n1 = n0 + job->tn < g->N ? n0 + job->tn : g->N;
        gemm_tile(g, &job->arch, m0, m1, n0, n1);
    }
}

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

void tdm_sgemm(const tdm_cpu_simd *simd, tdm_threadpool *pool, bool transA, bool transB, int64_t M, int64_t N, int64_t K,
               float alpha, const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
               float *C, int64_t ldc) {
    if (M <= 0 || N <= 0) return;
    if (!simd) simd = tdm_cpu_simd_portable();
    gemm_args g = {transA, transB, M, N, K, alpha, beta, A, B, lda, ldb, ldc, C, simd->dot_f32};
    if (K <= 0 || alpha == 0.0f) {
        g.K = 0;
        gemm_naive(&g, 0, M, 0, N);
        return;
    }
    double flops = 2.0 * (double)M * (double)N * (double)K;
    int threads = tdm_threadpool_size(pool);
    /* Tiny products and matrix-vector products: packing does not pay. */
    if (flops < 32768.0 || M == 1 || N == 1) {
        if (threads > 1 && flops >= 1.0e6) {
            naive_job nj = {&g, M == 1};
            int64_t n = M == 1 ? N : M;
            tdm_parallel_for(pool, n, M == 1 ? 256 : 16, gemm_naive_task, &nj);
        } else {
            gemm_naive(&g, 0, M, 0, N);
        }
        return;
    }
    gemm_job job = {&g, {simd->gemm_mr, simd->gemm_nr, simd->gemm}, M, N, 1};
    if (threads > 1 && flops >= 4.0e6) {
        /* Aim for a few tiles per thread: cut N into stripes first (A is repacked per
         * stripe, which is cheap), then M. */
        int64_t want = (int64_t)threads * 3;
        int64_t tn = round_up(N, job.arch.nr), tm = round_up(M, job.arch.mr);
        while (((M + tm - 1) / tm) * ((N + tn - 1) / tn) < want && tn > 256)
            tn = round_up(tn / 2, job.arch.nr);
        while (((M + tm - 1) / tm) * ((N + tn - 1) / tn) < want && tm > 4 * job.arch.mr)
            tm = round_up(tm / 2, job.arch.mr);
        while (((M + tm - 1) / tm) * ((N + tn - 1) / tn) < want && tn > 4 * job.arch.nr)
            tn = round_up(tn / 2, job.arch.nr);
        job.tm = tm;
        job.tn = tn;
        job.n_tiles_n = (N + tn - 1) / tn;
        int64_t tiles = ((M + tm - 1) / tm) * job.n_tiles_n;
        tdm_parallel_for(pool, tiles, 1, gemm_task, &job);
        return;
    }
    gemm_tile(&g, &job.arch, 0, M, 0, N);
}
