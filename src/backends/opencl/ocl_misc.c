/* OpenCL kernels: misc family. Where, float comparisons (bool outputs), the variadic
 * Max / Min / Sum / Mean with broadcasting, and Constant (float values).
 *
 * Variadic ops fold their inputs into the output: Y = broadcast(X0), then Y = op(Y, Xi)
 * with the binary kernels (Y has the output's shape, so it can be read and written by the
 * same element-wise kernel). */
#include <stdio.h>
#include <string.h>

#include "backends/opencl/ocl.h"
#include "ops/op.h"

const char ocl_src_misc[] = OCL_COMMON_SRC OCL_ELTWISE_SRC OCL_SRC(
BINARY(v_max, fmax(a, b))
BINARY(v_min, fmin(a, b))
BINARY(v_sum, a + b)
UNARY(v_div, v / p)

BINARY_T(c_eq, uchar, a == b)
BINARY_T(c_gt, uchar, a > b)
BINARY_T(c_lt, uchar, a < b)
BINARY_T(c_ge, uchar, a >= b)
BINARY_T(c_le, uchar, a <= b)

/* Y = C ? A : B over rows of the collapsed broadcast shape */
__kernel void where_rows(__global const uchar *C, __global const float *A,
                         __global const float *B, __global float *Y, long rows, long L,
                         long scL, long saL, long sbL, int rank, long8 dims, long8 sc, long8 sa,
                         long8 sb, long seg, long nseg, long chunk) {
    UNPACK8(dims, d);
    UNPACK8(sc, xc);
    UNPACK8(sa, xa);
    UNPACK8(sb, xb);
    FOR_SEGS(r, j0, j1, rows, L) {
        long oc = 0, oa = 0, ob = 0, t = r;
        for (int k = rank - 1; k >= 0; k--) {
            long c = t % d[k];
            t /= d[k];
            oc += c * xc[k];
            oa += c * xa[k];
            ob += c * xb[k];
        }
        __global float *Yr = Y + r * L;
        for (long j = j0; j < j1; j++)
            Yr[j] = C[oc + j * scL] ? A[oa + j * saL] : B[ob + j * sbL];
    }
}
);

/* ---- Where ---- */

static tdm_status *run_where(tdm_kernel_ctx *ctx) {
    tdm_tensor *Y = ctx->out[0];
    ocl_device *d = ocl_ctx_device(ctx);
    ocl_scope s;
    ocl_scope_begin(&s, d);
    cl_mem c, a, b, y;
    tdm_status *st = ocl_in(&s, ctx, 0, &c);
    if (!st) st = ocl_in(&s, ctx, 1, &a);
    if (!st) st = ocl_in(&s, ctx, 2, &b);
    if (!st) st = ocl_out(ctx, 0, &y);
    if (!st && Y->count) {
        ocl_bcast bc;
        ocl_bcast_plan(3, ctx->in, Y, &bc);
        int r = bc.rank - 1;
        cl_long L = bc.dims[r], scL = bc.strides[0][r], saL = bc.strides[1][r];
        cl_long sbL = bc.strides[2][r], rows = Y->count / L;
        cl_int rank = r;
        int64_t dims[8], sc[8], sa[8], sb[8];
        ocl_pack8(dims, r, bc.dims, 1);
        ocl_pack8(sc, r, bc.strides[0], 0);
        ocl_pack8(sa, r, bc.strides[1], 0);
        ocl_pack8(sb, r, bc.strides[2], 0);
        ocl_arg args[] = {OCL_ARG(c),    OCL_ARG(a),    OCL_ARG(b),  OCL_ARG(y),
                          OCL_ARG(rows), OCL_ARG(L),    OCL_ARG(scL), OCL_ARG(saL),
                          OCL_ARG(sbL),  OCL_ARG(rank), OCL_ARG(dims), OCL_ARG(sc),
                          OCL_ARG(sa),   OCL_ARG(sb)};
        st = ocl_launch_rows(d, OCL_PROG_misc, "where_rows", rows, L, 14, args);
    }
    ocl_scope_end(&s);
    return st;
}

/* ---- comparisons ---- */

/* op, since, kernel; each op gets its own run function (run_<op>) */
#define COMPARE_OPS(X)                                                                   \
    X(Equal, 11, "c_eq") X(Greater, 7, "c_gt") X(Less, 7, "c_lt")                        \
    X(GreaterOrEqual, 12, "c_ge") X(LessOrEqual, 12, "c_le")

static tdm_status *run_compare(tdm_kernel_ctx *ctx, const char *k) {
    if (ctx->out[0]->dtype != TDM_BOOL)
        return tdm_node_error(ctx->node, TDM_ERR_INTERNAL, "comparison output must be bool");
    ocl_device *d = ocl_ctx_device(ctx);
    ocl_scope s;
    ocl_scope_begin(&s, d);
    cl_mem a, b, y;
    tdm_status *st = ocl_in(&s, ctx, 0, &a);
    if (!st) st = ocl_in(&s, ctx, 1, &b);
    if (!st) st = ocl_out(ctx, 0, &y);
    if (!st) st = ocl_binary(d, OCL_PROG_misc, k, a, ctx->in[0], b, ctx->in[1], y, ctx->out[0]);
    ocl_scope_end(&s);
    return st;
}

