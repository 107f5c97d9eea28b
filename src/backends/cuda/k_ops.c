/* CUDA kernel table "ops": helpers shared by the k_ops*.c families (kernels/k_ops.h), the
 * copy-like ops (Reshape, Flatten, Squeeze, Unsqueeze, Identity, inference Dropout: the
 * executor gives every output its own buffer, so they copy) and Cast. */
#include <string.h>

#include "backends/cuda/kernels/k_ops.h"
#include "core/alloc.h"
#include "core/half.h"

/* ---- helpers ---- */

tdm_status *kops_in(const tdm_kernel_ctx *ctx, int i, const void **p) {
    const tdm_tensor *t = i < ctx->n_in ? ctx->in[i] : NULL;
    *p = NULL;
    if (!t) return NULL;
    if (t->device != ctx->device && t->count > 0)
        return tdm_node_error(ctx->node, TDM_ERR_INTERNAL, "cuda: input %d is not in %s memory",
                              i, ctx->device->name);
    *p = t->data;
    return NULL;
}

tdm_status *kops_out(const tdm_kernel_ctx *ctx, int i, void **p) {
    tdm_tensor *t = i < ctx->n_out ? ctx->out[i] : NULL;
    *p = NULL;
    if (!t || (t->device != ctx->device && t->count > 0))
        return tdm_node_error(ctx->node, TDM_ERR_INTERNAL, "cuda: output %d is not in %s memory",
                              i, ctx->device->name);
    *p = t->data;
    return NULL;
}

tdm_status *kops_status(const tdm_kernel_ctx *ctx, int err, const char *what) {
    if (!err) return NULL;
    if (err > 0) return cuda_check((cudaError_t)err, what);
    tdm_code code = err == TCU_E_ARG ? TDM_ERR_INTERNAL : TDM_ERR_UNSUPPORTED;
    return tdm_node_error(ctx->node, code, "cuda: %s: %s", what, tcu_error_string(err));
}

tdm_status *kops_copy(const tdm_kernel_ctx *ctx, void *dst, const void *src, size_t bytes) {
    if (!bytes || dst == src) return NULL;
    return cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice,
                                      cuda_ctx_device(ctx)->stream),
                      "copying a tensor");
}

tdm_status *kops_read_floats(const tdm_kernel_ctx *ctx, int i, const char *what, float *vals,
                             int max, int *count) {
    const tdm_tensor *t = i < ctx->n_in ? ctx->in[i] : NULL;
    if (!t) return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "%s is missing", what);
    if (t->dtype != TDM_FLOAT && t->dtype != TDM_FLOAT16 && t->dtype != TDM_DOUBLE)
        return tdm_node_error(ctx->node, TDM_ERR_UNSUPPORTED, "cuda: %s must be float32, float16 "
                              "or float64", what);
    if (t->rank > 1 || t->count > max)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "%s must be 1-D with at most %d values", what, max);
    double buf[TDM_MAX_RANK * 2];
    const void *src = t->data;
    if (t->device && t->nbytes) {
        if (t->nbytes > sizeof buf) return TDM_ERR(TDM_ERR_INTERNAL, "cuda: %s too long", what);
        TDM_TRY(cuda_to_host(cuda_ctx_device(ctx), buf, t->data, t->nbytes));
        src = buf;
    }
    for (int64_t k = 0; k < t->count; k++) {
        if (t->dtype == TDM_FLOAT)
            vals[k] = ((const float *)src)[k];
        else if (t->dtype == TDM_DOUBLE)
            vals[k] = (float)((const double *)src)[k];
        else
            vals[k] = tdm_f16_to_f32(((const uint16_t *)src)[k]);
    }
    *count = (int)t->count;
    return NULL;
}

tdm_status *kops_elem_size(const tdm_kernel_ctx *ctx, const tdm_tensor *t, int *size) {
    size_t s = tdm_dtype_elem_size(t->dtype);
    if (t->dtype == TDM_STRING || (s != 1 && s != 2 && s != 4 && s != 8))
        return tdm_node_error(ctx->node, TDM_ERR_UNSUPPORTED, "cuda: no kernel for %s elements",
                              tdm_dtype_name(t->dtype));
    *size = (int)s;
    return NULL;
}

