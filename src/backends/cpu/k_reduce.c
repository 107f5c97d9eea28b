/* CPU kernels: reduce family (the family's kernel table, and the Reduce* ops).
 *
 * A reduction is done in passes over [O, R, I] views: size-1 dims are dropped, adjacent
 * reduced (or kept) dims are merged, and each remaining reduced block is removed in one
 * pass, innermost first. A pass either reduces contiguous rows (I == 1) or accumulates
 * whole contiguous rows of length I (outer-axis reduction), so every inner loop runs over
 * contiguous memory. Reductions compose across passes: sum/prod/max/min trivially, the
 * "map" (abs, square) applies only in the first pass, log-sum-exp composes with itself,
 * and mean/sqrt/log are applied once at the end. */
#include <math.h>
#include <string.h>

#include "backends/cpu/k_reduce.h"
#include "core/alloc.h"
#include "core/threadpool.h"

enum { RD_ACC_SUM, RD_ACC_PROD, RD_ACC_MAX, RD_ACC_MIN, RD_ACC_LSE };
enum { RD_MAP_NONE, RD_MAP_ABS, RD_MAP_SQ };
enum { RD_POST_NONE, RD_POST_MEAN, RD_POST_SQRT, RD_POST_LOG };
#define RD_CH 256             /* columns per block with stack buffers */
#define RD_MAX_WIDTH 4096     /* columns per task in outer-axis passes, at most */
#define RD_GRAIN ((int64_t)1 << 15) /* elements per parallel task, at least */

#define T float
#define SFX f32
#define RT_FLOAT 1
#define RT_LOW (-INFINITY)
#define RT_HIGH INFINITY
#define RT_ABS(v) fabsf(v)
#define RT_EXP tdm_rd_expf
#define RT_LOG logf
#define RT_SQRT sqrtf
#include "backends/cpu/k_reduce_tmpl_pass.h"
#undef T
#undef SFX
#undef RT_ABS
#undef RT_EXP
#undef RT_LOG
#undef RT_SQRT

#define T double
#define SFX f64
#define RT_ABS(v) fabs(v)
#define RT_EXP exp
#define RT_LOG log
#define RT_SQRT sqrt
#include "backends/cpu/k_reduce_tmpl_pass.h"
#undef T
#undef SFX
#undef RT_FLOAT
#undef RT_LOW
#undef RT_HIGH
#undef RT_ABS
#undef RT_EXP
#undef RT_LOG
#undef RT_SQRT

#define T int64_t
#define SFX i64
#define RT_FLOAT 0
#define RT_LOW INT64_MIN
#define RT_HIGH INT64_MAX
#define RT_ABS(v) ((v) < 0 ? (int64_t)(0 - (uint64_t)(v)) : (v))
#include "backends/cpu/k_reduce_tmpl_pass.h"
#undef T
#undef SFX
#undef RT_LOW
#undef RT_HIGH
#undef RT_ABS

#define T uint64_t
#define SFX u64
#define RT_LOW 0
#define RT_HIGH UINT64_MAX
#define RT_ABS(v) (v)
#include "backends/cpu/k_reduce_tmpl_pass.h"
#undef T
#undef SFX
#undef RT_FLOAT
#undef RT_LOW
#undef RT_HIGH
#undef RT_ABS

/* ---- dispatch over compute types ---- */

static void do_pass(tdm_threadpool *pool, tdm_rd_ctype ct, const void *x, void *y, int64_t O,
                    int64_t R, int64_t I, int acc, int map) {
    switch (ct) {
    case TDM_RD_F32: pass_f32(pool, x, y, O, R, I, acc, map); break;
    case TDM_RD_F64: pass_f64(pool, x, y, O, R, I, acc, map); break;
    case TDM_RD_I64: pass_i64(pool, x, y, O, R, I, acc, map); break;
    case TDM_RD_U64: pass_u64(pool, x, y, O, R, I, acc, map); break;
    }
}

static void do_post(tdm_rd_ctype ct, void *y, int64_t n, int post, int64_t N) {
    switch (ct) {
    case TDM_RD_F32: post_f32(y, n, post, N); break;
    case TDM_RD_F64: post_f64(y, n, post, N); break;
    case TDM_RD_I64: post_i64(y, n, post, N); break;
    case TDM_RD_U64: post_u64(y, n, post, N); break;
    }
}

