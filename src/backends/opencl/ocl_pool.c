/* OpenCL kernels: pooling family. MaxPool (with the optional Indices output),
 * AveragePool (count_include_pad), GlobalAveragePool, GlobalMaxPool.
 *
 * Window geometry (pads from auto_pad, ceil_mode, dilations) comes from the nn family's
 * tdm_nn_geom_init, the same function the schemas and CPU kernels use. Up to 3 spatial
 * dims; 1-D and 2-D pools run as 3-D ones with leading size-1 dims. One work-item per
 * output; taps that fall into the padding are skipped, as on the CPU. */
#include <string.h>

#include "backends/opencl/ocl.h"
#include "ops/nn_geom.h"
#include "ops/op.h"

const char ocl_src_pool[] = OCL_COMMON_SRC OCL_SRC(
/* taps k in [*lo, *hi) with 0 <= start + k*d < n */
void tap_range(int start, int d, int k, int n, int *lo, int *hi) {
    int a = start >= 0 ? 0 : (-start + d - 1) / d;
    int b = start >= n ? 0 : (n - 1 - start) / d + 1;
    if (b > k) b = k;
    if (a > b) a = b;
    *lo = a;
    *hi = b;
}

/* mode 0: max, 1: average. Sizes per axis (d, h, w) in the int4 lanes x, y, z. One item
 * per output row (plane, od, oh). */
__kernel void pool3d(__global const float *x, __global float *y, __global long *ind,
                     int has_ind, int col_major, int mode, int include_pad, long rows,
                     int4 in, int4 out, int4 ker, int4 str, int4 dil, int4 pb, int4 pe,
                     long chunk) {
    long isz = (long)in.x * in.y * in.z;
    FOR_ITEMS(r, rows) {
        int oh = r % out.y;
        long t = r / out.y;
        int od = t % out.x;
        long pl = t / out.x;
        __global const float *xp = x + pl * isz;
        int ds = od * str.x - pb.x, hs = oh * str.y - pb.y;
        int dlo, dhi, hlo, hhi;
        tap_range(ds, dil.x, ker.x, in.x, &dlo, &dhi);
        tap_range(hs, dil.y, ker.y, in.y, &hlo, &hhi);
        long pad_dh = 1;
        if (include_pad) {
            int a, b, c, e;
            tap_range(ds + pb.x, dil.x, ker.x, in.x + pb.x + pe.x, &a, &b);
            tap_range(hs + pb.y, dil.y, ker.y, in.y + pb.y + pe.y, &c, &e);
            pad_dh = (long)(b - a) * (e - c);
        }
        for (int ow = 0; ow < out.z; ow++) {
            int ws = ow * str.z - pb.z, wlo, whi;
            tap_range(ws, dil.z, ker.z, in.z, &wlo, &whi);
            float acc = mode == 0 ? -FLT_MAX : 0.0f;
            long best = -1;
            for (int kd = dlo; kd < dhi; kd++)
                for (int kh = hlo; kh < hhi; kh++) {
                    long row = ((long)(ds + kd * dil.x) * in.y + hs + kh * dil.y) * in.z + ws;
                    for (int kw = wlo; kw < whi; kw++) {
                        long off = row + kw * dil.z;
                        float v = xp[off];
                        if (mode == 0) {
                            if (best < 0 || v > acc) {
                                acc = v;
                                best = off;
                            }
                        } else {
                            acc += v;
                        }
                    }
                }
            if (mode == 1) {
                long div = (long)(dhi - dlo) * (hhi - hlo) * (whi - wlo);
                if (include_pad) {
                    int f, g;
                    tap_range(ws + pb.z, dil.z, ker.z, in.z + pb.z + pe.z, &f, &g);
                    div = pad_dh * (g - f);
                }
                acc = div > 0 ? acc / (float)div : 0.0f;
            }
            long i = r * out.z + ow;
            y[i] = acc;
            if (has_ind) {
                long flat = best < 0 ? 0 : best;
                if (best >= 0 && col_major) {
                    long wv = best % in.z, rr = best / in.z;
                    long h = rr % in.y, dd = rr / in.y;
                    flat = dd + (long)in.x * (h + (long)in.y * wv);
                }
                ind[i] = pl * isz + flat;
            }
        }
    }
}
);

static void set4(cl_int4 *v, const int64_t *vals, int nsp, int64_t fill) {
    for (int i = 0; i < 4; i++) {
        int j = i - (3 - nsp); /* right-align the spatial dims in lanes 0..2 */
        v->s[i] = (cl_int)(i < 3 && j >= 0 ? vals[j] : fill);
    }
}

