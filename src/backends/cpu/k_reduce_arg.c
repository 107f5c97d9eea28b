/* CPU kernels: ArgMax, ArgMin, TopK, CumSum (reduce family). */
#include <math.h>
#include <string.h>

#include "backends/cpu/k_reduce.h"
#include "core/alloc.h"
#include "core/checked.h"
#include "core/threadpool.h"

#define RD_CH 256
#define RD_GRAIN ((int64_t)1 << 15)

#define T float
#define SFX f32
#define RT_FLOAT 1
#include "backends/cpu/k_reduce_tmpl_arg.h"
#undef T
#undef SFX
#define T double
#define SFX f64
#include "backends/cpu/k_reduce_tmpl_arg.h"
#undef T
#undef SFX
#undef RT_FLOAT
#define RT_FLOAT 0
#define T int64_t
#define SFX i64
#include "backends/cpu/k_reduce_tmpl_arg.h"
#undef T
#undef SFX
#define T uint64_t
#define SFX u64
#include "backends/cpu/k_reduce_tmpl_arg.h"
#undef T
#undef SFX
#undef RT_FLOAT

/* ---- ArgMax / ArgMin ---- */

static tdm_status *run_arg(tdm_kernel_ctx *ctx, int is_max) {
    const tdm_tensor *x = ctx->in[0];
    tdm_tensor *y = ctx->out[0];
    int axis;
    TDM_TRY(tdm_norm_axis(ctx->node, tdm_attr_int(ctx->node, "axis", 0), x->rank, &axis));
    int last = ctx->opset >= 12 && tdm_attr_int(ctx->node, "select_last_index", 0) != 0;
    int64_t O, N, I;
    tdm_rd_split(x->rank, x->dims, axis, &O, &N, &I);
    if (y->count == 0) return NULL;
    if (N == 0)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "cannot take the arg%s of an empty axis", is_max ? "max" : "min");
    tdm_rd_ctype ct = tdm_rd_ctype_of(x->dtype);
    const void *xd;
    void *owned;
    TDM_TRY(tdm_rd_load(ctx, x, ct, &xd, &owned));
    int64_t *yd = y->data;
    switch (ct) {
    case TDM_RD_F32: argreduce_f32(ctx->pool, xd, yd, O, N, I, is_max, last); break;
    case TDM_RD_F64: argreduce_f64(ctx->pool, xd, yd, O, N, I, is_max, last); break;
    case TDM_RD_I64: argreduce_i64(ctx->pool, xd, yd, O, N, I, is_max, last); break;
    case TDM_RD_U64: argreduce_u64(ctx->pool, xd, yd, O, N, I, is_max, last); break;
    }
    tdm_free(ctx->alloc, owned);
    return NULL;
}

tdm_status *tdm_rd_run_argmax(tdm_kernel_ctx *ctx) { return run_arg(ctx, 1); }
tdm_status *tdm_rd_run_argmin(tdm_kernel_ctx *ctx) { return run_arg(ctx, 0); }

/* ---- TopK ---- */

/* Copies element src_i of src into element dst_i of dst (es bytes each). */
static inline void copy_elem(void *dst, int64_t dst_i, const void *src, int64_t src_i, size_t es) {
    switch (es) {
    case 1: ((uint8_t *)dst)[dst_i] = ((const uint8_t *)src)[src_i]; break;
    case 2: ((uint16_t *)dst)[dst_i] = ((const uint16_t *)src)[src_i]; break;
    case 4: ((uint32_t *)dst)[dst_i] = ((const uint32_t *)src)[src_i]; break;
    case 8: ((uint64_t *)dst)[dst_i] = ((const uint64_t *)src)[src_i]; break;
    default:
        memcpy((char *)dst + (size_t)dst_i * es, (const char *)src + (size_t)src_i * es, es);
        break;
    }
}

