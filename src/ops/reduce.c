/* Operator schemas: reduce family — Reduce*, ArgMax/ArgMin, TopK, Softmax/LogSoftmax/
 * Hardmax, LayerNormalization, CumSum, NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss. */
#include <string.h>

#include "ops/op.h"

#define MAX_AXES 64

/* ---- Reduce* ---- */

static tdm_status *infer_reduce(tdm_infer_ctx *ctx) {
    const tdm_node *node = ctx->node;
    const tdm_value_info *x = &ctx->in[0];
    tdm_value_info *y = &ctx->out[0];
    y->dtype = x->dtype;
    bool keep = tdm_attr_int(node, "keepdims", 1) != 0;
    bool noop = tdm_attr_int(node, "noop_with_empty_axes", 0) != 0;
    int64_t axes[MAX_AXES];
    int n = 0;
    bool known = true;
    bool from_input = ctx->opset >= (strcmp(node->op_type, "ReduceSum") == 0 ? 13 : 18);
    if (from_input) {
        if (ctx->n_in > 1 && ctx->in[1].present) {
            const tdm_value_info *a = &ctx->in[1];
            if (a->data)
                TDM_TRY(tdm_read_ints(node, "axes", a->data, axes, MAX_AXES, &n));
            else if (!(a->rank == 1 && a->dims[0] == 0))
                known = false;
        }
    } else {
        size_t c = 0;
        const int64_t *a = tdm_attr_ints(node, "axes", &c);
        if (c > MAX_AXES)
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "too many axes (%zu)", c);
        for (size_t i = 0; i < c; i++) axes[i] = a[i];
        n = (int)c;
    }
    if (x->rank < 0) {
        y->rank = (known && n == 0 && !noop && !keep) ? 0 : -1;
        return NULL;
    }
    if (!known) {
        if (!keep) {
            y->rank = -1;
            return NULL;
        }
        y->rank = x->rank;
        for (int d = 0; d < x->rank; d++) y->dims[d] = x->dims[d] == 1 ? 1 : TDM_DIM_UNKNOWN;
        return NULL;
    }
    bool mask[TDM_MAX_RANK];
    for (int d = 0; d < x->rank; d++) mask[d] = n == 0 && !noop;
    for (int i = 0; i < n; i++) {
        int a;
        TDM_TRY(tdm_norm_axis(node, axes[i], x->rank, &a));
        if (mask[a])
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "axis %lld is repeated",
                                  (long long)axes[i]);
        mask[a] = true;
    }
    int r = 0;
    for (int d = 0; d < x->rank; d++) {
        if (!mask[d]) y->dims[r++] = x->dims[d];
        else if (keep) y->dims[r++] = 1;
    }
    y->rank = r;
    return NULL;
}

/* ---- ArgMax / ArgMin ---- */

static tdm_status *infer_arg(tdm_infer_ctx *ctx) {
    const tdm_value_info *x = &ctx->in[0];
    tdm_value_info *y = &ctx->out[0];
    y->dtype = TDM_INT64;
    if (x->rank < 0) return NULL;
    int axis;
    TDM_TRY(tdm_norm_axis(ctx->node, tdm_attr_int(ctx->node, "axis", 0), x->rank, &axis));
    bool keep = tdm_attr_int(ctx->node, "keepdims", 1) != 0;
    int r = 0;
    for (int d = 0; d < x->rank; d++) {
        if (d != axis) y->dims[r++] = x->dims[d];
        else if (keep) y->dims[r++] = 1;
    }
    y->rank = r;
    return NULL;
}

/* ---- TopK ---- */

