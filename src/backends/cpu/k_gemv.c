/* One-row and few-row products (GEMV) for MatMul, Gemm and FusedMatMul with a constant 2-D B.
 *
 * At batch 1 a recommender's or a classifier head's layers are y[N] = x[K] . B[K, N]: every
 * weight is read once and used once, so the run time is the time to stream B from the cache,
 * plus the call overheads. oneDNN's matmul primitive spends about half a microsecond per call
 * in its argument handling before its kernel starts (measured on the DLRM-like bench model:
 * 12% of a 38 us run in libdnnl outside the JIT code, for 8 products). This path packs B once,
 * on the first one-row run, into panels of 32 columns (each panel K x 32 floats, one
 * sequential stream), and runs an 8-accumulator FMA loop over them (the variant for the CPU,
 * cpu_simd.h); the bias, alpha and the
 * activation are applied to the 32 results while they are in registers' reach. Panels are
 * shared out over the thread pool when B is large enough to pay for the wake-up.
 *
 * A few rows (a small batch through a classifier head or a recommender's MLP) take each panel
 * for all rows before the next: B is streamed from memory once per run, where oneDNN's matmul
 * split over threads by rows reads all of it once per thread (measured in ResNet-50 at batch
 * 8 on 2 threads, weights cold: its 8x2048 . 2048x1000 product 1.32 ms, this path 0.70 ms,
 * ONNX Runtime's 0.42).
 *
 * The packed copy costs as much memory as B; it is made only for weights that such a run
 * used, and freed with the kernel state. */
#include "backends/cpu/k_gemv.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "backends/cpu/cpu_simd.h"
#include "core/alloc.h"
#include "core/threadpool.h"

#define PW 32 /* panel width: 4 vectors of 8 floats */

struct dn_gemv {
    int64_t K, N, panels;
    float *p; /* panels * K * PW floats, zero-padded past N */
};

tdm_status *dn_gemv_pack(const tdm_allocator *a, const float *b, int64_t K, int64_t N, bool nk,
                         dn_gemv **out) {
    *out = NULL;
    if (K < 1 || N < 1) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "gemv: empty B");
    int64_t panels = (N + PW - 1) / PW;
    size_t floats;
    if (__builtin_mul_overflow((size_t)panels, (size_t)K, &floats) ||
        __builtin_mul_overflow(floats, (size_t)PW * sizeof(float), &floats))
        return TDM_ERR(TDM_ERR_LIMIT, "gemv: B is too large");
    dn_gemv *g = tdm_calloc(a, 1, sizeof *g);
    float *p = g ? tdm_alloc(a, floats) : NULL;
    if (!p) {
        tdm_free(a, g);
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory packing a %lldx%lld weight",
                       (long long)K, (long long)N);
    }
    for (int64_t q = 0; q < panels; q++) {
        float *dst = p + q * K * PW;
        int64_t n0 = q * PW, w = N - n0 < PW ? N - n0 : PW;
        for (int64_t k = 0; k < K; k++) {
            float *row = dst + k * PW;
            if (nk) /* B stored [N, K] (Gemm with transB) */
                for (int64_t j = 0; j < w; j++) row[j] = b[(n0 + j) * K + k];
            else
                memcpy(row, b + k * N + n0, (size_t)w * sizeof(float));
            for (int64_t j = w; j < PW; j++) row[j] = 0.0f;
        }
    }
    g->K = K, g->N = N, g->panels = panels, g->p = p;
    *out = g;
    return NULL;
}

void dn_gemv_free(const tdm_allocator *a, dn_gemv *g) {
    if (!g) return;
    tdm_free(a, g->p);
    tdm_free(a, g);
}

int64_t dn_gemv_k(const dn_gemv *g) { return g->K; }
int64_t dn_gemv_n(const dn_gemv *g) { return g->N; }

typedef float v8f __attribute__((vector_size(32)));
typedef float v8f_u __attribute__((vector_size(32), aligned(4), may_alias));

/* acc[0..31] = x . panel (K rows of 32). Two sets of 4 accumulators (even and odd k) keep
 * 8 FMAs in flight. `x[k] - (v8f){0}` is x[k] in every lane (exact for every float, -0 too):
 * one broadcast load, where `(v8f){0} + x[k]` costs a scalar add first. */
#define GEMV_PANEL_BODY                                                                         \
    v8f e0 = {0}, e1 = {0}, e2 = {0}, e3 = {0}, o0 = {0}, o1 = {0}, o2 = {0}, o3 = {0};         \
    int64_t k = 0;                                                                              \
    for (; k + 1 < K; k += 2) {                                                                 \
        const float *r = p + k * PW;                                                            \
        v8f xa = x[k] - (v8f){0}, xb = x[k + 1] - (v8f){0};                                     \
        e0 += xa * *(const v8f_u *)(r + 0);                                                     \
        e1 += xa * *(const v8f_u *)(r + 8);                                                     \
        e2 += xa * *(const v8f_u *)(r + 16);                                                    \
        e3 += xa * *(const v8f_u *)(r + 24);                                                    \
        o0 += xb * *(const v8f_u *)(r + 32);                                                    \
        o1 += xb * *(const v8f_u *)(r + 40);                                                    \
        o2 += xb * *(const v8f_u *)(r + 48);                                                    \
        o3 += xb * *(const v8f_u *)(r + 56);                                                    \
    }                                                                                           \
    if (k < K) {                                                                                \
        const float *r = p + k * PW;                                                            \
        v8f xa = x[k] - (v8f){0};                                                               \
        e0 += xa * *(const v8f_u *)(r + 0);                                                     \
        e1 += xa * *(const v8f_u *)(r + 8);                                                     \
        e2 += xa * *(const v8f_u *)(r + 16);                                                    \
        e3 += xa * *(const v8f_u *)(r + 24);                                                    \
    }                                                                                           \
    *(v8f_u *)(acc + 0) = e0 + o0;                                                              \
    *(v8f_u *)(acc + 8) = e1 + o1;                                                              \
    *(v8f_u *)(acc + 16) = e2 + o2;                                                             \
    *(v8f_u *)(acc + 24) = e3 + o3;

