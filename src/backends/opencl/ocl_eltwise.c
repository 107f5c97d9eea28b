/* OpenCL kernels: element-wise family. Unary math and activations, Clip, binary arithmetic
 * with numpy broadcasting (Add, Sub, Mul, Div, Pow, PRelu) and Expand.
 *
 * Kernels come from the UNARY / BINARY generators of ocl.h (OCL_ELTWISE_SRC); binary ones
 * in four shapes: same shape (_nn), scalar right (_ns), scalar left (_sn) and general
 * broadcast (_bc, rows over the collapsed shape of ocl_bcast_plan). */
#include <float.h>
#include <stdio.h>
#include <string.h>

#include "backends/opencl/ocl.h"
#include "ops/op.h"

const char ocl_src_eltwise[] = OCL_COMMON_SRC OCL_ELTWISE_SRC OCL_SRC(
UNARY(u_relu, v > 0.0f ? v : 0.0f)
UNARY(u_sigmoid, 1.0f / (1.0f + exp(-v)))
UNARY(u_tanh, tanh(v))
UNARY(u_exp, exp(v))
UNARY(u_log, log(v))
UNARY(u_sqrt, sqrt(v))
UNARY(u_neg, -v)
UNARY(u_abs, fabs(v))
UNARY(u_erf, erf(v))
UNARY(u_gelu, 0.5f * v * (1.0f + erf(v * 0.70710678118654752f)))
UNARY(u_gelu_tanh, 0.5f * v * (1.0f + tanh(0.7978845608028654f * (v + 0.044715f * v * v * v))))
UNARY(u_clip, fmin(fmax(v, p), q))
UNARY(u_leaky_relu, v < 0.0f ? v * p : v)
UNARY(u_hard_swish, v * fmax(0.0f, fmin(1.0f, v / 6.0f + 0.5f)))
UNARY(u_hard_sigmoid, fmax(0.0f, fmin(1.0f, p * v + q)))
UNARY(u_reciprocal, 1.0f / v)
UNARY(u_floor, floor(v))
UNARY(u_ceil, ceil(v))
UNARY(u_round, rint(v))
UNARY(u_sign, v > 0.0f ? 1.0f : v < 0.0f ? -1.0f : v)
UNARY(u_sin, sin(v))
UNARY(u_cos, cos(v))
UNARY(u_elu, v < 0.0f ? p * (exp(v) - 1.0f) : v)
UNARY(u_selu, v <= 0.0f ? q * p * (exp(v) - 1.0f) : q * v)
UNARY(u_softsign, v / (1.0f + fabs(v)))
UNARY(u_softplus, v > 0.0f ? v + log1p(exp(-v)) : log1p(exp(v)))

BINARY(b_add, a + b)
BINARY(b_sub, a - b)
BINARY(b_mul, a * b)
BINARY(b_div, a / b)
BINARY(b_pow, pow(a, b))
BINARY(b_prelu, a < 0.0f ? a * b : a)

/* Clip-11+: bounds from optional one-element inputs */
__kernel void clip_inputs(__global const float *x, __global float *y, long n,
                          __global const float *lo, int has_lo,
                          __global const float *hi, int has_hi, long chunk) {
    float l = has_lo ? lo[0] : -INFINITY, h = has_hi ? hi[0] : INFINITY;
    FOR_ITEMS(i, n) {
        float v = x[i];
        if (has_lo) v = fmax(v, l);
        if (has_hi) v = fmin(v, h);
        y[i] = v;
    }
}

/* row r of Y (L values) = A[offset of r + j*saL] */
__kernel void bcast_copy(__global const float *A, __global float *Y, long rows, long L, long saL,
                         int rank, long8 dims, long8 sa, long seg, long nseg, long chunk) {
    UNPACK8(dims, d);
    UNPACK8(sa, x);
    FOR_SEGS(r, j0, j1, rows, L) {
        long oa, ob;
        bcast2(r, rank, d, x, x, &oa, &ob);
        __global float *Yr = Y + r * L;
        for (long j = j0; j < j1; j++) Yr[j] = A[oa + j * saL];
    }
}
);

/* ---- unary ---- */

