/* CPU kernels, misc family: quantization (QuantizeLinear, DequantizeLinear,
 * DynamicQuantizeLinear) and integer matmul / conv (MatMulInteger, QLinearMatMul,
 * ConvInteger, QLinearConv). Integer products accumulate exactly in 64 bits. */
#include <math.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_simd.h"
#include "core/alloc.h"
#include "core/checked.h"
#include "ops/nn_geom.h"

/* k_misc.c */
void tdm_misc_store_f64(tdm_dtype dt, double v, void *dst);

tdm_status *tdm_misc_quantize_run(tdm_kernel_ctx *ctx);
tdm_status *tdm_misc_dequantize_run(tdm_kernel_ctx *ctx);
tdm_status *tdm_misc_dynquant_run(tdm_kernel_ctx *ctx);
tdm_status *tdm_misc_matmul_integer_run(tdm_kernel_ctx *ctx);
tdm_status *tdm_misc_qlinear_matmul_run(tdm_kernel_ctx *ctx);
tdm_status *tdm_misc_conv_integer_run(tdm_kernel_ctx *ctx);
tdm_status *tdm_misc_qlinear_conv_run(tdm_kernel_ctx *ctx);
tdm_status *tdm_misc_qadd_run(tdm_kernel_ctx *ctx);
tdm_status *tdm_misc_qmul_run(tdm_kernel_ctx *ctx);
tdm_status *tdm_misc_qgap_run(tdm_kernel_ctx *ctx);

static bool q_range(tdm_dtype t, double *lo, double *hi) {
    switch (t) {
    case TDM_UINT8: *lo = 0; *hi = 255; return true;
    case TDM_INT8: *lo = -128; *hi = 127; return true;
    case TDM_UINT16: *lo = 0; *hi = 65535; return true;
    case TDM_INT16: *lo = -32768; *hi = 32767; return true;
    case TDM_INT32: *lo = -2147483648.0; *hi = 2147483647.0; return true;
    default: return false;
    }
}

/* Where the scale / zero point of element (p, a, q) of x viewed as [pre, L, post] lives. */
typedef struct q_layout {
    int64_t pre, L, post;
    int kind;          /* 0 per-tensor, 1 per-axis, 2 blocked */
    int64_t block, nblk;
} q_layout;

static tdm_status *q_layout_make(const tdm_kernel_ctx *ctx, const tdm_tensor *x,
                                 const tdm_tensor *scale, const tdm_tensor *zp, q_layout *l) {
    const tdm_node *node = ctx->node;
    memset(l, 0, sizeof *l);
    l->pre = 1;
    l->L = x->count;
    l->post = 1;
    int64_t block = ctx->opset >= 21 ? tdm_attr_int(node, "block_size", 0) : 0;
    /* a one-value zero point may be a scalar beside a [1] scale (ORT's quantizer writes that) */
    if (zp && (zp->count != scale->count || (zp->rank != scale->rank && zp->count != 1)))
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "zero point and scale must have the same shape");
    if (block < 0) return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "block_size is negative");
    if (scale->count == 1 && block == 0) return NULL;
    if (x->rank == 0)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "per-axis scale for a scalar input");
    int axis;
    TDM_TRY(tdm_norm_axis(node, ctx->opset >= 13 ? tdm_attr_int(node, "axis", 1) : 1, x->rank,
                          &axis));
    l->L = x->dims[axis];
    l->pre = 1;
    for (int i = 0; i < axis; i++) l->pre *= x->dims[i];
    for (int i = axis + 1; i < x->rank; i++) l->post *= x->dims[i];
    if (block == 0) {
        if (scale->rank != 1 || scale->count != l->L)
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                  "per-axis scale must be 1-D with %lld values", (long long)l->L);
        l->kind = 1;
        return NULL;
    }
    l->kind = 2;
    l->block = block;
    l->nblk = (l->L + block - 1) / block;
    bool ok = scale->rank == x->rank;
    for (int i = 0; ok && i < x->rank; i++)
        ok = scale->dims[i] == (i == axis ? l->nblk : x->dims[i]);
    if (!ok)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "blocked scale has the wrong shape");
    return NULL;
}

static inline int64_t q_index(const q_layout *l, int64_t p, int64_t a, int64_t q) {
    if (l->kind == 0) return 0;
    if (l->kind == 1) return a;
    return (p * l->nblk + a / l->block) * l->post + q;
}

/* float32 -> 8-bit, per-tensor or per-axis: rows of `post` elements share a scale. */
typedef struct q8_job {
    const float *x;
    void *y;
    const float *scale;
    const void *zp;
    q_layout l;
    bool s8;
} q8_job;

/* One row. SSE2 (the x86-64 baseline) 16 elements at a time: the compiler leaves the
 * scalar form's NaN-aware selects as branches (~60 ns per element on outputs of Sigmoid,
 * nudenet: 266 of 335 ms in QuantizeLinear). Same operations in the same order in both
 * forms: maxps / minps return their second operand for NaN as the selects do, so the
 * results are equal. */
static void q8_row(const float *xp, void *yv, int64_t n, float s, float z, bool s8) {
    const float big = 12582912.0f; /* 1.5 * 2^23: adding and subtracting rounds half to even */
    const float lo = s8 ? -128.0f : 0.0f, hi = s8 ? 127.0f : 255.0f;
    uint8_t *y = yv;
    int64_t q = 0;
#if defined(__SSE2__)
    const __m128 vs = _mm_set1_ps(s), vz = _mm_set1_ps(z), vb = _mm_set1_ps(big);
    const __m128 vmin = _mm_set1_ps(-4194304.0f), vmax = _mm_set1_ps(4194304.0f);
    const __m128 vlo = _mm_set1_ps(lo), vhi = _mm_set1_ps(hi);
    for (; q + 16 <= n; q += 16) {
        __m128i w[4];
        for (int k = 0; k < 4; k++) {
            __m128 v = _mm_div_ps(_mm_loadu_ps(xp + q + 4 * k), vs);
            v = _mm_min_ps(_mm_max_ps(v, vmin), vmax);
            v = _mm_add_ps(_mm_sub_ps(_mm_add_ps(v, vb), vb), vz);
            v = _mm_min_ps(_mm_max_ps(v, vlo), vhi);
            w[k] = _mm_cvttps_epi32(v);
        }
        __m128i a = _mm_packs_epi32(w[0], w[1]), b = _mm_packs_epi32(w[2], w[3]);
        _mm_storeu_si128((__m128i *)(y + q), s8 ? _mm_packs_epi16(a, b) : _mm_packus_epi16(a, b));
    }
#endif
    for (; q < n; q++) {
        float v = xp[q] / s;
        v = v > -4194304.0f ? v : -4194304.0f; /* also maps NaN to the low end */
        v = v < 4194304.0f ? v : 4194304.0f;
        v = (v + big) - big + z;
        v = v > lo ? v : lo;
        v = v < hi ? v : hi;
        if (s8) ((int8_t *)y)[q] = (int8_t)(int32_t)v;
        else y[q] = (uint8_t)(int32_t)v;
    }
}

