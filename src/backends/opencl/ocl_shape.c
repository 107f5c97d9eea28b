/* OpenCL kernels: shape family. Transpose, Concat, Slice, Gather; Reshape, Flatten,
 * Squeeze, Unsqueeze, Identity and inference-mode Dropout as buffer copies (the executor
 * gives every output its own buffer, so a view is not possible).
 *
 * Integer inputs (Slice starts/ends/axes/steps, Gather indices) are read on the host; when
 * they live on the device they are downloaded first (a blocking read). Gather indices are
 * checked there before the kernel reads them. */
#include <stdio.h>
#include <string.h>

#include "backends/opencl/ocl.h"
#include "core/alloc.h"
#include "ops/op.h"
#include "ops/shape_impl.h"

const char ocl_src_shape[] = OCL_COMMON_SRC OCL_SRC(
/* Row r of y (L values) = x[off(r) + j*sL], off(r) = base + sum_k c_k * st_k where c is the
 * index of r in dims[0..rank) (row-major) */
__kernel void gather_rows(__global const float *x, __global float *y, long rows, long L,
                          long sL, long base, int rank, long8 dims, long8 st, long seg,
                          long nseg, long chunk) {
    UNPACK8(dims, d);
    UNPACK8(st, s);
    FOR_SEGS(r, j0, j1, rows, L) {
        long t = r, off = base;
        for (int k = rank - 1; k >= 0; k--) {
            off += (t % d[k]) * s[k];
            t /= d[k];
        }
        __global float *yr = y + r * L;
        if (sL == 1)
            for (long j = j0; j < j1; j++) yr[j] = x[off + j];
        else
            for (long j = j0; j < j1; j++) yr[j] = x[off + j * sL];
    }
}

/* 2-D transpose of each of `batch` matrices: y[b][c][r] = x[b][r][c], 16x16 tiles */
__kernel __attribute__((reqd_work_group_size(16, 16, 1)))
void transpose_tiled(__global const float *x, __global float *y, int R, int C) {
    __local float t[16][17];
    int c0 = get_group_id(0) * 16, r0 = get_group_id(1) * 16;
    int lx = get_local_id(0), ly = get_local_id(1);
    long b = get_global_id(2);
    x += b * R * (long)C;
    y += b * R * (long)C;
    int r = r0 + ly, c = c0 + lx;
    if (r < R && c < C) t[ly][lx] = x[(long)r * C + c];
    barrier(CLK_LOCAL_MEM_FENCE);
    int orow = c0 + ly, ocol = r0 + lx; /* output is C x R */
    if (orow < C && ocol < R) y[(long)orow * R + ocol] = t[lx][ly];
}

/* dst[o*dst_blk + dst_off + j] = src[o*blk + j], a row o per item */
__kernel void concat_copy(__global const float *src, __global float *dst, long rows, long blk,
                          long dst_blk, long dst_off, long seg, long nseg, long chunk) {
    FOR_SEGS(o, j0, j1, rows, blk) {
        __global const float *s = src + o * blk;
        __global float *t = dst + o * dst_blk + dst_off;
        for (long j = j0; j < j1; j++) t[j] = s[j];
    }
}

/* row (o, j) of y = row (o, idx[j]) of x, rows of `inner` values; indices already checked */
__kernel void gather_axis(__global const float *x, __global const void *idx, int idx64,
                          __global float *y, long rows, long A, long nidx, long inner,
                          long chunk) {
    FOR_ITEMS(r, rows) {
        long j = r % nidx, o = r / nidx;
        long k = idx64 ? ((__global const long *)idx)[j] : (long)((__global const int *)idx)[j];
        if (k < 0) k += A;
        __global const float *s = x + (o * A + k) * inner;
        __global float *t = y + r * inner;
        for (long e = 0; e < inner; e++) t[e] = s[e];
    }
}
);

/* y (n values) = x[base + sum_k c_k * st_k] over the index c of each y element in dims */
static tdm_status *launch_gather_nd(tdm_kernel_ctx *ctx, cl_mem x, cl_mem y, int64_t n,
                                    int64_t base, int rank, const int64_t *dims,
                                    const int64_t *st) {
    ocl_device *d = ocl_ctx_device(ctx);
    cl_long L = rank ? dims[rank - 1] : 1, sL = rank ? st[rank - 1] : 0;
    cl_long rows = L ? n / L : 0, b = base;
    cl_int r = rank ? rank - 1 : 0;
    int64_t dd[8], ss[8];
    ocl_pack8(dd, r, dims, 1);
    ocl_pack8(ss, r, st, 0);
    ocl_arg args[] = {OCL_ARG(x), OCL_ARG(y), OCL_ARG(rows), OCL_ARG(L), OCL_ARG(sL),
                      OCL_ARG(b), OCL_ARG(r), OCL_ARG(dd),   OCL_ARG(ss)};
    return ocl_launch_rows(d, OCL_PROG_shape, "gather_rows", rows, L, 9, args);
}

