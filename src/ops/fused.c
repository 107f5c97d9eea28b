/* Operator schemas: fused family — tandem's internal FusedConv, FusedMatMul and Attention
 * (contract in ops/fused.h). Only graph passes create them (src/graph/fuse*.c). */
#include <string.h>

#include "ops/fused.h"
#include "ops/nn_geom.h"
#include "ops/op.h"

/* activation name -> number of activation_params it needs (-1: unknown name) */
static int act_params(const char *act, bool conv) {
    static const char *const none[] = {"", "Relu"};
    static const char *const conv_only[] = {"Sigmoid", "Tanh",     "HardSwish",
                                            "Gelu",    "GeluTanh", "Swish"};
    for (size_t i = 0; i < sizeof none / sizeof none[0]; i++)
        if (strcmp(act, none[i]) == 0) return 0;
    if (conv) {
        for (size_t i = 0; i < sizeof conv_only / sizeof conv_only[0]; i++)
            if (strcmp(act, conv_only[i]) == 0) return 0;
        if (strcmp(act, "LeakyRelu") == 0) return 1;
        if (strcmp(act, "Clip") == 0 || strcmp(act, "HardSigmoid") == 0) return 2;
        return -1;
    }
    return strcmp(act, "Gelu") == 0 || strcmp(act, "GeluTanh") == 0 ? 0 : -1;
}

static tdm_status *check_activation(const tdm_node *node, bool conv) {
    const char *act = tdm_attr_string(node, "activation", "");
    int need = act_params(act, conv);
    if (need < 0)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "unknown activation '%s'", act);
    size_t have;
    tdm_attr_floats(node, "activation_params", &have);
    if ((int)have < need)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "activation %s needs %d activation_params, got %zu", act, need, have);
    if (tdm_attr_floats(node, "activation_affine", &have) && (have != 2 || !conv || !act[0]))
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "activation_affine needs 2 values and a convolution's activation");
    return NULL;
}

static tdm_status *check_float(const tdm_infer_ctx *ctx) {
    tdm_dtype t = ctx->in[0].dtype;
    for (int i = 1; i < ctx->n_in; i++)
        if (ctx->in[i].present && t != TDM_UNDEFINED && ctx->in[i].dtype != TDM_UNDEFINED &&
            ctx->in[i].dtype != t)
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                  "input %d has type %s, input 0 %s", i,
                                  tdm_dtype_name(ctx->in[i].dtype), tdm_dtype_name(t));
    return NULL;
}

/* ---- FusedConv: Conv's shape rule; Z has the output's shape ---- */

static tdm_status *infer_fused_conv(tdm_infer_ctx *ctx) {
    const tdm_op_schema *conv = tdm_op_find("", "Conv", 11);
    if (!conv || !conv->infer)
        return tdm_node_error(ctx->node, TDM_ERR_INTERNAL, "no Conv schema to infer with");
    TDM_TRY(check_activation(ctx->node, true));
    TDM_TRY(check_float(ctx));
    tdm_infer_ctx c = *ctx;
    c.opset = 11;
    c.n_in = ctx->n_in < 3 ? ctx->n_in : 3;
    TDM_TRY(conv->infer(&c));
    const tdm_value_info *y = &ctx->out[0];
    if (ctx->n_in > 3 && ctx->in[3].present && ctx->in[3].rank >= 0 && y->rank >= 0) {
        const tdm_value_info *z = &ctx->in[3];
        bool bad = z->rank != y->rank;
        for (int d = 0; !bad && d < y->rank; d++)
            bad = z->dims[d] >= 0 && y->dims[d] >= 0 && z->dims[d] != y->dims[d];
        if (bad) {
            char a[128], b[128];
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                  "Z has shape %s, the convolution %s",
                                  tdm_shape_str(z->rank, z->dims, a, sizeof a),
                                  tdm_shape_str(y->rank, y->dims, b, sizeof b));
        }
    }
    return NULL;
}

/* ---- FusedMatMul: MatMul's shape rule; bias is 1-D over the last axis ---- */