static void q8_rows(void *arg, int64_t b, int64_t e) {
    const q8_job *j = arg;
    const int64_t n = j->l.post, L = j->l.L;
    const bool s8 = j->s8, per_tensor = j->l.kind == 0;
    for (int64_t row = b; row < e; row++) {
        int64_t si = per_tensor ? 0 : row % L;
        float s = j->scale[si];
        float z = !j->zp ? 0.0f : s8 ? (float)((const int8_t *)j->zp)[si]
                                     : (float)((const uint8_t *)j->zp)[si];
        const float *xp = j->x + row * n;
        q8_row(xp, (uint8_t *)j->y + row * n, n, s, z, s8);
    }
}

/* A per-tensor layout as rows of trailing dims (at most 64K elements unless the last dim is
 * longer): rows of one element each cost ~60 ns apiece (MobileNetV2's input at batch 8:
 * 58 ms to quantize). */
static void q_layout_rows(const tdm_tensor *x, q_layout *l) {
    if (l->kind != 0 || x->rank == 0) return;
    int64_t post = 1;
    for (int d = x->rank - 1; d >= 0; d--) {
        if (post > 1 && post * x->dims[d] > 65536) break;
        post *= x->dims[d];
    }
    if (post < 1) return;
    l->pre = 1;
    l->post = post;
    l->L = x->count / post;
}

tdm_status *tdm_misc_quantize_run(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0], *sc = ctx->in[1];
    const tdm_tensor *zp = ctx->n_in > 2 ? ctx->in[2] : NULL;
    tdm_tensor *y = ctx->out[0];
    q_layout l;
    TDM_TRY(q_layout_make(ctx, x, sc, zp, &l));
    double lo, hi;
    if (!q_range(y->dtype, &lo, &hi))
        return tdm_node_error(ctx->node, TDM_ERR_UNSUPPORTED, "output type %s is not supported",
                              tdm_dtype_name(y->dtype));
    if (x->dtype == TDM_FLOAT && sc->dtype == TDM_FLOAT && l.kind != 2 &&
        (y->dtype == TDM_UINT8 || y->dtype == TDM_INT8) && (!zp || zp->dtype == y->dtype)) {
        q_layout_rows(x, &l);
        q8_job j = {x->data, y->data, sc->data, zp ? zp->data : NULL, l, y->dtype == TDM_INT8};
        tdm_parallel_for(ctx->pool, l.pre * l.L, 16384 / (l.post + 1) + 1, q8_rows, &j);
        return NULL;
    }
    bool fx = x->dtype == TDM_FLOAT;
    size_t es = tdm_dtype_elem_size(y->dtype);
    for (int64_t p = 0; p < l.pre; p++)
        for (int64_t a = 0; a < l.L; a++) {
            int64_t base = (p * l.L + a) * l.post;
            for (int64_t q = 0; q < l.post; q++) {
                int64_t si = q_index(&l, p, a, q);
                double s = tdm_tensor_get_f64(sc, si), z = zp ? tdm_tensor_get_f64(zp, si) : 0;
                double v;
                if (fx) v = (double)rintf(((const float *)x->data)[base + q] / (float)s);
                else v = rint(tdm_tensor_get_f64(x, base + q) / s);
                v += z;
                if (!(v >= lo)) v = isnan(v) ? 0 : lo; /* NaN input: 0 + zero point below */
                if (v > hi) v = hi;
                tdm_misc_store_f64(y->dtype, v, (char *)y->data + (size_t)(base + q) * es);
            }
        }
    return NULL;
}

typedef struct dq_job {
    const tdm_tensor *x;
    float *y;
    const float *scale;
    const tdm_tensor *zp;
    q_layout l;
} dq_job;

static void dq_rows(void *arg, int64_t b, int64_t e) {
    const dq_job *j = arg;
    int64_t n = j->l.post;
    for (int64_t row = b; row < e; row++) {
        int64_t si = j->l.kind == 0 ? 0 : row % j->l.L;
        float s = j->scale[si], z = j->zp ? (float)tdm_tensor_get_f64(j->zp, si) : 0.0f;
        float *yp = j->y + row * n;
#define DQ(T)                                                                                \
    {                                                                                        \
        const T *xp = (const T *)j->x->data + row * n;                                       \
        for (int64_t q = 0; q < n; q++) yp[q] = ((float)xp[q] - z) * s;                      \
    }                                                                                        \
    break
        switch (j->x->dtype) {
        case TDM_UINT8: DQ(uint8_t);
        case TDM_INT8: DQ(int8_t);
        case TDM_UINT16: DQ(uint16_t);
        case TDM_INT16: DQ(int16_t);
        case TDM_INT32: DQ(int32_t);
        default:
            for (int64_t q = 0; q < n; q++)
                yp[q] = ((float)tdm_tensor_get_f64(j->x, row * n + q) - z) * s;
            break;
        }
#undef DQ
    }
}

tdm_status *tdm_misc_dequantize_run(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0], *sc = ctx->in[1];
    const tdm_tensor *zp = ctx->n_in > 2 ? ctx->in[2] : NULL;
    tdm_tensor *y = ctx->out[0];
    q_layout l;
    TDM_TRY(q_layout_make(ctx, x, sc, zp, &l));
    if (zp && zp->dtype != x->dtype)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "zero point type differs from the input type");
    if (y->dtype == TDM_FLOAT && sc->dtype == TDM_FLOAT && l.kind != 2) {
        q_layout_rows(x, &l);
        dq_job j = {x, y->data, sc->data, zp, l};
        tdm_parallel_for(ctx->pool, l.pre * l.L, 16384 / (l.post + 1) + 1, dq_rows, &j);
        return NULL;
    }
    size_t es = tdm_dtype_elem_size(y->dtype);
    for (int64_t p = 0; p < l.pre; p++)
        for (int64_t a = 0; a < l.L; a++) {
            int64_t base = (p * l.L + a) * l.post;
            for (int64_t q = 0; q < l.post; q++) {
                int64_t si = q_index(&l, p, a, q);
                float s = (float)tdm_tensor_get_f64(sc, si);
                float z = zp ? (float)tdm_tensor_get_f64(zp, si) : 0.0f;
                float v = ((float)tdm_tensor_get_f64(x, base + q) - z) * s;
                if (y->dtype == TDM_FLOAT) ((float *)y->data)[base + q] = v;
                else tdm_misc_store_f64(y->dtype, v, (char *)y->data + (size_t)(base + q) * es);
            }
        }
    return NULL;
}

