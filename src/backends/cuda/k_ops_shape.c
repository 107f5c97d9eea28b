/* CUDA kernel table "ops_shape": Transpose (tiled when it is a batched 2-D transpose, else
 * a strided copy), Concat and Split (pitched row copies), Slice (a strided copy), Gather
 * (indices checked on the device: the run waits for the result) and Pad (constant,
 * reflect, edge, wrap). Data movement only: any dtype of 1, 2, 4 or 8 bytes. */
#include <string.h>

#include "backends/cuda/kernels/k_ops.h"
#include "core/half.h"

/* ---- Transpose ---- */

static tdm_status *run_transpose(tdm_kernel_ctx *ctx) {
    const tdm_tensor *X = ctx->in[0];
    int r = X->rank;
    int64_t perm[TDM_MAX_RANK];
    size_t np = 0;
    const int64_t *p = tdm_attr_ints(ctx->node, "perm", &np);
    if (p && (int)np != r)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "perm has %zu entries, rank is %d", np, r);
    for (int i = 0; i < r; i++) perm[i] = p ? p[i] : r - 1 - i;
    tcu_shape s;
    if (tcu_transpose_plan(r, X->dims, perm, &s))
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "perm is not a permutation");
    const void *x;
    void *y;
    int es;
    TDM_TRY(kops_in(ctx, 0, &x));
    TDM_TRY(kops_out(ctx, 0, &y));
    TDM_TRY(kops_elem_size(ctx, X, &es));
    if (s.count != ctx->out[0]->count)
        return tdm_node_error(ctx->node, TDM_ERR_INTERNAL, "input and output sizes differ");
    if (s.rank <= 1) return kops_copy(ctx, y, x, ctx->out[0]->nbytes);
    int err;
    const int64_t *d = s.dims, *st = s.strides[0];
    if (s.rank == 2 && st[0] == 1 && st[1] == d[0])
        err = tcu_transpose2d(es, x, y, 1, d[1], d[0], kops_stream(ctx));
    else if (s.rank == 3 && st[1] == 1 && st[2] == d[1] && st[0] == d[1] * d[2])
        err = tcu_transpose2d(es, x, y, d[0], d[2], d[1], kops_stream(ctx));
    else
        err = tcu_strided_copy(es, x, y, &s, kops_stream(ctx));
    return kops_status(ctx, err, "Transpose");
}

/* ---- Concat / Split ---- */

static tdm_status *run_concat(tdm_kernel_ctx *ctx) {
    tdm_tensor *Y = ctx->out[0];
    int r = Y->rank, axis, es;
    TDM_TRY(tdm_norm_axis(ctx->node, tdm_attr_int(ctx->node, "axis", 0), r, &axis));
    TDM_TRY(kops_elem_size(ctx, Y, &es));
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < axis; i++) outer *= Y->dims[i];
    for (int i = axis + 1; i < r; i++) inner *= Y->dims[i];
    int64_t total = Y->dims[axis] * inner, off = 0;
    void *y;
    TDM_TRY(kops_out(ctx, 0, &y));
    for (int k = 0; k < ctx->n_in; k++) {
        const tdm_tensor *X = ctx->in[k];
        if (!X) continue;
        if (X->rank != r)
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "inputs differ in rank");
        int64_t blk = X->dims[axis] * inner;
        if (off + blk > total || X->count != outer * blk)
            return tdm_node_error(ctx->node, TDM_ERR_INTERNAL, "Concat input %d does not fit", k);
        const void *x;
        TDM_TRY(kops_in(ctx, k, &x));
        TDM_TRY(kops_status(ctx, tcu_copy_rows(es, x, blk, 0, y, total, off, outer, blk,
                                               kops_stream(ctx)),
                            "Concat"));
        off += blk;
    }
    if (off != total)
        return tdm_node_error(ctx->node, TDM_ERR_INTERNAL, "Concat inputs do not fill the output");
    return NULL;
}