tdm_status *tdm_rd_run_topk(tdm_kernel_ctx *ctx) {
    const tdm_node *node = ctx->node;
    const tdm_tensor *x = ctx->in[0];
    int axis;
    TDM_TRY(tdm_norm_axis(node, tdm_attr_int(node, "axis", -1), x->rank, &axis));
    int64_t k;
    if (ctx->opset < 10) {
        k = tdm_attr_int(node, "k", -1);
    } else {
        if (ctx->n_in < 2 || !ctx->in[1])
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "input K is missing");
        int64_t kv[1];
        int nk = 0;
        TDM_TRY(tdm_read_ints(node, "K", ctx->in[1], kv, 1, &nk));
        if (nk != 1)
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "K must hold one value");
        k = kv[0];
    }
    int largest = ctx->opset < 11 || tdm_attr_int(node, "largest", 1) != 0;
    int64_t O, N, I;
    tdm_rd_split(x->rank, x->dims, axis, &O, &N, &I);
    if (k < 0 || k > N)
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                              "K = %lld is out of range for an axis of %lld", (long long)k,
                              (long long)N);
    tdm_tensor *vals = ctx->out[0];
    tdm_tensor *idxt = ctx->n_out > 1 ? ctx->out[1] : NULL;
    int64_t lines = O * I;
    if (lines == 0 || k == 0) return NULL;

    tdm_rd_ctype ct = tdm_rd_ctype_of(x->dtype);
    size_t cs = tdm_rd_csize(ct);
    int64_t parts = (int64_t)tdm_threadpool_size(ctx->pool) * 4;
    if (parts > lines) parts = lines;
    size_t part_bytes = (I > 1 ? (size_t)N * cs : 0) + 8 + (size_t)k * 2 * sizeof(int64_t);
    part_bytes = (part_bytes + 63) & ~(size_t)63;
    size_t idx_bytes = idxt ? 0 : (size_t)(lines * k) * sizeof(int64_t);
    size_t total;
    if (!tdm_mul_size(part_bytes, (size_t)parts, &total) || !tdm_add_size(total, idx_bytes, &total))
        return tdm_node_error(node, TDM_ERR_LIMIT, "TopK scratch too large");
    char *scratch = tdm_kscratch(ctx, total);
    if (!scratch) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory in TopK");
    int64_t *idx = idxt ? idxt->data : (int64_t *)(scratch + part_bytes * (size_t)parts);

    const void *xd;
    void *owned;
    tdm_status *st = tdm_rd_load(ctx, x, ct, &xd, &owned);
    if (st) {
        tdm_free(ctx->alloc, scratch);
        return st;
    }
#define RD_TOPK_(sfx) \
    topk_##sfx(ctx->pool, xd, idx, O, N, I, k, largest, scratch, parts, part_bytes)
    switch (ct) {
    case TDM_RD_F32: RD_TOPK_(f32); break;
    case TDM_RD_F64: RD_TOPK_(f64); break;
    case TDM_RD_I64: RD_TOPK_(i64); break;
    case TDM_RD_U64: RD_TOPK_(u64); break;
    }
#undef RD_TOPK_
    tdm_free(ctx->alloc, owned);

    if (vals) {
        size_t es = tdm_dtype_elem_size(x->dtype);
        for (int64_t o = 0; o < O; o++) {
            for (int64_t j = 0; j < k; j++) {
                int64_t base = (o * k + j) * I;
                for (int64_t i = 0; i < I; i++)
                    copy_elem(vals->data, base + i, x->data, (o * N + idx[base + i]) * I + i, es);
            }
        }
    }
    tdm_free(ctx->alloc, scratch);
    return NULL;
}

/* ---- CumSum ---- */

tdm_status *tdm_rd_run_cumsum(tdm_kernel_ctx *ctx) {
    const tdm_node *node = ctx->node;
    const tdm_tensor *x = ctx->in[0];
    tdm_tensor *y = ctx->out[0];
    if (ctx->n_in < 2 || !ctx->in[1])
        return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "input axis is missing");
    int64_t av[1];
    int na = 0;
    TDM_TRY(tdm_read_ints(node, "axis", ctx->in[1], av, 1, &na));
    if (na != 1) return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "axis must hold one value");
    int axis;
    TDM_TRY(tdm_norm_axis(node, av[0], x->rank, &axis));
    int exclusive = tdm_attr_int(node, "exclusive", 0) != 0;
    int reverse = tdm_attr_int(node, "reverse", 0) != 0;
    if (y->count == 0) return NULL;
    int64_t O, N, I;
    tdm_rd_split(x->rank, x->dims, axis, &O, &N, &I);

    tdm_rd_ctype ct = tdm_rd_ctype_of(x->dtype);
    const void *xd;
    void *owned;
    TDM_TRY(tdm_rd_load(ctx, x, ct, &xd, &owned));
    bool native = tdm_rd_native(y->dtype, ct);
    void *yd = native ? y->data : tdm_kscratch(ctx, (size_t)y->count * tdm_rd_csize(ct));
    if (!yd) {
        tdm_free(ctx->alloc, owned);
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory in CumSum");
    }
    switch (ct) {
    case TDM_RD_F32: cumsum_f32(ctx->pool, xd, yd, O, N, I, exclusive, reverse); break;
    case TDM_RD_F64: cumsum_f64(ctx->pool, xd, yd, O, N, I, exclusive, reverse); break;
    case TDM_RD_I64: cumsum_i64(ctx->pool, xd, yd, O, N, I, exclusive, reverse); break;
    case TDM_RD_U64: cumsum_u64(ctx->pool, xd, yd, O, N, I, exclusive, reverse); break;
    }
    tdm_free(ctx->alloc, owned);
    if (!native) {
        tdm_rd_store(yd, ct, y->data, y->dtype, y->count);
        tdm_free(ctx->alloc, yd);
    }
    return NULL;
}