tdm_status *tdm_misc_dynquant_run(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0];
    tdm_tensor *y = ctx->out[0];
    if (x->dtype != TDM_FLOAT)
        return tdm_node_error(ctx->node, TDM_ERR_UNSUPPORTED, "input must be float32");
    const float *xd = x->data;
    float mn = 0, mx = 0;
    for (int64_t i = 0; i < x->count; i++) {
        if (xd[i] < mn) mn = xd[i];
        if (xd[i] > mx) mx = xd[i];
    }
    float scale = (mx == mn ? 1.0f : mx - mn) / 255.0f;
    float z0 = 0.0f - mn / scale;
    if (z0 < 0) z0 = 0;
    if (z0 > 255) z0 = 255;
    float zp = rintf(z0);
    uint8_t *yd = y->data;
    for (int64_t i = 0; i < x->count; i++) {
        float v = rintf(xd[i] / scale) + zp;
        yd[i] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v != v ? 0 : v);
    }
    if (ctx->n_out > 1 && ctx->out[1]) ((float *)ctx->out[1]->data)[0] = scale;
    if (ctx->n_out > 2 && ctx->out[2]) /* NaN-safe clamp: (uint8_t)NaN is undefined */
        ((uint8_t *)ctx->out[2]->data)[0] = (uint8_t)(zp >= 0 && zp <= 255 ? zp : zp > 255 ? 255 : 0);
    return NULL;
}

/* ---- integer matmul ---- */

/* Element i of an 8/16/32-bit integer tensor as int32. */
static inline int32_t ld_int(const tdm_tensor *t, int64_t i) {
    switch (t->dtype) {
    case TDM_UINT8: return ((const uint8_t *)t->data)[i];
    case TDM_INT8: return ((const int8_t *)t->data)[i];
    case TDM_UINT16: return ((const uint16_t *)t->data)[i];
    case TDM_INT16: return ((const int16_t *)t->data)[i];
    case TDM_INT32: return ((const int32_t *)t->data)[i];
    default: return (int32_t)tdm_tensor_get_i64(t, i);
    }
}

typedef struct imm_job {
    const int16_t *at;             /* a - zp: [nab, M, K] */
    const int16_t *bt;             /* b - zp, transposed: [nbb, N, K] */
    int64_t M, K, N;
    int yr;                        /* batch rank */
    int64_t ydims[TDM_MAX_RANK], astr[TDM_MAX_RANK], bstr[TDM_MAX_RANK];
    int32_t *acc;                  /* [batch, M, N], wrapped to 32 bits like the op's output */
} imm_job;

/* Exact dot product: |a|, |b| <= 255, so blocks of 32768 terms cannot overflow int32. */
static int64_t dot_i16(const int16_t *a, const int16_t *b, int64_t n) {
    int64_t total = 0;
    for (int64_t k0 = 0; k0 < n; k0 += 32768) {
        int64_t kn = n - k0 < 32768 ? n - k0 : 32768;
        int32_t s = 0;
        for (int64_t k = 0; k < kn; k++) s += (int32_t)a[k0 + k] * (int32_t)b[k0 + k];
        total += s;
    }
    return total;
}

static void imm_rows(void *arg, int64_t b, int64_t e) {
    const imm_job *j = arg;
    for (int64_t u = b; u < e; u++) {
        int64_t bi = u / j->M, m = u % j->M, rem = bi, ao = 0, bo = 0;
        for (int d = j->yr - 1; d >= 0; d--) {
            int64_t c = rem % j->ydims[d];
            rem /= j->ydims[d];
            ao += c * j->astr[d];
            bo += c * j->bstr[d];
        }
        const int16_t *arow = j->at + (ao * j->M + m) * j->K;
        int32_t *out = j->acc + u * j->N;
        for (int64_t n = 0; n < j->N; n++)
            out[n] = (int32_t)(uint32_t)(uint64_t)dot_i16(arow, j->bt + (bo * j->N + n) * j->K, j->K);
    }
}

/* acc[batch, M, N] = (a - a_zp) @ (b - b_zp) with numpy batch broadcasting against y. */
static tdm_status *int_matmul(tdm_kernel_ctx *ctx, const tdm_tensor *a, const tdm_tensor *b,
                              const tdm_tensor *azp, const tdm_tensor *bzp, const tdm_tensor *y,
                              int32_t **acc_out, int64_t *M_out, int64_t *N_out) {
    const tdm_node *node = ctx->node;
    int64_t ad[TDM_MAX_RANK + 1], bd[TDM_MAX_RANK + 1];
    int ar = a->rank, br = b->rank;
    if (ar < 1 || br < 1) return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "scalar operand");
    if ((a->dtype != TDM_UINT8 && a->dtype != TDM_INT8) || (b->dtype != TDM_UINT8 && b->dtype != TDM_INT8))
        return tdm_node_error(node, TDM_ERR_UNSUPPORTED, "operands must be uint8 or int8");
    if ((azp && azp->dtype != a->dtype) || (bzp && bzp->dtype != b->dtype))
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "zero point type differs from its operand");
    memcpy(ad, a->dims, sizeof(int64_t) * (size_t)ar);
    memcpy(bd, b->dims, sizeof(int64_t) * (size_t)br);
    if (ar == 1) { ad[1] = ad[0]; ad[0] = 1; ar = 2; }
    if (br == 1) { bd[1] = 1; br = 2; }
    int64_t M = ad[ar - 2], K = ad[ar - 1], N = bd[br - 1];
    if (bd[br - 2] != K) return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "inner dims differ");
    if (azp && azp->count != 1 && azp->count != M)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "a zero point must have 1 or M values");
    if (bzp && bzp->count != 1 && bzp->count != N)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "b zero point must have 1 or N values");
    imm_job j = {0};
    j.M = M;
    j.K = K;
    j.N = N;
    int yb = y->rank - (a->rank == 1 ? 0 : 1) - (b->rank == 1 ? 0 : 1);
    j.yr = yb;
    memcpy(j.ydims, y->dims, sizeof(int64_t) * (size_t)yb);
    tdm_broadcast_strides(ar - 2, ad, yb, j.ydims, j.astr);
    tdm_broadcast_strides(br - 2, bd, yb, j.ydims, j.bstr);
    int64_t nbb = 1, batch = 1, nab = 1;
    for (int i = 0; i < br - 2; i++) nbb *= bd[i];
    for (int i = 0; i < ar - 2; i++) nab *= ad[i];
    for (int i = 0; i < yb; i++) batch *= j.ydims[i];
    size_t nacc;
    if (!tdm_mul_size((size_t)(batch * M), (size_t)N * sizeof(int32_t), &nacc))
        return tdm_node_error(node, TDM_ERR_LIMIT, "matmul too large");
    int16_t *at = tdm_kscratch(ctx, (size_t)a->count * 2 + 64);
    int16_t *bt = tdm_kscratch(ctx, (size_t)b->count * 2 + 64);
    j.acc = tdm_kscratch(ctx, nacc + 64);
    if (!at || !bt || !j.acc) {
        tdm_free(ctx->alloc, at);
        tdm_free(ctx->alloc, bt);
        tdm_free(ctx->alloc, j.acc);
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory in integer matmul");
    }
    for (int64_t i = 0; i < nab * M; i++) {
        int32_t z = azp ? ld_int(azp, azp->count == 1 ? 0 : i % M) : 0;
        for (int64_t k = 0; k < K; k++) at[i * K + k] = (int16_t)(ld_int(a, i * K + k) - z);
    }
    for (int64_t bb = 0; bb < nbb; bb++)
        for (int64_t k = 0; k < K; k++)
            for (int64_t n = 0; n < N; n++) {
                int32_t z = bzp ? ld_int(bzp, bzp->count == 1 ? 0 : n) : 0;
                bt[(bb * N + n) * K + k] = (int16_t)(ld_int(b, (bb * K + k) * N + n) - z);
            }
    j.at = at;
    j.bt = bt;
    int64_t grain = N * K >= 4096 ? 1 : 4096 / (N * K + 1) + 1;
    tdm_parallel_for(ctx->pool, batch * M, grain, imm_rows, &j);
    tdm_free(ctx->alloc, at);
    tdm_free(ctx->alloc, bt);
    *acc_out = j.acc;
    *M_out = M;
    *N_out = N;
    return NULL;
}

