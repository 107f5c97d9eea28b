/* dnnl family: tandem's QConvTranspose (ops/fused.h) on oneDNN's int8 deconvolution (u8s8s32
 * or s8s8s32 sums; oneDNN's JIT kernels: VNNI on AVX-512 / AVX-VNNI, vpmaddubsw on plain
 * AVX2, whose int16 pair sums saturate as its convolutions' do).
 *
 * The requantisation is QConv's (k_dnnl_qconv.c): output scales x_scale * w_scale[m] /
 * y_scale per output channel, the int32 bias added to the sums before them, qmin / qmax as a
 * clip post-op relative to the output zero point, X's and Y's zero points as oneDNN's. A
 * deconvolution reads no padding, so X's zero point is the source zero point of the
 * primitive (its compensation varies with the output position at the borders: it cannot
 * go into the bias as QConv's padded mode does).
 *
 * Weights: ONNX's [C, M / group, k...] is oneDNN's logical (OC, IC, k...) with the two
 * leading dims swapped (tag bacd...; groups: (G, OC/G, IC/G, k...) as acbde...), reordered
 * once per shape into the primitive's layout. No spatial flip: oneDNN's deconvolution and
 * ONNX's ConvTranspose both scatter x[ih] * w[kh] to y[ih * stride + kh * dilation - pad].
 *
 * Layouts: the primitive takes X and Y channels-last (oneDNN's int8 layout on x86); X and Y
 * that already are (x_nhwc / y_nhwc, the int8 layout pass) are read and written as they are,
 * plain ones go through k_dnnl_qconv.c's 8-bit transposes (a Y of one channel is the same
 * bytes in both layouts). Threads: whole batches in one primitive on one thread, else one
 * image per work item.
 *
 * What it needs, else the reference kernel (k_misc_qdeconv.c) runs: constant per-tensor x / y
 * scales and zero points, w_scale per-tensor or [M], constant int8 weights with zero points
 * 0, a constant int32 bias, 8-bit X and Y, 1-D to 3-D, and a JIT implementation.
 *
 * Without VNNI, uint8 X and weights that can saturate a pair with large bytes (k_dnnl.h,
 * dn_q8_lim; here over all the weights at once, a lower and so safe limit), an ungrouped
 * node also keeps exact halves: weights [a; b] (2C input channels, w = a + b, |a|, |b| <= 64)
 * and a second primitive over X' = [X, X]; a run whose X has a byte above the limit builds X'
 * and takes it (twice the work, the same requantisation, exact). int8 X without VNNI runs
 * as uint8 (dn_q8_flip: X ^ 0x80, zero point + 128) on that path. Grouped: no halves (on
 * AVX2, oneDNN 2.6 gives int8 grouped deconvolutions no JIT kernel: the reference loops run,
 * exact). */
#include <stdint.h>
#include <string.h>

#include "backends/cpu/k_dnnl.h"
#include "core/alloc.h"
#include "ops/nn_geom.h"

/* k_misc_qdeconv.c */
tdm_status *tdm_misc_qconv_transpose_run(tdm_kernel_ctx *ctx);

typedef struct qd_state {
    dn_state base; /* first */
    int32_t xzp, yzp;
    dnnl_data_type_t yt;
    float *oscale;  /* [M] x_scale * w_scale[m] / y_scale */
    int32_t *bias;  /* [M] or NULL */
    const tdm_tensor *w;
    int64_t M, group;
    bool clip;
    float clo, chi;
    bool xl, yl;
    int lim;        /* without VNNI: X's bytes up to lim are exact with w (255: always) */
    int8_t *wh;     /* [2C, M, k...]: the halves [a; b] of the weights (NULL: none) */
    bool novnni;    /* the CPU has no VNNI (dn_has_vnni) */
    bool flip;      /* int8 X runs as uint8 (dn_q8_flip; xzp is then X's + 128) */
} qd_state;

