/* Operator schemas: binary family — elementwise ops with multidirectional (numpy)
 * broadcasting: arithmetic, comparison, logic, bitwise, Where, the variadic Sum / Mean /
 * Max / Min, and PRelu (slope broadcast to X).
 *
 * Before opset 7 the arithmetic, logic and comparison ops broadcast the old way: with
 * attribute broadcast=1, B's shape is matched against A's at `axis` (default: the trailing
 * dims) and the output has A's shape. */
#include <string.h>

#include "ops/op.h"

enum {
    KB_SAME_TYPES = 1 << 0, /* inputs must share one dtype */
    KB_OUT_BOOL = 1 << 1,   /* output is bool */
    KB_BOOL_IN = 1 << 2,    /* inputs must be bool */
};

static bool legacy_broadcast(const tdm_infer_ctx *ctx) {
    return ctx->opset < 7 && tdm_attr_int(ctx->node, "broadcast", 0) != 0;
}

static tdm_dtype first_known_dtype(const tdm_infer_ctx *ctx, int from, int to) {
    for (int i = from; i < to && i < ctx->n_in; i++)
        if (ctx->in[i].present && ctx->in[i].dtype != TDM_UNDEFINED) return ctx->in[i].dtype;
    return TDM_UNDEFINED;
}

/* All known dtypes of inputs [from, to) are equal. */
static tdm_status *check_same_dtype(const tdm_infer_ctx *ctx, int from, int to) {
    tdm_dtype dt = first_known_dtype(ctx, from, to);
    for (int i = from; i < to && i < ctx->n_in; i++) {
        const tdm_value_info *v = &ctx->in[i];
        if (v->present && v->dtype != TDM_UNDEFINED && v->dtype != dt)
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                  "input %d is %s but input %d is %s", i, tdm_dtype_name(v->dtype),
                                  from, tdm_dtype_name(dt));
    }
    return NULL;
}

/* Legacy (opset < 7) broadcast: the output has A's shape; B must fit inside A at `axis`. */
static tdm_status *infer_legacy(const tdm_infer_ctx *ctx, tdm_value_info *out) {
    const tdm_value_info *a = &ctx->in[0], *b = &ctx->in[1];
    out->rank = a->rank;
    for (int d = 0; d < a->rank && d < TDM_MAX_RANK; d++) out->dims[d] = a->dims[d];
    if (a->rank < 0 || b->rank < 0) return NULL;
    int64_t axis = tdm_attr_int(ctx->node, "axis", a->rank - b->rank);
    if (axis < 0) axis += a->rank;
    if (axis < 0 || b->rank > a->rank || axis + b->rank > a->rank)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "legacy broadcast: B of rank %d does not fit A of rank %d at "
                              "axis %lld",
                              b->rank, a->rank, (long long)axis);
    for (int d = 0; d < b->rank; d++) {
        int64_t x = a->dims[axis + d], y = b->dims[d];
        if (x >= 0 && y >= 0 && y != 1 && x != y)
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                  "legacy broadcast: B dim %d is %lld, A has %lld", d,
                                  (long long)y, (long long)x);
    }
    return NULL;
}

static tdm_status *infer_elementwise(tdm_infer_ctx *ctx, unsigned flags) {
    if (flags & KB_SAME_TYPES) TDM_TRY(check_same_dtype(ctx, 0, ctx->n_in));
    if (flags & KB_BOOL_IN) {
        for (int i = 0; i < ctx->n_in; i++)
            if (ctx->in[i].present && ctx->in[i].dtype != TDM_UNDEFINED &&
                ctx->in[i].dtype != TDM_BOOL)
                return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                      "input %d must be bool, got %s", i,
                                      tdm_dtype_name(ctx->in[i].dtype));
    }
    tdm_value_info *out = &ctx->out[0];
    out->dtype = (flags & KB_OUT_BOOL) ? TDM_BOOL : first_known_dtype(ctx, 0, 1);
    if (ctx->n_in == 2 && legacy_broadcast(ctx)) return infer_legacy(ctx, out);
    const tdm_value_info *ins[2] = {&ctx->in[0], &ctx->in[1]};
    return tdm_infer_broadcast(ctx, ctx->n_in < 2 ? ctx->n_in : 2, ins, out);
}

static tdm_status *infer_arith(tdm_infer_ctx *ctx) { return infer_elementwise(ctx, KB_SAME_TYPES); }

static tdm_status *infer_compare(tdm_infer_ctx *ctx) {
    return infer_elementwise(ctx, KB_SAME_TYPES | KB_OUT_BOOL);
}

static tdm_status *infer_logic(tdm_infer_ctx *ctx) {
    return infer_elementwise(ctx, KB_SAME_TYPES | KB_OUT_BOOL | KB_BOOL_IN);
}

static tdm_status *infer_pow(tdm_infer_ctx *ctx) {
    /* Base and exponent may differ in type from opset 12; the output has the base's type. */
    if (ctx->opset < 12) TDM_TRY(check_same_dtype(ctx, 0, 2));
    return infer_elementwise(ctx, 0);
}

static tdm_status *infer_mod(tdm_infer_ctx *ctx) {
    int64_t fmod = tdm_attr_int(ctx->node, "fmod", 0);
    if (fmod != 0 && fmod != 1)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "fmod must be 0 or 1, got %lld",
                              (long long)fmod);
    return infer_elementwise(ctx, KB_SAME_TYPES);
}

