/* Operator schemas: unary family (elementwise math, activations, Clip, logic Not/BitwiseNot,
 * Cast/CastLike). Every op here keeps its input's shape; only the output dtype varies. */
#include <string.h>

#include "ops/op.h"

/* Output = input 0 (dtype and shape). */
static tdm_status *infer_same(tdm_infer_ctx *ctx) {
    tdm_infer_copy(&ctx->out[0], &ctx->in[0]);
    return NULL;
}

/* Output has input 0's shape and dtype bool (IsNaN, IsInf). */
static tdm_status *infer_bool(tdm_infer_ctx *ctx) {
    tdm_infer_copy(&ctx->out[0], &ctx->in[0]);
    ctx->out[0].dtype = TDM_BOOL;
    return NULL;
}

static bool cast_target_ok(int64_t to) {
    return to > TDM_UNDEFINED && to < TDM_DTYPE_COUNT && to != TDM_COMPLEX64 &&
           to != TDM_COMPLEX128;
}

static tdm_status *infer_cast(tdm_infer_ctx *ctx) {
    const tdm_attr *a = tdm_node_attr(ctx->node, "to");
    if (!a || a->type != TDM_ATTR_INT)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_MODEL, "attribute 'to' is missing");
    if (!cast_target_ok(a->i))
        return tdm_node_error(ctx->node, TDM_ERR_UNSUPPORTED, "cannot cast to data type %lld",
                              (long long)a->i);
    tdm_infer_copy(&ctx->out[0], &ctx->in[0]);
    ctx->out[0].dtype = (tdm_dtype)a->i;
    return NULL;
}

static tdm_status *infer_castlike(tdm_infer_ctx *ctx) {
    tdm_dtype to = ctx->n_in > 1 && ctx->in[1].present ? ctx->in[1].dtype : TDM_UNDEFINED;
    if (to != TDM_UNDEFINED && !cast_target_ok(to))
        return tdm_node_error(ctx->node, TDM_ERR_UNSUPPORTED, "cannot cast to %s",
                              tdm_dtype_name(to));
    tdm_infer_copy(&ctx->out[0], &ctx->in[0]);
    ctx->out[0].dtype = to;
    return NULL;
}

static tdm_status *infer_clip(tdm_infer_ctx *ctx) {
    const tdm_value_info *x = &ctx->in[0];
    for (int i = 1; i < ctx->n_in && i < 3; i++) {
        const tdm_value_info *b = &ctx->in[i];
        if (!b->present) continue;
        if (x->dtype != TDM_UNDEFINED && b->dtype != TDM_UNDEFINED && b->dtype != x->dtype)
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_MODEL,
                                  "%s has type %s but the input is %s", i == 1 ? "min" : "max",
                                  tdm_dtype_name(b->dtype), tdm_dtype_name(x->dtype));
        if (tdm_info_known(b)) {
            int64_t n = 1;
            for (int d = 0; d < b->rank; d++) n *= b->dims[d];
            if (n != 1)
                return tdm_node_error(ctx->node, TDM_ERR_INVALID_MODEL,
                                      "%s must be a scalar, it has %lld elements",
                                      i == 1 ? "min" : "max", (long long)n);
        }
    }
    tdm_infer_copy(&ctx->out[0], x);
    return NULL;
}

static tdm_status *infer_gelu(tdm_infer_ctx *ctx) {
    const char *ap = tdm_attr_string(ctx->node, "approximate", "none");
    if (strcmp(ap, "none") != 0 && strcmp(ap, "tanh") != 0)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_MODEL,
                              "approximate must be \"none\" or \"tanh\", not \"%s\"", ap);
    return infer_same(ctx);
}

static tdm_status *infer_celu(tdm_infer_ctx *ctx) {
    if (tdm_attr_float(ctx->node, "alpha", 1.0f) == 0.0f)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_MODEL, "alpha must not be 0");
    return infer_same(ctx);
}

/* name, since: a one-input, one-output op whose output is like its input. */
#define SAME(name, since) {"", name, since, 1, 1, 1, 1, infer_same, 0, 0}

const tdm_op_schema tdm_ops_unary[] = {
    SAME("Abs", 1),
    SAME("Neg", 1),
    SAME("Reciprocal", 1),
    SAME("Sqrt", 1),
    SAME("Exp", 1),
    SAME("Log", 1),
    SAME("Erf", 9),
    SAME("Sin", 7),
    SAME("Cos", 7),
    SAME("Tan", 7),
    SAME("Asin", 7),
    SAME("Acos", 7),
    SAME("Atan", 7),
    SAME("Sinh", 9),
    SAME("Cosh", 9),
    SAME("Asinh", 9),
    SAME("Acosh", 9),
    SAME("Atanh", 9),
    SAME("Ceil", 1),
    SAME("Floor", 1),
    SAME("Round", 11),
    SAME("Sign", 9),
    {"", "IsNaN", 9, 1, 1, 1, 1, infer_bool, 0, 0},
    {"", "IsInf", 10, 1, 1, 1, 1, infer_bool, 0, 0},
    SAME("Relu", 1),
    SAME("LeakyRelu", 1),
    SAME("Sigmoid", 1),
    SAME("Tanh", 1),
    SAME("HardSigmoid", 1),
    SAME("HardSwish", 14),
    SAME("Elu", 1),
    SAME("Selu", 1),
    {"", "Celu", 12, 1, 1, 1, 1, infer_celu, 0, 0},
    SAME("Softplus", 1),
    SAME("Softsign", 1),
    SAME("ThresholdedRelu", 10),
    SAME("Shrink", 9),
    SAME("Mish", 18),
    {"", "Gelu", 20, 1, 1, 1, 1, infer_gelu, 0, 0},
    {"com.microsoft", "Gelu", 1, 1, 1, 1, 1, infer_same, 0, 0},
    {"", "Clip", 1, 1, 3, 1, 1, infer_clip, 0, 0},
    SAME("Not", 1),
    SAME("BitwiseNot", 18),
    {"", "Cast", 1, 1, 1, 1, 1, infer_cast, 0, 0},
    {"", "CastLike", 15, 2, 2, 1, 1, infer_castlike, 0, 0},
};
const int tdm_ops_unary_count = (int)(sizeof tdm_ops_unary / sizeof tdm_ops_unary[0]);