tdm_status *tdm_misc_matmul_integer_run(tdm_kernel_ctx *ctx) {
    tdm_tensor *y = ctx->out[0];
    int32_t *acc;
    int64_t M, N;
    TDM_TRY(int_matmul(ctx, ctx->in[0], ctx->in[1], ctx->n_in > 2 ? ctx->in[2] : NULL,
                       ctx->n_in > 3 ? ctx->in[3] : NULL, y, &acc, &M, &N));
    memcpy(y->data, acc, (size_t)y->count * sizeof(int32_t));
    tdm_free(ctx->alloc, acc);
    return NULL;
}

/* The range a result of node is clamped to: its type's, narrowed by the qmin / qmax
 * attributes of the fused QConv / QMatMul / QAdd (ops/fused.h). */
static void out_range(const tdm_node *node, tdm_dtype t, double *lo, double *hi) {
    q_range(t, lo, hi);
    const tdm_attr *a = tdm_node_attr(node, "qmin"), *b = tdm_node_attr(node, "qmax");
    if (a && a->type == TDM_ATTR_INT && (double)a->i > *lo) *lo = (double)a->i;
    if (b && b->type == TDM_ATTR_INT && (double)b->i < *hi) *hi = (double)b->i;
}

/* Requantizes v = acc * multiplier + zero point (round half to even, saturate to [lo, hi]). */
static void requant_store(tdm_dtype t, double lo, double hi, double v, void *dst) {
    v = nearbyint(v);
    v = v < lo ? lo : v > hi ? hi : v;
    tdm_misc_store_f64(t, v, dst);
}

tdm_status *tdm_misc_qlinear_matmul_run(tdm_kernel_ctx *ctx) {
    const tdm_tensor *const *in = ctx->in;
    tdm_tensor *y = ctx->out[0];
    const tdm_tensor *as = in[1], *bs = in[4], *ys = in[6], *yz = in[7];
    double lo, hi;
    if (!q_range(y->dtype, &lo, &hi))
        return tdm_node_error(ctx->node, TDM_ERR_UNSUPPORTED, "unsupported output type");
    out_range(ctx->node, y->dtype, &lo, &hi);
    int32_t *acc;
    int64_t M, N;
    TDM_TRY(int_matmul(ctx, in[0], in[3], in[2], in[5], y, &acc, &M, &N));
    tdm_status *st = NULL;
    const tdm_tensor *bias = ctx->n_in > 8 ? in[8] : NULL; /* QMatMul */
    if ((as->count != 1 && as->count != M) || (bs->count != 1 && bs->count != N) ||
        (ys->count != 1 && ys->count != M) || (yz && yz->count != ys->count)) {
        st = tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                            "scales must be per-tensor, per-row (a, y) or per-column (b)");
    } else if (bias && (bias->dtype != TDM_INT32 || bias->count != N)) {
        st = tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "bias must be int32 with N values");
    } else {
        size_t es = tdm_dtype_elem_size(y->dtype);
        for (int64_t i = 0; i < y->count; i++) {
            int64_t n = i % N, m = (i / N) % M;
            int64_t ri = ys->count == 1 ? 0 : m;
            float mult = (float)tdm_tensor_get_f64(as, as->count == 1 ? 0 : m) *
                         (float)tdm_tensor_get_f64(bs, bs->count == 1 ? 0 : n) /
                         (float)tdm_tensor_get_f64(ys, ri);
            int32_t a = bias ? (int32_t)((uint32_t)acc[i] + (uint32_t)((const int32_t *)bias->data)[n])
                             : acc[i];
            double v = (double)a * (double)mult + (yz ? tdm_tensor_get_f64(yz, ri) : 0);
            requant_store(y->dtype, lo, hi, v, (char *)y->data + (size_t)i * es);
        }
    }
    tdm_free(ctx->alloc, acc);
    return st;
}

/* ---- integer convolution ---- */

typedef struct iconv_job {
    const int16_t *x, *w; /* zero points already subtracted */
    const int32_t *bias;  /* [M] or NULL */
    int32_t *acc;         /* [N, M, out spatial], 32-bit wrapping sums */
    int sp;
    int64_t C, M, group, in_sp[TDM_MAX_RANK], out_sp[TDM_MAX_RANK], k[TDM_MAX_RANK];
    int64_t stride[TDM_MAX_RANK], dil[TDM_MAX_RANK], pad[TDM_MAX_RANK];
    int64_t in_plane, out_plane, k_plane;
} iconv_job;

/* One (batch, output channel) plane: for each input channel and kernel tap, a pass over
 * output rows whose innermost loop runs over the valid part of the last spatial dim. */
static void iconv_planes(void *arg, int64_t b, int64_t e) {
    const iconv_job *j = arg;
    int sp = j->sp, L = sp - 1;
    int64_t cg = j->C / j->group, mg = j->M / j->group;
    int64_t ow_n = j->out_sp[L], iw_n = j->in_sp[L], s_w = j->stride[L];
    int64_t rows = j->out_plane / (ow_n ? ow_n : 1);
    for (int64_t u = b; u < e; u++) {
        int64_t n = u / j->M, m = u % j->M, g = m / mg;
        uint32_t *out = (uint32_t *)j->acc + u * j->out_plane;
        uint32_t b0 = j->bias ? (uint32_t)j->bias[m] : 0;
        for (int64_t o = 0; o < j->out_plane; o++) out[o] = b0;
        for (int64_t c = 0; c < cg; c++) {
            const int16_t *xp = j->x + (n * j->C + g * cg + c) * j->in_plane;
            const int16_t *wp = j->w + (m * cg + c) * j->k_plane;
            int64_t kc[TDM_MAX_RANK] = {0};
            for (int64_t kk = 0; kk < j->k_plane; kk++) {
                int32_t w = wp[kk];
                if (w != 0) {
                    /* valid output range along the last dim for this tap */
                    int64_t off = kc[L] * j->dil[L] - j->pad[L];
                    int64_t lo = off >= 0 ? 0 : (-off + s_w - 1) / s_w;
                    int64_t hi = iw_n - 1 - off < 0 ? -1 : (iw_n - 1 - off) / s_w;
                    if (hi >= ow_n) hi = ow_n - 1;
                    int64_t orow[TDM_MAX_RANK] = {0};
                    for (int64_t r = 0; r < rows && lo <= hi; r++) {
                        int64_t ib = 0;
                        bool in = true;
                        for (int d = 0; d < L; d++) {
                            int64_t p = orow[d] * j->stride[d] - j->pad[d] + kc[d] * j->dil[d];
                            if (p < 0 || p >= j->in_sp[d]) { in = false; break; }
                            ib = ib * j->in_sp[d] + p;
                        }
                        if (in) {
                            const int16_t *xr = xp + ib * iw_n + off;
                            uint32_t *orw = out + r * ow_n;
                            if (s_w == 1)
                                for (int64_t q = lo; q <= hi; q++) orw[q] += (uint32_t)(w * (int32_t)xr[q]);
                            else
                                for (int64_t q = lo; q <= hi; q++)
                                    orw[q] += (uint32_t)(w * (int32_t)xr[q * s_w]);
                        }
                        for (int d = L - 1; d >= 0 && ++orow[d] == j->out_sp[d]; d--) orow[d] = 0;
                    }
                }
                for (int d = sp - 1; d >= 0 && ++kc[d] == j->k[d]; d--) kc[d] = 0;
            }
        }
    }
}

