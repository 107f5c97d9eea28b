/* OpenCL backend helpers: errors, launches, temporary buffers, reading small integer
 * inputs, broadcast planning. */
#include <stdio.h>
#include <string.h>

#include "backends/opencl/ocl.h"
#include "core/alloc.h"
#include "ops/op.h"

const char *ocl_errname(cl_int err) {
    switch (err) {
#define E_(x) case x: return #x;
        E_(CL_SUCCESS) E_(CL_DEVICE_NOT_FOUND) E_(CL_DEVICE_NOT_AVAILABLE)
        E_(CL_COMPILER_NOT_AVAILABLE) E_(CL_MEM_OBJECT_ALLOCATION_FAILURE)
        E_(CL_OUT_OF_RESOURCES) E_(CL_OUT_OF_HOST_MEMORY) E_(CL_PROFILING_INFO_NOT_AVAILABLE)
        E_(CL_MEM_COPY_OVERLAP) E_(CL_BUILD_PROGRAM_FAILURE) E_(CL_MAP_FAILURE)
        E_(CL_MISALIGNED_SUB_BUFFER_OFFSET) E_(CL_INVALID_VALUE) E_(CL_INVALID_DEVICE_TYPE)
        E_(CL_INVALID_PLATFORM) E_(CL_INVALID_DEVICE) E_(CL_INVALID_CONTEXT)
        E_(CL_INVALID_QUEUE_PROPERTIES) E_(CL_INVALID_COMMAND_QUEUE) E_(CL_INVALID_HOST_PTR)
        E_(CL_INVALID_MEM_OBJECT) E_(CL_INVALID_BINARY) E_(CL_INVALID_BUILD_OPTIONS)
        E_(CL_INVALID_PROGRAM) E_(CL_INVALID_PROGRAM_EXECUTABLE) E_(CL_INVALID_KERNEL_NAME)
        E_(CL_INVALID_KERNEL) E_(CL_INVALID_ARG_INDEX) E_(CL_INVALID_ARG_VALUE)
        E_(CL_INVALID_ARG_SIZE) E_(CL_INVALID_KERNEL_ARGS) E_(CL_INVALID_WORK_DIMENSION)
        E_(CL_INVALID_WORK_GROUP_SIZE) E_(CL_INVALID_WORK_ITEM_SIZE)
        E_(CL_INVALID_GLOBAL_OFFSET) E_(CL_INVALID_EVENT_WAIT_LIST) E_(CL_INVALID_EVENT)
        E_(CL_INVALID_OPERATION) E_(CL_INVALID_BUFFER_SIZE) E_(CL_INVALID_GLOBAL_WORK_SIZE)
#undef E_
    default: return "CL error";
    }
}

tdm_status *ocl_error(cl_int err, const char *what) {
    tdm_code code = err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_HOST_MEMORY ||
                            err == CL_INVALID_BUFFER_SIZE
                        ? TDM_ERR_OUT_OF_MEMORY
                        : TDM_ERR_DEVICE;
    return TDM_ERR(code, "opencl: %s: %s (%d)", what, ocl_errname(err), (int)err);
}

size_t ocl_wg1(const ocl_device *d) { return d->max_wg >= 256 ? 256 : d->max_wg; }

tdm_status *ocl_launch(ocl_device *d, int prog, const char *name, int dims, const size_t *gws,
                       const size_t *lws, int n_args, const ocl_arg *args) {
    cl_kernel k;
    TDM_TRY(ocl_kernel(d, prog, name, &k));
    for (int i = 0; i < n_args; i++) {
        cl_int err = clSetKernelArg(k, (cl_uint)i, args[i].size, args[i].ptr);
        if (err != CL_SUCCESS) {
            char what[96];
            snprintf(what, sizeof what, "kernel %s argument %d", name, i);
            return ocl_error(err, what);
        }
    }
    size_t g[3], l[3];
    for (int i = 0; i < dims; i++) {
        l[i] = lws ? lws[i] : ocl_wg1(d);
        if (gws[i] == 0) return NULL; /* nothing to do */
        g[i] = (gws[i] + l[i] - 1) / l[i] * l[i];
    }
    cl_int err = clEnqueueNDRangeKernel(d->queue, k, (cl_uint)dims, NULL, g, l, 0, NULL, NULL);
    if (err != CL_SUCCESS) {
        char what[96];
        snprintf(what, sizeof what, "launching kernel %s", name);
        return ocl_error(err, what);
    }
    return NULL;
}