/* op, since, kernel, attributes giving the kernel's p and q (NULL: none), their defaults.
 * Each op gets its own run function (run_<op>): the kernel table entry found at plan time is
 * the only lookup of the op. */
#define UNARY_OPS(X)                                                                     \
    X(Relu, 1, "u_relu", NULL, NULL, 0, 0)                                               \
    X(Sigmoid, 1, "u_sigmoid", NULL, NULL, 0, 0)                                         \
    X(Tanh, 1, "u_tanh", NULL, NULL, 0, 0)                                               \
    X(Exp, 1, "u_exp", NULL, NULL, 0, 0)                                                 \
    X(Log, 1, "u_log", NULL, NULL, 0, 0)                                                 \
    X(Sqrt, 1, "u_sqrt", NULL, NULL, 0, 0)                                               \
    X(Neg, 1, "u_neg", NULL, NULL, 0, 0)                                                 \
    X(Abs, 1, "u_abs", NULL, NULL, 0, 0)                                                 \
    X(Erf, 9, "u_erf", NULL, NULL, 0, 0)                                                 \
    X(LeakyRelu, 1, "u_leaky_relu", "alpha", NULL, 0.01f, 0)                             \
    X(HardSwish, 14, "u_hard_swish", NULL, NULL, 0, 0)                                   \
    X(HardSigmoid, 1, "u_hard_sigmoid", "alpha", "beta", 0.2f, 0.5f)                     \
    X(Reciprocal, 1, "u_reciprocal", NULL, NULL, 0, 0)                                   \
    X(Floor, 1, "u_floor", NULL, NULL, 0, 0)                                             \
    X(Ceil, 1, "u_ceil", NULL, NULL, 0, 0)                                               \
    X(Round, 11, "u_round", NULL, NULL, 0, 0)                                            \
    X(Sign, 9, "u_sign", NULL, NULL, 0, 0)                                               \
    X(Sin, 7, "u_sin", NULL, NULL, 0, 0)                                                 \
    X(Cos, 7, "u_cos", NULL, NULL, 0, 0)                                                 \
    X(Elu, 1, "u_elu", "alpha", NULL, 1.0f, 0)                                           \
    X(Selu, 1, "u_selu", "alpha", "gamma", 1.67326319217681884765625f,                  \
      1.05070102214813232421875f)                                                        \
    X(Softsign, 1, "u_softsign", NULL, NULL, 0, 0)                                       \
    X(Softplus, 1, "u_softplus", NULL, NULL, 0, 0)

static tdm_status *launch_unary(tdm_kernel_ctx *ctx, const char *kernel, float p, float q) {
    ocl_device *d = ocl_ctx_device(ctx);
    ocl_scope s;
    ocl_scope_begin(&s, d);
    cl_mem x, y;
    tdm_status *st = ocl_in(&s, ctx, 0, &x);
    if (!st) st = ocl_out(ctx, 0, &y);
    if (!st) {
        cl_long n = ctx->out[0]->count;
        cl_float pp = p, qq = q;
        ocl_arg args[] = {OCL_ARG(x), OCL_ARG(y), OCL_ARG(n), OCL_ARG(pp), OCL_ARG(qq)};
        st = ocl_launch1(d, OCL_PROG_eltwise, kernel, n, 5, args);
    }
    ocl_scope_end(&s);
    return st;
}

/* p and q from the node's attributes pa and pb (NULL: the defaults) */
static tdm_status *run_unary(tdm_kernel_ctx *ctx, const char *kernel, const char *pa,
                             const char *pb, float p, float q) {
    return launch_unary(ctx, kernel, pa ? tdm_attr_float(ctx->node, pa, p) : p,
                        pb ? tdm_attr_float(ctx->node, pb, q) : q);
}

#define X_(op, since, kernel, pa, pb, p, q)                                              \
    static tdm_status *run_##op(tdm_kernel_ctx *ctx) {                                   \
        return run_unary(ctx, kernel, pa, pb, p, q);                                     \
    }
UNARY_OPS(X_)
#undef X_

static tdm_status *run_gelu(tdm_kernel_ctx *ctx) {
    const char *approx = tdm_attr_string(ctx->node, "approximate", "none");
    if (strcmp(approx, "tanh") == 0) return launch_unary(ctx, "u_gelu_tanh", 0, 0);
    if (strcmp(approx, "none") != 0)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "approximate must be 'none' or 'tanh', got '%s'", approx);
    return launch_unary(ctx, "u_gelu", 0, 0);
}