static tdm_status *infer_fused_matmul(tdm_infer_ctx *ctx) {
    const tdm_op_schema *mm = tdm_op_find("", "MatMul", 13);
    if (!mm || !mm->infer)
        return tdm_node_error(ctx->node, TDM_ERR_INTERNAL, "no MatMul schema to infer with");
    TDM_TRY(check_activation(ctx->node, false));
    TDM_TRY(check_float(ctx));
    tdm_infer_ctx c = *ctx;
    c.opset = 13;
    c.n_in = 2;
    TDM_TRY(mm->infer(&c));
    const tdm_value_info *y = &ctx->out[0];
    if (ctx->n_in > 2 && ctx->in[2].present && ctx->in[2].rank >= 0) {
        const tdm_value_info *b = &ctx->in[2];
        int64_t n = y->rank > 0 ? y->dims[y->rank - 1] : TDM_DIM_UNKNOWN;
        if (b->rank != 1 || (b->dims[0] >= 0 && n >= 0 && b->dims[0] != n))
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                  "bias must be 1-D with one value per output column");
    }
    return NULL;
}

/* ---- Attention ---- */

/* Broadcast of known-or-unknown dims (numpy rule); error when two known sizes clash. */
static tdm_status *bcast_dim(const tdm_node *node, const int64_t *dims, int n, int64_t *out) {
    int64_t r = 1;
    bool unknown = false;
    for (int i = 0; i < n; i++) {
        if (dims[i] < 0) {
            unknown = true;
        } else if (dims[i] != 1) {
            if (r != 1 && r != dims[i])
                return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                      "dims %lld and %lld do not broadcast", (long long)r,
                                      (long long)dims[i]);
            r = dims[i];
        }
    }
    *out = unknown && r == 1 ? TDM_DIM_UNKNOWN : r;
    return NULL;
}

static tdm_status *infer_attention(tdm_infer_ctx *ctx) {
    const tdm_node *node = ctx->node;
    TDM_TRY(check_float(ctx));
    const tdm_value_info *q = &ctx->in[0], *k = &ctx->in[1], *v = &ctx->in[2];
    const tdm_value_info *m = ctx->n_in > 3 && ctx->in[3].present ? &ctx->in[3] : NULL;
    tdm_value_info *y = &ctx->out[0];
    y->dtype = q->dtype;
    for (int i = 0; i < 3; i++)
        if (ctx->in[i].rank >= 0 && ctx->in[i].rank != 4)
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "input %d must have rank 4", i);
    if (m && m->rank > 4)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "mask rank exceeds 4");
    if (q->rank < 0 || k->rank < 0 || v->rank < 0 || (m && m->rank < 0)) return NULL;
    if (q->dims[3] >= 0 && k->dims[3] >= 0 && q->dims[3] != k->dims[3])
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "Q and K head sizes differ");
    int64_t md[4] = {1, 1, 1, 1};
    if (m)
        for (int d = 0; d < m->rank; d++) md[4 - m->rank + d] = m->dims[d];
    for (int d = 0; d < 2; d++) {
        int64_t dims[4] = {q->dims[d], k->dims[d], v->dims[d], md[d]};
        TDM_TRY(bcast_dim(node, dims, 4, &y->dims[d]));
    }
    int64_t sd[2] = {q->dims[2], md[2]}, td[2] = {k->dims[2], md[3]};
    TDM_TRY(bcast_dim(node, sd, 2, &y->dims[2]));
    int64_t t = TDM_DIM_UNKNOWN; /* the scores' last dim must be V's rows */
    TDM_TRY(bcast_dim(node, td, 2, &t));
    if (t >= 0 && v->dims[2] >= 0 && t != v->dims[2])
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "the scores have %lld columns, V %lld rows", (long long)t,
                              (long long)v->dims[2]);
    y->dims[3] = v->dims[3];
    y->rank = 4;
    return NULL;
}

/* ---- QAdd, QMul: the broadcast of a and b; Y has y_zero_point's type ---- */
static tdm_status *infer_qadd(tdm_infer_ctx *ctx) {
    const tdm_value_info *ins[2] = {&ctx->in[0], &ctx->in[3]};
    TDM_TRY(tdm_infer_broadcast(ctx, 2, ins, &ctx->out[0]));
    ctx->out[0].dtype = ctx->in[7].dtype;
    return NULL;
}

/* ---- QConvTranspose: ConvTranspose's shape of X and W (inputs 0 and 3; x_nhwc / y_nhwc:
 * channels-last [N, H, W, C] of rank 4); Y has y_zero_point's type ---- */
static void nhwc_to_nchw(tdm_value_info *v) {
    int64_t c = v->dims[3];
    v->dims[3] = v->dims[2];
    v->dims[2] = v->dims[1];
    v->dims[1] = c;
}

