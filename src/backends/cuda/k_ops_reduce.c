/* CUDA kernel table "ops_reduce": Softmax / LogSoftmax, LayerNormalization, the Reduce*
 * family over any set of axes (keepdims, noop_with_empty_axes) and ArgMax / ArgMin
 * (kernels/cuda_reduce.cu). Float types compute in float32; the integer reductions
 * accumulate in int64. */
#include <string.h>

#include "backends/cuda/kernels/k_ops.h"

/* ---- Softmax / LogSoftmax ---- */

/* lg: LogSoftmax */
static tdm_status *softmax(tdm_kernel_ctx *ctx, int lg) {
    const tdm_tensor *X = ctx->in[0];
    const void *x;
    void *y;
    TDM_TRY(kops_in(ctx, 0, &x));
    TDM_TRY(kops_out(ctx, 0, &y));
    int r = X->rank;
    int64_t outer = 1, C = 1, inner = 1;
    if (ctx->opset < 13) {
        /* coerced to 2-D: [dims before axis, dims from axis] */
        int64_t a = tdm_attr_int(ctx->node, "axis", 1);
        int axis = r;
        if (a != r) TDM_TRY(tdm_norm_axis(ctx->node, a, r, &axis));
        for (int i = 0; i < r; i++) {
            if (i < axis) outer *= X->dims[i];
            else C *= X->dims[i];
        }
    } else {
        int axis;
        TDM_TRY(tdm_norm_axis(ctx->node, tdm_attr_int(ctx->node, "axis", -1), r, &axis));
        for (int i = 0; i < r; i++) {
            if (i < axis) outer *= X->dims[i];
            else if (i == axis) C = X->dims[i];
            else inner *= X->dims[i];
        }
    }
    if (outer * C * inner != ctx->out[0]->count)
        return tdm_node_error(ctx->node, TDM_ERR_INTERNAL, "input and output sizes differ");
    return kops_status(ctx, tcu_softmax((int)X->dtype, x, y, outer, C, inner, lg, kops_stream(ctx)),
                       ctx->node->op_type);
}

static tdm_status *run_softmax(tdm_kernel_ctx *ctx) { return softmax(ctx, 0); }
static tdm_status *run_log_softmax(tdm_kernel_ctx *ctx) { return softmax(ctx, 1); }

/* ---- LayerNormalization ---- */

static bool layernorm_accept(const tdm_node *node, const tdm_dtype *in_types, int n_in) {
    (void)in_types;
    (void)n_in;
    return tdm_attr_int(node, "stash_type", TDM_FLOAT) == TDM_FLOAT;
}

static tdm_status *run_layernorm(tdm_kernel_ctx *ctx) {
    const tdm_tensor *X = ctx->in[0], *S = ctx->in[1];
    const tdm_tensor *B = ctx->n_in > 2 ? ctx->in[2] : NULL;
    int axis;
    TDM_TRY(tdm_norm_axis(ctx->node, tdm_attr_int(ctx->node, "axis", -1), X->rank, &axis));
    int64_t rows = 1, cols = 1;
    for (int i = 0; i < X->rank; i++) {
        if (i < axis) rows *= X->dims[i];
        else cols *= X->dims[i];
    }
    /* Scale and B broadcast to the normalized shape in ONNX; the kernel takes them whole */
    if (!S || S->count != cols || (B && B->count != cols))
        return tdm_node_error(ctx->node, TDM_ERR_UNSUPPORTED,
                              "cuda: Scale and B must have the normalized shape's %lld elements",
                              (long long)cols);
    const void *x, *s, *b;
    void *y, *mean = NULL, *inv = NULL;
    TDM_TRY(kops_in(ctx, 0, &x));
    TDM_TRY(kops_in(ctx, 1, &s));
    TDM_TRY(kops_in(ctx, 2, &b));
    TDM_TRY(kops_out(ctx, 0, &y));
    for (int o = 1; o < 3 && o < ctx->n_out; o++) {
        if (!ctx->out[o]) continue;
        if (ctx->out[o]->dtype != TDM_FLOAT || ctx->out[o]->count != rows)
            return tdm_node_error(ctx->node, TDM_ERR_UNSUPPORTED,
                                  "cuda: Mean / InvStdDev must be float32 with one value per row");
        TDM_TRY(kops_out(ctx, o, o == 1 ? &mean : &inv));
    }
    float eps = tdm_attr_float(ctx->node, "epsilon", 1e-5f);
    return kops_status(ctx, tcu_layernorm((int)X->dtype, x, s, b, y, mean, inv, rows, cols, eps,
                                          kops_stream(ctx)),
                       "LayerNormalization");
}

/* ---- Reduce* ---- */

/* op, dtypes, kernel code, opset from which axes is an input. Each op gets its own run
 * function (run_<op>): the kernel table entry found at plan time is the only lookup. */
#define REDUCE_OPS(X)                                                                    \
    X(ReduceSum, KOPS_F | KOPS_I, TCU_R_SUM, 13)                                         \
    X(ReduceMean, KOPS_F | KOPS_I, TCU_R_MEAN, 18)                                       \
    X(ReduceMax, KOPS_F | KOPS_I, TCU_R_MAX, 18)                                         \
    X(ReduceMin, KOPS_F | KOPS_I, TCU_R_MIN, 18)                                         \
    X(ReduceProd, KOPS_F | KOPS_I, TCU_R_PROD, 18)                                       \
    X(ReduceL1, KOPS_F | KOPS_I, TCU_R_L1, 18)                                           \
    X(ReduceL2, KOPS_F, TCU_R_L2, 18)                                                    \
    X(ReduceSumSquare, KOPS_F | KOPS_I, TCU_R_SUMSQ, 18)                                 \
    X(ReduceLogSum, KOPS_F, TCU_R_LOGSUM, 18)                                            \
    X(ReduceLogSumExp, KOPS_F, TCU_R_LOGSUMEXP, 18)

