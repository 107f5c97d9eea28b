/* dnnl family: Conv and FusedConv (float32, 1-D to 3-D, grouped/depthwise, dilated, strided,
 * any pads, bias; FusedConv's Z input and activation as post-ops). */
#include <string.h>

#include "backends/cpu/k_dnnl.h"
#include "backends/cpu/k_nn.h"
#include "core/alloc.h"

/* Activation layout: let oneDNN pick (blocked nChw16c on AVX-512) and reorder X and Y inside
 * the kernel, which measures faster than running the convolution on plain NCHW. */
#ifndef DN_CONV_ACT_ANY
#define DN_CONV_ACT_ANY 1
#endif

typedef struct conv_state {
    dn_state base; /* first */
    bool fused;
    const char *act;  /* FusedConv activation (points into the node's attributes) */
    const float *act_params;
    size_t n_act_params;
} conv_state;

tdm_status *dn_conv_prepare(const tdm_node *node, int opset, int n_in,
                            const tdm_tensor *const *in, const tdm_allocator *a, void **state) {
    (void)opset;
    conv_state *s;
    TDM_TRY(dn_state_new(a, sizeof *s, (dn_state **)&s));
    *state = s;
    s->fused = strcmp(node->op_type, "FusedConv") == 0;
    if (n_in < 2 || tdm_attr_int(node, "group", 1) < 1) s->base.generic = true;
    if (n_in >= 2 && in[1] && in[1]->dtype == TDM_FLOAT) s->base.wconst = in[1];
    if (s->fused) {
        s->act = tdm_attr_string(node, "activation", "");
        s->act_params = tdm_attr_floats(node, "activation_params", &s->n_act_params);
        dnnl_post_ops_t po;
        if (dnnl_post_ops_create(&po) != dnnl_success) {
            s->base.generic = true;
        } else {
            if (!dn_append_activation(po, s->act, s->act_params, s->n_act_params))
                s->base.generic = true;
            dnnl_post_ops_destroy(po);
        }
    }
    return NULL;
}