/* Empty-set value: for integer max/min the limits of the output dtype itself. */
static void do_fill_empty(tdm_rd_ctype ct, void *y, int64_t n, int acc, tdm_dtype out_dt) {
    switch (ct) {
    case TDM_RD_F32: fill_empty_f32(y, n, acc); return;
    case TDM_RD_F64: fill_empty_f64(y, n, acc); return;
    case TDM_RD_U64: fill_empty_u64(y, n, acc); break;
    case TDM_RD_I64: fill_empty_i64(y, n, acc); break;
    }
    if (acc != RD_ACC_MAX && acc != RD_ACC_MIN) return;
    int64_t lo, hi;
    switch (out_dt) {
    case TDM_INT8: lo = INT8_MIN, hi = INT8_MAX; break;
    case TDM_UINT8: lo = 0, hi = UINT8_MAX; break;
    case TDM_INT16: lo = INT16_MIN, hi = INT16_MAX; break;
    case TDM_UINT16: lo = 0, hi = UINT16_MAX; break;
    case TDM_INT32: lo = INT32_MIN, hi = INT32_MAX; break;
    case TDM_UINT32: lo = 0, hi = UINT32_MAX; break;
    case TDM_BOOL: lo = 0, hi = 1; break;
    default: return; /* int64 / uint64: the compute type's limits are right */
    }
    int64_t v = acc == RD_ACC_MAX ? lo : hi;
    for (int64_t i = 0; i < n; i++) ((int64_t *)y)[i] = v;
}

/* ---- the Reduce* ops ---- */

enum { K_SUM, K_MEAN, K_PROD, K_MAX, K_MIN, K_L1, K_L2, K_LOGSUM, K_LSE, K_SUMSQ };
static const struct {
    int acc, map, post;
    bool needs_float; /* integer inputs are computed in double */
} kinds[] = {
    [K_SUM] = {RD_ACC_SUM, RD_MAP_NONE, RD_POST_NONE, false},
    [K_MEAN] = {RD_ACC_SUM, RD_MAP_NONE, RD_POST_MEAN, false},
    [K_PROD] = {RD_ACC_PROD, RD_MAP_NONE, RD_POST_NONE, false},
    [K_MAX] = {RD_ACC_MAX, RD_MAP_NONE, RD_POST_NONE, false},
    [K_MIN] = {RD_ACC_MIN, RD_MAP_NONE, RD_POST_NONE, false},
    [K_L1] = {RD_ACC_SUM, RD_MAP_ABS, RD_POST_NONE, false},
    [K_L2] = {RD_ACC_SUM, RD_MAP_SQ, RD_POST_SQRT, true},
    [K_LOGSUM] = {RD_ACC_SUM, RD_MAP_NONE, RD_POST_LOG, true},
    [K_LSE] = {RD_ACC_LSE, RD_MAP_NONE, RD_POST_NONE, true},
    [K_SUMSQ] = {RD_ACC_SUM, RD_MAP_SQ, RD_POST_NONE, false},
};

#define RD_MAX_AXES 64

/* Which axes to reduce. *noop: empty axes with noop_with_empty_axes set. */
static tdm_status *reduce_axes(tdm_kernel_ctx *ctx, int kind, bool *mask, bool *noop) {
    const tdm_node *node = ctx->node;
    int rank = ctx->in[0]->rank;
    int64_t axes[RD_MAX_AXES];
    int n = 0;
    bool from_input = ctx->opset >= (kind == K_SUM ? 13 : 18);
    if (from_input) {
        if (ctx->n_in > 1 && ctx->in[1])
            TDM_TRY(tdm_read_ints(node, "axes", ctx->in[1], axes, RD_MAX_AXES, &n));
    } else {
        size_t c = 0;
        const int64_t *a = tdm_attr_ints(node, "axes", &c);
        if (c > RD_MAX_AXES)
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "too many axes (%zu)", c);
        for (size_t i = 0; i < c; i++) axes[i] = a[i];
        n = (int)c;
    }
    *noop = false;
    for (int d = 0; d < rank; d++) mask[d] = n == 0;
    if (n == 0) {
        *noop = tdm_attr_int(node, "noop_with_empty_axes", 0) != 0;
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        int a;
        TDM_TRY(tdm_norm_axis(node, axes[i], rank, &a));
        if (mask[a])
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "axis %lld is repeated",
                                  (long long)axes[i]);
        mask[a] = true;
    }
    return NULL;
}