static tdm_status *infer_qconv_transpose(tdm_infer_ctx *ctx) {
    bool xl = tdm_attr_int(ctx->node, "x_nhwc", 0) != 0, yl = tdm_attr_int(ctx->node, "y_nhwc", 0) != 0;
    tdm_value_info in[2] = {ctx->in[0], ctx->in[3]};
    if (xl && in[0].rank >= 0) {
        if (in[0].rank != 4)
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "x_nhwc needs a rank-4 input");
        nhwc_to_nchw(&in[0]);
    }
    tdm_infer_ctx sub = *ctx;
    sub.n_in = 2;
    sub.in = in;
    TDM_TRY(tdm_nn_infer_conv_transpose(&sub));
    tdm_value_info *y = &ctx->out[0];
    y->dtype = ctx->in[7].dtype;
    if (yl && y->rank >= 0) {
        if (y->rank != 4)
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "y_nhwc needs a rank-4 output");
        int64_t c = y->dims[1];
        y->dims[1] = y->dims[2];
        y->dims[2] = y->dims[3];
        y->dims[3] = c;
    }
    return NULL;
}

/* ---- QLut: X's shape; Y has the table's type ---- */
static tdm_status *infer_qlut(tdm_infer_ctx *ctx) {
    tdm_infer_copy(&ctx->out[0], &ctx->in[0]);
    ctx->out[0].dtype = ctx->in[1].dtype;
    return NULL;
}

/* ---- MaxPoolNhwc: MaxPool's window on [N, H, W, C] (attributes of opset src_opset) ---- */
static tdm_status *infer_maxpool_nhwc(tdm_infer_ctx *ctx) {
    const tdm_value_info *x = &ctx->in[0];
    tdm_value_info *y = &ctx->out[0];
    y->dtype = x->dtype;
    if (x->rank < 0) return NULL;
    if (x->rank != 4)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "MaxPoolNhwc takes rank 4");
    int64_t d[4] = {x->dims[0], x->dims[3], x->dims[1], x->dims[2]};
    tdm_nn_geom g;
    TDM_TRY(tdm_nn_geom_init(ctx->node, (int)tdm_attr_int(ctx->node, "src_opset", 12),
                             TDM_NN_POOL, 4, d, NULL, &g));
    y->rank = 4;
    y->dims[0] = x->dims[0];
    y->dims[1] = g.out[0];
    y->dims[2] = g.out[1];
    y->dims[3] = x->dims[3];
    return NULL;
}

/* ---- ConvNwc1d: X [N, L, C(, D)], W [O, C, k(, 1)] -> Y [N, O, L + pads - k + 1(, D)] ---- */
static tdm_status *infer_conv_nwc1d(tdm_infer_ctx *ctx) {
    TDM_TRY(check_float(ctx));
    const char *act = tdm_attr_string(ctx->node, "activation", "");
    if (act[0] && strcmp(act, "GeluTanh") != 0)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "activation '%s': ConvNwc1d takes \"\" or \"GeluTanh\"", act);
    const tdm_value_info *x = &ctx->in[0], *w = &ctx->in[1];
    tdm_value_info *y = &ctx->out[0];
    y->dtype = x->dtype;
    size_t np = 0;
    const int64_t *pads = tdm_attr_ints(ctx->node, "pads", &np);
    if (pads && (np != 2 || pads[0] < 0 || pads[1] < 0))
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "pads must be 2 values (begin and end of L), none negative");
    int64_t pad = pads ? pads[0] + pads[1] : 0;
    int r = x->rank >= 0 ? x->rank : w->rank;
    if (r < 0) return NULL;
    if ((r != 3 && r != 4) || (x->rank >= 0 && x->rank != r) || (w->rank >= 0 && w->rank != r))
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "X and W must both have rank 3 or both rank 4 (X rank %d, W rank %d)",
                              x->rank, w->rank);
    int64_t N = x->rank >= 0 ? x->dims[0] : TDM_DIM_UNKNOWN;
    int64_t L = x->rank >= 0 ? x->dims[1] : TDM_DIM_UNKNOWN;
    int64_t O = w->rank >= 0 ? w->dims[0] : TDM_DIM_UNKNOWN;
    int64_t k = w->rank >= 0 ? w->dims[2] : TDM_DIM_UNKNOWN;
    if (x->rank >= 0 && w->rank >= 0 && x->dims[2] >= 0 && w->dims[1] >= 0 && x->dims[2] != w->dims[1])
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "X has %lld channels, W %lld",
                              (long long)x->dims[2], (long long)w->dims[1]);
    if (r == 4 && w->rank >= 0 && w->dims[3] >= 0 && w->dims[3] != 1)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "the last dim of W must be 1");
    if (k == 0) return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "the kernel is empty");
    int64_t Lo = TDM_DIM_UNKNOWN;
    if (L >= 0 && k >= 0) {
        Lo = L + pad - k + 1;
        if (Lo < 0)
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                  "the kernel (%lld) is longer than the padded input (%lld)",
                                  (long long)k, (long long)(L + pad));
    }
    if (ctx->n_in > 2 && ctx->in[2].present && ctx->in[2].rank >= 0 &&
        (ctx->in[2].rank != 1 || (O >= 0 && ctx->in[2].dims[0] >= 0 && ctx->in[2].dims[0] != O)))
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "B must be 1-D with one value per output channel");
    y->rank = r;
    y->dims[0] = N;
    y->dims[1] = O;
    y->dims[2] = Lo;
    if (r == 4) y->dims[3] = x->rank >= 0 ? x->dims[3] : TDM_DIM_UNKNOWN;
    return NULL;
}