/* ---- copies ---- */

static tdm_status *run_copy(tdm_kernel_ctx *ctx) {
    ocl_device *d = ocl_ctx_device(ctx);
    ocl_scope s;
    ocl_scope_begin(&s, d);
    cl_mem x, y;
    tdm_status *st = ocl_in(&s, ctx, 0, &x);
    if (!st) st = ocl_out(ctx, 0, &y);
    if (!st && ctx->in[0]->nbytes != ctx->out[0]->nbytes)
        st = tdm_node_error(ctx->node, TDM_ERR_INTERNAL, "input and output sizes differ");
    if (!st) st = ocl_copy(d, x, 0, y, 0, ctx->out[0]->nbytes);
    ocl_scope_end(&s);
    return st;
}

static tdm_status *run_dropout(tdm_kernel_ctx *ctx) {
    TDM_TRY(run_copy(ctx));
    if (ctx->n_out < 2 || !ctx->out[1]) return NULL;
    /* inference mode: the mask is all true */
    ocl_device *d = ocl_ctx_device(ctx);
    cl_mem m;
    TDM_TRY(ocl_out(ctx, 1, &m));
    if (!ctx->out[1]->nbytes) return NULL;
    if (ctx->out[1]->dtype != TDM_BOOL)
        return tdm_node_error(ctx->node, TDM_ERR_UNSUPPORTED, "mask must be bool");
    cl_uchar one = 1;
    cl_int err = clEnqueueFillBuffer(d->queue, m, &one, 1, 0, ctx->out[1]->nbytes, 0, NULL, NULL);
    return err == CL_SUCCESS ? NULL : ocl_error(err, "filling the dropout mask");
}

/* ---- Transpose ---- */

static tdm_status *run_transpose(tdm_kernel_ctx *ctx) {
    const tdm_tensor *X = ctx->in[0];
    int r = X->rank;
    int64_t perm[TDM_MAX_RANK];
    size_t np = 0;
    const int64_t *p = tdm_attr_ints(ctx->node, "perm", &np);
    if (p && (int)np != r)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "perm has %zu entries, rank is %d",
                              np, r);
    for (int i = 0; i < r; i++) perm[i] = p ? p[i] : r - 1 - i;
    int64_t xs[TDM_MAX_RANK];
    int64_t s = 1;
    for (int i = r - 1; i >= 0; i--) {
        xs[i] = s;
        s *= X->dims[i];
    }
    /* output dims with input strides, size-1 dims dropped, runs of consecutive axes merged */
    int64_t dims[TDM_MAX_RANK], st[TDM_MAX_RANK];
    int n = 0;
    for (int i = 0; i < r; i++) {
        int64_t ax = perm[i];
        if (ax < 0 || ax >= r)
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "perm entry out of range");
        if (X->dims[ax] == 1) continue;
        if (n > 0 && st[n - 1] == xs[ax] * X->dims[ax]) { /* adjacent in memory too */
            dims[n - 1] *= X->dims[ax];
            st[n - 1] = xs[ax];
        } else {
            dims[n] = X->dims[ax];
            st[n] = xs[ax];
            n++;
        }
    }
    ocl_device *d = ocl_ctx_device(ctx);
    ocl_scope sc;
    ocl_scope_begin(&sc, d);
    cl_mem x, y;
    tdm_status *stt = ocl_in(&sc, ctx, 0, &x);
    if (!stt) stt = ocl_out(ctx, 0, &y);
    if (stt || !ctx->out[0]->count) goto done;
    if (n <= 1) {
        stt = ocl_copy(d, x, 0, y, 0, ctx->out[0]->nbytes);
    } else if ((n == 2 && st[0] == 1 && st[1] == dims[0]) ||
               (n == 3 && st[1] == 1 && st[2] == dims[1] && st[0] == dims[1] * dims[2])) {
        /* batched 2-D transpose: out [.., C, R] of in [.., R, C] */
        cl_int R = (cl_int)dims[n - 1], C = (cl_int)dims[n - 2];
        size_t batch = n == 3 ? (size_t)dims[0] : 1;
        size_t gws[3] = {(size_t)C, (size_t)R, batch}, lws[3] = {16, 16, 1};
        ocl_arg args[] = {OCL_ARG(x), OCL_ARG(y), OCL_ARG(R), OCL_ARG(C)};
        if (dims[n - 1] > INT32_MAX || dims[n - 2] > INT32_MAX || d->max_wg < 256)
            stt = launch_gather_nd(ctx, x, y, ctx->out[0]->count, 0, n, dims, st);
        else
            stt = ocl_launch(d, OCL_PROG_shape, "transpose_tiled", 3, gws, lws, 4, args);
    } else {
        stt = launch_gather_nd(ctx, x, y, ctx->out[0]->count, 0, n, dims, st);
    }