static tdm_status *infer_topk(tdm_infer_ctx *ctx) {
    const tdm_node *node = ctx->node;
    const tdm_value_info *x = &ctx->in[0];
    ctx->out[0].dtype = x->dtype;
    if (ctx->n_out > 1) ctx->out[1].dtype = TDM_INT64;
    int64_t k = TDM_DIM_UNKNOWN;
    if (ctx->opset < 10) {
        if (!tdm_node_attr(node, "k"))
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "attribute k is missing");
        k = tdm_attr_int(node, "k", 0);
    } else {
        if (ctx->n_in < 2 || !ctx->in[1].present)
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "input K is missing");
        if (ctx->in[1].data) {
            int64_t kv[1];
            int nk = 0;
            TDM_TRY(tdm_read_ints(node, "K", ctx->in[1].data, kv, 1, &nk));
            if (nk != 1)
                return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "K must hold one value");
            k = kv[0];
        }
    }
    if (ctx->opset < 10 || ctx->in[1].data) {
        if (k < 0)
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "K = %lld is negative",
                                  (long long)k);
    }
    if (x->rank < 0) return NULL;
    int axis;
    TDM_TRY(tdm_norm_axis(node, tdm_attr_int(node, "axis", -1), x->rank, &axis));
    if (k >= 0 && x->dims[axis] >= 0 && k > x->dims[axis])
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "K = %lld is larger than the axis (%lld)", (long long)k,
                              (long long)x->dims[axis]);
    for (int o = 0; o < ctx->n_out && o < 2; o++) {
        tdm_value_info *y = &ctx->out[o];
        y->rank = x->rank;
        for (int d = 0; d < x->rank; d++) y->dims[d] = x->dims[d];
        y->dims[axis] = k;
    }
    return NULL;
}

/* ---- Softmax / LogSoftmax / Hardmax ---- */

static tdm_status *infer_softmax(tdm_infer_ctx *ctx) {
    const tdm_value_info *x = &ctx->in[0];
    tdm_infer_copy(&ctx->out[0], x);
    if (x->rank < 0) return NULL;
    int axis;
    int64_t def = ctx->opset < 13 ? 1 : -1;
    int64_t a = tdm_attr_int(ctx->node, "axis", def);
    if (ctx->opset < 13 && a == x->rank) return NULL; /* coerced to [everything, 1] */
    return tdm_norm_axis(ctx->node, a, x->rank, &axis);
}

/* ---- LayerNormalization ---- */

static tdm_status *infer_layer_norm(tdm_infer_ctx *ctx) {
    const tdm_node *node = ctx->node;
    const tdm_value_info *x = &ctx->in[0];
    tdm_infer_copy(&ctx->out[0], x);
    int64_t stash = tdm_attr_int(node, "stash_type", TDM_FLOAT);
    if (stash != TDM_FLOAT && stash != TDM_DOUBLE && stash != TDM_FLOAT16 &&
        stash != TDM_BFLOAT16)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "stash_type %lld is not a float type",
                              (long long)stash);
    for (int o = 1; o < ctx->n_out && o < 3; o++) ctx->out[o].dtype = (tdm_dtype)stash;
    if (x->rank < 0) return NULL;
    int axis;
    TDM_TRY(tdm_norm_axis(node, tdm_attr_int(node, "axis", -1), x->rank, &axis));
    for (int o = 1; o < ctx->n_out && o < 3; o++) {
        tdm_value_info *y = &ctx->out[o];
        y->rank = x->rank;
        for (int d = 0; d < x->rank; d++) y->dims[d] = d < axis ? x->dims[d] : 1;
    }
    return NULL;
}

/* ---- CumSum ---- */

static tdm_status *infer_cumsum(tdm_infer_ctx *ctx) {
    tdm_infer_copy(&ctx->out[0], &ctx->in[0]);
    const tdm_value_info *a = &ctx->in[1];
    if (a->present && a->dtype != TDM_UNDEFINED && a->dtype != TDM_INT32 && a->dtype != TDM_INT64)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "axis must be int32 or int64");
    return NULL;
}

/* ---- NegativeLogLikelihoodLoss / SoftmaxCrossEntropyLoss ---- */