/* ---- QGlobalAveragePool: [N, C, 1, ...] (nhwc: [N, 1, ..., C]); Y has y_zero_point's type ---- */
static tdm_status *infer_qgap(tdm_infer_ctx *ctx) {
    const tdm_value_info *x = &ctx->in[0];
    tdm_value_info *y = &ctx->out[0];
    y->dtype = ctx->in[4].dtype;
    if (x->rank < 0) return NULL;
    if (x->rank < 3)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "QGlobalAveragePool takes rank >= 3");
    bool nhwc = tdm_attr_int(ctx->node, "nhwc", 0) != 0;
    y->rank = x->rank;
    for (int d = 0; d < x->rank; d++) y->dims[d] = 1;
    y->dims[0] = x->dims[0];
    if (nhwc) y->dims[x->rank - 1] = x->dims[x->rank - 1];
    else y->dims[1] = x->dims[1];
    return NULL;
}

const tdm_op_schema tdm_ops_fused[] = {
    {TDM_FUSED_DOMAIN, "FusedConv", 1, 2, 4, 1, 1, infer_fused_conv, 0, 0},
    {TDM_FUSED_DOMAIN, "FusedMatMul", 1, 2, 3, 1, 1, infer_fused_matmul, 0, 0},
    {TDM_FUSED_DOMAIN, "Attention", 1, 3, 4, 1, 1, infer_attention, 0, 0},
    {TDM_FUSED_DOMAIN, "ToBlocked", 1, 1, 1, 1, 1, tdm_fused_infer_to_blocked, 0, 0},
    {TDM_FUSED_DOMAIN, "FromBlocked", 1, 1, 1, 1, 1, tdm_fused_infer_from_blocked, 0, 0},
    {TDM_FUSED_DOMAIN, "BlockedConv", 1, 2, 4, 1, 1, tdm_fused_infer_blocked_conv, 0, 0},
    {TDM_FUSED_DOMAIN, "BlockedPool", 1, 1, 1, 1, 1, tdm_fused_infer_blocked_pool, 0, 0},
    {TDM_FUSED_DOMAIN, "BlockedConcat", 1, 1, 1024, 1, 1, tdm_fused_infer_blocked_concat, 0, 0},
    {TDM_FUSED_DOMAIN, "QConv", 1, 8, 9, 1, 1, tdm_misc_infer_qlinear_conv, 0, 0},
    {TDM_FUSED_DOMAIN, "QConvTranspose", 1, 8, 9, 1, 1, infer_qconv_transpose, 0, 0},
    {TDM_FUSED_DOMAIN, "QMatMul", 1, 8, 9, 1, 1, tdm_misc_infer_qlinear_matmul, 0, 0},
    {TDM_FUSED_DOMAIN, "QAdd", 1, 8, 8, 1, 1, infer_qadd, 0, 0},
    {TDM_FUSED_DOMAIN, "QMul", 1, 8, 8, 1, 1, infer_qadd, 0, 0},
    {TDM_FUSED_DOMAIN, "QLut", 1, 2, 2, 1, 1, infer_qlut, 0, 0},
    {TDM_FUSED_DOMAIN, "MaxPoolNhwc", 1, 1, 1, 1, 1, infer_maxpool_nhwc, 0, 0},
    {TDM_FUSED_DOMAIN, "QGlobalAveragePool", 1, 5, 5, 1, 1, infer_qgap, 0, 0},
    {TDM_FUSED_DOMAIN, "ConvNwc1d", 1, 2, 3, 1, 1, infer_conv_nwc1d, 0, 0},
};
const int tdm_ops_fused_count = (int)(sizeof tdm_ops_fused / sizeof tdm_ops_fused[0]);
