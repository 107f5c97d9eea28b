/* CPU kernels: Softmax, LogSoftmax, Hardmax, LayerNormalization (reduce family).
 * float32 runs directly on the tensors; float16/bfloat16 go through float buffers. */
#include <math.h>
#include <string.h>

#include "backends/cpu/cpu_simd.h"
#include "backends/cpu/k_reduce.h"
#include "backends/cpu/k_unary.h"
#include "core/alloc.h"

#define RD_CH 256
#define RD_GRAIN ((int64_t)1 << 14)

#define T float
#define SFX f32
#define RT_EXP tdm_rd_expf
#define RT_LOG logf
#define RT_SQRT sqrtf
#include "backends/cpu/k_reduce_tmpl_smx.h"
#undef T
#undef SFX
#undef RT_EXP
#undef RT_LOG
#undef RT_SQRT
#define T double
#define SFX f64
#define RT_EXP exp
#define RT_LOG log
#define RT_SQRT sqrt
#include "backends/cpu/k_reduce_tmpl_smx.h"
#undef T
#undef SFX
#undef RT_EXP
#undef RT_LOG
#undef RT_SQRT

void tdm_rd_softmax(tdm_threadpool *pool, tdm_rd_ctype ct, int mode, const void *x, void *y,
                    int64_t outer, int64_t n, int64_t inner) {
    if (ct == TDM_RD_F64)
        softmax_f64(pool, mode, x, y, outer, n, inner);
    else
        softmax_f32(pool, mode, x, y, outer, n, inner);
}

static tdm_rd_ctype float_ctype(tdm_dtype dt) {
    return dt == TDM_DOUBLE ? TDM_RD_F64 : TDM_RD_F32;
}

/* float32 Softmax over contiguous rows (the last axis): the device's SIMD row kernel
 * (cpu_simd.h) reading each input row, e.g. a recognizer's softmax over 18k classes. */
typedef struct smx_simd_job {
    const tdm_cpu_simd *sd;
    const float *x;
    float *y;
    int64_t n;
} smx_simd_job;

static void smx_simd_rows(void *arg, int64_t b, int64_t e) {
    const smx_simd_job *j = arg;
    for (int64_t o = b; o < e; o++) {
        float *y = j->y + o * j->n;
        const float *x = j->x + o * j->n;
        j->sd->softmax_row(y, x == y ? NULL : x, NULL, false, j->n);
    }
}

/* float32 Softmax over an axis that is not the last (a detector's distribution over 16 bins:
 * [1, 16, 4, 8400] on axis 1): RD_CH columns at a time, the exponentials by the device's
 * SIMD unary kernel. Items: (outer index, chunk of columns). */
typedef struct smx_cols_job {
    const tdm_cpu_simd *sd;
    const float *x;
    float *y;
    int64_t N, I, chunks;
} smx_cols_job;

static void smx_simd_cols(void *arg, int64_t b, int64_t e) {
    const smx_cols_job *j = arg;
    const tdm_uparams p = {.op = TDM_U_EXP};
    float m[RD_CH], s[RD_CH], t[RD_CH];
    int64_t N = j->N, I = j->I;
    for (int64_t it = b; it < e; it++) {
        int64_t o = it / j->chunks, i0 = (it % j->chunks) * RD_CH;
        int64_t n = I - i0 < RD_CH ? I - i0 : RD_CH;
        const float *x = j->x + o * N * I + i0;
        float *y = j->y + o * N * I + i0;
        for (int64_t i = 0; i < n; i++) {
            m[i] = x[i];
            s[i] = 0.0f;
        }
        for (int64_t r = 1; r < N; r++)
            for (int64_t i = 0; i < n; i++) m[i] = x[r * I + i] > m[i] ? x[r * I + i] : m[i];
        for (int64_t r = 0; r < N; r++) {
            for (int64_t i = 0; i < n; i++) t[i] = x[r * I + i] - m[i];
            j->sd->unary_f32(&p, t, y + r * I, n);
            for (int64_t i = 0; i < n; i++) s[i] += y[r * I + i];
        }
        for (int64_t i = 0; i < n; i++) s[i] = 1.0f / s[i];
        for (int64_t r = 0; r < N; r++)
            for (int64_t i = 0; i < n; i++) y[r * I + i] *= s[i];
    }
}

static tdm_status *run_softmax(tdm_kernel_ctx *ctx, int mode) {
    const tdm_tensor *x = ctx->in[0];
    tdm_tensor *y = ctx->out[0];
    int axis;
    int64_t def = ctx->opset < 13 ? 1 : -1;
    int64_t a = tdm_attr_int(ctx->node, "axis", def);
    int64_t O, N, I;
    if (ctx->opset < 13 && a == x->rank) {
        O = x->count, N = 1, I = 1; /* coerced to [everything, 1] */
    } else {
        TDM_TRY(tdm_norm_axis(ctx->node, a, x->rank, &axis));
        tdm_rd_split(x->rank, x->dims, axis, &O, &N, &I);
        if (ctx->opset < 13) { /* coerced to 2-D: [outer, everything from axis on] */
            N *= I;
            I = 1;
        }
    }
    if (y->count == 0) return NULL;
    if (mode == 0 && I == 1 && N > 0 && x->dtype == TDM_FLOAT && y->dtype == TDM_FLOAT) {
        smx_simd_job j = {tdm_cpu_simd_of(ctx), x->data, y->data, N};
        int64_t grain = RD_GRAIN / N + 1;
        tdm_parallel_for(ctx->pool, O, grain, smx_simd_rows, &j);
        return NULL;
    }
    if (mode == 0 && I > 1 && N > 0 && x->dtype == TDM_FLOAT && y->dtype == TDM_FLOAT) {
        smx_cols_job j = {tdm_cpu_simd_of(ctx), x->data, y->data, N, I, (I + RD_CH - 1) / RD_CH};
        int64_t grain = RD_GRAIN / (N * (I < RD_CH ? I : RD_CH)) + 1;
        tdm_parallel_for(ctx->pool, O * j.chunks, grain, smx_simd_cols, &j);
        return NULL;
    }
    tdm_rd_ctype ct = float_ctype(x->dtype);
    const void *xd;
    void *owned;
    TDM_TRY(tdm_rd_load(ctx, x, ct, &xd, &owned));
    bool native = tdm_rd_native(y->dtype, ct);
    void *yd = native ? y->data : tdm_kscratch(ctx, (size_t)y->count * tdm_rd_csize(ct));
    if (!yd) {
        tdm_free(ctx->alloc, owned);
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory in %s", ctx->node->op_type);
    }
    tdm_rd_softmax(ctx->pool, ct, mode, xd, yd, O, N, I);
    tdm_free(ctx->alloc, owned);
    if (!native) {
        tdm_rd_store(yd, ct, y->data, y->dtype, y->count);
        tdm_free(ctx->alloc, yd);
    }
    return NULL;
}