#define X_(op, since, k)                                                                 \
    static tdm_status *run_##op(tdm_kernel_ctx *ctx) { return run_compare(ctx, k); }
COMPARE_OPS(X_)
#undef X_

/* ---- Max, Min, Sum, Mean ---- */

/* op, kernel that folds in one more input, whether the result is divided by the count;
 * before opset 8 these broadcast with legacy rules */
#define VARIADIC_OPS(X)                                                                  \
    X(Max, "v_max", false) X(Min, "v_min", false) X(Sum, "v_sum", false) X(Mean, "v_sum", true)

static tdm_status *run_variadic(tdm_kernel_ctx *ctx, const char *k, bool mean) {
    tdm_tensor *Y = ctx->out[0];
    ocl_device *d = ocl_ctx_device(ctx);
    ocl_scope s;
    ocl_scope_begin(&s, d);
    cl_mem y, x;
    int n = 0;
    tdm_status *st = ocl_out(ctx, 0, &y);
    for (int i = 0; i < ctx->n_in && !st; i++) {
        if (!ctx->in[i]) continue;
        ocl_scope one;
        ocl_scope_begin(&one, d);
        st = ocl_in(&one, ctx, i, &x);
        if (!st && n == 0) {
            st = ctx->in[i]->count == Y->count ? ocl_copy(d, x, 0, y, 0, Y->nbytes)
                                               : ocl_bcast_copy(d, x, ctx->in[i], y, Y);
        } else if (!st) {
            st = ocl_binary(d, OCL_PROG_misc, k, y, Y, x, ctx->in[i], y, Y);
        }
        ocl_scope_end(&one);
        n++;
    }
    if (!st && n == 0)
        st = tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "needs at least one input");
    if (!st && n > 1 && mean && Y->count) {
        cl_long cnt = Y->count;
        cl_float p = (float)n, q = 0.0f;
        ocl_arg args[] = {OCL_ARG(y), OCL_ARG(y), OCL_ARG(cnt), OCL_ARG(p), OCL_ARG(q)};
        st = ocl_launch1(d, OCL_PROG_misc, "v_div", cnt, 5, args);
    }
    ocl_scope_end(&s);
    return st;
}

#define X_(op, k, mean)                                                                  \
    static tdm_status *run_##op(tdm_kernel_ctx *ctx) { return run_variadic(ctx, k, mean); }
VARIADIC_OPS(X_)
#undef X_

/* ---- Constant ---- */

/* A float32 value: `value` (a float tensor), `value_float` or `value_floats`. */
static bool float_constant(const tdm_node *node) {
    const tdm_tensor *t = tdm_attr_tensor(node, "value");
    if (t) return t->dtype == TDM_FLOAT && !t->device;
    return tdm_node_attr(node, "value_float") || tdm_node_attr(node, "value_floats");
}

static tdm_status *run_constant(tdm_kernel_ctx *ctx) {
    const tdm_tensor *t = tdm_attr_tensor(ctx->node, "value");
    const void *src = NULL;
    size_t bytes = 0;
    const tdm_attr *a;
    if (t) {
        src = t->data;
        bytes = t->nbytes;
    } else if ((a = tdm_node_attr(ctx->node, "value_float"))) {
        src = &a->f;
        bytes = sizeof(float);
    } else if ((a = tdm_node_attr(ctx->node, "value_floats"))) {
        src = a->floats;
        bytes = a->n * sizeof(float);
    }
    if (!src && bytes)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "no float value");
    cl_mem y;
    TDM_TRY(ocl_out(ctx, 0, &y));
    if (bytes != ctx->out[0]->nbytes)
        return tdm_node_error(ctx->node, TDM_ERR_INTERNAL, "Constant size mismatch");
    if (!bytes) return NULL;
    ocl_device *d = ocl_ctx_device(ctx);
    cl_int err = clEnqueueWriteBuffer(d->queue, y, CL_TRUE, 0, bytes, src, 0, NULL, NULL);
    return err == CL_SUCCESS ? NULL : ocl_error(err, "writing a constant");
}

#define F32 TDM_T(TDM_FLOAT)
#define CMP_(op, since, k) {{"", #op, since, 0, 0, F32, run_##op, NULL, NULL}, 0, NULL, 0},
#define VAR_(op, k, mean) {{"", #op, 8, 0, 0, F32, run_##op, NULL, NULL}, 0, NULL, 0},

const ocl_kernel_entry ocl_kernels_misc[] = {
    {{"", "Where", 9, 0, 1, F32, run_where, NULL, NULL}, 0, NULL, 1u << 0},
    COMPARE_OPS(CMP_)
    VARIADIC_OPS(VAR_)
    {{"", "Constant", 1, 0, -1, 0, run_constant, NULL, NULL}, 0, float_constant, 0},
};
const int ocl_kernels_misc_count = (int)(sizeof ocl_kernels_misc / sizeof ocl_kernels_misc[0]);