/* The outputs' shapes (inferred from split / num_outputs) say where each piece starts. */
static tdm_status *run_split(tdm_kernel_ctx *ctx) {
    const tdm_tensor *X = ctx->in[0];
    int r = X->rank, axis, es;
    TDM_TRY(tdm_norm_axis(ctx->node, tdm_attr_int(ctx->node, "axis", 0), r, &axis));
    TDM_TRY(kops_elem_size(ctx, X, &es));
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < axis; i++) outer *= X->dims[i];
    for (int i = axis + 1; i < r; i++) inner *= X->dims[i];
    int64_t total = X->dims[axis] * inner, off = 0;
    const void *x;
    TDM_TRY(kops_in(ctx, 0, &x));
    for (int k = 0; k < ctx->n_out; k++) {
        const tdm_tensor *Y = ctx->out[k];
        if (!Y) return tdm_node_error(ctx->node, TDM_ERR_UNSUPPORTED, "cuda: omitted Split output");
        if (Y->rank != r)
            return tdm_node_error(ctx->node, TDM_ERR_INTERNAL, "outputs differ in rank");
        int64_t blk = Y->dims[axis] * inner;
        if (off + blk > total || Y->count != outer * blk)
            return tdm_node_error(ctx->node, TDM_ERR_INTERNAL, "Split output %d does not fit", k);
        void *y;
        TDM_TRY(kops_out(ctx, k, &y));
        TDM_TRY(kops_status(ctx, tcu_copy_rows(es, x, total, off, y, blk, 0, outer, blk,
                                               kops_stream(ctx)),
                            "Split"));
        off += blk;
    }
    if (off != total)
        return tdm_node_error(ctx->node, TDM_ERR_INTERNAL, "Split outputs do not cover the input");
    return NULL;
}

/* ---- Slice ---- */

static tdm_status *run_slice(tdm_kernel_ctx *ctx) {
    const tdm_tensor *X = ctx->in[0];
    tdm_tensor *Y = ctx->out[0];
    int r = X->rank;
    int64_t starts[TDM_MAX_RANK], ends[TDM_MAX_RANK], axes[TDM_MAX_RANK], steps[TDM_MAX_RANK];
    int ns = 0, ne = 0, na = -1, nst = -1;
    if (ctx->opset < 10) {
        size_t c1 = 0, c2 = 0, c3 = 0;
        const int64_t *a1 = tdm_attr_ints(ctx->node, "starts", &c1);
        const int64_t *a2 = tdm_attr_ints(ctx->node, "ends", &c2);
        const int64_t *a3 = tdm_attr_ints(ctx->node, "axes", &c3);
        if (c1 > TDM_MAX_RANK || c2 > TDM_MAX_RANK || c3 > TDM_MAX_RANK)
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "too many slice entries");
        ns = (int)c1;
        ne = (int)c2;
        if (ns) memcpy(starts, a1, c1 * sizeof *a1);
        if (ne) memcpy(ends, a2, c2 * sizeof *a2);
        if (a3) {
            na = (int)c3;
            if (na) memcpy(axes, a3, c3 * sizeof *a3);
        }
    } else {
        TDM_TRY(cuda_read_ints(ctx, 1, "starts", starts, TDM_MAX_RANK, &ns));
        TDM_TRY(cuda_read_ints(ctx, 2, "ends", ends, TDM_MAX_RANK, &ne));
        if (ctx->n_in > 3 && ctx->in[3])
            TDM_TRY(cuda_read_ints(ctx, 3, "axes", axes, TDM_MAX_RANK, &na));
        if (ctx->n_in > 4 && ctx->in[4])
            TDM_TRY(cuda_read_ints(ctx, 4, "steps", steps, TDM_MAX_RANK, &nst));
    }
    if (ns != ne || (na >= 0 && na != ns) || (nst >= 0 && nst != ns))
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "starts, ends, axes and steps differ in length");
    int64_t first[TDM_MAX_RANK], step[TDM_MAX_RANK], len[TDM_MAX_RANK];
    bool seen[TDM_MAX_RANK] = {false};
    for (int i = 0; i < r; i++) {
        first[i] = 0;
        step[i] = 1;
        len[i] = X->dims[i];
    }
    for (int k = 0; k < ns; k++) {
        int ax;
        TDM_TRY(tdm_norm_axis(ctx->node, na >= 0 ? axes[k] : k, r, &ax));
        if (seen[ax]) return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "repeated axis");
        seen[ax] = true;
        step[ax] = nst >= 0 ? steps[k] : 1;
        if (tcu_slice_axis(X->dims[ax], starts[k], ends[k], step[ax], &first[ax], &len[ax]))
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "step is 0");
    }
    /* y = strided walk of x: base offset of the first element, the steps as strides */
    tcu_shape s;
    memset(&s, 0, sizeof s);
    s.n_ops = 1;
    s.count = 1;
    int64_t xs[TDM_MAX_RANK], acc = 1;
    for (int i = r - 1; i >= 0; i--) {
        xs[i] = acc;
        acc *= X->dims[i];
    }
    for (int i = 0; i < r; i++) {
        if (len[i] != Y->dims[i])
            return tdm_node_error(ctx->node, TDM_ERR_INTERNAL, "Slice output shape mismatch");
        s.count *= len[i];
        s.base[0] += first[i] * xs[i];
        if (len[i] == 1) continue;
        s.dims[s.rank] = len[i];
        s.strides[0][s.rank] = xs[i] * step[i];
        s.rank++;
    }
    if (s.count == 0) return NULL;
    const void *x;
    void *y;
    int es;
    TDM_TRY(kops_in(ctx, 0, &x));
    TDM_TRY(kops_out(ctx, 0, &y));
    TDM_TRY(kops_elem_size(ctx, X, &es));
    return kops_status(ctx, tcu_strided_copy(es, x, y, &s, kops_stream(ctx)), "Slice");
}