typedef struct qd_entry {
    dn_entry h; /* first */
    int nd;
    int64_t N, mb, C, isz, osz;
    dnnl_data_type_t xt;
    dn_prim prim;
    dnnl_memory_desc_t src, wei, dst, bias;
    bool tr_src, tr_dst; /* own transposes of plain X / Y */
    size_t src_bytes, dst_bytes, item_bytes; /* per item (mb images) */
    void *wbuf;
    dn_held *held; /* [N / mb] */
    int64_t n_held;
    dn_prim prim2; /* the halves' primitive over X' (p NULL: none) */
    dnnl_memory_desc_t src2, wei2;
    size_t src2_bytes; /* per item, after the item's other bytes (with prim2) */
    void *wbuf2;
    dn_held *held2; /* [N / mb] */
} qd_entry;

static void qd_clear(dn_state *s, dn_entry *he) {
    qd_entry *e = (qd_entry *)he;
    if (e->held) dn_held_array_free(s->alloc, e->held, (size_t)e->n_held);
    if (e->held2) dn_held_array_free(s->alloc, e->held2, (size_t)e->n_held);
    e->held = e->held2 = NULL;
    dn_prim_clear(&e->prim);
    dn_prim_clear(&e->prim2);
    tdm_free(s->alloc, e->wbuf);
    tdm_free(s->alloc, e->wbuf2);
    e->wbuf = e->wbuf2 = NULL;
}

static void qd_release(void *state, const tdm_allocator *a) {
    qd_state *s = state;
    if (s) {
        tdm_free(s->base.alloc, s->oscale);
        tdm_free(s->base.alloc, s->bias);
        tdm_free(s->base.alloc, s->wh);
    }
    dn_release(state, a);
}

/* The constants the fast path needs; false leaves the node to the reference kernel. */
static bool qd_setup(qd_state *s, const tdm_node *node, int n_in, const tdm_tensor *const *in) {
    if (n_in < 8) return false;
    const tdm_tensor *w = in[3], *ws = in[4], *b = n_in > 8 ? in[8] : NULL;
    float xs, ys;
    if (!w || w->dtype != TDM_INT8 || w->rank < 3 || w->rank > 5 || !dn_q8_zeros(in[5])) return false;
    if ((node->inputs[5] >= 0 && !in[5]) || (node->inputs[2] >= 0 && !in[2]) ||
        (node->inputs[7] >= 0 && !in[7]))
        return false;
    if (!dn_f32_scalar(in[1], &xs) || !dn_f32_scalar(in[6], &ys) || !dn_q8_scalar(in[2], &s->xzp) ||
        !dn_q8_scalar(in[7], &s->yzp) || !(ys > 0))
        return false;
    s->flip = dn_q8_flip(in[2]);
    if (s->flip) s->xzp += 128;
    s->group = tdm_attr_int(node, "group", 1);
    if (s->group < 1 || w->dims[0] % s->group) return false;
    s->M = w->dims[1] * s->group;
    if (!ws || ws->dtype != TDM_FLOAT || (ws->count != 1 && ws->count != s->M)) return false;
    if (n_in > 8 && node->n_inputs > 8 && node->inputs[8] >= 0 && !b) return false;
    if (b && (b->dtype != TDM_INT32 || b->count != s->M)) return false;
    tdm_dtype yt = in[7] ? in[7]->dtype : TDM_UINT8;
    s->yt = yt == TDM_INT8 ? dnnl_s8 : dnnl_u8;
    s->w = w;
    if (!dn_q8_requant(s->base.alloc, xs, ws, ys, s->M, b, s->M, &s->oscale, &s->bias))
        return false;
    s->clip = dn_q8_clip(node, yt, s->yzp, &s->clo, &s->chi);
    /* without VNNI (uint8 X, or int8 X flipped to uint8), ungrouped: the exact halves where
     * large bytes can saturate */
    s->lim = 255;
    if (s->novnni && s->group == 1) {
        int lim = dn_q8_lim(w->data, 1, w->count, 0, 1);
        if (lim < 255) {
            s->wh = tdm_alloc(s->base.alloc, 2 * (size_t)w->count + 1);
            if (!s->wh) return false;
            dn_q8_halves(w->data, s->wh, s->wh + w->count, w->count);
            s->lim = lim;
        }
    }
    return true;
}

