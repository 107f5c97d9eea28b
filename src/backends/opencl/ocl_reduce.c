/* OpenCL kernels: reduce family. Reduce{Sum,Mean,Max,Min,Prod,SumSquare,L1,L2,LogSum},
 * Softmax, LogSoftmax, LayerNormalization, BatchNormalization (inference); row reductions
 * for the global pools.
 *
 * Reductions collapse the shape into runs of kept and reduced axes, then use
 *  - rows:   [kept, reduced]         one work-item per row (CPU devices) or one work-group
 *                                    per row with a local-memory tree (GPUs, long rows)
 *  - mid:    [kept, reduced, kept]   one work-item per output, strided reads
 *  - generic (any other pattern)     one work-item per output, index arithmetic.
 * Softmax and LayerNorm use the same row / mid split. Sums run in float32; LayerNorm
 * computes the mean first and the variance from it (two passes). */
#include <math.h>
#include <string.h>

#include "backends/opencl/ocl.h"
#include "ops/op.h"

#define WG 256

const char ocl_src_reduce[] = OCL_COMMON_SRC "#define WG 256\n" OCL_SRC(
float r_init(int op) { return op == 2 ? -INFINITY : op == 3 ? INFINITY : op == 4 ? 1.0f : 0.0f; }
float r_pre(int op, float v) { return op == 5 || op == 7 ? v * v : op == 6 ? fabs(v) : v; }
float r_comb(int op, float a, float b) {
    return op == 2 ? fmax(a, b) : op == 3 ? fmin(a, b) : op == 4 ? a * b : a + b;
}
float r_post(int op, float a, long n) {
    return op == 1 ? a / (float)n : op == 7 ? sqrt(a) : op == 8 ? log(a) : a;
}

__kernel void reduce_rows(int op, __global const float *x, __global float *y, long rows,
                          long cols, long chunk) {
    FOR_ITEMS(r, rows) {
        __global const float *xr = x + r * cols;
        float acc = r_init(op);
        for (long j = 0; j < cols; j++) acc = r_comb(op, acc, r_pre(op, xr[j]));
        y[r] = r_post(op, acc, cols);
    }
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void reduce_rows_wg(int op, __global const float *x, __global float *y, long rows, long cols) {
    __local float sh[WG];
    long r = get_group_id(0);
    int l = get_local_id(0);
    x += r * cols;
    float acc = r_init(op);
    for (long j = l; j < cols; j += WG) acc = r_comb(op, acc, r_pre(op, x[j]));
    sh[l] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = WG / 2; s > 0; s >>= 1) {
        if (l < s) sh[l] = r_comb(op, sh[l], sh[l + s]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (l == 0) y[r] = r_post(op, sh[0], cols);
}

__kernel void reduce_mid(int op, __global const float *x, __global float *y, long n, long R,
                         long inner, long chunk) {
    FOR_ITEMS(i, n) {
        long o = i / inner, t = i - o * inner;
        __global const float *xr = x + o * R * inner + t;
        float acc = r_init(op);
        for (long j = 0; j < R; j++) acc = r_comb(op, acc, r_pre(op, xr[j * inner]));
        y[i] = r_post(op, acc, R);
    }
}

__kernel void reduce_generic(int op, __global const float *x, __global float *y, long n,
                             int kr, long8 kdims, long8 kst, int rr, long8 rdims, long8 rst,
                             long R, long chunk) {
    UNPACK8(kdims, kd);
    UNPACK8(kst, ks);
    UNPACK8(rdims, rd);
    UNPACK8(rst, rs);
    FOR_ITEMS(i, n) {
        long base = 0, t = i;
        for (int k = kr - 1; k >= 0; k--) {
            base += (t % kd[k]) * ks[k];
            t /= kd[k];
        }
        float acc = r_init(op);
        for (long j = 0; j < R; j++) {
            long off = base, u = j;
            for (int k = rr - 1; k >= 0; k--) {
                off += (u % rd[k]) * rs[k];
                u /= rd[k];
            }
            acc = r_comb(op, acc, r_pre(op, x[off]));
        }
        y[i] = r_post(op, acc, R);
    }
}

/* softmax over `cols` contiguous values per row (log: LogSoftmax) */
__kernel void softmax_rows(__global const float *x, __global float *y, long rows, long cols,
                           int lg, long chunk) {
    FOR_ITEMS(r, rows) {
        __global const float *xr = x + r * cols;
        __global float *yr = y + r * cols;
        float m = -INFINITY;
        for (long j = 0; j < cols; j++) m = fmax(m, xr[j]);
        float s = 0.0f;
        for (long j = 0; j < cols; j++) s += exp(xr[j] - m);
        if (lg) {
            float ls = log(s);
            for (long j = 0; j < cols; j++) yr[j] = xr[j] - m - ls;
        } else {
            float inv = 1.0f / s;
            for (long j = 0; j < cols; j++) yr[j] = exp(xr[j] - m) * inv;
        }
    }
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void softmax_rows_wg(__global const float *x, __global float *y, long rows, long cols, int lg) {
    __local float sh[WG];
    long r = get_group_id(0);
    int l = get_local_id(0);
    x += r * cols;
    y += r * cols;
    float m = -INFINITY;
    for (long j = l; j < cols; j += WG) m = fmax(m, x[j]);
    sh[l] = m;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = WG / 2; s > 0; s >>= 1) {
        if (l < s) sh[l] = fmax(sh[l], sh[l + s]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    m = sh[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    float s = 0.0f;
    for (long j = l; j < cols; j += WG) s += exp(x[j] - m);
    sh[l] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int k = WG / 2; k > 0; k >>= 1) {
        if (l < k) sh[l] += sh[l + k];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    s = sh[0];
    if (lg) {
        float ls = log(s);
        for (long j = l; j < cols; j += WG) y[j] = x[j] - m - ls;
    } else {
        float inv = 1.0f / s;
        for (long j = l; j < cols; j += WG) y[j] = exp(x[j] - m) * inv;
    }
}

/* softmax along the middle axis of [outer, A, inner] */
__kernel void softmax_mid(__global const float *x, __global float *y, long n, long A,
                          long inner, int lg, long chunk) {
    FOR_ITEMS(i, n) {
        long o = i / inner, t = i - o * inner;
        __global const float *xr = x + o * A * inner + t;
        __global float *yr = y + o * A * inner + t;
        float m = -INFINITY;
        for (long j = 0; j < A; j++) m = fmax(m, xr[j * inner]);
        float s = 0.0f;
        for (long j = 0; j < A; j++) s += exp(xr[j * inner] - m);
        if (lg) {
            float ls = log(s);
            for (long j = 0; j < A; j++) yr[j * inner] = xr[j * inner] - m - ls;
        } else {
            float inv = 1.0f / s;
            for (long j = 0; j < A; j++) yr[j * inner] = exp(xr[j * inner] - m) * inv;
        }
    }
}

/* LayerNormalization over rows of D values; scale/bias indexed j * stride (stride 0 or 1) */
__kernel void layernorm_rows(__global const float *x, __global const float *scale, long ss,
                             __global const float *bias, long bs, int has_bias,
                             __global float *y, __global float *mean, __global float *istd,
                             int has_stats, long rows, long D, float eps, long chunk) {
    FOR_ITEMS(r, rows) {
        __global const float *xr = x + r * D;
        __global float *yr = y + r * D;
        float s = 0.0f;
        for (long j = 0; j < D; j++) s += xr[j];
        float mu = s / (float)D;
        float v = 0.0f;
        for (long j = 0; j < D; j++) {
            float t = xr[j] - mu;
            v += t * t;
        }
        float inv = 1.0f / sqrt(v / (float)D + eps);
        for (long j = 0; j < D; j++) {
            float t = (xr[j] - mu) * inv * scale[j * ss];
            yr[j] = has_bias ? t + bias[j * bs] : t;
        }
        if (has_stats & 1) mean[r] = mu;
        if (has_stats & 2) istd[r] = inv;
    }
}

/* BatchNormalization (inference): row r = (n, c) of L values, y = x * a + b with
 * a = scale / sqrt(var + eps), b = bias - mean * a */
__kernel void batchnorm_rows(__global const float *x, __global float *y,
                             __global const float *scale, __global const float *bias,
                             __global const float *mean, __global const float *var, float eps,
                             long rows, long L, long C, long chunk) {
    FOR_ITEMS(r, rows) {
        long c = r % C;
        float a = scale[c] / sqrt(var[c] + eps);
        float b = bias[c] - mean[c] * a;
        __global const float *xr = x + r * L;
        __global float *yr = y + r * L;
        for (long j = 0; j < L; j++) yr[j] = xr[j] * a + b;
    }
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void layernorm_rows_wg(__global const float *x, __global const float *scale, long ss,
                       __global const float *bias, long bs, int has_bias, __global float *y,
                       __global float *mean, __global float *istd, int has_stats, long rows,
                       long D, float eps) {
    __local float sh[WG];
    long r = get_group_id(0);
    int l = get_local_id(0);
    x += r * D;
    y += r * D;
    float s = 0.0f;
    for (long j = l; j < D; j += WG) s += x[j];
    sh[l] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int k = WG / 2; k > 0; k >>= 1) {
        if (l < k) sh[l] += sh[l + k];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float mu = sh[0] / (float)D;
    barrier(CLK_LOCAL_MEM_FENCE);
    float v = 0.0f;
    for (long j = l; j < D; j += WG) {
        float t = x[j] - mu;
        v += t * t;
    }
    sh[l] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int k = WG / 2; k > 0; k >>= 1) {
        if (l < k) sh[l] += sh[l + k];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float inv = 1.0f / sqrt(sh[0] / (float)D + eps);
    for (long j = l; j < D; j += WG) {
        float t = (x[j] - mu) * inv * scale[j * ss];
        y[j] = has_bias ? t + bias[j * bs] : t;
    }
    if (l == 0 && (has_stats & 1)) mean[r] = mu;
    if (l == 0 && (has_stats & 2)) istd[r] = inv;
}
);

/* Row kernels: a work-group per row pays off on GPUs for long rows. */
static bool use_wg(const ocl_device *d, int64_t cols) { return d->gpu_style && cols >= 128; }

tdm_status *ocl_reduce_rows(ocl_device *d, int op, cl_mem x, cl_mem y, int64_t rows,
                            int64_t cols) {
    cl_int o = op;
    cl_long r = rows, c = cols;
    ocl_arg args[] = {OCL_ARG(o), OCL_ARG(x), OCL_ARG(y), OCL_ARG(r), OCL_ARG(c)};
    if (use_wg(d, cols)) {
        size_t g = (size_t)rows * WG, l = WG;
        return ocl_launch(d, OCL_PROG_reduce, "reduce_rows_wg", 1, &g, &l, 5, args);
    }
    return ocl_launchn(d, OCL_PROG_reduce, "reduce_rows", rows, cols, 5, args);
}

tdm_status *ocl_softmax_rows(ocl_device *d, cl_mem x, cl_mem y, int64_t rows, int64_t cols,
                             bool lg) {
    cl_long r = rows, c = cols;
    cl_int l = lg;
    ocl_arg args[] = {OCL_ARG(x), OCL_ARG(y), OCL_ARG(r), OCL_ARG(c), OCL_ARG(l)};
    if (use_wg(d, cols)) {
        size_t g = (size_t)rows * WG, lw = WG;
        return ocl_launch(d, OCL_PROG_reduce, "softmax_rows_wg", 1, &g, &lw, 5, args);
    }
    return ocl_launchn(d, OCL_PROG_reduce, "softmax_rows", rows, 3 * cols, 5, args);
}

/* ---- Reduce* ---- */

/* op, OCL_RED_* code; each op gets its own run function (run_<op>) */
#define REDUCE_OPS(X)                                                                    \
    X(ReduceSum, OCL_RED_SUM) X(ReduceMean, OCL_RED_MEAN) X(ReduceMax, OCL_RED_MAX)      \
    X(ReduceMin, OCL_RED_MIN) X(ReduceProd, OCL_RED_PROD)                                \
    X(ReduceSumSquare, OCL_RED_SUMSQ) X(ReduceL1, OCL_RED_L1) X(ReduceL2, OCL_RED_L2)    \
    X(ReduceLogSum, OCL_RED_LOGSUM)

static tdm_status *run_reduce(tdm_kernel_ctx *ctx, int op) {
    const tdm_tensor *X = ctx->in[0];
    bool axes_input = ctx->opset >= (op == OCL_RED_SUM ? 13 : 18);
    int64_t axes[TDM_MAX_RANK];
    int na = 0;
    bool have_axes = false;
    if (axes_input) {
        if (ctx->n_in > 1 && ctx->in[1]) {
            TDM_TRY(ocl_read_ints(ctx, 1, "axes", axes, TDM_MAX_RANK, &na));
            have_axes = na > 0;
        }
    } else {
        size_t n = 0;
        const int64_t *a = tdm_attr_ints(ctx->node, "axes", &n);
        if (n > TDM_MAX_RANK)
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "too many axes");
        if (a) memcpy(axes, a, n * sizeof *a);
        na = (int)n;
        have_axes = na > 0;
    }
    int r = X->rank;
    bool red[TDM_MAX_RANK] = {false};
    if (!have_axes) {
        if (axes_input && tdm_attr_int(ctx->node, "noop_with_empty_axes", 0)) {
            ocl_device *d = ocl_ctx_device(ctx);
            ocl_scope s;
            ocl_scope_begin(&s, d);
            cl_mem x, y;
            tdm_status *st = ocl_in(&s, ctx, 0, &x);
            if (!st) st = ocl_out(ctx, 0, &y);
            if (!st) st = ocl_copy(d, x, 0, y, 0, ctx->out[0]->nbytes);
            ocl_scope_end(&s);
            return st;
        }
        for (int i = 0; i < r; i++) red[i] = true;
    }
    for (int k = 0; k < na; k++) {
        int ax;
        TDM_TRY(tdm_norm_axis(ctx->node, axes[k], r, &ax));
        red[ax] = true;
    }
    /* collapse into runs; size-1 axes vanish */
    int64_t dims[TDM_MAX_RANK], st_[TDM_MAX_RANK];
    bool rd[TDM_MAX_RANK];
    int n = 0;
    int64_t stride = 1, R = 1, K = 1;
    int64_t xs[TDM_MAX_RANK];
    for (int i = r - 1; i >= 0; i--) {
        xs[i] = stride;
        stride *= X->dims[i];
    }
    for (int i = 0; i < r; i++) {
        if (red[i]) R *= X->dims[i];
        else K *= X->dims[i];
        if (X->dims[i] == 1) continue;
        if (n > 0 && rd[n - 1] == red[i]) {
            dims[n - 1] *= X->dims[i];
            st_[n - 1] = xs[i];
            continue;
        }
        dims[n] = X->dims[i];
        st_[n] = xs[i];
        rd[n] = red[i];
        n++;
    }
    if (K != ctx->out[0]->count)
        return tdm_node_error(ctx->node, TDM_ERR_INTERNAL, "reduction output size mismatch");
    ocl_device *d = ocl_ctx_device(ctx);
    ocl_scope s;
    ocl_scope_begin(&s, d);
    cl_mem x, y;
    tdm_status *st = ocl_in(&s, ctx, 0, &x);
    if (!st) st = ocl_out(ctx, 0, &y);
    if (st || K == 0) goto done;
    cl_int o = op;
    if (n == 0 || (n == 1 && rd[0]) || (n == 2 && !rd[0] && rd[1]) || (n == 1 && !rd[0])) {
        /* rows of R contiguous values (R may be 1: a copy through the reduction) */
        st = ocl_reduce_rows(d, op, x, y, K, R);
    } else if ((n == 2 && rd[0] && !rd[1]) || (n == 3 && !rd[0] && rd[1] && !rd[2])) {
        cl_long nn = K, RR = R, inner = dims[n - 1];
        ocl_arg args[] = {OCL_ARG(o), OCL_ARG(x), OCL_ARG(y), OCL_ARG(nn), OCL_ARG(RR),
                          OCL_ARG(inner)};
        st = ocl_launchn(d, OCL_PROG_reduce, "reduce_mid", K, R, 6, args);
    } else {
        int64_t kd[8], ks[8], rdm[8], rs[8];
        int kn = 0, rn = 0;
        for (int i = 0; i < n; i++) {
            if (rd[i]) {
                rdm[rn] = dims[i];
                rs[rn++] = st_[i];
            } else {
                kd[kn] = dims[i];
                ks[kn++] = st_[i];
            }
        }
        int64_t kd8[8], ks8[8], rd8[8], rs8[8];
        ocl_pack8(kd8, kn, kd, 1);
        ocl_pack8(ks8, kn, ks, 0);
        ocl_pack8(rd8, rn, rdm, 1);
        ocl_pack8(rs8, rn, rs, 0);
        cl_long nn = K, RR = R;
        cl_int kr = kn, rr = rn;
        ocl_arg args[] = {OCL_ARG(o),  OCL_ARG(x),   OCL_ARG(y),  OCL_ARG(nn),
                          OCL_ARG(kr), OCL_ARG(kd8), OCL_ARG(ks8), OCL_ARG(rr),
                          OCL_ARG(rd8), OCL_ARG(rs8), OCL_ARG(RR)};
        st = ocl_launchn(d, OCL_PROG_reduce, "reduce_generic", K, R, 11, args);
    }
done:
    ocl_scope_end(&s);
    return st;
}

#define X_(op, code)                                                                     \
    static tdm_status *run_##op(tdm_kernel_ctx *ctx) { return run_reduce(ctx, code); }
REDUCE_OPS(X_)
#undef X_

/* ---- Softmax, LogSoftmax ---- */

/* lg: LogSoftmax */
static tdm_status *softmax(tdm_kernel_ctx *ctx, cl_int lg) {
    const tdm_tensor *X = ctx->in[0];
    int r = X->rank;
    bool v13 = ctx->opset >= 13;
    int axis;
    TDM_TRY(tdm_norm_axis(ctx->node, tdm_attr_int(ctx->node, "axis", v13 ? -1 : 1),
                          r > 0 ? r : 1, &axis));
    int64_t outer = 1, A = 1, inner = 1;
    for (int i = 0; i < r; i++) {
        if (i < axis) outer *= X->dims[i];
        else if (i == axis || !v13) A *= X->dims[i];
        else inner *= X->dims[i];
    }
    ocl_device *d = ocl_ctx_device(ctx);
    ocl_scope s;
    ocl_scope_begin(&s, d);
    cl_mem x, y;
    tdm_status *st = ocl_in(&s, ctx, 0, &x);
    if (!st) st = ocl_out(ctx, 0, &y);
    if (st || X->count == 0) goto done;
    if (inner == 1) {
        st = ocl_softmax_rows(d, x, y, outer, A, lg);
    } else {
        cl_long n = outer * inner, aa = A, in = inner;
        ocl_arg args[] = {OCL_ARG(x), OCL_ARG(y), OCL_ARG(n), OCL_ARG(aa), OCL_ARG(in),
                          OCL_ARG(lg)};
        st = ocl_launchn(d, OCL_PROG_reduce, "softmax_mid", n, 3 * A, 6, args);
    }
done:
    ocl_scope_end(&s);
    return st;
}

static tdm_status *run_softmax(tdm_kernel_ctx *ctx) { return softmax(ctx, 0); }
static tdm_status *run_log_softmax(tdm_kernel_ctx *ctx) { return softmax(ctx, 1); }

/* ---- LayerNormalization ---- */

static tdm_status *run_layer_norm(tdm_kernel_ctx *ctx) {
    const tdm_tensor *X = ctx->in[0], *S = ctx->in[1];
    const tdm_tensor *B = ctx->n_in > 2 ? ctx->in[2] : NULL;
    int r = X->rank, axis;
    TDM_TRY(tdm_norm_axis(ctx->node, tdm_attr_int(ctx->node, "axis", -1), r, &axis));
    float eps = tdm_attr_float(ctx->node, "epsilon", 1e-5f);
    int64_t rows = 1, D = 1;
    for (int i = 0; i < r; i++) {
        if (i < axis) rows *= X->dims[i];
        else D *= X->dims[i];
    }
    /* the normalised block's shape, for broadcasting scale and bias onto it */
    tdm_tensor block = {.dtype = TDM_FLOAT, .rank = r - axis, .count = D};
    for (int i = axis; i < r; i++) block.dims[i - axis] = X->dims[i];
    ocl_device *d = ocl_ctx_device(ctx);
    ocl_scope s;
    ocl_scope_begin(&s, d);
    cl_mem x, sc, bi, y, mean = d->dummy, istd = d->dummy;
    cl_int stats = 0;
    tdm_status *st = ocl_in(&s, ctx, 0, &x);
    if (!st) st = ocl_in(&s, ctx, 1, &sc);
    if (!st) st = ocl_in(&s, ctx, 2, &bi);
    if (!st) st = ocl_out(ctx, 0, &y);
    if (!st && ctx->n_out > 1 && ctx->out[1]) {
        st = ocl_out(ctx, 1, &mean);
        stats |= 1;
    }
    if (!st && ctx->n_out > 2 && ctx->out[2]) {
        st = ocl_out(ctx, 2, &istd);
        stats |= 2;
    }
    if (st || rows == 0) goto done;
    cl_long ss = 1, bs = 1;
    const tdm_tensor *sb[2] = {S, B};
    cl_mem *mem[2] = {&sc, &bi};
    cl_long *str[2] = {&ss, &bs};
    for (int k = 0; k < 2 && !st; k++) {
        const tdm_tensor *t = sb[k];
        if (!t || t->count == D) continue;
        if (t->count == 1) {
            *str[k] = 0;
            continue;
        }
        if (t->rank > block.rank) {
            st = tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                "scale or bias does not broadcast to the normalised shape");
            break;
        }
        for (int i = 0; i < t->rank; i++) {
            int64_t dt = t->dims[i], db = block.dims[block.rank - t->rank + i];
            if (dt != 1 && dt != db)
                st = tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                    "scale or bias does not broadcast to the normalised shape");
        }
        if (st) break;
        cl_mem full = NULL;
        st = ocl_temp(&s, (size_t)D * sizeof(float), NULL, &full);
        if (!st) st = ocl_bcast_copy(d, *mem[k], t, full, &block);
        if (st) break;
        *mem[k] = full;
    }
    if (st) goto done;
    cl_int has_bias = B != NULL;
    cl_long rr = rows, dd = D;
    cl_float e = eps;
    ocl_arg args[] = {OCL_ARG(x),     OCL_ARG(sc),   OCL_ARG(ss),    OCL_ARG(bi),
                      OCL_ARG(bs),    OCL_ARG(has_bias), OCL_ARG(y), OCL_ARG(mean),
                      OCL_ARG(istd),  OCL_ARG(stats), OCL_ARG(rr),   OCL_ARG(dd),
                      OCL_ARG(e)};
    if (use_wg(d, D)) {
        size_t g = (size_t)rows * WG, l = WG;
        st = ocl_launch(d, OCL_PROG_reduce, "layernorm_rows_wg", 1, &g, &l, 13, args);
    } else {
        st = ocl_launchn(d, OCL_PROG_reduce, "layernorm_rows", rows, 3 * D, 13, args);
    }
done:
    ocl_scope_end(&s);
    return st;
}

/* ---- BatchNormalization (inference mode) ---- */

static tdm_status *run_batch_norm(tdm_kernel_ctx *ctx) {
    const tdm_tensor *X = ctx->in[0];
    if (X->rank < 2)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "input must have rank >= 2");
    int64_t C = X->dims[1], rows = X->dims[0] * C, L = rows ? X->count / rows : 0;
    for (int i = 1; i < 5; i++)
        if (ctx->n_in <= i || !ctx->in[i] || ctx->in[i]->count != C)
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                  "input %d must have one value per channel", i);
    ocl_device *d = ocl_ctx_device(ctx);
    ocl_scope s;
    ocl_scope_begin(&s, d);
    cl_mem x, y, p[4];
    tdm_status *st = ocl_in(&s, ctx, 0, &x);
    for (int i = 0; i < 4 && !st; i++) st = ocl_in(&s, ctx, 1 + i, &p[i]);
    if (!st) st = ocl_out(ctx, 0, &y);
    if (!st && rows) {
        cl_float eps = tdm_attr_float(ctx->node, "epsilon", 1e-5f);
        cl_long r = rows, l = L, c = C;
        ocl_arg args[] = {OCL_ARG(x),    OCL_ARG(y),    OCL_ARG(p[0]), OCL_ARG(p[1]),
                          OCL_ARG(p[2]), OCL_ARG(p[3]), OCL_ARG(eps),  OCL_ARG(r),
                          OCL_ARG(l),    OCL_ARG(c)};
        st = ocl_launchn(d, OCL_PROG_reduce, "batchnorm_rows", rows, L, 10, args);
    }
    ocl_scope_end(&s);
    return st;
}

/* inference mode only: no training_mode, no running-statistics outputs */
static bool bn_inference(const tdm_node *node) {
    if (tdm_attr_int(node, "training_mode", 0) != 0) return false;
    for (int i = 1; i < node->n_outputs; i++)
        if (node->outputs[i] >= 0) return false;
    return true;
}

/* statistics kept in float32 */
static bool ln_float_stash(const tdm_node *node) { return tdm_attr_int(node, "stash_type", 1) == 1; }

#define F32 TDM_T(TDM_FLOAT)
#define RD_(op, code) {{"", #op, 1, 0, 0, F32, run_##op, NULL, NULL}, 1u << 1, NULL},

const ocl_kernel_entry ocl_kernels_reduce[] = {
    REDUCE_OPS(RD_)
    {{"", "Softmax", 1, 0, 0, F32, run_softmax, NULL, NULL}, 0},
    {{"", "LogSoftmax", 1, 0, 0, F32, run_log_softmax, NULL, NULL}, 0},
    {{"", "LayerNormalization", 17, 0, 0, F32, run_layer_norm, NULL, NULL}, 0, ln_float_stash},
    {{"", "BatchNormalization", 9, 0, 0, F32, run_batch_norm, NULL, NULL}, 0, bn_inference},
};
const int ocl_kernels_reduce_count =
    (int)(sizeof ocl_kernels_reduce / sizeof ocl_kernels_reduce[0]);