/* ---- copies ---- */

static tdm_status *run_copy(tdm_kernel_ctx *ctx) {
    const void *x;
    void *y;
    TDM_TRY(kops_in(ctx, 0, &x));
    TDM_TRY(kops_out(ctx, 0, &y));
    if (ctx->in[0]->nbytes != ctx->out[0]->nbytes)
        return tdm_node_error(ctx->node, TDM_ERR_INTERNAL, "input and output sizes differ");
    return kops_copy(ctx, y, x, ctx->out[0]->nbytes);
}

static tdm_status *run_dropout(tdm_kernel_ctx *ctx) {
    TDM_TRY(run_copy(ctx));
    if (ctx->n_out < 2 || !ctx->out[1] || !ctx->out[1]->nbytes) return NULL;
    void *m;
    TDM_TRY(kops_out(ctx, 1, &m));
    if (ctx->out[1]->dtype != TDM_BOOL)
        return tdm_node_error(ctx->node, TDM_ERR_UNSUPPORTED, "mask must be bool");
    /* inference mode: every element kept */
    return cuda_check(cudaMemsetAsync(m, 1, ctx->out[1]->nbytes, cuda_ctx_device(ctx)->stream),
                      "filling the dropout mask");
}

/* Dropout runs as a copy only in inference mode: no training_mode input that is true
 * (a constant false or none). The input may be computed, so it is refused when present. */
static bool dropout_accept(const tdm_node *node, const tdm_dtype *in_types, int n_in) {
    (void)in_types;
    return n_in < 3 || node->inputs[2] < 0;
}

/* ---- Cast ---- */

static bool cast_type(int64_t t) {
    return t == TDM_FLOAT || t == TDM_DOUBLE || t == TDM_FLOAT16 || t == TDM_BFLOAT16 ||
           t == TDM_INT32 || t == TDM_INT64 || t == TDM_INT8 || t == TDM_UINT8 || t == TDM_BOOL;
}

static bool cast_accept(const tdm_node *node, const tdm_dtype *in_types, int n_in) {
    return n_in >= 1 && cast_type(in_types[0]) && cast_type(tdm_attr_int(node, "to", 0));
}

static tdm_status *run_cast(tdm_kernel_ctx *ctx) {
    const void *x;
    void *y;
    TDM_TRY(kops_in(ctx, 0, &x));
    TDM_TRY(kops_out(ctx, 0, &y));
    const tdm_tensor *X = ctx->in[0], *Y = ctx->out[0];
    if (X->count != Y->count)
        return tdm_node_error(ctx->node, TDM_ERR_INTERNAL, "input and output sizes differ");
    if (X->dtype == Y->dtype) return kops_copy(ctx, y, x, Y->nbytes);
    return kops_status(ctx, tcu_cast((int)X->dtype, (int)Y->dtype, x, y, Y->count,
                                     kops_stream(ctx)),
                       "Cast");
}

/* (the shape and axes inputs are read by the executor's shape inference only: the copy
 * never touches them, so they stay where they are, TDM_KF_HOST_READS) */
#define K(op, since, fn, ints)                                                             \
    {{"", op, since, 0, 0, KOPS_ANY, fn, NULL, NULL, TDM_KF_HOST_READS(ints)}, ints, 0, 0, NULL}

const cuda_kernel_entry cuda_kernels_ops[] = {
    K("Reshape", 5, run_copy, 1u << 1),
    K("Flatten", 1, run_copy, 0),
    K("Squeeze", 1, run_copy, 1u << 1),
    K("Unsqueeze", 1, run_copy, 1u << 1),
    K("Identity", 1, run_copy, 0),
    {{"", "Dropout", 7, 0, 0, KOPS_F, run_dropout, NULL, NULL}, 0, 0, 1u << 1, dropout_accept},
    {{"", "Cast", 6, 0, 0, KOPS_ANY, run_cast, NULL, NULL}, 0, 0, 0, cast_accept},
};
const int cuda_kernels_ops_count = (int)(sizeof cuda_kernels_ops / sizeof cuda_kernels_ops[0]);