/* ---- Gather ---- */

static tdm_status *run_gather(tdm_kernel_ctx *ctx) {
    const tdm_tensor *X = ctx->in[0], *I = ctx->in[1];
    tdm_tensor *Y = ctx->out[0];
    int axis, es;
    TDM_TRY(tdm_norm_axis(ctx->node, tdm_attr_int(ctx->node, "axis", 0), X->rank, &axis));
    TDM_TRY(kops_elem_size(ctx, X, &es));
    int64_t A = X->dims[axis], outer = 1, inner = 1;
    for (int i = 0; i < axis; i++) outer *= X->dims[i];
    for (int i = axis + 1; i < X->rank; i++) inner *= X->dims[i];
    if (I->dtype != TDM_INT64 && I->dtype != TDM_INT32)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "indices must be int32 or int64");
    if (Y->count != outer * I->count * inner)
        return tdm_node_error(ctx->node, TDM_ERR_INTERNAL, "Gather output shape mismatch");
    if (!Y->count) return NULL;
    const void *x, *idx;
    void *y;
    TDM_TRY(kops_in(ctx, 0, &x));
    TDM_TRY(kops_in(ctx, 1, &idx));
    TDM_TRY(kops_out(ctx, 0, &y));
    /* out-of-range indices: zero rows and a flag. In a launch window of CUDA graphs the
     * device's index word (mapped host memory, one address in the graph too), which the host
     * reads after its next wait for the device (cuda_index_check): no wait here */
    cuda_device *d = cuda_ctx_device(ctx);
    if (d->index_bad_dev && cuda_graph_window_open(d)) {
        if (!d->gather_node[0])
            snprintf(d->gather_node, sizeof d->gather_node, "%s", ctx->node->name);
        return kops_status(ctx, tcu_gather(es, x, idx, I->dtype == TDM_INT64, y, outer, A,
                                           I->count, inner, d->index_bad_dev, kops_stream(ctx)),
                           "Gather");
    }
    /* without mapped memory: a flag read back before returning. A stream being captured
     * into a CUDA graph cannot wait: there the rows are zeros, unreported. */
    enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    TDM_TRY(cuda_check(cudaStreamIsCapturing(d->stream, &cap), "querying stream capture"));
    if (cap != cudaStreamCaptureStatusNone)
        return kops_status(ctx, tcu_gather(es, x, idx, I->dtype == TDM_INT64, y, outer, A,
                                           I->count, inner, NULL, kops_stream(ctx)),
                           "Gather");
    void *flag;
    TDM_TRY(cuda_scratch(d, sizeof(int), &flag));
    tdm_status *st = cuda_check(cudaMemsetAsync(flag, 0, sizeof(int), d->stream),
                                "clearing the index check");
    if (!st)
        st = kops_status(ctx, tcu_gather(es, x, idx, I->dtype == TDM_INT64, y, outer, A, I->count,
                                         inner, (int *)flag, kops_stream(ctx)),
                         "Gather");
    int bad = 0;
    if (!st) st = cuda_to_host(d, &bad, flag, sizeof bad);
    cuda_scratch_free(d, flag);
    if (!st && bad)
        st = tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                            "an index is out of range for a dimension of %lld", (long long)A);
    return st;
}