static tdm_status *run_reduce(tdm_kernel_ctx *ctx, int code, int axes_input_since) {
    const tdm_tensor *X = ctx->in[0], *Y = ctx->out[0];
    int r = X->rank;
    int64_t axes[TDM_MAX_RANK];
    int na = 0;
    if (ctx->opset >= axes_input_since) {
        if (ctx->n_in > 1 && ctx->in[1])
            TDM_TRY(cuda_read_ints(ctx, 1, "axes", axes, TDM_MAX_RANK, &na));
    } else {
        size_t n = 0;
        const int64_t *a = tdm_attr_ints(ctx->node, "axes", &n);
        if (n > TDM_MAX_RANK)
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "too many axes");
        if (a && n) memcpy(axes, a, n * sizeof *a);
        na = (int)n;
    }
    const void *x;
    void *y;
    TDM_TRY(kops_in(ctx, 0, &x));
    TDM_TRY(kops_out(ctx, 0, &y));
    int reduced[TDM_MAX_RANK] = {0};
    if (na == 0) {
        if (tdm_attr_int(ctx->node, "noop_with_empty_axes", 0)) {
            if (X->nbytes != Y->nbytes)
                return tdm_node_error(ctx->node, TDM_ERR_INTERNAL, "input and output sizes differ");
            return kops_copy(ctx, y, x, Y->nbytes);
        }
        for (int i = 0; i < r; i++) reduced[i] = 1;
    }
    for (int k = 0; k < na; k++) {
        int ax;
        TDM_TRY(tdm_norm_axis(ctx->node, axes[k], r, &ax));
        reduced[ax] = 1;
    }
    tcu_shape keep, red;
    if (tcu_reduce_plan(r, X->dims, reduced, &keep, &red))
        return tdm_node_error(ctx->node, TDM_ERR_INTERNAL, "cuda: rank out of range");
    if (keep.count != Y->count)
        return tdm_node_error(ctx->node, TDM_ERR_INTERNAL, "reduction output size mismatch");
    return kops_status(ctx, tcu_reduce(code, (int)X->dtype, x, y, &keep, &red,
                                       kops_stream(ctx)),
                       ctx->node->op_type);
}

#define X_(op, types, code, since)                                                       \
    static tdm_status *run_##op(tdm_kernel_ctx *ctx) { return run_reduce(ctx, code, since); }
REDUCE_OPS(X_)
#undef X_

/* ---- ArgMax / ArgMin ---- */

static tdm_status *arg_min_max(tdm_kernel_ctx *ctx, int is_max) {
    const tdm_tensor *X = ctx->in[0];
    int axis;
    TDM_TRY(tdm_norm_axis(ctx->node, tdm_attr_int(ctx->node, "axis", 0), X->rank, &axis));
    int64_t outer = 1, C = X->dims[axis], inner = 1;
    for (int i = 0; i < axis; i++) outer *= X->dims[i];
    for (int i = axis + 1; i < X->rank; i++) inner *= X->dims[i];
    if (ctx->out[0]->dtype != TDM_INT64 || ctx->out[0]->count != outer * inner)
        return tdm_node_error(ctx->node, TDM_ERR_INTERNAL,
                              "output must be int64 of the kept shape");
    if (C == 0 && outer * inner > 0)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "the reduced axis is empty");
    const void *x;
    void *y;
    TDM_TRY(kops_in(ctx, 0, &x));
    TDM_TRY(kops_out(ctx, 0, &y));
    int last = (int)tdm_attr_int(ctx->node, "select_last_index", 0);
    return kops_status(ctx, tcu_argminmax((int)X->dtype, x, (int64_t *)y, outer, C, inner,
                                          is_max, last, kops_stream(ctx)),
                       ctx->node->op_type);
}

static tdm_status *run_argmax(tdm_kernel_ctx *ctx) { return arg_min_max(ctx, 1); }
static tdm_status *run_argmin(tdm_kernel_ctx *ctx) { return arg_min_max(ctx, 0); }

/* (a reduction's axes input is read on the host: TDM_KF_HOST_READS) */
#define E_(op, since, types, fn, ints, acc)                                              \
    {{"", op, since, 0, 0, types, fn, NULL, NULL, TDM_KF_HOST_READS(ints)}, ints, 0, 0, acc}
#define X_(op, types, code, since) E_(#op, 1, types, run_##op, 1u << 1, NULL),

const cuda_kernel_entry cuda_kernels_ops_reduce[] = {
    E_("Softmax", 1, KOPS_F, run_softmax, 0, NULL),
    E_("LogSoftmax", 1, KOPS_F, run_log_softmax, 0, NULL),
    E_("LayerNormalization", 17, KOPS_F, run_layernorm, 0, layernorm_accept),
    REDUCE_OPS(X_)
    E_("ArgMax", 1, KOPS_F | KOPS_I, run_argmax, 0, NULL),
    E_("ArgMin", 1, KOPS_F | KOPS_I, run_argmin, 0, NULL),
};
#undef X_
const int cuda_kernels_ops_reduce_count =
    (int)(sizeof cuda_kernels_ops_reduce / sizeof cuda_kernels_ops_reduce[0]);