static tdm_status *conv_build(dn_state *bs, tdm_kernel_ctx *ctx, dn_entry *e) {
    conv_state *s = (conv_state *)bs;
    const tdm_tensor *x = ctx->in[0], *w = ctx->in[1];
    const tdm_tensor *b = ctx->n_in > 2 ? ctx->in[2] : NULL;
    const tdm_tensor *z = s->fused && ctx->n_in > 3 ? ctx->in[3] : NULL;
    const tdm_tensor *y = ctx->out[0];
    int nd = x->rank, nsp = nd - 2;
    e->generic = true;
    tdm_nn_geom g;
    tdm_status *gst = tdm_nn_geom_init(ctx->node, ctx->opset, TDM_NN_CONV, nd, x->dims, w->dims, &g);
    if (gst) { /* the generic kernel reports it */
        tdm_status_free(gst);
        return NULL;
    }
    int64_t group = tdm_attr_int(ctx->node, "group", 1);
    int64_t C = x->dims[1], M = w->dims[0];
    if (group < 1 || C % group || M % group || w->dims[1] * group != C || y->dims[1] != M)
        return NULL;
    for (int i = 0; i < nsp; i++)
        if (g.out[i] != y->dims[2 + i] || g.kernel[i] != w->dims[2 + i]) return NULL;
    if (b && (b->rank != 1 || b->dims[0] != M)) return NULL;

    dnnl_dims_t strides, dil, pl, pr;
    for (int i = 0; i < nsp; i++) {
        strides[i] = g.stride[i];
        dil[i] = g.dil[i] - 1;
        pl[i] = g.pad_b[i];
        pr[i] = g.pad_e[i];
    }
    int64_t wd[DNNL_MAX_NDIMS];
    int wnd = nd;
    if (group > 1) {
        wnd = nd + 1;
        wd[0] = group;
        wd[1] = M / group;
        for (int i = 1; i < nd; i++) wd[i + 1] = w->dims[i];
    } else {
        for (int i = 0; i < nd; i++) wd[i] = w->dims[i];
    }
    dn_md_plain(&e->usr_src, nd, x->dims);
    dn_md_plain(&e->usr_dst, nd, y->dims);
    dn_md_plain(&e->usr_wei, wnd, wd);
    dn_md_plain(&e->bias_md, 1, &M);

    dnnl_memory_desc_t src_any, dst_any, wei_any;
    dnnl_dims_t xdims, ydims, wdims;
    for (int i = 0; i < nd; i++) {
        xdims[i] = x->dims[i];
        ydims[i] = y->dims[i];
    }
    for (int i = 0; i < wnd; i++) wdims[i] = wd[i];
    if (DN_CONV_ACT_ANY) {
        dnnl_memory_desc_init_by_tag(&src_any, nd, xdims, dnnl_f32, dnnl_format_tag_any);
        dnnl_memory_desc_init_by_tag(&dst_any, nd, ydims, dnnl_f32, dnnl_format_tag_any);
    } else {
        src_any = e->usr_src;
        dst_any = e->usr_dst;
    }
    dnnl_memory_desc_init_by_tag(&wei_any, wnd, wdims, dnnl_f32, dnnl_format_tag_any);

    dnnl_convolution_desc_t cd;
    if (dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_inference,
                                                   dnnl_convolution_direct, &src_any, &wei_any,
                                                   b ? &e->bias_md : NULL, &dst_any, strides,
                                                   dil, pl, pr) != dnnl_success)
        return NULL;
    dnnl_primitive_attr_t attr;
    TDM_TRY(dn_attr_new(&attr));
    dnnl_post_ops_t po = NULL;
    bool ok = dnnl_post_ops_create(&po) == dnnl_success;
    if (ok && z) ok = dnnl_post_ops_append_sum(po, 1.0f) == dnnl_success;
    if (ok && s->fused) ok = dn_append_activation(po, s->act, s->act_params, s->n_act_params);
    if (ok) ok = dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success;
    if (po) dnnl_post_ops_destroy(po);
    dnnl_primitive_desc_t pd = NULL;
    if (ok && dnnl_primitive_desc_create(&pd, &cd, attr, bs->eng, NULL) != dnnl_success) {
        pd = NULL;
        ok = false;
    }
    dnnl_primitive_attr_destroy(attr);
    if (!ok) return NULL;
    e->src_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
    e->wei_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    e->dst_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
    TDM_TRY(dn_prim_from_pd(pd, &e->main));
    TDM_TRY(dn_reorder_new(bs->eng, &e->usr_src, &e->src_md, &e->r_src));
    TDM_TRY(dn_reorder_new(bs->eng, &e->dst_md, &e->usr_dst, &e->r_dst));
    if (z && e->r_dst.p) TDM_TRY(dn_reorder_new(bs->eng, &e->usr_dst, &e->dst_md, &e->r_z));
    TDM_TRY(dn_reorder_new(bs->eng, &e->usr_wei, &e->wei_md, &e->r_wei));
    if (w == bs->wconst) TDM_TRY(dn_weights_cache(bs, ctx, e, w->data));
    e->generic = false;
    return NULL;
}

static bool same_shape(const tdm_tensor *a, const tdm_tensor *b) {
    if (a->rank != b->rank) return false;
    for (int i = 0; i < a->rank; i++)
        if (a->dims[i] != b->dims[i]) return false;
    return true;
}

/* Scratch for a tensor in layout md. */
static void *md_scratch(tdm_kernel_ctx *ctx, const dnnl_memory_desc_t *md) {
    size_t n = dnnl_memory_desc_get_size(md);
    return tdm_kscratch(ctx, n ? n : 1);
}

