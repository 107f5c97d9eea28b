/* Operator schemas: nn family (MatMul, Gemm, convolutions, pooling, normalizations,
 * Einsum). Shape functions of the windowed ops are in nn_conv.c, Einsum's in nn_einsum.c. */
#include <string.h>

#include "ops/nn_geom.h"

tdm_status *tdm_nn_infer_conv(tdm_infer_ctx *ctx);
tdm_status *tdm_nn_infer_conv_integer(tdm_infer_ctx *ctx);
tdm_status *tdm_nn_infer_conv_transpose(tdm_infer_ctx *ctx);
tdm_status *tdm_nn_infer_pool(tdm_infer_ctx *ctx);
tdm_status *tdm_nn_infer_global_pool(tdm_infer_ctx *ctx);
tdm_status *tdm_nn_infer_max_unpool(tdm_infer_ctx *ctx);
tdm_status *tdm_nn_infer_einsum(tdm_infer_ctx *ctx);

/* Broadcasts two known-rank batch shapes (numpy rules); dims may be unknown. */
static tdm_status *batch_broadcast(const tdm_node *node, int ra, const int64_t *a, int rb,
                                   const int64_t *b, int *rank, int64_t *out) {
    int r = ra > rb ? ra : rb;
    for (int i = 0; i < r; i++) {
        int ia = i - (r - ra), ib = i - (r - rb);
        int64_t x = ia >= 0 ? a[ia] : 1, y = ib >= 0 ? b[ib] : 1;
        int64_t d;
        if (x == 1) d = y;
        else if (y == 1) d = x;
        else if (x < 0) d = y; /* unknown vs known > 1: must be equal (or 1) */
        else if (y < 0) d = x;
        else if (x == y) d = x;
        else
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                  "batch dims %lld and %lld cannot be broadcast", (long long)x,
                                  (long long)y);
        out[i] = d;
    }
    *rank = r;
    return NULL;
}

static tdm_status *infer_matmul_shape(tdm_infer_ctx *ctx, tdm_dtype out_type) {
    const tdm_value_info *a = &ctx->in[0], *b = &ctx->in[1];
    tdm_value_info *y = &ctx->out[0];
    y->dtype = out_type;
    if (a->rank < 0 || b->rank < 0) return NULL;
    if (a->rank == 0 || b->rank == 0)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "operands must have rank 1 or more");
    int64_t ka = a->dims[a->rank - 1], kb = b->dims[b->rank == 1 ? 0 : b->rank - 2];
    if (ka >= 0 && kb >= 0 && ka != kb) {
        char s1[128], s2[128];
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "inner dimensions differ: %s x %s",
                              tdm_shape_str(a->rank, a->dims, s1, sizeof s1),
                              tdm_shape_str(b->rank, b->dims, s2, sizeof s2));
    }
    int ra = a->rank > 2 ? a->rank - 2 : 0, rb = b->rank > 2 ? b->rank - 2 : 0, r = 0;
    int64_t dims[TDM_MAX_RANK + 2];
    TDM_TRY(batch_broadcast(ctx->node, ra, a->dims, rb, b->dims, &r, dims));
    if (a->rank >= 2) dims[r++] = a->dims[a->rank - 2];
    if (b->rank >= 2) dims[r++] = b->dims[b->rank - 1];
    if (r > TDM_MAX_RANK)
        return tdm_node_error(ctx->node, TDM_ERR_LIMIT, "result rank exceeds %d", TDM_MAX_RANK);
    y->rank = r;
    memcpy(y->dims, dims, sizeof(int64_t) * (size_t)r);
    return NULL;
}

static tdm_status *infer_matmul(tdm_infer_ctx *ctx) {
    return infer_matmul_shape(ctx, ctx->in[0].dtype);
}

static tdm_status *infer_matmul_integer(tdm_infer_ctx *ctx) {
    return infer_matmul_shape(ctx, TDM_INT32);
}

static tdm_status *infer_gemm(tdm_infer_ctx *ctx) {
    const tdm_value_info *a = &ctx->in[0], *b = &ctx->in[1];
    tdm_value_info *y = &ctx->out[0];
    y->dtype = a->dtype;
    bool ta = tdm_attr_int(ctx->node, "transA", 0) != 0;
    bool tb = tdm_attr_int(ctx->node, "transB", 0) != 0;
    if ((a->rank >= 0 && a->rank != 2) || (b->rank >= 0 && b->rank != 2))
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "A and B must be 2-D");
    y->rank = 2;
    int64_t m = a->rank == 2 ? a->dims[ta ? 1 : 0] : TDM_DIM_UNKNOWN;
    int64_t ka = a->rank == 2 ? a->dims[ta ? 0 : 1] : TDM_DIM_UNKNOWN;
    int64_t kb = b->rank == 2 ? b->dims[tb ? 1 : 0] : TDM_DIM_UNKNOWN;
    int64_t n = b->rank == 2 ? b->dims[tb ? 0 : 1] : TDM_DIM_UNKNOWN;
    if (ka >= 0 && kb >= 0 && ka != kb)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "inner dimensions differ (%lld vs %lld)", (long long)ka,
                              (long long)kb);
    y->dims[0] = m;
    y->dims[1] = n;
    if (ctx->n_in > 2 && ctx->in[2].present && ctx->in[2].rank >= 0) {
        const tdm_value_info *c = &ctx->in[2];
        if (c->rank > 2)
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "C must have rank <= 2");
        for (int i = 0; i < c->rank; i++) {
            int64_t cd = c->dims[i], yd = y->dims[2 - c->rank + i];
            if (cd >= 0 && yd >= 0 && cd != 1 && cd != yd)
                return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                      "C cannot be broadcast to the result");
        }
    }
    return NULL;
}