static tdm_status *run_clip(tdm_kernel_ctx *ctx) {
    if (ctx->opset < 11)
        return launch_unary(ctx, "u_clip", tdm_attr_float(ctx->node, "min", -FLT_MAX),
                            tdm_attr_float(ctx->node, "max", FLT_MAX));
    ocl_device *d = ocl_ctx_device(ctx);
    const tdm_tensor *lo = ctx->n_in > 1 ? ctx->in[1] : NULL;
    const tdm_tensor *hi = ctx->n_in > 2 ? ctx->in[2] : NULL;
    if ((lo && lo->count != 1) || (hi && hi->count != 1))
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "min and max must be scalars");
    ocl_scope s;
    ocl_scope_begin(&s, d);
    cl_mem x, y, l, h;
    tdm_status *st = ocl_in(&s, ctx, 0, &x);
    if (!st) st = ocl_in(&s, ctx, 1, &l);
    if (!st) st = ocl_in(&s, ctx, 2, &h);
    if (!st) st = ocl_out(ctx, 0, &y);
    if (!st) {
        cl_long n = ctx->out[0]->count;
        cl_int has_lo = lo != NULL, has_hi = hi != NULL;
        ocl_arg args[] = {OCL_ARG(x), OCL_ARG(y), OCL_ARG(n), OCL_ARG(l), OCL_ARG(has_lo),
                          OCL_ARG(h), OCL_ARG(has_hi)};
        st = ocl_launch1(d, OCL_PROG_eltwise, "clip_inputs", n, 7, args);
    }
    ocl_scope_end(&s);
    return st;
}

/* ---- binary ---- */

tdm_status *ocl_binary(ocl_device *d, int prog, const char *base, cl_mem a, const tdm_tensor *A,
                       cl_mem b, const tdm_tensor *B, cl_mem y, const tdm_tensor *Y) {
    cl_long n = Y->count;
    char name[OCL_KERNEL_NAME];
    if (n == 0) return NULL;
    if (A->count == n && B->count == n) {
        snprintf(name, sizeof name, "%s_nn", base);
    } else if (A->count == n && B->count == 1) {
        snprintf(name, sizeof name, "%s_ns", base);
    } else if (A->count == 1 && B->count == n) {
        snprintf(name, sizeof name, "%s_sn", base);
    } else {
        snprintf(name, sizeof name, "%s_bc", base);
        ocl_bcast bc;
        const tdm_tensor *ins[2] = {A, B};
        ocl_bcast_plan(2, ins, Y, &bc);
        /* rows of the last collapsed dim; the outer dims index the rows */
        int r = bc.rank - 1;
        cl_long L = bc.dims[r], saL = bc.strides[0][r], sbL = bc.strides[1][r];
        cl_long rows = L ? n / L : 0;
        cl_int rank = r;
        int64_t dims[8], sa[8], sb[8];
        ocl_pack8(dims, r, bc.dims, 1);
        ocl_pack8(sa, r, bc.strides[0], 0);
        ocl_pack8(sb, r, bc.strides[1], 0);
        ocl_arg args[] = {OCL_ARG(a),    OCL_ARG(b),    OCL_ARG(y),  OCL_ARG(rows),
                          OCL_ARG(L),    OCL_ARG(saL),  OCL_ARG(sbL), OCL_ARG(rank),
                          OCL_ARG(dims), OCL_ARG(sa),   OCL_ARG(sb)};
        return ocl_launch_rows(d, prog, name, rows, L, 11, args);
    }
    ocl_arg args[] = {OCL_ARG(a), OCL_ARG(b), OCL_ARG(y), OCL_ARG(n)};
    return ocl_launch1(d, prog, name, n, 4, args);
}

static tdm_status *launch_binary(tdm_kernel_ctx *ctx, const char *base) {
    ocl_device *d = ocl_ctx_device(ctx);
    ocl_scope s;
    ocl_scope_begin(&s, d);
    cl_mem a, b, y;
    tdm_status *st = ocl_in(&s, ctx, 0, &a);
    if (!st) st = ocl_in(&s, ctx, 1, &b);
    if (!st) st = ocl_out(ctx, 0, &y);
    if (!st) st = ocl_binary(d, OCL_PROG_eltwise, base, a, ctx->in[0], b, ctx->in[1], y, ctx->out[0]);
    ocl_scope_end(&s);
    return st;
}