tdm_status *tdm_rd_run_softmax(tdm_kernel_ctx *ctx) { return run_softmax(ctx, 0); }
tdm_status *tdm_rd_run_log_softmax(tdm_kernel_ctx *ctx) { return run_softmax(ctx, 1); }
tdm_status *tdm_rd_run_hardmax(tdm_kernel_ctx *ctx) { return run_softmax(ctx, 2); }

/* ---- LayerNormalization ---- */

/* Broadcasts Scale or B against X: to the normalized shape X.shape[axis:] when it does
 * not vary along the outer dims (*full = false), else to all of X (*full = true). */
static tdm_status *ln_param(tdm_kernel_ctx *ctx, const tdm_tensor *p, tdm_rd_ctype ct, int axis,
                            void **out, bool *full) {
    const tdm_tensor *x = ctx->in[0];
    int lead = 0;
    while (lead < p->rank && p->dims[lead] == 1) lead++;
    *full = p->rank - lead > x->rank - axis;
    if (*full) return tdm_rd_expand(ctx, p, ct, x->rank, x->dims, out);
    return tdm_rd_expand(ctx, p, ct, x->rank - axis, x->dims + axis, out);
}

tdm_status *tdm_rd_run_layer_norm(tdm_kernel_ctx *ctx) {
    const tdm_node *node = ctx->node;
    const tdm_tensor *x = ctx->in[0];
    const tdm_tensor *scale = ctx->n_in > 1 ? ctx->in[1] : NULL;
    const tdm_tensor *bias = ctx->n_in > 2 ? ctx->in[2] : NULL;
    tdm_tensor *y = ctx->out[0];
    tdm_tensor *mean_t = ctx->n_out > 1 ? ctx->out[1] : NULL;
    tdm_tensor *inv_t = ctx->n_out > 2 ? ctx->out[2] : NULL;
    if (!scale) return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "input Scale is missing");
    int axis;
    TDM_TRY(tdm_norm_axis(node, tdm_attr_int(node, "axis", -1), x->rank, &axis));
    float eps = tdm_attr_float(node, "epsilon", 1e-5f);
    int64_t O = 1, N = 1;
    for (int i = 0; i < axis; i++) O *= x->dims[i];
    for (int i = axis; i < x->rank; i++) N *= x->dims[i];
    if (y->count == 0) return NULL;

    tdm_rd_ctype ct = float_ctype(x->dtype);
    size_t cs = tdm_rd_csize(ct);
    tdm_status *st = NULL;
    const void *xd = NULL;
    void *x_owned = NULL, *sc = NULL, *bi = NULL, *yd = NULL, *stats = NULL;
    bool sc_full = false, bi_full = false;
    bool native = tdm_rd_native(y->dtype, ct);
    st = tdm_rd_load(ctx, x, ct, &xd, &x_owned);
    if (!st) st = ln_param(ctx, scale, ct, axis, &sc, &sc_full);
    if (!st && bias) st = ln_param(ctx, bias, ct, axis, &bi, &bi_full);
    if (st) goto done;
    yd = native ? y->data : tdm_kscratch(ctx, (size_t)y->count * cs);
    stats = (mean_t || inv_t) ? tdm_kscratch(ctx, (size_t)O * 2 * cs) : NULL;
    if (!yd || ((mean_t || inv_t) && !stats)) {
        st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory in LayerNormalization");
        goto done;
    }
    void *mean = mean_t ? stats : NULL;
    void *inv = inv_t ? (char *)stats + (size_t)O * cs : NULL;
    if (ct == TDM_RD_F64) {
        ln_arg_f64 a = {xd, sc, bi, yd, mean, inv, N, sc_full, bi_full, (double)eps};
        layer_norm_f64(ctx->pool, &a, O);
    } else {
        ln_arg_f32 a = {xd, sc, bi, yd, mean, inv, N, sc_full, bi_full, eps};
        layer_norm_f32(ctx->pool, &a, O);
    }
    if (!native) tdm_rd_store(yd, ct, y->data, y->dtype, y->count);
    if (mean_t && mean_t->count == O) tdm_rd_store(mean, ct, mean_t->data, mean_t->dtype, O);
    if (inv_t && inv_t->count == O) tdm_rd_store(inv, ct, inv_t->data, inv_t->dtype, O);
done:
    tdm_free(ctx->alloc, x_owned);
    tdm_free(ctx->alloc, sc);
    tdm_free(ctx->alloc, bi);
    if (!native) tdm_free(ctx->alloc, yd);
    tdm_free(ctx->alloc, stats);
    return st;
}