tdm_status *ocl_launch1(ocl_device *d, int prog, const char *name, int64_t n, int n_args,
                        const ocl_arg *args) {
    return ocl_launchn(d, prog, name, n, 1, n_args, args);
}

tdm_status *ocl_launchn(ocl_device *d, int prog, const char *name, int64_t n, int64_t work,
                        int n_args, const ocl_arg *args) {
    if (n <= 0) return NULL;
    if (n_args >= 31) return TDM_ERR(TDM_ERR_INTERNAL, "opencl: too many kernel arguments");
    cl_long chunk = 1;
    size_t l = ocl_wg1(d);
    if (!d->gpu_style) {
        /* CPU devices: a few dozen work-items (one per work-group) of at least ~1024
         * elements each: long loops that vectorise, few work-groups to schedule */
        int64_t items = 32 * (int64_t)(d->cus ? d->cus : 1);
        int64_t min_chunk = work >= 1024 ? 1 : (1024 + work - 1) / (work > 0 ? work : 1);
        chunk = (n + items - 1) / items;
        if (chunk < min_chunk) chunk = min_chunk;
        l = 1;
    }
    ocl_arg all[32];
    memcpy(all, args, (size_t)n_args * sizeof *args);
    all[n_args] = (ocl_arg)OCL_ARG(chunk);
    size_t g = (size_t)((n + chunk - 1) / chunk);
    return ocl_launch(d, prog, name, 1, &g, &l, n_args + 1, all);
}

tdm_status *ocl_launch_rows(ocl_device *d, int prog, const char *name, int64_t rows, int64_t L,
                            int n_args, const ocl_arg *args) {
    if (rows <= 0 || L <= 0) return NULL;
    if (n_args >= 29) return TDM_ERR(TDM_ERR_INTERNAL, "opencl: too many kernel arguments");
    /* GPUs: a segment of one element per work-item. CPU devices: whole rows when there are
     * enough of them to keep every compute unit busy, else rows cut into >= 1024-element
     * segments */
    cl_long seg = 1;
    if (!d->gpu_style) {
        int64_t want = 32 * (int64_t)(d->cus ? d->cus : 1);
        seg = L;
        if (rows < want) {
            int64_t per = (rows * L + want - 1) / want;
            seg = per < 1024 ? 1024 : per;
            if (seg > L) seg = L;
        }
    }
    cl_long nseg = (L + seg - 1) / seg;
    ocl_arg all[32];
    memcpy(all, args, (size_t)n_args * sizeof *args);
    all[n_args] = (ocl_arg)OCL_ARG(seg);
    all[n_args + 1] = (ocl_arg)OCL_ARG(nseg);
    return ocl_launchn(d, prog, name, rows * nseg, seg, n_args + 2, all);
}

ocl_device *ocl_ctx_device(const tdm_kernel_ctx *ctx) { return ctx->device->ctx; }

void ocl_scope_begin(ocl_scope *s, ocl_device *d) {
    s->d = d;
    s->n = 0;
    s->more = NULL;
    s->more_cap = 0;
}

void ocl_scope_end(ocl_scope *s) {
    for (size_t i = 0; i < s->n; i++)
        ocl_buf_free(s->d, i < OCL_SCOPE_INLINE ? s->mem[i] : s->more[i - OCL_SCOPE_INLINE]);
    s->n = 0;
    tdm_free(s->d->a, s->more);
    s->more = NULL;
    s->more_cap = 0;
}

tdm_status *ocl_temp(ocl_scope *s, size_t bytes, const void *host, cl_mem *out) {
    /* room in the table first, so that a buffer is never allocated without a slot */
    if (s->n >= OCL_SCOPE_INLINE &&
        tdm_grow(s->d->a, (void **)&s->more, &s->more_cap, s->n - OCL_SCOPE_INLINE + 1,
                 sizeof *s->more))
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "opencl: out of memory for temporary buffers");
    cl_mem m;
    TDM_TRY(ocl_buf_alloc(s->d, bytes, &m));
    if (s->n < OCL_SCOPE_INLINE) s->mem[s->n] = m;
    else s->more[s->n - OCL_SCOPE_INLINE] = m;
    s->n++;
    if (host && bytes) {
        cl_int err = clEnqueueWriteBuffer(s->d->queue, m, CL_TRUE, 0, bytes, host, 0, NULL, NULL);
        if (err != CL_SUCCESS) return ocl_error(err, "filling a temporary buffer");
    }
    *out = m;
    return NULL;
}