/* acc[N, M, out...] = conv(x - x_zp, w - w_zp) + bias. */
static tdm_status *int_conv(tdm_kernel_ctx *ctx, const tdm_tensor *x, const tdm_tensor *xzp,
                            const tdm_tensor *w, const tdm_tensor *wzp, const tdm_tensor *bias,
                            const tdm_tensor *y, int32_t **acc_out) {
    const tdm_node *node = ctx->node;
    int r = x->rank, sp = r - 2;
    if (r < 3 || w->rank != r || y->rank != r)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "bad conv input ranks");
    iconv_job j = {0};
    j.sp = sp;
    j.C = x->dims[1];
    j.M = w->dims[0];
    j.group = tdm_attr_int(node, "group", 1);
    if (j.group < 1 || j.C % j.group || j.M % j.group || w->dims[1] != j.C / j.group)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "channels do not match the group count");
    if (xzp && xzp->count != 1)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "x zero point must be a scalar");
    if (wzp && wzp->count != 1 && wzp->count != j.M)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "w zero point must have 1 or M values");
    if (bias && (bias->count != j.M || bias->dtype != TDM_INT32))
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "bias must be int32 with M values");
    size_t ns = 0, nd = 0, np = 0;
    const int64_t *st = tdm_attr_ints(node, "strides", &ns);
    const int64_t *dl = tdm_attr_ints(node, "dilations", &nd);
    const int64_t *pd = tdm_attr_ints(node, "pads", &np);
    const char *ap = tdm_attr_string(node, "auto_pad", "NOTSET");
    j.in_plane = j.out_plane = j.k_plane = 1;
    for (int d = 0; d < sp; d++) {
        j.in_sp[d] = x->dims[2 + d];
        j.out_sp[d] = y->dims[2 + d];
        j.k[d] = w->dims[2 + d];
        j.stride[d] = st && ns == (size_t)sp ? st[d] : 1;
        j.dil[d] = dl && nd == (size_t)sp ? dl[d] : 1;
        if (j.stride[d] < 1 || j.dil[d] < 1)
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "bad strides or dilations");
        if (!strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER")) {
            int64_t tot = (j.out_sp[d] - 1) * j.stride[d] + (j.k[d] - 1) * j.dil[d] + 1 - j.in_sp[d];
            if (tot < 0) tot = 0;
            j.pad[d] = !strcmp(ap, "SAME_UPPER") ? tot / 2 : tot - tot / 2;
        } else if (!strcmp(ap, "VALID")) {
            j.pad[d] = 0;
        } else {
            j.pad[d] = pd && np == 2 * (size_t)sp ? pd[d] : 0;
        }
        j.in_plane *= j.in_sp[d];
        j.out_plane *= j.out_sp[d];
        j.k_plane *= j.k[d];
    }
    if (y->dims[0] != x->dims[0] || y->dims[1] != j.M)
        return tdm_node_error(node, TDM_ERR_INTERNAL, "output shape mismatch");
    if ((x->dtype != TDM_UINT8 && x->dtype != TDM_INT8) || (w->dtype != TDM_UINT8 && w->dtype != TDM_INT8))
        return tdm_node_error(node, TDM_ERR_UNSUPPORTED, "x and w must be uint8 or int8");
    int16_t *xs = tdm_kscratch(ctx, (size_t)x->count * 2 + 64);
    int16_t *ws = tdm_kscratch(ctx, (size_t)w->count * 2 + 64);
    int32_t *bs = bias ? tdm_kscratch(ctx, (size_t)j.M * 4 + 64) : NULL;
    int32_t *acc = tdm_kscratch(ctx, (size_t)y->count * 4 + 64);
    if (!xs || !ws || !acc || (bias && !bs)) {
        tdm_free(ctx->alloc, xs);
        tdm_free(ctx->alloc, ws);
        tdm_free(ctx->alloc, bs);
        tdm_free(ctx->alloc, acc);
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory in integer conv");
    }
    int32_t xz = xzp ? ld_int(xzp, 0) : 0;
    for (int64_t i = 0; i < x->count; i++) xs[i] = (int16_t)(ld_int(x, i) - xz);
    int64_t per_m = w->count / (j.M ? j.M : 1);
    for (int64_t i = 0; i < w->count; i++)
        ws[i] = (int16_t)(ld_int(w, i) - (wzp ? ld_int(wzp, wzp->count == 1 ? 0 : i / per_m) : 0));
    for (int64_t m = 0; bias && m < j.M; m++) bs[m] = ((const int32_t *)bias->data)[m];
    j.x = xs;
    j.w = ws;
    j.bias = bs;
    j.acc = acc;
    if (j.out_plane > 0) tdm_parallel_for(ctx->pool, x->dims[0] * j.M, 1, iconv_planes, &j);
    tdm_free(ctx->alloc, xs);
    tdm_free(ctx->alloc, ws);
    tdm_free(ctx->alloc, bs);
    *acc_out = acc;
    return NULL;
}

tdm_status *tdm_misc_conv_integer_run(tdm_kernel_ctx *ctx) {
    tdm_tensor *y = ctx->out[0];
    int32_t *acc;
    TDM_TRY(int_conv(ctx, ctx->in[0], ctx->n_in > 2 ? ctx->in[2] : NULL, ctx->in[1],
                     ctx->n_in > 3 ? ctx->in[3] : NULL, NULL, y, &acc));
    memcpy(y->data, acc, (size_t)y->count * sizeof(int32_t));
    tdm_free(ctx->alloc, acc);
    return NULL;
}