/* The variants (chosen per device, cpu_simd.h): the same 8-accumulator body in plain C
 * (GCC vector extensions, any target) and for AVX2 + FMA; AVX-512 has 16-float vectors, so
 * two per panel row, and takes four k at a time to keep 8 FMAs in flight. */
void tdm_gemv_panel_portable(const float *restrict p, const float *restrict x, int64_t K,
                             float *restrict acc) {
    GEMV_PANEL_BODY
}

#ifdef TDM_SIMD_X86
TDM_TARGET_AVX2 void tdm_gemv_panel_avx2(const float *restrict p, const float *restrict x,
                                         int64_t K, float *restrict acc) {
    GEMV_PANEL_BODY
}

typedef float v16f __attribute__((vector_size(64)));
typedef float v16f_u __attribute__((vector_size(64), aligned(4), may_alias));

TDM_TARGET_AVX512 void tdm_gemv_panel_avx512(const float *restrict p, const float *restrict x,
                                             int64_t K, float *restrict acc) {
    v16f a0 = {0}, a1 = {0}, b0 = {0}, b1 = {0}, c0 = {0}, c1 = {0}, d0 = {0}, d1 = {0};
    int64_t k = 0;
    for (; k + 3 < K; k += 4) {
        const float *r = p + k * PW;
        v16f xa = x[k] - (v16f){0}, xb = x[k + 1] - (v16f){0};
        v16f xc = x[k + 2] - (v16f){0}, xd = x[k + 3] - (v16f){0};
        a0 += xa * *(const v16f_u *)(r + 0);
        a1 += xa * *(const v16f_u *)(r + 16);
        b0 += xb * *(const v16f_u *)(r + 32);
        b1 += xb * *(const v16f_u *)(r + 48);
        c0 += xc * *(const v16f_u *)(r + 64);
        c1 += xc * *(const v16f_u *)(r + 80);
        d0 += xd * *(const v16f_u *)(r + 96);
        d1 += xd * *(const v16f_u *)(r + 112);
    }
    for (; k < K; k++) {
        const float *r = p + k * PW;
        v16f xa = x[k] - (v16f){0};
        a0 += xa * *(const v16f_u *)(r + 0);
        a1 += xa * *(const v16f_u *)(r + 16);
    }
    *(v16f_u *)(acc + 0) = (a0 + b0) + (c0 + d0);
    *(v16f_u *)(acc + 16) = (a1 + b1) + (c1 + d1);
}
#endif

typedef struct gemv_job {
    const dn_gemv *g;
    int64_t rows;
    const float *x, *bias;
    float alpha;
    const tdm_fused_act *act;
    float *y;
    tdm_simd_gemv_panel panel;
} gemv_job;

static void gemv_panels(void *arg, int64_t q0, int64_t q1) {
    const gemv_job *j = arg;
    const dn_gemv *g = j->g;
    float acc[PW];
    for (int64_t q = q0; q < q1; q++) {
        const float *p = g->p + q * g->K * PW;
        /* the rows one after the other over the same panel: it comes from memory once and
         * from the core's cache for the other rows */
        for (int64_t r = 0; r < j->rows; r++) {
            const float *x = j->x + r * g->K;
            j->panel(p, x, g->K, acc);
            int64_t n0 = q * PW, w = g->N - n0 < PW ? g->N - n0 : PW;
            float *y = j->y + r * g->N + n0;
            for (int64_t c = 0; c < w; c++)
                y[c] = j->alpha * acc[c] + (j->bias ? j->bias[n0 + c] : 0.0f);
            tdm_fused_apply_act(j->act, y, w);
        }
    }
}

void dn_gemv_run(const tdm_kernel_ctx *ctx, const dn_gemv *g, int64_t rows, const float *x,
                 const float *bias, float alpha, const tdm_fused_act *act, float *y) {
    static const tdm_fused_act none = {TDM_FUSED_NONE, 0.0f, 0.0f};
    if (rows < 1) return;
    gemv_job j = {g, rows, x, bias, alpha, act ? act : &none, y,
                  tdm_cpu_simd_of(ctx)->gemv_panel};
    tdm_threadpool *pool = ctx ? ctx->pool : NULL;
    /* about 64 KiB of weights per task; smaller products stay on the caller (measured on the
     * DLRM-like model at batch 1, 2 threads: 256 KiB a task 31.7 us, 128 KiB 23.4 us, 64 KiB
     * 20.8 us, 32 KiB 22.3 us) */
    int64_t grain = (int64_t)(16384 / (g->K * PW * rows)) + 1;
    tdm_parallel_for(pool, g->panels, grain, gemv_panels, &j);
}
