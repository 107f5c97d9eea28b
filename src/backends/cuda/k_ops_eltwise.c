/* CUDA kernel table "ops_eltwise": unary math and activations, Clip, Gelu, binary
 * arithmetic / comparison / logic with numpy broadcast (variadic Max, Min, Sum), Where and
 * Expand (kernels/cuda_eltwise.cu). Float types (float32, float16, bfloat16) compute in
 * float32; int32 / int64 and bool where the table says. */
#include <float.h>
#include <string.h>

#include "backends/cuda/kernels/k_ops.h"

/* ---- unary ---- */

typedef struct unary_op {
    const char *op;
    int code;
    const char *pa, *pb; /* attribute names of p and q, or NULL */
    float p, q;          /* defaults */
} unary_op;

static const unary_op unary_ops[] = {
    {"Relu", TCU_RELU, NULL, NULL, 0, 0},
    {"Sigmoid", TCU_SIGMOID, NULL, NULL, 0, 0},
    {"Tanh", TCU_TANH, NULL, NULL, 0, 0},
    {"Exp", TCU_EXP, NULL, NULL, 0, 0},
    {"Log", TCU_LOG, NULL, NULL, 0, 0},
    {"Sqrt", TCU_SQRT, NULL, NULL, 0, 0},
    {"Neg", TCU_NEG, NULL, NULL, 0, 0},
    {"Abs", TCU_ABS, NULL, NULL, 0, 0},
    {"Erf", TCU_ERF, NULL, NULL, 0, 0},
    {"LeakyRelu", TCU_LEAKY_RELU, "alpha", NULL, 0.01f, 0},
    {"HardSwish", TCU_HARD_SWISH, NULL, NULL, 0, 0},
    {"HardSigmoid", TCU_HARD_SIGMOID, "alpha", "beta", 0.2f, 0.5f},
    {"Reciprocal", TCU_RECIPROCAL, NULL, NULL, 0, 0},
    {"Floor", TCU_FLOOR, NULL, NULL, 0, 0},
    {"Ceil", TCU_CEIL, NULL, NULL, 0, 0},
    {"Round", TCU_ROUND, NULL, NULL, 0, 0},
    {"Sign", TCU_SIGN, NULL, NULL, 0, 0},
    {"Sin", TCU_SIN, NULL, NULL, 0, 0},
    {"Cos", TCU_COS, NULL, NULL, 0, 0},
    {"Elu", TCU_ELU, "alpha", NULL, 1.0f, 0},
    {"Selu", TCU_SELU, "alpha", "gamma", 1.67326319217681884765625f, 1.05070102214813232421875f},
    {"Softsign", TCU_SOFTSIGN, NULL, NULL, 0, 0},
    {"Softplus", TCU_SOFTPLUS, NULL, NULL, 0, 0},
    {"Not", TCU_NOT, NULL, NULL, 0, 0},
};

static tdm_status *launch_unary(tdm_kernel_ctx *ctx, int code, float p, float q) {
    const void *x;
    void *y;
    TDM_TRY(kops_in(ctx, 0, &x));
    TDM_TRY(kops_out(ctx, 0, &y));
    if (ctx->in[0]->count != ctx->out[0]->count)
        return tdm_node_error(ctx->node, TDM_ERR_INTERNAL, "input and output sizes differ");
    return kops_status(ctx, tcu_unary(code, (int)ctx->in[0]->dtype, x, y, ctx->out[0]->count, p,
                                      q, kops_stream(ctx)),
                       ctx->node->op_type);
}

static tdm_status *run_unary(tdm_kernel_ctx *ctx) {
    for (size_t i = 0; i < sizeof unary_ops / sizeof unary_ops[0]; i++) {
        const unary_op *u = &unary_ops[i];
        if (strcmp(u->op, ctx->node->op_type) != 0) continue;
        float p = u->pa ? tdm_attr_float(ctx->node, u->pa, u->p) : u->p;
        float q = u->pb ? tdm_attr_float(ctx->node, u->pb, u->q) : u->q;
        return launch_unary(ctx, u->code, p, q);
    }
    return tdm_node_error(ctx->node, TDM_ERR_INTERNAL, "cuda: no unary kernel");
}

static bool gelu_accept(const tdm_node *node, const tdm_dtype *in_types, int n_in) {
    (void)in_types;
    (void)n_in;
    const char *a = tdm_attr_string(node, "approximate", "none");
    return strcmp(a, "none") == 0 || strcmp(a, "tanh") == 0;
}

static tdm_status *run_gelu(tdm_kernel_ctx *ctx) {
    const char *a = tdm_attr_string(ctx->node, "approximate", "none");
    return launch_unary(ctx, strcmp(a, "tanh") == 0 ? TCU_GELU_TANH : TCU_GELU, 0, 0);
}