static tdm_status *qlinear_conv_plain(tdm_kernel_ctx *ctx) {
    const tdm_tensor *const *in = ctx->in;
    tdm_tensor *y = ctx->out[0];
    const tdm_tensor *xs = in[1], *ws = in[4], *ys = in[6], *yz = in[7];
    double lo, hi;
    if (!q_range(y->dtype, &lo, &hi))
        return tdm_node_error(ctx->node, TDM_ERR_UNSUPPORTED, "unsupported output type");
    out_range(ctx->node, y->dtype, &lo, &hi);
    int64_t M = in[3]->dims[0];
    if (xs->count != 1 || ys->count != 1 || (yz && yz->count != 1) ||
        (ws->count != 1 && ws->count != M))
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "scales must be per-tensor (w: or per output channel)");
    int32_t *acc;
    TDM_TRY(int_conv(ctx, in[0], in[2], in[3], in[5], ctx->n_in > 8 ? in[8] : NULL, y, &acc));
    int64_t plane = y->count / (y->dims[0] * M > 0 ? y->dims[0] * M : 1);
    float fx = (float)tdm_tensor_get_f64(xs, 0), fy = (float)tdm_tensor_get_f64(ys, 0);
    double z = yz ? tdm_tensor_get_f64(yz, 0) : 0;
    size_t es = tdm_dtype_elem_size(y->dtype);
    for (int64_t i = 0; i < y->count; i++) {
        int64_t m = (i / plane) % M;
        float mult = fx * (float)tdm_tensor_get_f64(ws, ws->count == 1 ? 0 : m) / fy;
        requant_store(y->dtype, lo, hi, (double)acc[i] * (double)mult + z,
                      (char *)y->data + (size_t)i * es);
    }
    tdm_free(ctx->alloc, acc);
    return NULL;
}

/* ---- QAdd (ops/fused.h): per-tensor scales, numpy broadcasting ---- */

typedef struct qadd_job {
    const tdm_tensor *a, *b;
    void *y;
    int rank;
    int64_t dims[TDM_MAX_RANK], as[TDM_MAX_RANK], bs[TDM_MAX_RANK];
    int64_t inner;    /* elements of the last dim */
    tdm_q8_bin p;     /* the element-wise step (cpu_simd.h): QAdd y = a * ka + b * kb + c
                         before rounding; QMul y = ((a - za) * sa) * ((b - zb) * sb) / sy,
                         rounded, + zy */
    tdm_simd_q8_bin row;
} qadd_job;

static inline float ld_q(const void *p, bool s8, int64_t i) {
    return s8 ? (float)((const int8_t *)p)[i] : (float)((const uint8_t *)p)[i];
}

/* t[q] = (x[off + q * st] - z) * k for q < n (st 0: one value for the whole row; other
 * strides than 1: a transposed operand). */
static void qadd_scaled(const void *x, bool s8, int64_t off, int64_t st, int64_t n, float z,
                        float k, float *restrict t) {
    if (st == 0) {
        float v = (ld_q(x, s8, off) - z) * k;
        for (int64_t q = 0; q < n; q++) t[q] = v;
    } else {
        for (int64_t q = 0; q < n; q++) t[q] = (ld_q(x, s8, off + q * st) - z) * k;
    }
}

/* Rows of the last dim of y, 256 elements at a time: an operand contiguous along the row
 * goes to the row kernel as bytes, another (broadcast, strided) is scaled into a float row
 * first (a broadcast row equal to the previous row's is kept); the same operations in the
 * same order as the flat case (a per-element index walk with strided loads measured ~10 ns
 * an element: PP-OCRv4's ConvTranspose bias, 19 ms). */
static void qadd_rows(void *arg, int64_t rb, int64_t re) {
    const qadd_job *j = arg;
    const tdm_q8_bin *p = &j->p;
    int L = j->rank - 1;
    int64_t sa = L >= 0 ? j->as[L] : 0, sb = L >= 0 ? j->bs[L] : 0;
    float ta[256], tb[256];
    int64_t last_a = -1, last_b = -1; /* offsets in ta / tb (whole rows of <= 256 only) */
    bool whole = j->inner <= 256;
    for (int64_t r = rb; r < re; r++) {
        int64_t rem = r, ao = 0, bo = 0;
        for (int d = L - 1; d >= 0; d--) {
            int64_t c = rem % j->dims[d];
            rem /= j->dims[d];
            ao += c * j->as[d];
            bo += c * j->bs[d];
        }
        for (int64_t q0 = 0; q0 < j->inner; q0 += 256) {
            int64_t n = j->inner - q0 < 256 ? j->inner - q0 : 256;
            const void *a8 = NULL, *b8 = NULL;
            if (sa == 1) a8 = (const uint8_t *)j->a->data + ao + q0;
            else if (!whole || ao != last_a)
                qadd_scaled(j->a->data, p->a_s8, ao + q0 * sa, sa, n, p->za, p->ka, ta);
            if (sb == 1) b8 = (const uint8_t *)j->b->data + bo + q0;
            else if (!whole || bo != last_b)
                qadd_scaled(j->b->data, p->b_s8, bo + q0 * sb, sb, n, p->zb, p->kb, tb);
            last_a = ao;
            last_b = bo;
            j->row(p, a8, ta, b8, tb, n, (uint8_t *)j->y + r * j->inner + q0);
        }
    }
}

/* a, b and y of one shape: the row kernel on the bytes. */
static void qadd_flat(void *arg, int64_t b, int64_t e) {
    const qadd_job *j = arg;
    j->row(&j->p, (const uint8_t *)j->a->data + b, NULL, (const uint8_t *)j->b->data + b, NULL,
           e - b, (uint8_t *)j->y + b);
}

