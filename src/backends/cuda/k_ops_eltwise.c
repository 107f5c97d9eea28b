/* CUDA kernel table "ops_eltwise": unary math and activations, Clip, Gelu, binary
 * arithmetic / comparison / logic with numpy broadcast (variadic Max, Min, Sum), Where and
 * Expand (kernels/cuda_eltwise.cu). Float types (float32, float16, bfloat16) compute in
 * float32; int32 / int64 and bool where the table says. */
#include <float.h>
#include <string.h>

#include "backends/cuda/kernels/k_ops.h"

/* ---- unary ---- */

/* op, since, dtypes, kernel code, attributes giving the kernel's p and q (NULL: none), their
 * defaults. Each op gets its own run function (run_<op>): the kernel table entry found at
 * plan time is the only lookup of the op. */
#define UNARY_OPS(X)                                                                     \
    X(Relu, 6, KOPS_F | KOPS_I, TCU_RELU, NULL, NULL, 0, 0)                              \
    X(Sigmoid, 6, KOPS_F, TCU_SIGMOID, NULL, NULL, 0, 0)                                 \
    X(Tanh, 6, KOPS_F, TCU_TANH, NULL, NULL, 0, 0)                                       \
    X(Exp, 6, KOPS_F, TCU_EXP, NULL, NULL, 0, 0)                                         \
    X(Log, 6, KOPS_F, TCU_LOG, NULL, NULL, 0, 0)                                         \
    X(Sqrt, 6, KOPS_F, TCU_SQRT, NULL, NULL, 0, 0)                                       \
    X(Neg, 6, KOPS_F | KOPS_I, TCU_NEG, NULL, NULL, 0, 0)                                \
    X(Abs, 6, KOPS_F | KOPS_I, TCU_ABS, NULL, NULL, 0, 0)                                \
    X(Erf, 9, KOPS_F, TCU_ERF, NULL, NULL, 0, 0)                                         \
    X(LeakyRelu, 6, KOPS_F, TCU_LEAKY_RELU, "alpha", NULL, 0.01f, 0)                     \
    X(HardSwish, 14, KOPS_F, TCU_HARD_SWISH, NULL, NULL, 0, 0)                           \
    X(HardSigmoid, 6, KOPS_F, TCU_HARD_SIGMOID, "alpha", "beta", 0.2f, 0.5f)             \
    X(Reciprocal, 6, KOPS_F, TCU_RECIPROCAL, NULL, NULL, 0, 0)                           \
    X(Floor, 6, KOPS_F, TCU_FLOOR, NULL, NULL, 0, 0)                                     \
    X(Ceil, 6, KOPS_F, TCU_CEIL, NULL, NULL, 0, 0)                                       \
    X(Round, 11, KOPS_F, TCU_ROUND, NULL, NULL, 0, 0)                                    \
    X(Sign, 9, KOPS_F | KOPS_I, TCU_SIGN, NULL, NULL, 0, 0)                              \
    X(Sin, 7, KOPS_F, TCU_SIN, NULL, NULL, 0, 0)                                         \
    X(Cos, 7, KOPS_F, TCU_COS, NULL, NULL, 0, 0)                                         \
    X(Elu, 6, KOPS_F, TCU_ELU, "alpha", NULL, 1.0f, 0)                                   \
    X(Selu, 6, KOPS_F, TCU_SELU, "alpha", "gamma", 1.67326319217681884765625f,          \
      1.05070102214813232421875f)                                                        \
    X(Softsign, 1, KOPS_F, TCU_SOFTSIGN, NULL, NULL, 0, 0)                               \
    X(Softplus, 1, KOPS_F, TCU_SOFTPLUS, NULL, NULL, 0, 0)                               \
    X(Not, 1, KOPS_B, TCU_NOT, NULL, NULL, 0, 0)

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

/* p and q from the node's attributes pa and pb (NULL: the defaults) */
static tdm_status *run_unary(tdm_kernel_ctx *ctx, int code, const char *pa, const char *pb,
                             float p, float q) {
    return launch_unary(ctx, code, pa ? tdm_attr_float(ctx->node, pa, p) : p,
                        pb ? tdm_attr_float(ctx->node, pb, q) : q);
}

#define X_(op, since, types, code, pa, pb, p, q)                                         \
    static tdm_status *run_##op(tdm_kernel_ctx *ctx) { return run_unary(ctx, code, pa, pb, p, q); }
UNARY_OPS(X_)
#undef X_

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

/* op, since, dtypes, kernel code: binary ops from opset 7 (earlier versions broadcast with
 * the legacy broadcast/axis attributes); the variadic ones (Max, Min, Sum: y = op(y, input k)
 * over the inputs) from 8 (numpy broadcast) */
#define BINARY_OPS(X)                                                                    \
    X(Add, 7, KOPS_F | KOPS_I, TCU_ADD)                                                  \
    X(Sub, 7, KOPS_F | KOPS_I, TCU_SUB)                                                  \
    X(Mul, 7, KOPS_F | KOPS_I, TCU_MUL)                                                  \
    X(Div, 7, KOPS_F | KOPS_I, TCU_DIV)                                                  \
    X(Pow, 7, KOPS_F, TCU_POW)                                                           \
    X(PRelu, 7, KOPS_F, TCU_PRELU)                                                       \
    X(Max, 8, KOPS_F | KOPS_I, TCU_MAX)                                                  \
    X(Min, 8, KOPS_F | KOPS_I, TCU_MIN)                                                  \
    X(Sum, 8, KOPS_F | KOPS_I, TCU_ADD)                                                  \
    X(Equal, 7, KOPS_F | KOPS_I | KOPS_B, TCU_EQUAL)                                     \
    X(Less, 7, KOPS_F | KOPS_I, TCU_LESS)                                                \
    X(Greater, 7, KOPS_F | KOPS_I, TCU_GREATER)                                          \
    X(LessOrEqual, 12, KOPS_F | KOPS_I, TCU_LESS_EQ)                                     \
    X(GreaterOrEqual, 12, KOPS_F | KOPS_I, TCU_GREATER_EQ)                               \
    X(And, 7, KOPS_B, TCU_AND)                                                           \
    X(Or, 7, KOPS_B, TCU_OR)                                                             \
    X(Xor, 7, KOPS_B, TCU_XOR)

static tdm_status *run_binary(tdm_kernel_ctx *ctx, int code) {
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

#define X_(op, since, types, code)                                                       \
    static tdm_status *run_##op(tdm_kernel_ctx *ctx) { return run_binary(ctx, code); }
BINARY_OPS(X_)
#undef X_

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
#define X_(op, since, types, ...) E_(#op, since, types, run_##op),

const cuda_kernel_entry cuda_kernels_ops_eltwise[] = {
    UNARY_OPS(X_)
    {{"", "Gelu", 20, 0, 0, KOPS_F, run_gelu, NULL, NULL}, 0, 0, 0, gelu_accept},
    {{"com.microsoft", "Gelu", 1, 0, 0, KOPS_F, run_gelu, NULL, NULL}, 0, 0, 0, NULL},
    E_("Clip", 6, KOPS_F | KOPS_I, run_clip),
    BINARY_OPS(X_)
    {{"", "Where", 9, 0, 1, KOPS_ANY, run_where, NULL, NULL}, 0, 1u << 0, 0, NULL},
    {{"", "Expand", 8, 0, 0, KOPS_ANY, run_expand, NULL, NULL}, 1u << 1, 0, 0, NULL},
};
#undef X_
const int cuda_kernels_ops_eltwise_count =
    (int)(sizeof cuda_kernels_ops_eltwise / sizeof cuda_kernels_ops_eltwise[0]);