static tdm_status *infer_bitshift(tdm_infer_ctx *ctx) {
    const char *dir = tdm_attr_string(ctx->node, "direction", NULL);
    if (!dir || (strcmp(dir, "LEFT") && strcmp(dir, "RIGHT")))
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "direction must be \"LEFT\" or \"RIGHT\"");
    return infer_elementwise(ctx, KB_SAME_TYPES);
}

static tdm_status *infer_where(tdm_infer_ctx *ctx) {
    const tdm_value_info *c = &ctx->in[0];
    if (c->dtype != TDM_UNDEFINED && c->dtype != TDM_BOOL)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "condition must be bool, got %s",
                              tdm_dtype_name(c->dtype));
    TDM_TRY(check_same_dtype(ctx, 1, 3));
    ctx->out[0].dtype = first_known_dtype(ctx, 1, 3);
    const tdm_value_info *ins[3] = {&ctx->in[0], &ctx->in[1], &ctx->in[2]};
    return tdm_infer_broadcast(ctx, 3, ins, &ctx->out[0]);
}

/* Sum, Mean, Max, Min: 1..N inputs of one dtype, broadcast together. */
static tdm_status *infer_variadic(tdm_infer_ctx *ctx) {
    TDM_TRY(check_same_dtype(ctx, 0, ctx->n_in));
    ctx->out[0].dtype = first_known_dtype(ctx, 0, ctx->n_in);
    tdm_value_info acc = ctx->in[0];
    for (int i = 1; i < ctx->n_in; i++) {
        const tdm_value_info *pair[2] = {&acc, &ctx->in[i]};
        tdm_value_info next = acc;
        next.data = NULL;
        TDM_TRY(tdm_infer_broadcast(ctx, 2, pair, &next));
        acc = next;
    }
    ctx->out[0].rank = acc.rank;
    memcpy(ctx->out[0].dims, acc.dims, sizeof acc.dims);
    return NULL;
}

static tdm_status *infer_prelu(tdm_infer_ctx *ctx) {
    TDM_TRY(check_same_dtype(ctx, 0, 2));
    const tdm_value_info *x = &ctx->in[0], *s = &ctx->in[1];
    tdm_infer_copy(&ctx->out[0], x);
    if (x->rank < 0 || s->rank < 0) return NULL;
    bool ok = s->rank <= x->rank;
    for (int d = 0; ok && d < s->rank; d++) {
        int64_t sd = s->dims[d], xd = x->dims[x->rank - s->rank + d];
        if (sd >= 0 && xd >= 0 && sd != 1 && sd != xd) ok = false;
    }
    /* Before opset 7 a 1-D slope applied per channel (dim 1). */
    if (!ok && ctx->opset < 7 && s->rank == 1 && x->rank >= 2 &&
        (s->dims[0] == x->dims[1] || s->dims[0] < 0 || x->dims[1] < 0))
        ok = true;
    if (!ok) {
        char a[128], b[128];
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "slope shape %s does not broadcast to X shape %s",
                              tdm_shape_str(s->rank, s->dims, a, sizeof a),
                              tdm_shape_str(x->rank, x->dims, b, sizeof b));
    }
    return NULL;
}

#define KB_MANY (1 << 30)

const tdm_op_schema tdm_ops_binary[] = {
    {"", "Add", 1, 2, 2, 1, 1, infer_arith, 0, 0},
    {"", "Sub", 1, 2, 2, 1, 1, infer_arith, 0, 0},
    {"", "Mul", 1, 2, 2, 1, 1, infer_arith, 0, 0},
    {"", "Div", 1, 2, 2, 1, 1, infer_arith, 0, 0},
    {"", "Pow", 1, 2, 2, 1, 1, infer_pow, 0, 0},
    {"", "Mod", 10, 2, 2, 1, 1, infer_mod, 0, 0},
    {"", "BitShift", 11, 2, 2, 1, 1, infer_bitshift, 0, 0},
    {"", "And", 1, 2, 2, 1, 1, infer_logic, 0, 0},
    {"", "Or", 1, 2, 2, 1, 1, infer_logic, 0, 0},
    {"", "Xor", 1, 2, 2, 1, 1, infer_logic, 0, 0},
    {"", "BitwiseAnd", 18, 2, 2, 1, 1, infer_arith, 0, 0},
    {"", "BitwiseOr", 18, 2, 2, 1, 1, infer_arith, 0, 0},
    {"", "BitwiseXor", 18, 2, 2, 1, 1, infer_arith, 0, 0},
    {"", "Equal", 1, 2, 2, 1, 1, infer_compare, 0, 0},
    {"", "Less", 1, 2, 2, 1, 1, infer_compare, 0, 0},
    {"", "LessOrEqual", 12, 2, 2, 1, 1, infer_compare, 0, 0},
    {"", "Greater", 1, 2, 2, 1, 1, infer_compare, 0, 0},
    {"", "GreaterOrEqual", 12, 2, 2, 1, 1, infer_compare, 0, 0},
    {"", "Where", 9, 3, 3, 1, 1, infer_where, 0, 0},
    {"", "Sum", 1, 1, KB_MANY, 1, 1, infer_variadic, 0, 0},
    {"", "Mean", 1, 1, KB_MANY, 1, 1, infer_variadic, 0, 0},
    {"", "Max", 1, 1, KB_MANY, 1, 1, infer_variadic, 0, 0},
    {"", "Min", 1, 1, KB_MANY, 1, 1, infer_variadic, 0, 0},
    {"", "PRelu", 1, 2, 2, 1, 1, infer_prelu, 0, 0},
};
const int tdm_ops_binary_count = (int)(sizeof tdm_ops_binary / sizeof tdm_ops_binary[0]);
