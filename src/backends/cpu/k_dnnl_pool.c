/* dnnl family: MaxPool and AveragePool (float32, 1-D to 3-D, plain NCHW in and out) on oneDNN's
 * pooling_v2 primitive. ceil_mode becomes extra right padding; AveragePool with
 * count_include_pad runs here only when no such extra padding is needed (ONNX then divides
 * by the window size, as oneDNN does). MaxPool with the Indices output stays generic. */
#include <string.h>

#include "backends/cpu/k_dnnl.h"
#include "backends/cpu/k_nn.h"

typedef struct pool_state {
    dn_state base; /* first */
    bool max;
    bool include_pad;
} pool_state;

tdm_status *dn_pool_prepare(const tdm_node *node, int opset, int n_in,
                            const tdm_tensor *const *in, const tdm_allocator *a, void **state) {
    (void)opset;
    (void)in;
    pool_state *s;
    TDM_TRY(dn_state_new(a, sizeof *s, (dn_state **)&s));
    *state = s;
    s->max = strcmp(node->op_type, "MaxPool") == 0;
    s->include_pad = !s->max && tdm_attr_int(node, "count_include_pad", 0) != 0;
    if (n_in < 1 || (s->max && node->n_outputs > 1 && node->outputs[1] >= 0))
        s->base.generic = true;
    return NULL;
}

static tdm_status *pool_build(dn_state *bs, tdm_kernel_ctx *ctx, dn_entry *e) {
    pool_state *s = (pool_state *)bs;
    const tdm_tensor *x = ctx->in[0], *y = ctx->out[0];
    int nd = x->rank, nsp = nd - 2;
    e->generic = true;
    tdm_nn_geom g;
    tdm_status *gst = tdm_nn_geom_init(ctx->node, ctx->opset, TDM_NN_POOL, nd, x->dims, NULL, &g);
    if (gst) {
        tdm_status_free(gst);
        return NULL;
    }
    dnnl_dims_t strides, kernel, dil, pl, pr;
    for (int i = 0; i < nsp; i++) {
        if (g.out[i] != y->dims[2 + i] || g.out[i] < 1) return NULL;
        int64_t ext = (g.kernel[i] - 1) * g.dil[i] + 1;
        int64_t right = g.pad_e[i];
        if ((g.in[i] + g.pad_b[i] + right - ext) / g.stride[i] + 1 != g.out[i]) {
            right = (g.out[i] - 1) * g.stride[i] + ext - g.in[i] - g.pad_b[i];
            if (s->include_pad) return NULL; /* ONNX's divisor differs from oneDNN's here */
        }
        if (right < 0 || g.pad_b[i] >= ext || right >= ext) return NULL;
        strides[i] = g.stride[i];
        kernel[i] = g.kernel[i];
        dil[i] = g.dil[i] - 1;
        pl[i] = g.pad_b[i];
        pr[i] = right;
    }
    dn_md_plain(&e->src_md, nd, x->dims);
    dn_md_plain(&e->dst_md, nd, y->dims);
    dnnl_alg_kind_t alg = s->max           ? dnnl_pooling_max
                          : s->include_pad ? dnnl_pooling_avg_include_padding
                                           : dnnl_pooling_avg_exclude_padding;
    dnnl_pooling_v2_desc_t pdsc;
    if (dnnl_pooling_v2_forward_desc_init(&pdsc, dnnl_forward_inference, alg, &e->src_md,
                                          &e->dst_md, strides, kernel, dil, pl,
                                          pr) != dnnl_success)
        return NULL;
    dnnl_primitive_attr_t attr;
    TDM_TRY(dn_attr_new(&attr));
    dnnl_primitive_desc_t pd;
    dnnl_status_t r = dnnl_primitive_desc_create(&pd, &pdsc, attr, bs->eng, NULL);
    dnnl_primitive_attr_destroy(attr);
    if (r != dnnl_success) return NULL;
    TDM_TRY(dn_prim_from_pd(pd, &e->main));
    e->generic = false;
    return NULL;
}

tdm_status *dn_pool_run(tdm_kernel_ctx *ctx) {
    pool_state *s = ctx->state;
    if (!s || s->base.generic || ctx->n_in < 1 || !ctx->in[0] || !ctx->out[0] ||
        (ctx->n_out > 1 && ctx->out[1]))
        return dn_fallback(ctx);
    const tdm_tensor *x = ctx->in[0], *y = ctx->out[0];
    if (x->dtype != TDM_FLOAT || x->rank < 3 || x->rank > 5 || y->rank != x->rank ||
        x->count == 0 || y->count == 0)
        return dn_fallback(ctx);
    int64_t key[DN_KEY];
    int nk = 0;
    key[nk++] = dn_threads(ctx);
    key[nk++] = x->rank;
    for (int i = 0; i < x->rank; i++) key[nk++] = x->dims[i];
    dn_entry tmp, *e;
    TDM_TRY(dn_cache_get(&s->base, ctx, key, nk, pool_build, &tmp, &e));
    tdm_status *st;
    if (e->generic) {
        st = dn_fallback(ctx);
    } else {
        dn_arg args[2] = {{DNNL_ARG_SRC, &e->src_md, x->data}, {DNNL_ARG_DST, &e->dst_md, y->data}};
        st = dn_exec(ctx, s->base.eng, &e->main, 2, args);
    }
    dn_entry_done(e, &tmp);
    return st;
}