/* ---- Pad ---- */

/* The bytes of v in dtype dt (the constant of Pad-2's float attribute). */
static uint64_t value_bits(tdm_dtype dt, float v) {
    uint64_t bits = 0;
    switch (dt) {
    case TDM_FLOAT: memcpy(&bits, &v, sizeof v); break;
    case TDM_DOUBLE: { double x = v; memcpy(&bits, &x, sizeof x); break; }
    case TDM_FLOAT16: bits = tdm_f32_to_f16(v); break;
    case TDM_BFLOAT16: bits = tdm_f32_to_bf16(v); break;
    case TDM_INT64: case TDM_UINT64: { int64_t x = (int64_t)v; memcpy(&bits, &x, sizeof x); break; }
    case TDM_INT32: case TDM_UINT32: { int32_t x = (int32_t)v; memcpy(&bits, &x, sizeof x); break; }
    case TDM_INT16: case TDM_UINT16: { int16_t x = (int16_t)v; memcpy(&bits, &x, sizeof x); break; }
    default: { int8_t x = (int8_t)v; memcpy(&bits, &x, sizeof x); break; }
    }
    return bits;
}

static int pad_mode(const char *m) {
    if (strcmp(m, "constant") == 0) return TCU_PAD_CONSTANT;
    if (strcmp(m, "reflect") == 0) return TCU_PAD_REFLECT;
    if (strcmp(m, "edge") == 0) return TCU_PAD_EDGE;
    if (strcmp(m, "wrap") == 0) return TCU_PAD_WRAP;
    return -1;
}

static bool pad_accept(const tdm_node *node, const tdm_dtype *in_types, int n_in) {
    (void)in_types;
    (void)n_in;
    return pad_mode(tdm_attr_string(node, "mode", "constant")) >= 0;
}