static tdm_status *infer_loss(tdm_infer_ctx *ctx) {
    const tdm_node *node = ctx->node;
    const tdm_value_info *x = &ctx->in[0], *t = &ctx->in[1];
    tdm_value_info *y = &ctx->out[0];
    const char *red = tdm_attr_string(node, "reduction", "mean");
    bool none = strcmp(red, "none") == 0;
    if (!none && strcmp(red, "sum") != 0 && strcmp(red, "mean") != 0)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "unknown reduction '%s'", red);
    if (t->dtype != TDM_UNDEFINED && t->dtype != TDM_INT32 && t->dtype != TDM_INT64)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "target must be int32 or int64");
    if (x->rank >= 0 && x->rank < 2)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "input must have rank >= 2");
    if (x->rank >= 0 && t->rank >= 0) {
        bool ok = t->rank == x->rank - 1;
        for (int d = 0; ok && d < t->rank; d++) {
            int64_t a = t->dims[d], b = x->dims[d == 0 ? 0 : d + 1];
            if (a >= 0 && b >= 0 && a != b) ok = false;
        }
        if (!ok) {
            char sa[128], sb[128];
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                  "target shape %s does not match input shape %s",
                                  tdm_shape_str(t->rank, t->dims, sa, sizeof sa),
                                  tdm_shape_str(x->rank, x->dims, sb, sizeof sb));
        }
    }
    y->dtype = x->dtype;
    if (!none) {
        y->rank = 0;
    } else if (t->rank >= 0) {
        y->rank = t->rank;
        for (int d = 0; d < t->rank; d++) {
            int64_t a = t->dims[d], b = x->rank >= 0 ? x->dims[d == 0 ? 0 : d + 1] : -1;
            y->dims[d] = a >= 0 ? a : b;
        }
    } else if (x->rank >= 0) {
        y->rank = x->rank - 1;
        y->dims[0] = x->dims[0];
        for (int d = 1; d < y->rank; d++) y->dims[d] = x->dims[d + 1];
    }
    if (ctx->n_out > 1) tdm_infer_copy(&ctx->out[1], x);
    return NULL;
}

#define AXES_IN (1u << 1)

const tdm_op_schema tdm_ops_reduce[] = {
    {"", "ReduceSum", 1, 1, 2, 1, 1, infer_reduce, 0, AXES_IN},
    {"", "ReduceMean", 1, 1, 2, 1, 1, infer_reduce, 0, AXES_IN},
    {"", "ReduceMax", 1, 1, 2, 1, 1, infer_reduce, 0, AXES_IN},
    {"", "ReduceMin", 1, 1, 2, 1, 1, infer_reduce, 0, AXES_IN},
    {"", "ReduceProd", 1, 1, 2, 1, 1, infer_reduce, 0, AXES_IN},
    {"", "ReduceL1", 1, 1, 2, 1, 1, infer_reduce, 0, AXES_IN},
    {"", "ReduceL2", 1, 1, 2, 1, 1, infer_reduce, 0, AXES_IN},
    {"", "ReduceLogSum", 1, 1, 2, 1, 1, infer_reduce, 0, AXES_IN},
    {"", "ReduceLogSumExp", 1, 1, 2, 1, 1, infer_reduce, 0, AXES_IN},
    {"", "ReduceSumSquare", 1, 1, 2, 1, 1, infer_reduce, 0, AXES_IN},
    {"", "ArgMax", 1, 1, 1, 1, 1, infer_arg, 0, 0},
    {"", "ArgMin", 1, 1, 1, 1, 1, infer_arg, 0, 0},
    {"", "TopK", 1, 1, 2, 2, 2, infer_topk, 0, 1u << 1},
    {"", "Softmax", 1, 1, 1, 1, 1, infer_softmax, 0, 0},
    {"", "LogSoftmax", 1, 1, 1, 1, 1, infer_softmax, 0, 0},
    {"", "Hardmax", 1, 1, 1, 1, 1, infer_softmax, 0, 0},
    {"", "LayerNormalization", 17, 2, 3, 1, 3, infer_layer_norm, 0, 0},
    {"", "CumSum", 11, 2, 2, 1, 1, infer_cumsum, 0, 0},
    {"", "NegativeLogLikelihoodLoss", 12, 2, 3, 1, 1, infer_loss, 0, 0},
    {"", "SoftmaxCrossEntropyLoss", 12, 2, 3, 1, 2, infer_loss, 0, 0},
};
const int tdm_ops_reduce_count = (int)(sizeof tdm_ops_reduce / sizeof tdm_ops_reduce[0]);
