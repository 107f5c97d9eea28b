/* CUDA kernel table "ops_reduce": Softmax / LogSoftmax, LayerNormalization, the Reduce*
 * family over any set of axes (keepdims, noop_with_empty_axes) and ArgMax / ArgMin
 * (kernels/cuda_reduce.cu). Float types compute in float32; the integer reductions
 * accumulate in int64. */
#include <string.h>

#include "backends/cuda/kernels/k_ops.h"

/* ---- Softmax / LogSoftmax ---- */

static tdm_status *run_softmax(tdm_kernel_ctx *ctx) {
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
    int lg = strcmp(ctx->node->op_type, "LogSoftmax") == 0;
    return kops_status(ctx, tcu_softmax((int)X->dtype, x, y, outer, C, inner, lg, kops_stream(ctx)),
                       ctx->node->op_type);
}

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

typedef struct reduce_op {
    const char *op;
    int code;
    int axes_input_since; /* opset from which axes is an input */
} reduce_op;

static const reduce_op reduce_ops[] = {
    {"ReduceSum", TCU_R_SUM, 13},         {"ReduceMean", TCU_R_MEAN, 18},
    {"ReduceMax", TCU_R_MAX, 18},         {"ReduceMin", TCU_R_MIN, 18},
    {"ReduceProd", TCU_R_PROD, 18},       {"ReduceL1", TCU_R_L1, 18},
    {"ReduceL2", TCU_R_L2, 18},           {"ReduceSumSquare", TCU_R_SUMSQ, 18},
    {"ReduceLogSum", TCU_R_LOGSUM, 18},   {"ReduceLogSumExp", TCU_R_LOGSUMEXP, 18},
};

static tdm_status *run_reduce(tdm_kernel_ctx *ctx) {
    const reduce_op *op = NULL;
    for (size_t i = 0; i < sizeof reduce_ops / sizeof reduce_ops[0]; i++)
        if (strcmp(reduce_ops[i].op, ctx->node->op_type) == 0) op = &reduce_ops[i];
    if (!op) return tdm_node_error(ctx->node, TDM_ERR_INTERNAL, "cuda: no reduction kernel");
    const tdm_tensor *X = ctx->in[0], *Y = ctx->out[0];
    int r = X->rank;
    int64_t axes[TDM_MAX_RANK];
    int na = 0;
    if (ctx->opset >= op->axes_input_since) {
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
    return kops_status(ctx, tcu_reduce(op->code, (int)X->dtype, x, y, &keep, &red,
                                       kops_stream(ctx)),
                       ctx->node->op_type);
}

/* ---- ArgMax / ArgMin ---- */

static tdm_status *run_arg(tdm_kernel_ctx *ctx) {
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
    int is_max = strcmp(ctx->node->op_type, "ArgMax") == 0;
    int last = (int)tdm_attr_int(ctx->node, "select_last_index", 0);
    return kops_status(ctx, tcu_argminmax((int)X->dtype, x, (int64_t *)y, outer, C, inner,
                                          is_max, last, kops_stream(ctx)),
                       ctx->node->op_type);
}

#define E_(op, since, types, fn, ints, acc)                                              \
    {{"", op, since, 0, 0, types, fn, NULL, NULL}, ints, 0, 0, acc}
#define R(op, types) E_(op, 1, types, run_reduce, 1u << 1, NULL)

const cuda_kernel_entry cuda_kernels_ops_reduce[] = {
    E_("Softmax", 1, KOPS_F, run_softmax, 0, NULL),
    E_("LogSoftmax", 1, KOPS_F, run_softmax, 0, NULL),
    E_("LayerNormalization", 17, KOPS_F, run_layernorm, 0, layernorm_accept),
    R("ReduceSum", KOPS_F | KOPS_I), R("ReduceMean", KOPS_F | KOPS_I),
    R("ReduceMax", KOPS_F | KOPS_I), R("ReduceMin", KOPS_F | KOPS_I),
    R("ReduceProd", KOPS_F | KOPS_I), R("ReduceL1", KOPS_F | KOPS_I), R("ReduceL2", KOPS_F),
    R("ReduceSumSquare", KOPS_F | KOPS_I), R("ReduceLogSum", KOPS_F),
    R("ReduceLogSumExp", KOPS_F),
    E_("ArgMax", 1, KOPS_F | KOPS_I, run_arg, 0, NULL),
    E_("ArgMin", 1, KOPS_F | KOPS_I, run_arg, 0, NULL),
};
const int cuda_kernels_ops_reduce_count =
    (int)(sizeof cuda_kernels_ops_reduce / sizeof cuda_kernels_ops_reduce[0]);