static tdm_status *run_pad(tdm_kernel_ctx *ctx) {
    const tdm_tensor *X = ctx->in[0], *Y = ctx->out[0];
    int r = X->rank, es;
    TDM_TRY(kops_elem_size(ctx, X, &es));
    tcu_pad_desc pd;
    memset(&pd, 0, sizeof pd);
    pd.rank = r;
    pd.mode = pad_mode(tdm_attr_string(ctx->node, "mode", "constant"));
    if (pd.mode < 0) return tdm_node_error(ctx->node, TDM_ERR_UNSUPPORTED, "cuda: unknown mode");
    int64_t pads[2 * TDM_MAX_RANK], axes[TDM_MAX_RANK];
    int np = 0, na = -1;
    if (ctx->opset < 11) {
        size_t n = 0;
        const int64_t *p = tdm_attr_ints(ctx->node, "pads", &n);
        if (n > 2 * TDM_MAX_RANK)
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "too many pads");
        if (p && n) memcpy(pads, p, n * sizeof *p);
        np = (int)n;
        pd.value = value_bits(X->dtype, tdm_attr_float(ctx->node, "value", 0.0f));
    } else {
        TDM_TRY(cuda_read_ints(ctx, 1, "pads", pads, 2 * TDM_MAX_RANK, &np));
        if (ctx->n_in > 3 && ctx->in[3])
            TDM_TRY(cuda_read_ints(ctx, 3, "axes", axes, TDM_MAX_RANK, &na));
        const tdm_tensor *V = ctx->n_in > 2 ? ctx->in[2] : NULL;
        if (V && V->count > 0) {
            if (V->dtype != X->dtype)
                return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                      "constant_value must have the input's type");
            if (V->device)
                TDM_TRY(cuda_to_host(cuda_ctx_device(ctx), &pd.value, V->data, (size_t)es));
            else
                memcpy(&pd.value, V->data, (size_t)es);
        }
    }
    int n_axes = na >= 0 ? na : r;
    if (np != 2 * n_axes)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "pads must have %d values",
                              2 * n_axes);
    for (int k = 0; k < n_axes; k++) {
        int ax = k;
        if (na >= 0) TDM_TRY(tdm_norm_axis(ctx->node, axes[k], r, &ax));
        pd.before[ax] = pads[k];
    }
    for (int i = 0; i < r; i++) {
        pd.in_dims[i] = X->dims[i];
        pd.out_dims[i] = Y->dims[i];
        if (pd.mode == TCU_PAD_REFLECT && X->dims[i] > 0 &&
            (pd.before[i] >= X->dims[i] || Y->dims[i] - X->dims[i] - pd.before[i] >= X->dims[i]))
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                  "reflect pads must be smaller than the dimension");
    }
    if (Y->count && !X->count && pd.mode != TCU_PAD_CONSTANT)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "cannot %s-pad an empty tensor",
                              tdm_attr_string(ctx->node, "mode", "constant"));
    const void *x;
    void *y;
    TDM_TRY(kops_in(ctx, 0, &x));
    TDM_TRY(kops_out(ctx, 0, &y));
    return kops_status(ctx, tcu_pad(es, x, y, &pd, kops_stream(ctx)), "Pad");
}

/* host: the inputs read on the host or not at all (TDM_KF_HOST_READS; cuda_read_ints takes
 * them in either memory): Split's sizes (the outputs' shapes say them), Slice's starts, ends,
 * axes and steps, Pad's pads, constant value and axes; not Gather's indices (a kernel reads
 * them) */
#define K(op, since, fn, ints, host, acc)                                                \
    {{"", op, since, 0, 0, KOPS_ANY, fn, NULL, NULL, TDM_KF_HOST_READS(host)}, ints, 0, 0, acc}

const cuda_kernel_entry cuda_kernels_ops_shape[] = {
    K("Transpose", 1, run_transpose, 0, 0, NULL),
    K("Concat", 4, run_concat, 0, 0, NULL),
    K("Split", 2, run_split, 1u << 1, 1u << 1, NULL),
    K("Slice", 1, run_slice, (1u << 1) | (1u << 2) | (1u << 3) | (1u << 4),
      (1u << 1) | (1u << 2) | (1u << 3) | (1u << 4), NULL),
    K("Gather", 1, run_gather, 1u << 1, 0, NULL),
    K("Pad", 2, run_pad, (1u << 1) | (1u << 3), (1u << 1) | (1u << 2) | (1u << 3), pad_accept),
};
const int cuda_kernels_ops_shape_count =
    (int)(sizeof cuda_kernels_ops_shape / sizeof cuda_kernels_ops_shape[0]);