static tdm_status *pool(tdm_kernel_ctx *ctx, bool is_max) {
    const tdm_tensor *X = ctx->in[0];
    tdm_tensor *Y = ctx->out[0];
    tdm_nn_geom g;
    TDM_TRY(tdm_nn_geom_init(ctx->node, ctx->opset, TDM_NN_POOL, X->rank, X->dims, NULL, &g));
    if (g.nsp > 3)
        return tdm_node_error(ctx->node, TDM_ERR_UNSUPPORTED,
                              "opencl: pooling over more than 3 spatial dims");
    for (int i = 0; i < g.nsp; i++) {
        if (g.out[i] != Y->dims[2 + i])
            return tdm_node_error(ctx->node, TDM_ERR_INTERNAL, "output shape mismatch");
        if (g.in[i] > INT32_MAX || g.kernel[i] > INT32_MAX || g.stride[i] > INT32_MAX ||
            g.dil[i] > INT32_MAX || g.pad_b[i] > INT32_MAX || g.pad_e[i] > INT32_MAX ||
            g.in[i] + g.pad_b[i] + g.pad_e[i] > INT32_MAX)
            return tdm_node_error(ctx->node, TDM_ERR_UNSUPPORTED, "opencl: window too large");
    }
    ocl_device *d = ocl_ctx_device(ctx);
    ocl_scope s;
    ocl_scope_begin(&s, d);
    cl_mem x, y, ind = d->dummy;
    cl_int has_ind = 0, col_major = 0;
    tdm_status *st = ocl_in(&s, ctx, 0, &x);
    if (!st) st = ocl_out(ctx, 0, &y);
    if (!st && is_max && ctx->n_out > 1 && ctx->out[1]) {
        st = ocl_out(ctx, 1, &ind);
        has_ind = 1;
        col_major = tdm_attr_int(ctx->node, "storage_order", 0) == 1;
    }
    if (st || !Y->count) goto done;
    cl_int mode = is_max ? 0 : 1;
    cl_int incl = !is_max && tdm_attr_int(ctx->node, "count_include_pad", 0) != 0;
    cl_long n;
    cl_int4 in, out, ker, str, dil, pb, pe;
    set4(&in, g.in, g.nsp, 1);
    set4(&out, g.out, g.nsp, 1);
    set4(&ker, g.kernel, g.nsp, 1);
    set4(&str, g.stride, g.nsp, 1);
    set4(&dil, g.dil, g.nsp, 1);
    set4(&pb, g.pad_b, g.nsp, 0);
    set4(&pe, g.pad_e, g.nsp, 0);
    n = Y->count / out.s[2]; /* output rows */
    ocl_arg args[] = {OCL_ARG(x),    OCL_ARG(y),    OCL_ARG(ind), OCL_ARG(has_ind),
                      OCL_ARG(col_major), OCL_ARG(mode), OCL_ARG(incl), OCL_ARG(n),
                      OCL_ARG(in),   OCL_ARG(out),  OCL_ARG(ker), OCL_ARG(str),
                      OCL_ARG(dil),  OCL_ARG(pb),   OCL_ARG(pe)};
    int64_t ksz = g.nsp >= 1 ? ker.s[0] * (int64_t)ker.s[1] * ker.s[2] : 1;
    st = ocl_launchn(d, OCL_PROG_pool, "pool3d", n, out.s[2] * ksz, 15, args);
done:
    ocl_scope_end(&s);
    return st;
}

static tdm_status *run_max_pool(tdm_kernel_ctx *ctx) { return pool(ctx, true); }
static tdm_status *run_average_pool(tdm_kernel_ctx *ctx) { return pool(ctx, false); }

static tdm_status *global_pool(tdm_kernel_ctx *ctx, bool is_max) {
    const tdm_tensor *X = ctx->in[0];
    if (X->rank < 2)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "input must have rank >= 2");
    int64_t planes = X->dims[0] * X->dims[1];
    int64_t size = planes ? X->count / planes : 0;
    ocl_device *d = ocl_ctx_device(ctx);
    ocl_scope s;
    ocl_scope_begin(&s, d);
    cl_mem x, y;
    tdm_status *st = ocl_in(&s, ctx, 0, &x);
    if (!st) st = ocl_out(ctx, 0, &y);
    if (!st && planes)
        st = ocl_reduce_rows(d, is_max ? OCL_RED_MAX : OCL_RED_MEAN, x, y, planes, size);
    ocl_scope_end(&s);
    return st;
}

static tdm_status *run_global_max_pool(tdm_kernel_ctx *ctx) { return global_pool(ctx, true); }
static tdm_status *run_global_average_pool(tdm_kernel_ctx *ctx) { return global_pool(ctx, false); }

#define F32 TDM_T(TDM_FLOAT)

const ocl_kernel_entry ocl_kernels_pool[] = {
    {{"", "MaxPool", 1, 0, 0, F32, run_max_pool, NULL, NULL}, 0, ocl_window_attrs_ok},
    {{"", "AveragePool", 1, 0, 0, F32, run_average_pool, NULL, NULL}, 0, ocl_window_attrs_ok},
    {{"", "GlobalAveragePool", 1, 0, 0, F32, run_global_average_pool, NULL, NULL}, 0},
    {{"", "GlobalMaxPool", 1, 0, 0, F32, run_global_max_pool, NULL, NULL}, 0},
};
const int ocl_kernels_pool_count = (int)(sizeof ocl_kernels_pool / sizeof ocl_kernels_pool[0]);