/* QAdd and QMul (ops/fused.h). */
static tdm_status *qbinary_run(tdm_kernel_ctx *ctx, bool mul) {
    const tdm_tensor *const *in = ctx->in;
    tdm_tensor *y = ctx->out[0];
    const char *op = mul ? "QMul" : "QAdd";
    for (int i = 0; i < 8; i++)
        if (!in[i] || ((i % 3 != 0) && in[i]->count != 1))
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                  "%s takes per-tensor scales and zero points", op);
    double lo, hi;
    if ((y->dtype != TDM_UINT8 && y->dtype != TDM_INT8) ||
        (in[0]->dtype != TDM_UINT8 && in[0]->dtype != TDM_INT8) ||
        (in[3]->dtype != TDM_UINT8 && in[3]->dtype != TDM_INT8))
        return tdm_node_error(ctx->node, TDM_ERR_UNSUPPORTED, "%s takes 8-bit tensors", op);
    out_range(ctx->node, y->dtype, &lo, &hi);
    qadd_job j = {.a = in[0], .b = in[3], .y = y->data, .rank = y->rank,
                  .row = tdm_cpu_simd_of(ctx)->q8_bin};
    double sa = tdm_tensor_get_f64(in[1], 0), za = tdm_tensor_get_f64(in[2], 0);
    double sb = tdm_tensor_get_f64(in[4], 0), zb = tdm_tensor_get_f64(in[5], 0);
    double sy = tdm_tensor_get_f64(in[6], 0), zy = tdm_tensor_get_f64(in[7], 0);
    if (!(sy > 0)) return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "y_scale must be > 0");
    tdm_q8_bin *p = &j.p;
    p->mul = mul;
    p->a_s8 = in[0]->dtype == TDM_INT8;
    p->b_s8 = in[3]->dtype == TDM_INT8;
    p->y_s8 = y->dtype == TDM_INT8;
    if (mul) { /* the float values as DequantizeLinear makes them */
        p->ka = (float)sa, p->kb = (float)sb, p->za = (float)za, p->zb = (float)zb;
        p->sy = (float)sy, p->zy = (float)zy;
    } else { /* (z = 0: exact) */
        p->ka = (float)(sa / sy);
        p->kb = (float)(sb / sy);
        p->c = (float)(zy - za * sa / sy - zb * sb / sy);
    }
    p->lo = (float)lo;
    p->hi = (float)hi;
    memcpy(j.dims, y->dims, sizeof(int64_t) * (size_t)y->rank);
    tdm_broadcast_strides(in[0]->rank, in[0]->dims, y->rank, y->dims, j.as);
    tdm_broadcast_strides(in[3]->rank, in[3]->dims, y->rank, y->dims, j.bs);
    j.inner = y->rank ? y->dims[y->rank - 1] : 1;
    if (y->count == 0) return NULL;
    if (in[0]->count == y->count && in[3]->count == y->count) { /* same shapes (no broadcast) */
        tdm_parallel_for(ctx->pool, y->count, 16384, qadd_flat, &j);
        return NULL;
    }
    int64_t rows = y->count / j.inner;
    tdm_parallel_for(ctx->pool, rows, j.inner >= 4096 ? 1 : 4096 / j.inner + 1, qadd_rows, &j);
    return NULL;
}

tdm_status *tdm_misc_qadd_run(tdm_kernel_ctx *ctx) { return qbinary_run(ctx, false); }
tdm_status *tdm_misc_qmul_run(tdm_kernel_ctx *ctx) { return qbinary_run(ctx, true); }

/* Bytes between layouts: src channels-last [N, H, W, C] -> dst NCHW (to_nchw), or src NCHW ->
 * dst channels-last; dst's dims say which (N, C from dst). */
static void q8_relayout(const tdm_tensor *src, tdm_tensor *dst, bool to_nchw) {
    const uint8_t *x = src->data;
    uint8_t *y = dst->data;
    int64_t N = dst->dims[0], C = to_nchw ? dst->dims[1] : dst->dims[3];
    int64_t HW = dst->count / (N * C > 0 ? N * C : 1);
    for (int64_t n = 0; n < N; n++)
        for (int64_t p = 0; p < HW; p++)
            for (int64_t c = 0; c < C; c++) {
                int64_t nhwc = (n * HW + p) * C + c, nchw = (n * C + c) * HW + p;
                if (to_nchw) y[nchw] = x[nhwc];
                else y[nhwc] = x[nchw];
            }
}

/* QLinearConv, and QConv with its channels-last attributes (x_nhwc / y_nhwc, ops/fused.h):
 * the reference runs on NCHW copies. */
tdm_status *tdm_misc_qlinear_conv_run(tdm_kernel_ctx *ctx) {
    bool xl = tdm_attr_int(ctx->node, "x_nhwc", 0) != 0, yl = tdm_attr_int(ctx->node, "y_nhwc", 0) != 0;
    if (!xl && !yl) return qlinear_conv_plain(ctx);
    const tdm_tensor *x = ctx->in[0];
    tdm_tensor *y = ctx->out[0];
    if ((xl && x->rank != 4) || (yl && y->rank != 4))
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "x_nhwc / y_nhwc need rank 4");
    tdm_tensor *xp = NULL, *yp = NULL;
    tdm_status *st = NULL;
    if (xl) {
        int64_t d[4] = {x->dims[0], x->dims[3], x->dims[1], x->dims[2]};
        if (!(st = tdm_tensor_new(ctx->alloc, x->dtype, 4, d, &xp))) q8_relayout(x, xp, true);
    }
    if (!st && yl) {
        int64_t d[4] = {y->dims[0], y->dims[3], y->dims[1], y->dims[2]};
        st = tdm_tensor_new(ctx->alloc, y->dtype, 4, d, &yp);
    }
    if (!st) {
        const tdm_tensor *in[9];
        for (int k = 0; k < ctx->n_in && k < 9; k++) in[k] = ctx->in[k];
        if (xp) in[0] = xp;
        tdm_tensor *out[1] = {yp ? yp : y};
        tdm_kernel_ctx c = *ctx;
        c.in = in;
        c.out = out;
        st = qlinear_conv_plain(&c);
        if (!st && yp) q8_relayout(yp, y, false);
    }
    if (xp) tdm_tensor_destroy(xp);
    if (yp) tdm_tensor_destroy(yp);
    return st;
}

/* ---- QLut (ops/fused.h): a byte table (cpu_lut.c's variants) ---- */
typedef struct lut_job {
    const uint8_t *x, *t;
    uint8_t *y;
    tdm_simd_lut_u8 fn;
} lut_job;

static void lut_range(void *arg, int64_t b, int64_t e) {
    const lut_job *j = arg;
    j->fn(j->t, j->x + b, j->y + b, e - b);
}

tdm_status *tdm_misc_qlut_run(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0], *t = ctx->in[1];
    tdm_tensor *y = ctx->out[0];
    if (!t || t->count != 256 || tdm_dtype_elem_size(t->dtype) != 1 ||
        tdm_dtype_elem_size(x->dtype) != 1 || y->count != x->count)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "QLut takes an 8-bit input and a table of 256 8-bit values");
    lut_job j = {x->data, t->data, y->data, tdm_cpu_simd_of(ctx)->lut_u8};
    tdm_parallel_for(ctx->pool, x->count, 65536, lut_range, &j);
    return NULL;
}

/* ---- MaxPoolNhwc (ops/fused.h): rows of C bytes, max over the window's pixels ---- */
typedef struct mp_job {
    const tdm_kernel_ctx *ctx;
    const tdm_nn_geom *g;
    int64_t H, W, C, OH, OW;
    bool s8;
} mp_job;