static tdm_status *infer_batchnorm(tdm_infer_ctx *ctx) {
    const tdm_value_info *x = &ctx->in[0];
    tdm_infer_copy(&ctx->out[0], x);
    if (x->rank == 0 || x->rank == 1)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "input must have rank 2 or more (N, C, ...)");
    for (int i = 1; i < 5 && i < ctx->n_in; i++) {
        const tdm_value_info *p = &ctx->in[i];
        /* scale, bias, mean and var are floating point (their type names the statistics
         * outputs' from opset 14) */
        if (p->present && p->dtype != TDM_UNDEFINED && !tdm_dtype_is_float(p->dtype))
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                  "input %d must be floating point, not %s", i,
                                  tdm_dtype_name(p->dtype));
        if (x->rank >= 2 && p->rank >= 1 && p->dims[0] >= 0 && x->dims[1] >= 0 &&
            p->dims[0] != x->dims[1])
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                  "input %d has %lld values for %lld channels", i,
                                  (long long)p->dims[0], (long long)x->dims[1]);
    }
    for (int o = 1; o < ctx->n_out; o++) {
        tdm_value_info *s = &ctx->out[o];
        if (!s->present) continue;
        /* running mean / var (and, before opset 14, the saved batch statistics) */
        const tdm_value_info *src = &ctx->in[o == 2 ? 4 : 3];
        s->dtype = ctx->opset >= 14 ? src->dtype : x->dtype;
        s->rank = 1;
        s->dims[0] = x->rank >= 2 ? x->dims[1] : src->rank == 1 ? src->dims[0] : TDM_DIM_UNKNOWN;
    }
    return NULL;
}

static tdm_status *infer_instancenorm(tdm_infer_ctx *ctx) {
    const tdm_value_info *x = &ctx->in[0];
    tdm_infer_copy(&ctx->out[0], x);
    if (x->rank >= 0 && x->rank < 3)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "input must have rank 3 or more (N, C, D1, ...)");
    return NULL;
}

static tdm_status *infer_lrn(tdm_infer_ctx *ctx) {
    const tdm_value_info *x = &ctx->in[0];
    tdm_infer_copy(&ctx->out[0], x);
    if (tdm_attr_int(ctx->node, "size", 0) < 1)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "attribute 'size' must be positive");
    if (x->rank >= 0 && x->rank < 3)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "input must have rank 3 or more (N, C, D1, ...)");
    return NULL;
}

static tdm_status *infer_mvn(tdm_infer_ctx *ctx) {
    const tdm_value_info *x = &ctx->in[0];
    tdm_infer_copy(&ctx->out[0], x);
    if (x->rank < 0) return NULL;
    size_t n = 0;
    const int64_t *axes = tdm_attr_ints(ctx->node, "axes", &n);
    for (size_t i = 0; i < n; i++) {
        int ax;
        TDM_TRY(tdm_norm_axis(ctx->node, axes[i], x->rank, &ax));
    }
    if (!axes && x->rank < 4)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "the default axes [0, 2, 3] need a 4-D input");
    return NULL;
}

const tdm_op_schema tdm_ops_nn[] = {
    {"", "MatMul", 1, 2, 2, 1, 1, infer_matmul, 0, 0},
    {"", "MatMulInteger", 10, 2, 4, 1, 1, infer_matmul_integer, 0, 0},
    {"", "Gemm", 1, 2, 3, 1, 1, infer_gemm, 0, 0},
    {"", "Conv", 1, 2, 3, 1, 1, tdm_nn_infer_conv, 0, 0},
    {"", "ConvInteger", 10, 2, 4, 1, 1, tdm_nn_infer_conv_integer, 0, 0},
    {"", "ConvTranspose", 1, 2, 3, 1, 1, tdm_nn_infer_conv_transpose, 0, 0},
    {"", "MaxPool", 1, 1, 1, 1, 2, tdm_nn_infer_pool, 0, 0},
    {"", "AveragePool", 1, 1, 1, 1, 1, tdm_nn_infer_pool, 0, 0},
    {"", "LpPool", 1, 1, 1, 1, 1, tdm_nn_infer_pool, 0, 0},
    {"", "GlobalAveragePool", 1, 1, 1, 1, 1, tdm_nn_infer_global_pool, 0, 0},
    {"", "GlobalMaxPool", 1, 1, 1, 1, 1, tdm_nn_infer_global_pool, 0, 0},
    {"", "GlobalLpPool", 1, 1, 1, 1, 1, tdm_nn_infer_global_pool, 0, 0},
    {"", "MaxUnpool", 9, 2, 3, 1, 1, tdm_nn_infer_max_unpool, 0, 1u << 2},
    {"", "BatchNormalization", 1, 5, 5, 1, 5, infer_batchnorm, 0, 0},
    {"", "InstanceNormalization", 1, 3, 3, 1, 1, infer_instancenorm, 0, 0},
    {"", "LRN", 1, 1, 1, 1, 1, infer_lrn, 0, 0},
    {"", "MeanVarianceNormalization", 9, 1, 1, 1, 1, infer_mvn, 0, 0},
    {"", "Einsum", 12, 1, TDM_EINSUM_MAX_OPS, 1, 1, tdm_nn_infer_einsum, 0, 0},
};
const int tdm_ops_nn_count = (int)(sizeof tdm_ops_nn / sizeof tdm_ops_nn[0]);
