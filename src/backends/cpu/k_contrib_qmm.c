/* CPU kernels: contrib family — MatMulIntegerToFloat and DynamicQuantizeMatMul.
 * Y = (A - a_zp) . (B - b_zp[n]) * (a_scale * b_scale[n]) + bias[n], MatMul's batching.
 * The zero-point-free integers go to float and through tdm_sgemm: their products are exact
 * and the sums exact up to 2^24 (K <= 258 for full-range int8 x uint8), beyond that within a
 * float rounding of ONNX Runtime's int32 sums, which it turns into float the same way.
 * DynamicQuantizeMatMul first quantizes A to uint8 as ONNX Runtime does: the range of A
 * widened to include 0, scale = range / 255, zero point = round(-min / scale) (half to even),
 * q = round(a / scale) + zero point, saturated. */
#include <math.h>
#include <string.h>

#include "backends/cpu/k_contrib.h"
#include "core/alloc.h"

typedef struct qmm_args {
    const tdm_tensor *a, *b, *bs, *bz, *bias;
    float a_scale;
    const float *af; /* A as floats minus its zero point */
} qmm_args;

static tdm_status *qmm_finish(tdm_kernel_ctx *ctx, qmm_args *q) {
    const tdm_tensor *b = q->b, *bs = q->bs, *bz = q->bz, *bias = q->bias;
    tdm_tensor *y = ctx->out[0];
    int64_t N = b->rank == 1 ? 1 : b->dims[b->rank - 1];
    int64_t K = b->rank == 1 ? b->dims[0] : b->dims[b->rank - 2];
    bool per_col_ok = b->rank >= 1;
    if (bs->dtype != TDM_FLOAT || (bs->count != 1 && (!per_col_ok || bs->count != N)) ||
        (bz && (bz->dtype != b->dtype || (bz->count != 1 && bz->count != N))) ||
        (bias && (bias->dtype != TDM_FLOAT || bias->count != N)))
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "b_scale and b_zero_point must be scalars or [%lld] (b_zero_point of B's type), "
                              "bias float32 [%lld]",
                              (long long)N, (long long)N);
    size_t nb = (size_t)b->count;
    float *bf = tdm_kscratch(ctx, (nb + 1) * sizeof(float));
    if (!bf) return tdm_node_error(ctx->node, TDM_ERR_OUT_OF_MEMORY, "out of memory");
    for (size_t i = 0; i < nb; i++) {
        int64_t col = (int64_t)i % N;
        int z = bz ? tdm_contrib_ld_q(bz->dtype, bz->data, bz->count == 1 ? 0 : col) : 0;
        bf[i] = (float)(tdm_contrib_ld_q(b->dtype, b->data, (int64_t)i) - z);
    }
    (void)K;
    tdm_status *st = tdm_contrib_matmul(ctx, q->a->rank, q->a->dims, q->af, b->rank, b->dims, bf, false,
                                        false, 1.0f, y->data, y->count);
    tdm_free(ctx->alloc, bf);
    if (st) return st;
    float *Y = y->data;
    const float *s = bs->data, *bv = bias ? bias->data : NULL;
    int64_t cols = b->rank == 1 ? 1 : N;
    for (int64_t i = 0; i < y->count; i++) {
        int64_t col = i % cols;
        Y[i] = Y[i] * (q->a_scale * s[bs->count == 1 ? 0 : col]) + (bv ? bv[col] : 0.0f);
    }
    return NULL;
}

tdm_status *tdm_contrib_run_matmul_integer_to_float(tdm_kernel_ctx *ctx) {
    const tdm_tensor *a = ctx->in[0], *as = ctx->in[2], *az = ctx->n_in > 4 ? ctx->in[4] : NULL;
    if (as->dtype != TDM_FLOAT || as->count != 1 || (az && (az->dtype != a->dtype || az->count != 1)))
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "a_scale must be a float32 scalar and a_zero_point a scalar of A's type "
                              "(per-tensor quantization of A)");
    qmm_args q = {.a = a, .b = ctx->in[1], .bs = ctx->in[3], .bz = ctx->n_in > 5 ? ctx->in[5] : NULL,
                  .bias = ctx->n_in > 6 ? ctx->in[6] : NULL, .a_scale = *(const float *)as->data};
    if (q.b->dtype != TDM_INT8 && q.b->dtype != TDM_UINT8)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "B must be int8 or uint8");
    float *af = tdm_kscratch(ctx, (size_t)(a->count + 1) * sizeof(float));
    if (!af) return tdm_node_error(ctx->node, TDM_ERR_OUT_OF_MEMORY, "out of memory");
    int z = az ? tdm_contrib_ld_q(az->dtype, az->data, 0) : 0;
    for (int64_t i = 0; i < a->count; i++) af[i] = (float)(tdm_contrib_ld_q(a->dtype, a->data, i) - z);
    q.af = af;
    tdm_status *st = qmm_finish(ctx, &q);
    tdm_free(ctx->alloc, af);
    return st;
}

tdm_status *tdm_contrib_run_dynamic_quantize_matmul(tdm_kernel_ctx *ctx) {
    const tdm_tensor *a = ctx->in[0];
    qmm_args q = {.a = a, .b = ctx->in[1], .bs = ctx->in[2], .bz = ctx->n_in > 3 ? ctx->in[3] : NULL,
                  .bias = ctx->n_in > 4 ? ctx->in[4] : NULL};
    if (q.b->dtype != TDM_INT8 && q.b->dtype != TDM_UINT8)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "B must be int8 or uint8");
    const float *A = a->data;
    float lo = 0.0f, hi = 0.0f;
    for (int64_t i = 0; i < a->count; i++) {
        lo = A[i] < lo ? A[i] : lo;
        hi = A[i] > hi ? A[i] : hi;
    }
    float scale = hi == lo ? 1.0f : (hi - lo) / 255.0f;
    float zf = 0.0f - lo / scale;
    zf = zf < 0.0f ? 0.0f : zf > 255.0f ? 255.0f : zf;
    int zp = (int)nearbyintf(zf);
    float *af = tdm_kscratch(ctx, (size_t)(a->count + 1) * sizeof(float));
    if (!af) return tdm_node_error(ctx->node, TDM_ERR_OUT_OF_MEMORY, "out of memory");
    for (int64_t i = 0; i < a->count; i++) {
        int v = tdm_contrib_sat(TDM_UINT8, nearbyintf(A[i] / scale) + (float)zp);
        af[i] = (float)(v - zp);
    }
    q.af = af;
    q.a_scale = scale;
    tdm_status *st = qmm_finish(ctx, &q);
    tdm_free(ctx->alloc, af);
    return st;
}
