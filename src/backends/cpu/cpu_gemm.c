/* Single-precision GEMM for the CPU backend (tdm_sgemm, declared in cpu_kernels.h).
 *
 * Blocked in the usual three levels: C is cut into column panels of NC, K into slices of
 * KC and rows into blocks of MC. A KC x NC slice of B and an MC x KC block of A are packed
 * into contiguous micro-panels (NR columns / MR rows, zero padded) so that the micro-kernel
 * streams both from cache while it keeps an MR x NR tile of C in vector registers.
 *
 * The micro-kernels use GCC vector extensions. On x86 an AVX2+FMA kernel (6x16) is built
 * with a target attribute and chosen at run time when the CPU has it; otherwise a portable
 * 4x8 kernel on 16-byte vectors is used (SSE2 / NEON).
 *
 * Threads: large products are cut into tiles of C (column stripes first, then row blocks)
 * that run as independent tasks on the pool, each packing its own operands. Scratch
 * memory comes from libc (tdm_sgemm has no allocator argument); if it cannot be had, a
 * plain loop computes the result instead, so the function cannot fail. */
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_kernels.h"
#include "core/alloc.h"
#include "core/threadpool.h"

#define GEMM_KC 256
#define GEMM_MC 144 /* multiple of both MRs (6 and 4) */
#define GEMM_NC 2048

typedef float v4f __attribute__((vector_size(16)));
typedef float v4f_u __attribute__((vector_size(16), aligned(4), may_alias));

/* Micro-kernel: C[m x n] = alpha * Apanel * Bpanel + beta * C (beta == 0: C not read). */
typedef void (*gemm_ukernel)(int64_t kc, const float *restrict pa, const float *restrict pb,
                             float *restrict c, int64_t ldc, int m, int n, float alpha,
                             float beta);

typedef struct gemm_arch {
    int mr, nr;
    gemm_ukernel kernel;
} gemm_arch;

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

/* ---- portable 4x8 kernel (two 4-float vectors per row) ---- */
static void ukernel_4x8(int64_t kc, const float *restrict pa, const float *restrict pb,
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

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#define GEMM_HAVE_AVX2 1
typedef float v8f __attribute__((vector_size(32)));
typedef float v8f_u __attribute__((vector_size(32), aligned(4), may_alias));

/* ---- AVX2 + FMA 6x16 kernel: 12 accumulators, 2 B vectors, 1 broadcast ---- */
__attribute__((target("avx2,fma"))) static void
ukernel_6x16_avx2(int64_t kc, const float *restrict pa, const float *restrict pb,
                  float *restrict c, int64_t ldc, int m, int n, float alpha, float beta) {
    v8f c00 = {0}, c01 = {0}, c10 = {0}, c11 = {0}, c20 = {0}, c21 = {0};
    v8f c30 = {0}, c31 = {0}, c40 = {0}, c41 = {0}, c50 = {0}, c51 = {0};
    for (int64_t k = 0; k < kc; k++) {
        v8f b0 = *(const v8f *)(pb);
        v8f b1 = *(const v8f *)(pb + 8);
        v8f a;
        a = (v8f){0} + pa[0];
        c00 += a * b0;
        c01 += a * b1;
        a = (v8f){0} + pa[1];
        c10 += a * b0;
        c11 += a * b1;
        a = (v8f){0} + pa[2];
        c20 += a * b0;
        c21 += a * b1;
        a = (v8f){0} + pa[3];
        c30 += a * b0;
        c31 += a * b1;
        a = (v8f){0} + pa[4];
        c40 += a * b0;
        c41 += a * b1;
        a = (v8f){0} + pa[5];
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
#endif

static gemm_arch gemm_pick_arch(void) {
#ifdef GEMM_HAVE_AVX2
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return (gemm_arch){6, 16, ukernel_6x16_avx2};
#endif
    return (gemm_arch){4, 8, ukernel_4x8};
}

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
            if (nj == nr) { /* nr is 8 or 16: vector copies, no memcpy calls */
                for (int64_t k = 0; k < kc; k++) {
                    const v4f_u *src = (const v4f_u *)(B + k * ldb + j0);
                    v4f *d = (v4f *)(dst + k * nr);
                    d[0] = src[0];
                    d[1] = src[1];
                    if (nr == 16) {
                        d[2] = src[2];
                        d[3] = src[3];
                    }
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
} gemm_args;

/* Dot product with eight partial sums so that it vectorizes without -ffast-math. */
static float dot_f32(const float *a, const float *b, int64_t n) {
    float s[8] = {0};
    int64_t k = 0;
    for (; k + 8 <= n; k += 8)
        for (int u = 0; u < 8; u++) s[u] += a[k + u] * b[k + u];
    float r = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
    for (; k < n; k++) r += a[k] * b[k];
    return r;
}

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
            cr[n0] += g->alpha * dot_f32(g->A + i * g->lda, g->B + n0, g->K);
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
                    s = dot_f32(g->A + i * g->lda, br, g->K);
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

void tdm_sgemm(tdm_threadpool *pool, bool transA, bool transB, int64_t M, int64_t N, int64_t K,
               float alpha, const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
               float *C, int64_t ldc) {
    if (M <= 0 || N <= 0) return;
    gemm_args g = {transA, transB, M, N, K, alpha, beta, A, B, lda, ldb, ldc, C};
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
    gemm_job job = {&g, gemm_pick_arch(), M, N, 1};
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
