/* CPU kernels: contrib family — MatMulIntegerToFloat and DynamicQuantizeMatMul.
 * Y = (A - a_zp) . (B - b_zp[n]) * (a_scale * b_scale[n]) + bias[n], MatMul's batching.
 * The zero-point-free integers go to float and through tdm_sgemm: their products are exact
 * and the sums exact up to 2^24 (K <= 258 for full-range int8 x uint8), beyond that within a
 * float rounding of ONNX Runtime's int32 sums, which it turns into float the same way.
 * DynamicQuantizeMatMul first quantizes A to uint8 as ONNX Runtime does: the range of A
 * widened to include 0, scale = range / 255, zero point = round(-min / scale) (half to even),
 * q = round(a / scale) + zero point, saturated.
 * A constant B (with a constant or no zero point) is converted once, at prepare. */
#include <math.h>
#include <string.h>

#include "backends/cpu/k_contrib.h"
#include "core/alloc.h"

/* B minus its zero points as floats (k x n values, row-major like B). */
static void b_to_float(const tdm_tensor *b, const tdm_tensor *bz, int64_t N, float *bf) {
    for (int64_t i = 0; i < b->count; i++) {
        int z = bz ? tdm_contrib_ld_q(bz->dtype, bz->data, bz->count == 1 ? 0 : i % N) : 0;
        bf[i] = (float)(tdm_contrib_ld_q(b->dtype, b->data, i) - z);
    }
}

/* Prepared state: B converted once when B and its zero point are constants. */
typedef struct qmm_state {
    const void *b_data; /* the constant B seen at prepare */
    int64_t count;
    float *bf;
} qmm_state;

tdm_status *tdm_contrib_qmm_prepare(const tdm_node *node, int opset, int n_in, const tdm_tensor *const *in,
                               const tdm_allocator *a, void **state) {
    (void)opset;
    *state = NULL;
    bool dyn = strcmp(node->op_type, "DynamicQuantizeMatMul") == 0;
    int zi = dyn ? 3 : 5;
    const tdm_tensor *b = n_in > 1 ? in[1] : NULL, *bz = n_in > zi ? in[zi] : NULL;
    bool bz_given = zi < node->n_inputs && node->inputs[zi] >= 0;
    if (!b || (bz_given && !bz) || (b->dtype != TDM_INT8 && b->dtype != TDM_UINT8) || b->rank < 1) return NULL;
    int64_t N = b->rank == 1 ? 1 : b->dims[b->rank - 1];
    if (bz && (bz->dtype != b->dtype || (bz->count != 1 && bz->count != N))) return NULL;
    qmm_state *s = tdm_calloc(a, 1, sizeof *s);
    float *bf = s ? tdm_alloc(a, (size_t)(b->count + 1) * sizeof(float)) : NULL;
    if (!bf) {
        tdm_free(a, s);
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory preparing %s", node->op_type);
    }
    b_to_float(b, bz, N, bf);
    s->b_data = b->data;
    s->count = b->count;
    s->bf = bf;
    *state = s;
    return NULL;
}

void tdm_contrib_qmm_release(void *state, const tdm_allocator *a) {
    qmm_state *s = state;
    if (!s) return;
    tdm_free(a, s->bf);
    tdm_free(a, s);
}

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
    const qmm_state *ps = ctx->state;
    float *bf = NULL;
    const float *bconst = ps && ps->b_data == b->data && ps->count == b->count ? ps->bf : NULL;
    if (!bconst) {
        bf = tdm_kscratch(ctx, (size_t)(b->count + 1) * sizeof(float));
        if (!bf) return tdm_node_error(ctx->node, TDM_ERR_OUT_OF_MEMORY, "out of memory");
        b_to_float(b, bz, N, bf);
        bconst = bf;
    }
    (void)K;
    tdm_status *st = tdm_contrib_matmul(ctx, q->a->rank, q->a->dims, q->af, b->rank, b->dims, bconst, false,
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
    zf = zf >= 0.0f ? (zf <= 255.0f ? zf : 255.0f) : 0.0f; /* NaN (infinite inputs) too */
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