done:
    ocl_scope_end(&sc);
    return stt;
}

/* ---- Concat ---- */

static tdm_status *run_concat(tdm_kernel_ctx *ctx) {
    tdm_tensor *Y = ctx->out[0];
    int r = Y->rank;
    int axis;
    TDM_TRY(tdm_norm_axis(ctx->node, tdm_attr_int(ctx->node, "axis", 0), r, &axis));
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < axis; i++) outer *= Y->dims[i];
    for (int i = axis + 1; i < r; i++) inner *= Y->dims[i];
    int64_t total = Y->dims[axis] * inner, off = 0;
    ocl_device *d = ocl_ctx_device(ctx);
    ocl_scope s;
    ocl_scope_begin(&s, d);
    cl_mem y;
    tdm_status *st = ocl_out(ctx, 0, &y);
    for (int k = 0; !st && k < ctx->n_in; k++) {
        const tdm_tensor *X = ctx->in[k];
        if (!X) continue;
        if (X->rank != r) {
            st = tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "inputs differ in rank");
            break;
        }
        int64_t blk = X->dims[axis] * inner;
        if (off + blk > total || X->count != outer * blk) {
            st = tdm_node_error(ctx->node, TDM_ERR_INTERNAL, "Concat input %d does not fit", k);
            break;
        }
        if (X->count) {
            cl_mem x;
            ocl_scope one;
            ocl_scope_begin(&one, d);
            st = ocl_in(&one, ctx, k, &x);
            if (!st) {
                cl_long rows = outer, b = blk, db = total, o = off;
                ocl_arg args[] = {OCL_ARG(x), OCL_ARG(y), OCL_ARG(rows), OCL_ARG(b), OCL_ARG(db),
                                  OCL_ARG(o)};
                st = ocl_launch_rows(d, OCL_PROG_shape, "concat_copy", rows, blk, 6, args);
            }
            ocl_scope_end(&one);
        }
        off += blk;
    }
    ocl_scope_end(&s);
    return st;
}

/* ---- Slice ---- */

static tdm_status *run_slice(tdm_kernel_ctx *ctx) {
    const tdm_tensor *X = ctx->in[0];
    tdm_tensor *Y = ctx->out[0];
    int r = X->rank;
    /* starts, ends, axes, steps as host tensors (read back when they live on the device),
     * then the plan every backend shares (ops/shape_impl.h) */
    static const char *const names[4] = {"starts", "ends", "axes", "steps"};
    int64_t vals[4][TDM_MAX_RANK];
    tdm_tensor views[4];
    const tdm_tensor *args[4] = {NULL, NULL, NULL, NULL};
    for (int k = 0; k < 4 && ctx->opset >= 10; k++) {
        int n = 0;
        if (ctx->n_in <= k + 1 || !ctx->in[k + 1]) continue;
        TDM_TRY(ocl_read_ints(ctx, k + 1, names[k], vals[k], TDM_MAX_RANK, &n));
        views[k] = (tdm_tensor){.dtype = TDM_INT64, .rank = 1, .dims = {n}, .count = n,
                                .nbytes = (size_t)n * sizeof(int64_t), .data = vals[k]};
        args[k] = &views[k];
    }
    int64_t first[TDM_MAX_RANK], step[TDM_MAX_RANK], len[TDM_MAX_RANK];
    TDM_TRY(tdm_shape_slice_plan(ctx->node, ctx->opset, args, r, X->dims, first, step, len));
    int64_t xs[TDM_MAX_RANK], s = 1, base = 0, dims[TDM_MAX_RANK], st[TDM_MAX_RANK];
    for (int i = r - 1; i >= 0; i--) {
        xs[i] = s;
        s *= X->dims[i];
    }
    int nd = 0;
    int64_t count = 1;
    for (int i = 0; i < r; i++) {
        if (len[i] != Y->dims[i])
            return tdm_node_error(ctx->node, TDM_ERR_INTERNAL, "Slice output shape mismatch");
        count *= len[i];
        if (len[i] == 0) continue;
        base += first[i] * xs[i];
        if (len[i] == 1) continue;
        dims[nd] = len[i];
        st[nd] = xs[i] * step[i];
        nd++;
    }
    if (count == 0) return NULL;
    ocl_device *d = ocl_ctx_device(ctx);
    ocl_scope sc;
    ocl_scope_begin(&sc, d);
    cl_mem x, y;
    tdm_status *stt = ocl_in(&sc, ctx, 0, &x);
    if (!stt) stt = ocl_out(ctx, 0, &y);
    if (!stt) stt = launch_gather_nd(ctx, x, y, count, base, nd, dims, st);
    ocl_scope_end(&sc);
    return stt;
}