static tdm_status *run_reduce(tdm_kernel_ctx *ctx, int kind) {
    const tdm_tensor *x = ctx->in[0];
    tdm_tensor *y = ctx->out[0];
    bool mask[TDM_MAX_RANK], noop;
    TDM_TRY(reduce_axes(ctx, kind, mask, &noop));
    if (noop) {
        if (y->nbytes != x->nbytes)
            return tdm_node_error(ctx->node, TDM_ERR_INTERNAL, "output size mismatch");
        memcpy(y->data, x->data, x->nbytes);
        return NULL;
    }
    tdm_rd_ctype ct = tdm_rd_ctype_of(x->dtype);
    if (kinds[kind].needs_float && ct != TDM_RD_F32) ct = TDM_RD_F64;
    size_t cs = tdm_rd_csize(ct);
    int acc = kinds[kind].acc, post = kinds[kind].post;

    /* Segments: size-1 dims dropped, neighbours with the same role merged. */
    int64_t seg[TDM_MAX_RANK], N = 1;
    bool red[TDM_MAX_RANK], empty = false;
    int ns = 0;
    for (int d = 0; d < x->rank; d++) {
        int64_t n = x->dims[d];
        if (mask[d]) {
            N *= n;
            if (n == 0) empty = true;
        }
        if (n == 1) continue;
        if (ns > 0 && red[ns - 1] == mask[d]) {
            seg[ns - 1] *= n;
        } else {
            seg[ns] = n;
            red[ns] = mask[d];
            ns++;
        }
    }
    if (y->count == 0) return NULL;
    bool native = tdm_rd_native(y->dtype, ct);
    if (empty) {
        void *buf = native ? y->data : tdm_kscratch(ctx, (size_t)y->count * cs);
        if (!buf) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory in %s", ctx->node->op_type);
        do_fill_empty(ct, buf, y->count, acc, y->dtype);
        do_post(ct, buf, y->count, post, 0);
        if (!native) {
            tdm_rd_store(buf, ct, y->data, y->dtype, y->count);
            tdm_free(ctx->alloc, buf);
        }
        return NULL;
    }

    const void *cur;
    void *cur_owned;
    TDM_TRY(tdm_rd_load(ctx, x, ct, &cur, &cur_owned));
    bool first = true;
    for (;;) {
        int k = -1;
        for (int i = ns - 1; i >= 0 && k < 0; i--)
            if (red[i]) k = i;
        if (k < 0 && !first) break;
        int64_t O = 1, R = 1, I = 1;
        bool last = true;
        if (k < 0) {
            O = x->count; /* nothing left to reduce: one elementwise pass for map */
        } else {
            for (int i = 0; i < k; i++) {
                O *= seg[i];
                if (red[i]) last = false;
            }
            R = seg[k];
            for (int i = k + 1; i < ns; i++) I *= seg[i];
        }
        void *dst = last && native ? y->data : tdm_kscratch(ctx, (size_t)(O * I) * cs);
        if (!dst) {
            tdm_free(ctx->alloc, cur_owned);
            return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory in %s", ctx->node->op_type);
        }
        do_pass(ctx->pool, ct, cur, dst, O, R, I, acc, first ? kinds[kind].map : RD_MAP_NONE);
        tdm_free(ctx->alloc, cur_owned);
        cur = dst;
        cur_owned = dst == y->data ? NULL : dst;
        first = false;
        if (k < 0) break;
        for (int i = k; i + 1 < ns; i++) {
            seg[i] = seg[i + 1];
            red[i] = red[i + 1];
        }
        ns--;
    }
    do_post(ct, (void *)cur, y->count, post, N);
    if (cur != y->data) tdm_rd_store(cur, ct, y->data, y->dtype, y->count);
    tdm_free(ctx->alloc, cur_owned);
    return NULL;
}

