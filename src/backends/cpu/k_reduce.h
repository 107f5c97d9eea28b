/* Private to the reduce kernel family (k_reduce*.c): compute-type conversions, the
 * [outer, n, inner] view of a tensor around one axis, and the run functions that
 * k_reduce.c lists in the family's kernel table.
 *
 * Kernels compute in one of four "compute types": float for float32/float16/bfloat16,
 * double for float64, int64 for the signed and small unsigned integers, uint64 for uint64.
 * tdm_rd_load gives an input's data in a compute type (converting into scratch only when
 * the storage type differs), tdm_rd_store writes compute values out in any dtype. */
#ifndef TDM_BACKENDS_CPU_K_REDUCE_H
#define TDM_BACKENDS_CPU_K_REDUCE_H

#include <string.h>

#include "backends/cpu/cpu_kernels.h"

typedef enum tdm_rd_ctype { TDM_RD_F32, TDM_RD_F64, TDM_RD_I64, TDM_RD_U64 } tdm_rd_ctype;

/* The natural compute type of a storage dtype (see above). */
tdm_rd_ctype tdm_rd_ctype_of(tdm_dtype dt);
size_t tdm_rd_csize(tdm_rd_ctype ct);
/* True when a tensor of dtype dt already holds compute values of type ct. */
bool tdm_rd_native(tdm_dtype dt, tdm_rd_ctype ct);

/* *data = t's elements as compute type ct. Points into t when native, else into a scratch
 * copy returned in *owned (free with tdm_free(ctx->alloc, *owned); NULL when none). */
tdm_status *tdm_rd_load(tdm_kernel_ctx *ctx, const tdm_tensor *t, tdm_rd_ctype ct,
                        const void **data, void **owned);
/* Converts n compute values of type ct into dst of dtype dt (floats to integers saturate). */
void tdm_rd_store(const void *src, tdm_rd_ctype ct, void *dst, tdm_dtype dt, int64_t n);
/* Loads t as compute type ct and broadcasts it (unidirectionally) to the shape
 * (rank, dims): *out holds the product of dims values, owned by the caller. */
tdm_status *tdm_rd_expand(tdm_kernel_ctx *ctx, const tdm_tensor *t, tdm_rd_ctype ct, int rank,
                          const int64_t *dims, void **out);

/* exp for float32 written so that loops calling it vectorize (no libm call, no branches):
 * range reduction to r in [-ln2/2, ln2/2], a degree-7 polynomial, and the power of two
 * applied in two halves so results underflow gradually and overflow to inf like expf.
 * Relative error below 2e-7 (about 1 ulp); NaN in, NaN out. */
static inline float tdm_rd_sel(int c, float a, float b) {
    int32_t ia, ib, r;
    memcpy(&ia, &a, 4);
    memcpy(&ib, &b, 4);
    r = (ia & -c) | (ib & ~-c);
    float f;
    memcpy(&f, &r, 4);
    return f;
}

static inline float tdm_rd_expf(float x) {
    float xc = tdm_rd_sel(x > 89.0f, 89.0f, x);
    xc = tdm_rd_sel(xc < -104.0f, -104.0f, xc);
    float t = xc * 1.44269504088896341f + 12582912.0f; /* round(x / ln2) in the low bits */
    float n = t - 12582912.0f;
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    int32_t u;
    memcpy(&u, &t, 4);
    int32_t ni = u - 0x4B400000, h = ni / 2;
    int32_t e1 = (int32_t)((uint32_t)(h + 127) << 23), e2 = (int32_t)((uint32_t)(ni - h + 127) << 23);
    float s1, s2;
    memcpy(&s1, &e1, 4);
    memcpy(&s2, &e2, 4);
    return tdm_rd_sel(x != x, x, (p * s1) * s2);
}

/* Products of the dims before `axis`, at `axis`, and after it. */
void tdm_rd_split(int rank, const int64_t *dims, int axis, int64_t *outer, int64_t *n,
                  int64_t *inner);

/* Softmax-like ops over [outer, n, inner] in float or double (k_reduce_softmax.c).
 * mode: 0 softmax, 1 log-softmax, 2 hardmax. x and y may not alias. */
void tdm_rd_softmax(tdm_threadpool *pool, tdm_rd_ctype ct, int mode, const void *x, void *y,
                    int64_t outer, int64_t n, int64_t inner);

/* ---- run functions of the family's kernel table ---- */
tdm_status *tdm_rd_run_reduce_sum(tdm_kernel_ctx *ctx);
tdm_status *tdm_rd_run_reduce_mean(tdm_kernel_ctx *ctx);
tdm_status *tdm_rd_run_reduce_max(tdm_kernel_ctx *ctx);
tdm_status *tdm_rd_run_reduce_min(tdm_kernel_ctx *ctx);
tdm_status *tdm_rd_run_reduce_prod(tdm_kernel_ctx *ctx);
tdm_status *tdm_rd_run_reduce_l1(tdm_kernel_ctx *ctx);
tdm_status *tdm_rd_run_reduce_l2(tdm_kernel_ctx *ctx);
tdm_status *tdm_rd_run_reduce_log_sum(tdm_kernel_ctx *ctx);
tdm_status *tdm_rd_run_reduce_log_sum_exp(tdm_kernel_ctx *ctx);
tdm_status *tdm_rd_run_reduce_sum_square(tdm_kernel_ctx *ctx);
tdm_status *tdm_rd_run_argmax(tdm_kernel_ctx *ctx);
tdm_status *tdm_rd_run_argmin(tdm_kernel_ctx *ctx);
tdm_status *tdm_rd_run_topk(tdm_kernel_ctx *ctx);
tdm_status *tdm_rd_run_cumsum(tdm_kernel_ctx *ctx);
tdm_status *tdm_rd_run_softmax(tdm_kernel_ctx *ctx);
tdm_status *tdm_rd_run_log_softmax(tdm_kernel_ctx *ctx);
tdm_status *tdm_rd_run_hardmax(tdm_kernel_ctx *ctx);
tdm_status *tdm_rd_run_layer_norm(tdm_kernel_ctx *ctx);
tdm_status *tdm_rd_run_nll_loss(tdm_kernel_ctx *ctx);
tdm_status *tdm_rd_run_sce_loss(tdm_kernel_ctx *ctx);

#endif