static void mp_rows(void *arg, int64_t b, int64_t e) {
    const mp_job *j = arg;
    const tdm_nn_geom *g = j->g;
    const uint8_t *x = j->ctx->in[0]->data;
    uint8_t *y = j->ctx->out[0]->data;
    int64_t C = j->C;
    for (int64_t r = b; r < e; r++) { /* r = n * OH + oh */
        int64_t n = r / j->OH, oh = r % j->OH;
        for (int64_t ow = 0; ow < j->OW; ow++) {
            uint8_t *out = y + ((r * j->OW) + ow) * C;
            bool first = true;
            for (int64_t kh = 0; kh < g->kernel[0]; kh++) {
                int64_t ih = oh * g->stride[0] - g->pad_b[0] + kh * g->dil[0];
                if (ih < 0 || ih >= j->H) continue;
                for (int64_t kw = 0; kw < g->kernel[1]; kw++) {
                    int64_t iw = ow * g->stride[1] - g->pad_b[1] + kw * g->dil[1];
                    if (iw < 0 || iw >= j->W) continue;
                    const uint8_t *in = x + ((n * j->H + ih) * j->W + iw) * C;
                    if (first) {
                        memcpy(out, in, (size_t)C);
                        first = false;
                    } else if (j->s8) {
                        int8_t *o = (int8_t *)out;
                        const int8_t *v = (const int8_t *)in;
                        for (int64_t c = 0; c < C; c++) o[c] = v[c] > o[c] ? v[c] : o[c];
                    } else {
                        for (int64_t c = 0; c < C; c++) out[c] = in[c] > out[c] ? in[c] : out[c];
                    }
                }
            }
            if (first) memset(out, j->s8 ? 0x80 : 0, (size_t)C); /* (no pixel: the lowest) */
        }
    }
}

tdm_status *tdm_misc_maxpool_nhwc_run(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0];
    tdm_tensor *y = ctx->out[0];
    if (x->rank != 4 || y->rank != 4 || tdm_dtype_elem_size(x->dtype) != 1)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "MaxPoolNhwc takes 8-bit rank 4");
    int64_t d[4] = {x->dims[0], x->dims[3], x->dims[1], x->dims[2]};
    tdm_nn_geom g;
    TDM_TRY(tdm_nn_geom_init(ctx->node, (int)tdm_attr_int(ctx->node, "src_opset", 12), TDM_NN_POOL,
                             4, d, NULL, &g));
    if (g.out[0] != y->dims[1] || g.out[1] != y->dims[2] || y->dims[3] != x->dims[3])
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "MaxPoolNhwc: output shape");
    mp_job j = {ctx, &g, x->dims[1], x->dims[2], x->dims[3], y->dims[1], y->dims[2],
                x->dtype == TDM_INT8};
    int64_t px = y->dims[2] * y->dims[3] * g.kernel[0] * g.kernel[1];
    tdm_parallel_for(ctx->pool, y->dims[0] * y->dims[1], 65536 / (px + 1) + 1, mp_rows, &j);
    return NULL;
}

/* ---- QGlobalAveragePool (ops/fused.h): exact integer sums per channel, then the mean of the
 * dequantized values requantised (round half to even, as QuantizeLinear) ---- */
typedef struct qgap_job {
    const uint8_t *x;
    uint8_t *y;
    int64_t C, P; /* channels, pixels */
    bool nhwc, xs8, ys8;
    int32_t xz;
    float xs, ys, yz, lo, hi;
} qgap_job;

static void qgap_store(const qgap_job *j, int64_t sum, uint8_t *dst) {
    const float big = 12582912.0f;
    float m = (float)((double)sum * (double)j->xs / (double)j->P); /* the float mean */
    float v = m / j->ys;
    v = v > -4194304.0f ? v : -4194304.0f;
    v = v < 4194304.0f ? v : 4194304.0f;
    v = (v + big) - big + j->yz;
    v = v > j->lo ? v : j->lo;
    v = v < j->hi ? v : j->hi;
    *dst = j->ys8 ? (uint8_t)(int8_t)v : (uint8_t)v;
}

static void qgap_images(void *arg, int64_t b, int64_t e) { /* channels-last: rows of C */
    const qgap_job *j = arg;
    int32_t acc[256];
    for (int64_t n = b; n < e; n++)
        for (int64_t c0 = 0; c0 < j->C; c0 += 256) {
            int64_t nc = j->C - c0 < 256 ? j->C - c0 : 256;
            memset(acc, 0, sizeof acc);
            for (int64_t p = 0; p < j->P; p++) {
                const uint8_t *row = j->x + (n * j->P + p) * j->C + c0;
                if (j->xs8)
                    for (int64_t c = 0; c < nc; c++) acc[c] += (int8_t)row[c];
                else
                    for (int64_t c = 0; c < nc; c++) acc[c] += row[c];
            }
            for (int64_t c = 0; c < nc; c++)
                qgap_store(j, (int64_t)acc[c] - (int64_t)j->xz * j->P, j->y + n * j->C + c0 + c);
        }
}

static void qgap_planes(void *arg, int64_t b, int64_t e) { /* plain: one plane per (n, c) */
    const qgap_job *j = arg;
    for (int64_t i = b; i < e; i++) {
        const uint8_t *x = j->x + i * j->P;
        int64_t sum = 0;
        if (j->xs8)
            for (int64_t p = 0; p < j->P; p++) sum += (int8_t)x[p];
        else
            for (int64_t p = 0; p < j->P; p++) sum += x[p];
        qgap_store(j, sum - (int64_t)j->xz * j->P, j->y + i);
    }
}

tdm_status *tdm_misc_qgap_run(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0];
    tdm_tensor *y = ctx->out[0];
    for (int i = 1; i < 5; i++)
        if (!ctx->in[i] || ctx->in[i]->count != 1)
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                  "QGlobalAveragePool takes per-tensor scales and zero points");
    if ((x->dtype != TDM_UINT8 && x->dtype != TDM_INT8) ||
        (y->dtype != TDM_UINT8 && y->dtype != TDM_INT8) || x->rank < 3)
        return tdm_node_error(ctx->node, TDM_ERR_UNSUPPORTED,
                              "QGlobalAveragePool takes 8-bit tensors of rank >= 3");
    bool nhwc = tdm_attr_int(ctx->node, "nhwc", 0) != 0;
    int64_t N = x->dims[0], C = nhwc ? x->dims[x->rank - 1] : x->dims[1];
    int64_t P = N * C > 0 ? x->count / (N * C) : 0;
    if (y->count != N * C)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "QGlobalAveragePool: output shape");
    if (y->count == 0) return NULL;
    double lo = 0, hi = 255;
    q_range(y->dtype, &lo, &hi);
    qgap_job j = {x->data, y->data, C, P, nhwc, x->dtype == TDM_INT8, y->dtype == TDM_INT8,
                  (int32_t)tdm_tensor_get_f64(ctx->in[2], 0),
                  (float)tdm_tensor_get_f64(ctx->in[1], 0), (float)tdm_tensor_get_f64(ctx->in[3], 0),
                  (float)tdm_tensor_get_f64(ctx->in[4], 0), (float)lo, (float)hi};
    if (!(j.ys > 0)) return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "y_scale must be > 0");
    if (P == 0) { /* (an empty mean: NaN in float, which QuantizeLinear sends to the low end) */
        for (int64_t i = 0; i < y->count; i++) ((uint8_t *)y->data)[i] = j.ys8 ? 0x80 : 0;
        return NULL;
    }
    if (nhwc) tdm_parallel_for(ctx->pool, N, 1, qgap_images, &j);
    else tdm_parallel_for(ctx->pool, N * C, 65536 / P + 1, qgap_planes, &j);
    return NULL;
}