tdm_status *tdm_rd_run_reduce_sum(tdm_kernel_ctx *ctx) { return run_reduce(ctx, K_SUM); }
tdm_status *tdm_rd_run_reduce_mean(tdm_kernel_ctx *ctx) { return run_reduce(ctx, K_MEAN); }
tdm_status *tdm_rd_run_reduce_max(tdm_kernel_ctx *ctx) { return run_reduce(ctx, K_MAX); }
tdm_status *tdm_rd_run_reduce_min(tdm_kernel_ctx *ctx) { return run_reduce(ctx, K_MIN); }
tdm_status *tdm_rd_run_reduce_prod(tdm_kernel_ctx *ctx) { return run_reduce(ctx, K_PROD); }
tdm_status *tdm_rd_run_reduce_l1(tdm_kernel_ctx *ctx) { return run_reduce(ctx, K_L1); }
tdm_status *tdm_rd_run_reduce_l2(tdm_kernel_ctx *ctx) { return run_reduce(ctx, K_L2); }
tdm_status *tdm_rd_run_reduce_log_sum(tdm_kernel_ctx *ctx) { return run_reduce(ctx, K_LOGSUM); }
tdm_status *tdm_rd_run_reduce_log_sum_exp(tdm_kernel_ctx *ctx) { return run_reduce(ctx, K_LSE); }
tdm_status *tdm_rd_run_reduce_sum_square(tdm_kernel_ctx *ctx) { return run_reduce(ctx, K_SUMSQ); }

/* ---- the family's kernel table ---- */

#define RD_T_REDUCE TDM_T_NUMERIC
#define RD_T_CUMSUM TDM_T_NUMERIC

const tdm_kernel_def tdm_cpu_kernels_reduce[] = {
    {"", "ReduceSum", 1, 0, 0, RD_T_REDUCE, tdm_rd_run_reduce_sum},
    {"", "ReduceMean", 1, 0, 0, RD_T_REDUCE, tdm_rd_run_reduce_mean},
    {"", "ReduceMax", 1, 0, 0, RD_T_REDUCE | TDM_T(TDM_BOOL), tdm_rd_run_reduce_max},
    {"", "ReduceMin", 1, 0, 0, RD_T_REDUCE | TDM_T(TDM_BOOL), tdm_rd_run_reduce_min},
    {"", "ReduceProd", 1, 0, 0, RD_T_REDUCE, tdm_rd_run_reduce_prod},
    {"", "ReduceL1", 1, 0, 0, RD_T_REDUCE, tdm_rd_run_reduce_l1},
    {"", "ReduceL2", 1, 0, 0, RD_T_REDUCE, tdm_rd_run_reduce_l2},
    {"", "ReduceLogSum", 1, 0, 0, RD_T_REDUCE, tdm_rd_run_reduce_log_sum},
    {"", "ReduceLogSumExp", 1, 0, 0, RD_T_REDUCE, tdm_rd_run_reduce_log_sum_exp},
    {"", "ReduceSumSquare", 1, 0, 0, RD_T_REDUCE, tdm_rd_run_reduce_sum_square},
    {"", "ArgMax", 1, 0, 0, TDM_T_NUMERIC, tdm_rd_run_argmax},
    {"", "ArgMin", 1, 0, 0, TDM_T_NUMERIC, tdm_rd_run_argmin},
    {"", "TopK", 1, 0, 0, TDM_T_NUMERIC, tdm_rd_run_topk},
    {"", "CumSum", 11, 0, 0, RD_T_CUMSUM, tdm_rd_run_cumsum},
    {"", "Softmax", 1, 0, 0, TDM_T_FLOATS, tdm_rd_run_softmax, NULL, NULL, TDM_KF_WRITES_ALL},
    {"", "LogSoftmax", 1, 0, 0, TDM_T_FLOATS, tdm_rd_run_log_softmax},
    {"", "Hardmax", 1, 0, 0, TDM_T_FLOATS, tdm_rd_run_hardmax},
    {"", "LayerNormalization", 17, 0, 0, TDM_T_FLOATS, tdm_rd_run_layer_norm, NULL, NULL,
     TDM_KF_WRITES_ALL},
    {"", "NegativeLogLikelihoodLoss", 12, 0, 0, TDM_T_FLOATS, tdm_rd_run_nll_loss},
    {"", "SoftmaxCrossEntropyLoss", 12, 0, 0, TDM_T_FLOATS, tdm_rd_run_sce_loss},
};
const int tdm_cpu_kernels_reduce_count =
    (int)(sizeof tdm_cpu_kernels_reduce / sizeof tdm_cpu_kernels_reduce[0]);