static tdm_status *run_add(tdm_kernel_ctx *ctx) { return launch_binary(ctx, "b_add"); }
static tdm_status *run_sub(tdm_kernel_ctx *ctx) { return launch_binary(ctx, "b_sub"); }
static tdm_status *run_mul(tdm_kernel_ctx *ctx) { return launch_binary(ctx, "b_mul"); }
static tdm_status *run_div(tdm_kernel_ctx *ctx) { return launch_binary(ctx, "b_div"); }
static tdm_status *run_pow(tdm_kernel_ctx *ctx) { return launch_binary(ctx, "b_pow"); }
static tdm_status *run_prelu(tdm_kernel_ctx *ctx) { return launch_binary(ctx, "b_prelu"); }

/* ---- Expand (and broadcast copies for other families) ---- */

tdm_status *ocl_bcast_copy(ocl_device *d, cl_mem src, const tdm_tensor *src_shape, cl_mem dst,
                           const tdm_tensor *dst_shape) {
    ocl_bcast bc;
    const tdm_tensor *ins[1] = {src_shape};
    ocl_bcast_plan(1, ins, dst_shape, &bc);
    int r = bc.rank - 1;
    cl_long L = bc.dims[r], saL = bc.strides[0][r];
    cl_long rows = L ? dst_shape->count / L : 0;
    cl_int rank = r;
    int64_t dims[8], sa[8];
    ocl_pack8(dims, r, bc.dims, 1);
    ocl_pack8(sa, r, bc.strides[0], 0);
    ocl_arg args[] = {OCL_ARG(src), OCL_ARG(dst),  OCL_ARG(rows), OCL_ARG(L),
                      OCL_ARG(saL), OCL_ARG(rank), OCL_ARG(dims), OCL_ARG(sa)};
    return ocl_launch_rows(d, OCL_PROG_eltwise, "bcast_copy", rows, L, 8, args);
}

static tdm_status *run_expand(tdm_kernel_ctx *ctx) {
    ocl_device *d = ocl_ctx_device(ctx);
    ocl_scope s;
    ocl_scope_begin(&s, d);
    cl_mem x, y;
    tdm_status *st = ocl_in(&s, ctx, 0, &x);
    if (!st) st = ocl_out(ctx, 0, &y);
    if (!st) st = ocl_bcast_copy(d, x, ctx->in[0], y, ctx->out[0]);
    ocl_scope_end(&s);
    return st;
}

static bool gelu_known(const tdm_node *node) {
    const char *a = tdm_attr_string(node, "approximate", "none");
    return strcmp(a, "none") == 0 || strcmp(a, "tanh") == 0;
}

#define F32 TDM_T(TDM_FLOAT)
#define X_(op, since, ...) {{"", #op, since, 0, 0, F32, run_##op, NULL, NULL}, 0},
/* binary ops from opset 7: earlier versions broadcast with the legacy broadcast/axis attributes */
#define B(op, fn) {{"", op, 7, 0, 0, F32, fn, NULL, NULL}, 0}

const ocl_kernel_entry ocl_kernels_eltwise[] = {
    UNARY_OPS(X_)
    {{"", "Gelu", 20, 0, 0, F32, run_gelu, NULL, NULL}, 0, gelu_known},
    {{"com.microsoft", "Gelu", 1, 0, 0, F32, run_gelu, NULL, NULL}, 0},
    {{"", "Clip", 1, 0, 0, F32, run_clip, NULL, NULL}, 0},
    B("Add", run_add), B("Sub", run_sub), B("Mul", run_mul), B("Div", run_div),
    B("Pow", run_pow), B("PRelu", run_prelu),
    {{"", "Expand", 8, 0, 0, F32, run_expand, NULL, NULL}, 1u << 1},
};
#undef X_
const int ocl_kernels_eltwise_count =
    (int)(sizeof ocl_kernels_eltwise / sizeof ocl_kernels_eltwise[0]);