static tdm_status *conv_exec(conv_state *s, tdm_kernel_ctx *ctx, dn_entry *e) {
    const tdm_tensor *x = ctx->in[0], *w = ctx->in[1];
    const tdm_tensor *b = ctx->n_in > 2 ? ctx->in[2] : NULL;
    const tdm_tensor *z = s->fused && ctx->n_in > 3 ? ctx->in[3] : NULL;
    tdm_tensor *y = ctx->out[0];
    dnnl_engine_t eng = s->base.eng;
    void *xs = NULL, *ws = NULL, *ys = NULL;
    tdm_status *st = NULL;
    const void *src = x->data, *wei = e->wei_cached;
    void *dst = y->data;
    if (e->r_src.p) {
        if (!(xs = md_scratch(ctx, &e->src_md))) goto oom;
        if ((st = dn_exec_reorder(ctx, eng, &e->r_src, &e->usr_src, x->data, &e->src_md, xs)))
            goto done;
        src = xs;
    }
    if (!wei && !e->r_wei.p) wei = w->data;
    if (!wei) {
        if (!(ws = md_scratch(ctx, &e->wei_md))) goto oom;
        if ((st = dn_exec_reorder(ctx, eng, &e->r_wei, &e->usr_wei, w->data, &e->wei_md, ws)))
            goto done;
        wei = ws;
    }
    if (e->r_dst.p) {
        if (!(ys = md_scratch(ctx, &e->dst_md))) goto oom;
        dst = ys;
    }
    if (z) {
        if (e->r_dst.p)
            st = dn_exec_reorder(ctx, eng, &e->r_z, &e->usr_dst, z->data, &e->dst_md, ys);
        else
            memcpy(y->data, z->data, y->nbytes);
        if (st) goto done;
    }
    {
        dn_arg args[4] = {{DNNL_ARG_SRC, &e->src_md, src},
                          {DNNL_ARG_WEIGHTS, &e->wei_md, wei},
                          {DNNL_ARG_DST, &e->dst_md, dst},
                          {DNNL_ARG_BIAS, &e->bias_md, b ? b->data : NULL}};
        if ((st = dn_exec(ctx, eng, &e->main, b ? 4 : 3, args))) goto done;
    }
    if (e->r_dst.p) st = dn_exec_reorder(ctx, eng, &e->r_dst, &e->dst_md, ys, &e->usr_dst, y->data);
    goto done;
oom:
    st = tdm_node_error(ctx->node, TDM_ERR_OUT_OF_MEMORY, "out of memory");
done:
    tdm_free(ctx->alloc, xs);
    tdm_free(ctx->alloc, ws);
    tdm_free(ctx->alloc, ys);
    return st;
}

tdm_status *dn_conv_run(tdm_kernel_ctx *ctx) {
    conv_state *s = ctx->state;
    if (!s || s->base.generic || ctx->n_in < 2 || !ctx->in[0] || !ctx->in[1] || !ctx->out[0])
        return dn_fallback(ctx);
    const tdm_tensor *x = ctx->in[0], *w = ctx->in[1];
    const tdm_tensor *b = ctx->n_in > 2 ? ctx->in[2] : NULL;
    const tdm_tensor *z = s->fused && ctx->n_in > 3 ? ctx->in[3] : NULL;
    const tdm_tensor *y = ctx->out[0];
    if (x->dtype != TDM_FLOAT || w->dtype != TDM_FLOAT || (b && b->dtype != TDM_FLOAT) ||
        (z && (z->dtype != TDM_FLOAT || !same_shape(z, y))) || x->rank < 3 || x->rank > 5 ||
        w->rank != x->rank || y->rank != x->rank || x->count == 0 || y->count == 0 ||
        w->count == 0)
        return dn_fallback(ctx);
    int64_t key[DN_KEY];
    int nk = 0;
    key[nk++] = dn_threads(ctx);
    key[nk++] = (b ? 1 : 0) | (z ? 2 : 0) | (w == s->base.wconst ? 4 : 0);
    key[nk++] = x->rank;
    for (int i = 0; i < x->rank; i++) key[nk++] = x->dims[i];
    for (int i = 0; i < w->rank; i++) key[nk++] = w->dims[i];
    dn_entry tmp, *e;
    TDM_TRY(dn_cache_get(&s->base, ctx, key, nk, conv_build, &tmp, &e));
    tdm_status *st = e->generic ? dn_fallback(ctx) : conv_exec(s, ctx, e);
    dn_entry_done(e, &tmp);
    return st;
}