static tdm_status *run_clip(tdm_kernel_ctx *ctx) {
    if (ctx->opset < 11)
        return launch_unary(ctx, TCU_CLIP, tdm_attr_float(ctx->node, "min", -FLT_MAX),
                            tdm_attr_float(ctx->node, "max", FLT_MAX));
    const tdm_tensor *lo = ctx->n_in > 1 ? ctx->in[1] : NULL;
    const tdm_tensor *hi = ctx->n_in > 2 ? ctx->in[2] : NULL;
    if ((lo && lo->count != 1) || (hi && hi->count != 1))
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "min and max must be scalars");
    const void *x, *l, *h;
    void *y;
    TDM_TRY(kops_in(ctx, 0, &x));
    TDM_TRY(kops_in(ctx, 1, &l));
    TDM_TRY(kops_in(ctx, 2, &h));
    TDM_TRY(kops_out(ctx, 0, &y));
    return kops_status(ctx, tcu_clip((int)ctx->in[0]->dtype, x, y, ctx->out[0]->count, l, h,
                                     kops_stream(ctx)),
                       "Clip");
}

/* ---- binary (and variadic) ---- */

/* The broadcast walk of n tensors onto out's shape. */
static tdm_status *bcast(const tdm_kernel_ctx *ctx, int n, const tdm_tensor *const *ins,
                         const tdm_tensor *out, tcu_shape *s) {
    int ranks[TCU_MAX_OPERANDS];
    const int64_t *dims[TCU_MAX_OPERANDS];
    for (int k = 0; k < n; k++) {
        ranks[k] = ins[k]->rank;
        dims[k] = ins[k]->dims;
    }
    if (tcu_bcast_plan(n, ranks, dims, out->rank, out->dims, s))
        return tdm_node_error(ctx->node, TDM_ERR_INTERNAL,
                              "cuda: inputs do not broadcast to the output shape");
    return NULL;
}

typedef struct binary_op {
    const char *op;
    int code;
} binary_op;

static const binary_op binary_ops[] = {
    {"Add", TCU_ADD}, {"Sub", TCU_SUB}, {"Mul", TCU_MUL}, {"Div", TCU_DIV},
    {"Pow", TCU_POW}, {"Max", TCU_MAX}, {"Min", TCU_MIN}, {"Sum", TCU_ADD},
    {"PRelu", TCU_PRELU}, {"Equal", TCU_EQUAL}, {"Less", TCU_LESS}, {"Greater", TCU_GREATER},
    {"LessOrEqual", TCU_LESS_EQ}, {"GreaterOrEqual", TCU_GREATER_EQ}, {"And", TCU_AND},
    {"Or", TCU_OR}, {"Xor", TCU_XOR},
};

static tdm_status *run_binary(tdm_kernel_ctx *ctx) {
    int code = -1;
    for (size_t i = 0; i < sizeof binary_ops / sizeof binary_ops[0]; i++)
        if (strcmp(binary_ops[i].op, ctx->node->op_type) == 0) code = binary_ops[i].code;
    if (code < 0) return tdm_node_error(ctx->node, TDM_ERR_INTERNAL, "cuda: no binary kernel");
    const tdm_tensor *Y = ctx->out[0];
    void *y;
    TDM_TRY(kops_out(ctx, 0, &y));
    int n = 0;
    const tdm_tensor *ins[32];
    const void *ptr[32];
    for (int k = 0; k < ctx->n_in && k < 32; k++) {
        if (!ctx->in[k]) continue;
        TDM_TRY(kops_in(ctx, k, &ptr[n]));
        ins[n++] = ctx->in[k];
    }
    if (n == 0 || n != ctx->n_in)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "cuda: missing or too many inputs");
    if (n == 1) { /* variadic op of one input: a copy */
        if (ins[0]->nbytes != Y->nbytes)
            return tdm_node_error(ctx->node, TDM_ERR_INTERNAL, "input and output sizes differ");
        return kops_copy(ctx, y, ptr[0], Y->nbytes);
    }
    tcu_shape s;
    TDM_TRY(bcast(ctx, 2, ins, Y, &s));
    int dt = (int)ins[0]->dtype;
    TDM_TRY(kops_status(ctx, tcu_binary(code, dt, ptr[0], ptr[1], y, &s, kops_stream(ctx)),
                        ctx->node->op_type));
    /* more inputs (Max, Min, Sum): y = op(y, input k), in stream order */
    for (int k = 2; k < n; k++) {
        const tdm_tensor *pair[2] = {Y, ins[k]};
        TDM_TRY(bcast(ctx, 2, pair, Y, &s));
        TDM_TRY(kops_status(ctx, tcu_binary(code, dt, y, ptr[k], y, &s, kops_stream(ctx)),
                            ctx->node->op_type));
    }
    return NULL;
}

/* ---- Where, Expand ---- */