tdm_status *ocl_in(ocl_scope *s, const tdm_kernel_ctx *ctx, int i, cl_mem *out) {
    const tdm_tensor *t = i < ctx->n_in ? ctx->in[i] : NULL;
    if (!t) {
        *out = s->d->dummy;
        return NULL;
    }
    if (t->device == ctx->device) {
        *out = (cl_mem)t->data;
        return NULL;
    }
    if (t->device)
        return tdm_node_error(ctx->node, TDM_ERR_INTERNAL,
                              "input %d is on another device than %s", i, ctx->device->name);
    return ocl_temp(s, t->nbytes, t->data, out);
}

tdm_status *ocl_out(const tdm_kernel_ctx *ctx, int i, cl_mem *out) {
    const tdm_tensor *t = i < ctx->n_out ? ctx->out[i] : NULL;
    if (!t || t->device != ctx->device)
        return tdm_node_error(ctx->node, TDM_ERR_INTERNAL, "output %d is not on device %s", i,
                              ctx->device->name);
    *out = (cl_mem)t->data;
    return NULL;
}

tdm_status *ocl_read_ints(const tdm_kernel_ctx *ctx, int i, const char *what, int64_t *vals,
                          int max, int *count) {
    const tdm_tensor *t = ctx->in[i];
    if (!t->device) return tdm_read_ints(ctx->node, what, t, vals, max, count);
    if ((t->dtype != TDM_INT64 && t->dtype != TDM_INT32) || t->rank > 1 || t->count > max)
        return tdm_read_ints(ctx->node, what, &(tdm_tensor){.dtype = t->dtype, .rank = t->rank,
                                                             .count = t->count},
                             vals, max, count); /* the same error as for a host tensor */
    int64_t buf[TDM_MAX_RANK * 2 + 8];
    if (t->nbytes > sizeof buf)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "%s has too many values", what);
    ocl_device *d = ocl_ctx_device(ctx);
    if (t->nbytes) {
        cl_int err = clEnqueueReadBuffer(d->queue, (cl_mem)t->data, CL_TRUE, 0, t->nbytes, buf, 0,
                                         NULL, NULL);
        if (err != CL_SUCCESS) return ocl_error(err, "reading an integer input");
    }
    tdm_tensor view = *t;
    view.data = buf;
    view.device = NULL;
    view.release = NULL;
    view.owns_data = false;
    return tdm_read_ints(ctx->node, what, &view, vals, max, count);
}

tdm_status *ocl_copy(ocl_device *d, cl_mem src, size_t src_off, cl_mem dst, size_t dst_off,
                     size_t bytes) {
    if (!bytes) return NULL;
    cl_int err = clEnqueueCopyBuffer(d->queue, src, dst, src_off, dst_off, bytes, 0, NULL, NULL);
    return err == CL_SUCCESS ? NULL : ocl_error(err, "copying a buffer");
}

void ocl_pack8(int64_t out[8], int n, const int64_t *vals, int64_t fill) {
    for (int i = 0; i < 8; i++) out[i] = i < n ? vals[i] : fill;
}

void ocl_bcast_plan(int n_in, const tdm_tensor *const *ins, const tdm_tensor *out, ocl_bcast *b) {
    int r = out->rank;
    int64_t st[3][TDM_MAX_RANK];
    for (int k = 0; k < n_in; k++) {
        const tdm_tensor *t = ins[k];
        int64_t s = 1;
        for (int i = r - 1; i >= 0; i--) {
            int j = i - (r - t->rank);
            int64_t dim = j >= 0 ? t->dims[j] : 1;
            st[k][i] = dim == 1 && out->dims[i] != 1 ? 0 : s;
            if (dim == 1) st[k][i] = 0;
            s *= dim;
        }
    }
    /* collapse: drop size-1 dims, merge i into the previous kept dim p when every input's
     * stride satisfies st[p] == st[i] * dims[i] (both zero also qualifies) */
    int n = 0;
    for (int i = 0; i < r; i++) {
        if (out->dims[i] == 1) continue;
        if (n > 0) {
            bool merge = true;
            for (int k = 0; k < n_in; k++)
                if (b->strides[k][n - 1] != st[k][i] * out->dims[i]) merge = false;
            if (merge) {
                b->dims[n - 1] *= out->dims[i];
                for (int k = 0; k < n_in; k++) b->strides[k][n - 1] = st[k][i];
                continue;
            }
        }
        b->dims[n] = out->dims[i];
        for (int k = 0; k < n_in; k++) b->strides[k][n] = st[k][i];
        n++;
    }
    if (n == 0) {
        b->dims[0] = 1;
        for (int k = 0; k < n_in; k++) b->strides[k][0] = 0;
        n = 1;
    }
    b->rank = n;
}