static tdm_status *qd_prepare(const tdm_node *node, int opset, int n_in,
                              const tdm_tensor *const *in, const tdm_allocator *a, void **state) {
    (void)opset;
    qd_state *s;
    TDM_TRY(dn_state_new(a, sizeof *s, sizeof(qd_entry), qd_clear, (dn_state **)&s));
    *state = s;
    s->xl = tdm_attr_int(node, "x_nhwc", 0) != 0;
    s->yl = tdm_attr_int(node, "y_nhwc", 0) != 0;
    s->novnni = !dn_has_vnni();
    if (!s->base.generic && !qd_setup(s, node, n_in, in)) s->base.generic = true;
    return NULL;
}

static void md_tag(dnnl_memory_desc_t *md, int nd, const int64_t *dims, dnnl_data_type_t dt,
                   dnnl_format_tag_t tag) {
    dnnl_dims_t d;
    for (int i = 0; i < nd; i++) d[i] = dims[i];
    if (dnnl_memory_desc_init_by_tag(md, nd, d, dt, tag) != dnnl_success) memset(md, 0, sizeof *md);
}

static dnnl_format_tag_t tag_nhwc(int nd) {
    return nd == 3 ? dnnl_acb : nd == 4 ? dnnl_acdb : dnnl_acdeb;
}

/* ONNX's weight layout as oneDNN's logical deconvolution weights: (OC, IC, k...) stored
 * IC-major, or with groups (G, OC/G, IC/G, k...) stored (G, IC/G, OC/G, k...). */
static dnnl_format_tag_t tag_onnx_w(int wnd, bool grouped) {
    if (grouped) return wnd == 4 ? dnnl_acbd : wnd == 5 ? dnnl_acbde : dnnl_acbdef;
    return wnd == 3 ? dnnl_bac : wnd == 4 ? dnnl_bacd : dnnl_bacde;
}

/* X and Y as NCHW dims (channels-last ones permuted). */
static void nchw_dims(const tdm_tensor *t, bool nhwc, int64_t *d) {
    memcpy(d, t->dims, sizeof(int64_t) * (size_t)t->rank);
    if (nhwc && t->rank == 4) d[1] = t->dims[3], d[2] = t->dims[1], d[3] = t->dims[2];
}