static tdm_status *run_where(tdm_kernel_ctx *ctx) {
    const void *c, *a, *b;
    void *y;
    TDM_TRY(kops_in(ctx, 0, &c));
    TDM_TRY(kops_in(ctx, 1, &a));
    TDM_TRY(kops_in(ctx, 2, &b));
    TDM_TRY(kops_out(ctx, 0, &y));
    if (!c || !a || !b) return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "missing input");
    int es;
    TDM_TRY(kops_elem_size(ctx, ctx->out[0], &es));
    tcu_shape s;
    TDM_TRY(bcast(ctx, 3, (const tdm_tensor *const *)ctx->in, ctx->out[0], &s));
    return kops_status(ctx, tcu_where(es, c, a, b, y, &s, kops_stream(ctx)), "Where");
}

static tdm_status *run_expand(tdm_kernel_ctx *ctx) {
    const void *x;
    void *y;
    TDM_TRY(kops_in(ctx, 0, &x));
    TDM_TRY(kops_out(ctx, 0, &y));
    int es;
    TDM_TRY(kops_elem_size(ctx, ctx->out[0], &es));
    tcu_shape s;
    TDM_TRY(bcast(ctx, 1, (const tdm_tensor *const *)ctx->in, ctx->out[0], &s));
    return kops_status(ctx, tcu_strided_copy(es, x, y, &s, kops_stream(ctx)), "Expand");
}

#define E_(op, since, types, fn) {{"", op, since, 0, 0, types, fn, NULL, NULL}, 0, 0, 0, NULL}
#define U(op, since, types) E_(op, since, types, run_unary)
/* binary ops from opset 7 (earlier versions broadcast with the legacy broadcast/axis
 * attributes); the variadic ones from 8 (numpy broadcast) */
#define B(op, since, types) E_(op, since, types, run_binary)

const cuda_kernel_entry cuda_kernels_ops_eltwise[] = {
    U("Relu", 6, KOPS_F | KOPS_I), U("Sigmoid", 6, KOPS_F), U("Tanh", 6, KOPS_F),
    U("Exp", 6, KOPS_F), U("Log", 6, KOPS_F), U("Sqrt", 6, KOPS_F), U("Neg", 6, KOPS_F | KOPS_I),
    U("Abs", 6, KOPS_F | KOPS_I), U("Erf", 9, KOPS_F), U("LeakyRelu", 6, KOPS_F),
    U("HardSwish", 14, KOPS_F), U("HardSigmoid", 6, KOPS_F), U("Reciprocal", 6, KOPS_F),
    U("Floor", 6, KOPS_F), U("Ceil", 6, KOPS_F), U("Round", 11, KOPS_F),
    U("Sign", 9, KOPS_F | KOPS_I), U("Sin", 7, KOPS_F), U("Cos", 7, KOPS_F), U("Elu", 6, KOPS_F),
    U("Selu", 6, KOPS_F), U("Softsign", 1, KOPS_F), U("Softplus", 1, KOPS_F),
    U("Not", 1, KOPS_B),
    {{"", "Gelu", 20, 0, 0, KOPS_F, run_gelu, NULL, NULL}, 0, 0, 0, gelu_accept},
    {{"com.microsoft", "Gelu", 1, 0, 0, KOPS_F, run_gelu, NULL, NULL}, 0, 0, 0, NULL},
    E_("Clip", 6, KOPS_F | KOPS_I, run_clip),
    B("Add", 7, KOPS_F | KOPS_I), B("Sub", 7, KOPS_F | KOPS_I), B("Mul", 7, KOPS_F | KOPS_I),
    B("Div", 7, KOPS_F | KOPS_I), B("Pow", 7, KOPS_F), B("PRelu", 7, KOPS_F),
    B("Max", 8, KOPS_F | KOPS_I), B("Min", 8, KOPS_F | KOPS_I), B("Sum", 8, KOPS_F | KOPS_I),
    B("Equal", 7, KOPS_F | KOPS_I | KOPS_B), B("Less", 7, KOPS_F | KOPS_I),
    B("Greater", 7, KOPS_F | KOPS_I), B("LessOrEqual", 12, KOPS_F | KOPS_I),
    B("GreaterOrEqual", 12, KOPS_F | KOPS_I), B("And", 7, KOPS_B), B("Or", 7, KOPS_B),
    B("Xor", 7, KOPS_B),
    {{"", "Where", 9, 0, 1, KOPS_ANY, run_where, NULL, NULL}, 0, 1u << 0, 0, NULL},
    {{"", "Expand", 8, 0, 0, KOPS_ANY, run_expand, NULL, NULL}, 1u << 1, 0, 0, NULL},
};
const int cuda_kernels_ops_eltwise_count =
    (int)(sizeof cuda_kernels_ops_eltwise / sizeof cuda_kernels_ops_eltwise[0]);