/* ---- Gather ---- */

static tdm_status *run_gather(tdm_kernel_ctx *ctx) {
    const tdm_tensor *X = ctx->in[0], *I = ctx->in[1];
    tdm_tensor *Y = ctx->out[0];
    int axis;
    TDM_TRY(tdm_norm_axis(ctx->node, tdm_attr_int(ctx->node, "axis", 0), X->rank, &axis));
    int64_t A = X->dims[axis], outer = 1, inner = 1;
    for (int i = 0; i < axis; i++) outer *= X->dims[i];
    for (int i = axis + 1; i < X->rank; i++) inner *= X->dims[i];
    if (I->dtype != TDM_INT64 && I->dtype != TDM_INT32)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "indices must be int32 or int64");
    if (Y->count != outer * I->count * inner)
        return tdm_node_error(ctx->node, TDM_ERR_INTERNAL, "Gather output shape mismatch");
    ocl_device *d = ocl_ctx_device(ctx);
    /* check the indices on the host */
    const void *host = I->data;
    void *copy = NULL;
    if (I->device && I->nbytes) {
        copy = tdm_alloc(ctx->alloc, I->nbytes);
        if (!copy) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "opencl: out of memory reading indices");
        cl_int err = clEnqueueReadBuffer(d->queue, (cl_mem)I->data, CL_TRUE, 0, I->nbytes, copy,
                                         0, NULL, NULL);
        if (err != CL_SUCCESS) {
            tdm_free(ctx->alloc, copy);
            return ocl_error(err, "reading Gather indices");
        }
        host = copy;
    }
    tdm_status *st = NULL;
    for (int64_t j = 0; j < I->count; j++) {
        int64_t k = I->dtype == TDM_INT64 ? ((const int64_t *)host)[j] : ((const int32_t *)host)[j];
        if (k < -A || k >= A) {
            st = tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                "index %lld is out of range for a dimension of %lld",
                                (long long)k, (long long)A);
            break;
        }
    }
    tdm_free(ctx->alloc, copy);
    if (st || !Y->count) return st;
    ocl_scope s;
    ocl_scope_begin(&s, d);
    cl_mem x, idx, y;
    st = ocl_in(&s, ctx, 0, &x);
    if (!st) st = ocl_in(&s, ctx, 1, &idx);
    if (!st) st = ocl_out(ctx, 0, &y);
    if (!st) {
        cl_int i64 = I->dtype == TDM_INT64;
        cl_long rows = outer * I->count, aa = A, ni = I->count, in = inner;
        ocl_arg args[] = {OCL_ARG(x),    OCL_ARG(idx), OCL_ARG(i64), OCL_ARG(y),
                          OCL_ARG(rows), OCL_ARG(aa),  OCL_ARG(ni),  OCL_ARG(in)};
        st = ocl_launchn(d, OCL_PROG_shape, "gather_axis", rows, inner, 8, args);
    }
    ocl_scope_end(&s);
    return st;
}

#define F32 TDM_T(TDM_FLOAT)
#define K(op, since, fn, ints) {{"", op, since, 0, 0, F32, fn, NULL, NULL}, ints}

const ocl_kernel_entry ocl_kernels_shape[] = {
    K("Reshape", 1, run_copy, 1u << 1),
    K("Flatten", 1, run_copy, 0),
    K("Squeeze", 1, run_copy, 1u << 1),
    K("Unsqueeze", 1, run_copy, 1u << 1),
    K("Identity", 1, run_copy, 0),
    K("Dropout", 10, run_dropout, 0),
    K("Transpose", 1, run_transpose, 0),
    K("Concat", 4, run_concat, 0),
    K("Slice", 1, run_slice, (1u << 1) | (1u << 2) | (1u << 3) | (1u << 4)),
    K("Gather", 1, run_gather, 1u << 1),
};
const int ocl_kernels_shape_count = (int)(sizeof ocl_kernels_shape / sizeof ocl_kernels_shape[0]);