static tdm_status *qd_build(dn_state *ds, tdm_kernel_ctx *ctx, dn_entry *he) {
    qd_state *s = (qd_state *)ds;
    qd_entry *e = (qd_entry *)he;
    const tdm_tensor *x = ctx->in[0], *y = ctx->out[0];
    int nd = x->rank, sp = nd - 2;
    int64_t xd[5], yd[5];
    nchw_dims(x, s->xl, xd);
    nchw_dims(y, s->yl, yd);
    tdm_nn_geom g;
    tdm_status *gst = tdm_nn_geom_init(ctx->node, 1, TDM_NN_CONVT, nd, xd, s->w->dims, &g);
    if (gst) { /* (shape inference checked the attributes: leave it to the reference) */
        tdm_status_free(gst);
        return NULL;
    }
    dnnl_dims_t strides, dil, pl, pr;
    for (int d = 0; d < sp; d++) {
        if (g.out[d] != yd[2 + d]) return NULL;
        strides[d] = g.stride[d];
        dil[d] = g.dil[d] - 1;
        pl[d] = g.pad_b[d];
        /* the end pad that gives exactly Y's size (output_padding, output_shape) */
        pr[d] = (xd[2 + d] - 1) * g.stride[d] + (g.kernel[d] - 1) * g.dil[d] + 1 - g.pad_b[d] -
                yd[2 + d];
    }
    int threads = dn_threads(ctx);
    e->nd = nd;
    e->N = xd[0];
    e->C = xd[1];
    e->mb = threads == 1 ? e->N : 1;
    e->xt = x->dtype == TDM_INT8 && !s->flip ? dnnl_s8 : dnnl_u8; /* (flip: X ^ 0x80) */
    e->isz = e->osz = 1;
    for (int d = 0; d < sp; d++) e->isz *= xd[2 + d], e->osz *= yd[2 + d];
    int64_t sdims[5], ddims[5], wdims[6];
    memcpy(sdims, xd, sizeof(int64_t) * (size_t)nd);
    memcpy(ddims, yd, sizeof(int64_t) * (size_t)nd);
    sdims[0] = ddims[0] = e->mb;
    bool grouped = s->group > 1;
    int wnd = grouped ? nd + 1 : nd;
    if (grouped) {
        wdims[0] = s->group;
        wdims[1] = s->M / s->group;
        wdims[2] = e->C / s->group;
        for (int d = 0; d < sp; d++) wdims[3 + d] = s->w->dims[2 + d];
    } else {
        wdims[0] = s->M;
        wdims[1] = e->C;
        for (int d = 0; d < sp; d++) wdims[2 + d] = s->w->dims[2 + d];
    }
    md_tag(&e->dst, nd, ddims, s->yt, tag_nhwc(nd));
    md_tag(&e->bias, 1, &s->M, dnnl_s32, dnnl_a);
    for (int two = 0; two <= (s->wh && e->xt == dnnl_u8); two++) {
        /* (then the halves: 2C input channels, weights [a; b]) */
        if (two) { /* (ungrouped) */
            sdims[1] = 2 * e->C;
            wdims[1] = 2 * e->C;
        }
        dnnl_memory_desc_t wany, *src = two ? &e->src2 : &e->src, *wei = two ? &e->wei2 : &e->wei;
        md_tag(src, nd, sdims, e->xt, tag_nhwc(nd));
        md_tag(&wany, wnd, wdims, dnnl_s8, dnnl_format_tag_any);
        dnnl_deconvolution_desc_t dd;
        if (dnnl_dilated_deconvolution_forward_desc_init(&dd, dnnl_forward_inference,
                                                         dnnl_deconvolution_direct, src, &wany,
                                                         s->bias ? &e->bias : NULL, &e->dst,
                                                         strides, dil, pl, pr) != dnnl_success) {
            if (two) break;
            return NULL;
        }
        dnnl_primitive_attr_t attr;
        TDM_TRY(dn_attr_new(&attr));
        bool good =
            dnnl_primitive_attr_set_output_scales(attr, s->M, 1 << 1, s->oscale) == dnnl_success;
        if (good && s->xzp)
            good = dnnl_primitive_attr_set_zero_points(attr, DNNL_ARG_SRC, 1, 0, &s->xzp) ==
                   dnnl_success;
        if (good && s->yzp)
            good = dnnl_primitive_attr_set_zero_points(attr, DNNL_ARG_DST, 1, 0, &s->yzp) ==
                   dnnl_success;
        if (good && s->clip) good = dn_attr_clip(attr, s->clo, s->chi);
        dnnl_primitive_desc_t pd = NULL;
        if (good && dnnl_primitive_desc_create(&pd, &dd, attr, s->base.eng, NULL) != dnnl_success)
            pd = NULL;
        dnnl_primitive_attr_destroy(attr);
        if (!pd || dn_refuse_ref(&s->base, pd)) {
            if (two) break; /* no halves: large bytes saturate as before */
            return NULL;
        }
        dn_query_md(pd, dnnl_query_weights_md, wei);
        dn_prim *prim = two ? &e->prim2 : &e->prim;
        TDM_TRY(dn_prim_from_pd(pd, prim));
        dn_note_impl(&s->base, two ? "%s (halves)" : "%s", dn_prim_impl(prim));
        /* the constant weights in the primitive's layout */
        dnnl_memory_desc_t usr;
        md_tag(&usr, wnd, wdims, dnnl_s8, tag_onnx_w(wnd, grouped));
        void **wbuf = two ? &e->wbuf2 : &e->wbuf;
        *wbuf = tdm_alloc(s->base.alloc, dn_md_bytes(wei) + 64);
        if (!*wbuf) return dn_oom(ctx);
        dn_prim r;
        TDM_TRY(dn_reorder_new(s->base.eng, &usr, wei, &r));
        tdm_status *st = dn_exec_reorder(ctx, s->base.eng, &r, &usr,
                                         two ? (const void *)s->wh : s->w->data, wei, *wbuf);
        dn_prim_clear(&r);
        TDM_TRY(st);
    }
    e->tr_src = !s->xl && e->C > 1;
    e->tr_dst = !s->yl && s->M > 1;
    e->src_bytes = e->tr_src ? (dn_md_bytes(&e->src) + 63) / 64 * 64 : 0;
    e->dst_bytes = e->tr_dst ? (dn_md_bytes(&e->dst) + 63) / 64 * 64 : 0;
    size_t sc = e->prim.scratch > e->prim2.scratch ? e->prim.scratch : e->prim2.scratch;
    e->item_bytes = e->src_bytes + e->dst_bytes + (sc + 63) / 64 * 64;
    e->src2_bytes = e->prim2.p ? (dn_md_bytes(&e->src2) + 63) / 64 * 64 : 0;
    e->item_bytes += e->src2_bytes;
    e->n_held = e->N / e->mb;
    e->held = dn_held_array(s->base.alloc, (size_t)e->n_held);
    if (e->prim2.p) e->held2 = dn_held_array(s->base.alloc, (size_t)e->n_held);
    e->h.generic = false;
    return NULL;
}

typedef struct qd_run {
    qd_state *s;
    qd_entry *e;
    const tdm_tensor *x;
    tdm_tensor *y;
    char *buf;
    bool two; /* X has a byte above s->lim: X' and the halves' primitive */
} qd_run;

static tdm_status *qd_item(void *arg, tdm_kernel_ctx *ctx, int64_t i) {
    qd_run *r = arg;
    qd_state *s = r->s;
    qd_entry *e = r->e;
    char *mine = r->buf + (size_t)i * e->item_bytes;
    char *sbuf = mine, *dbuf = mine + e->src_bytes, *scratch = dbuf + e->dst_bytes;
    const uint8_t *x = (const uint8_t *)r->x->data + (size_t)(i * e->mb * e->C * e->isz);
    uint8_t *y = (uint8_t *)r->y->data + (size_t)(i * e->mb * s->M * e->osz);
    uint8_t *x2 = (uint8_t *)mine + e->item_bytes - e->src2_bytes;
    if (r->two) /* X' = [X, X] channels-last per image */
        for (int64_t k = 0; k < e->mb; k++)
            dn_x2_u8(x + k * e->C * e->isz, s->xl, e->C, 1, e->isz, e->isz,
                     x2 + k * 2 * e->C * e->isz);
    else if (e->tr_src) /* [C, HW] -> [HW, C] per image */
        for (int64_t k = 0; k < e->mb; k++)
            dn_tr_u8(x + k * e->C * e->isz, e->C, e->isz, e->isz,
                     (uint8_t *)sbuf + k * e->C * e->isz, e->C);
    dn_arg args[4];
    int n = 0;
    if (r->two) {
        args[n++] = (dn_arg){DNNL_ARG_SRC, &e->src2, x2};
        args[n++] = (dn_arg){DNNL_ARG_WEIGHTS, &e->wei2, e->wbuf2};
    } else {
        args[n++] = (dn_arg){DNNL_ARG_SRC, &e->src,
                             e->tr_src ? (const void *)sbuf : (const void *)x};
        args[n++] = (dn_arg){DNNL_ARG_WEIGHTS, &e->wei, e->wbuf};
    }
    args[n++] = (dn_arg){DNNL_ARG_DST, &e->dst, e->tr_dst ? (void *)dbuf : (void *)y};
    if (s->bias) args[n++] = (dn_arg){DNNL_ARG_BIAS, &e->bias, s->bias};
    dn_held *hs = r->two ? e->held2 : e->held, *h = hs ? &hs[i] : NULL;
    const dn_prim *prim = r->two ? &e->prim2 : &e->prim;
    TDM_TRY(h ? dn_exec_held(ctx, s->base.eng, prim, n, args, prim->scratch ? scratch : NULL, h)
              : dn_exec_in(ctx, s->base.eng, prim, n, args, prim->scratch ? scratch : NULL));
    if (e->tr_dst) /* [HW, M] -> [M, HW] per image */
        for (int64_t k = 0; k < e->mb; k++)
            dn_tr_u8((const uint8_t *)dbuf + k * s->M * e->osz, e->osz, s->M, s->M,
                     y + k * s->M * e->osz, e->osz);
    return NULL;
}

static tdm_status *qd_run_node(tdm_kernel_ctx *ctx) {
    qd_state *s = ctx->state;
    const tdm_tensor *x = ctx->in[0];
    tdm_tensor *y = ctx->out[0];
    if (!s || s->base.generic || (x->dtype != TDM_UINT8 && x->dtype != TDM_INT8) ||
        x->rank != s->w->rank || x->rank < 3 || ((s->xl || s->yl) && x->rank != 4) ||
        y->rank != x->rank || y->count == 0 || (ctx->in[2] && ctx->in[2]->dtype != x->dtype) ||
        (s->xl ? x->dims[3] : x->dims[1]) != s->w->dims[0] ||
        (x->dtype == TDM_INT8 && s->novnni && !s->flip)) /* (int8 X without a zero point) */
        return tdm_misc_qconv_transpose_run(ctx);
    bool flip = s->flip && x->dtype == TDM_INT8;
    int64_t key[DN_KEY];
    int nk = 0;
    key[nk++] = dn_threads(ctx);
    key[nk++] = x->dtype;
    for (int d = 0; d < x->rank; d++) key[nk++] = x->dims[d];
    for (int d = 0; d < y->rank; d++) key[nk++] = y->dims[d];
    dn_entry *he;
    int prev = dn_omp_begin();
    tdm_status *st = dn_cache_get(&s->base, ctx, key, nk, qd_build, &he);
    if (st) {
        dn_omp_end(prev);
        return st;
    }
    qd_entry *e = (qd_entry *)he;
    if (e->h.generic) {
        dn_entry_done(&s->base, he);
        dn_omp_end(prev);
        return tdm_misc_qconv_transpose_run(ctx);
    }
    int64_t items = e->N / e->mb;
    size_t fb = flip ? ((size_t)x->count + 63) / 64 * 64 : 0; /* X ^ 0x80 first */
    size_t need = fb + (size_t)items * e->item_bytes;
    bool own = false;
    char *buf = dn_scratch_get(&s->base, ctx, need, &own);
    tdm_tensor xv;
    if (need && !buf) {
        st = dn_oom(ctx);
    } else {
        if (flip) st = dn_q8_flip_x(ctx, x, (uint8_t *)buf, &xv);
        if (flip) x = &xv;
        qd_run r = {s, e, x, y, buf + fb,
                    !st && e->prim2.p && dn_q8_halves_use(s->lim, ctx, x, s->xzp)};
        if (!st) st = dn_parallel(ctx, items, qd_item, &r);
    }
    dn_scratch_put(&s->base, ctx, buf, own);
    dn_entry_done(&s->base, he);
    dn_omp_end(prev);
    return st;
}

tdm_status *dn_qdeconv_prepare(const tdm_node *node, int opset, int n_in,
                               const tdm_tensor *const *in, const tdm_allocator *a, void **state) {
    return qd_prepare(node, opset, n_in, in, a, state);
}
void dn_qdeconv_release(void *state, const tdm_allocator *a) { qd_release(state, a); }
tdm_status *dn_qdeconv_run(tdm_kernel_ctx *ctx) { return qd_run_node(ctx); }
