/* dnnl family: Conv, FusedConv and BlockedConv (float32, 1-D to 3-D, grouped/depthwise,
 * dilated, strided, any pads, bias; Z input and activation as post-ops).
 *
 * BlockedConv (ops/fused.h) writes Y (and reads Z, and X when blocked) in the channel-blocked
 * layout its primitives use, so those need no reorders; a plain X is reordered as below.
 * With one thread and no channel split, one primitive execution covers the whole batch.
 * In the channels-last form (block TDM_BLOCK_CHANNELS_LAST) a range of channels is strided,
 * which oneDNN takes only with its reference code: a chunk of output channels is written
 * dense and reordered into place (where the weights outweigh X and Y), or else each 2-D
 * image is cut into chunks of output rows (conv_build_rows), which are contiguous in NHWC.
 *
 * The activations are plain NCHW; oneDNN picks its layouts (blocked nChw8c/16c on AVX2 /
 * AVX-512) and the kernel reorders X in and Y out, which measures faster than oneDNN's
 * convolutions on plain NCHW. The work is split into items for the thread pool:
 *  1. X -> the primitives' layout, by (image, block of input channels);
 *  2. the convolution by (image, chunk of output channels), or for grouped convolutions by
 *     (image, chunk of groups). A chunk of output channels of a plain NCHW image is one
 *     contiguous range, and so is its weight slice, so each item runs a primitive made for
 *     the chunk's size (one for the full chunks, one for a smaller last chunk), with its own
 *     part of the (reordered once, if constant) weights, and reorders its result into Y. */
#include <stdio.h>
#include <string.h>
#include <stdlib.h>

#include "backends/cpu/k_dnnl.h"
#include "backends/cpu/k_fused.h"
#include "backends/cpu/k_nn.h"
#include "core/alloc.h"
#include "ops/fused.h"

typedef struct conv_state {
    dn_state base; /* first */
    bool fused;
    bool blocked; /* BlockedConv: Y (and Z) channel-blocked, X blocked or plain */
    bool cl;      /* BlockedConv in its channels-last form (block TDM_BLOCK_CHANNELS_LAST) */
    const char *act; /* FusedConv activation (points into the node's attributes) */
    const float *act_params;
    size_t n_act_params;
    tdm_fused_act act_own; /* the activation for own code (when the post-op takes oneDNN's
                              reference kernel) */
} conv_state;

/* The choices tried for a convolution, in order, until oneDNN offers a primitive that is not
 * its reference code: the layouts (oneDNN's own choice; channel-blocked; plain NCHW; NHWC),
 * first with the activation as a post-op, then with the activation applied by own code
 * after the primitive ("unfused"). None left: the generic kernel. Y keeps the node's layout
 * whatever the primitive's (a reorder into it when they differ). */
typedef enum conv_layout { CL_FREE, CL_BLOCKED, CL_PLAIN, CL_NHWC, CL_COUNT } conv_layout;
static const char *const conv_layout_names[] = {"oneDNN's layouts", "channel-blocked layouts",
                                                "plain layouts", "channels-last layouts"};
#define CONV_VARIANTS (2 * CL_COUNT) /* variant v: layout v % CL_COUNT, unfused when v >= CL_COUNT */

#define CONV_PARTS 6           /* parts of an entry (channel chunks use two; row chunks one per
                                  distinct geometry: 5 for a 5x5 kernel with pads 2) */
#define CONV_MAX_ROW_CHUNKS 64 /* row chunks of an image */

/* The primitives for one chunk size. */
typedef struct conv_part {
    int64_t units; /* output channels (or groups) per chunk; 0 = unused */
    dn_prim conv, r_wei, r_dst, r_z;
    dn_prim conv_sum; /* with zbin: the same convolution with a sum post-op, for runs where Y
                         has Z's memory (in place, kernel flags): Z is then read as Y */
    dnnl_memory_desc_t src, wei, usr_wei, dst, usr_dst, bias;
    size_t wbytes; /* bytes of one chunk's weights in `wei` */
    bool zbin;     /* Z is read by a binary-add post-op (else copied into Y for a sum) */
    bool act_after; /* the activation is applied by own code after the primitive */
} conv_part;

typedef struct conv_entry {
    dn_entry h; /* first */
    bool by_group;
    int nd;
    int64_t blk;  /* BlockedConv: Y's channel block (0: plain Y; TDM_BLOCK_CHANNELS_LAST:
                     X, Y and Z channels-last) */
    bool xblk;    /* X is channel-blocked (as the primitives read it) */
    bool xunblk;  /* X is stored channel-blocked but reordered to plain NCHW first: no
                     primitive but a reference one takes it blocked (e.g. fewer input
                     channels than the block) */
    dnnl_memory_desc_t unblk_from, unblk_to; /* that copy (dn_unblock_copy), the whole batch */
    int64_t Mp;   /* output channels as stored (M rounded up to a blk > 0) */
    int64_t mb;   /* images per primitive execution: N when one thread does whole images
                     (one primitive over the batch), else 1 */
    int64_t N, C, M, Cg, Mg, group, ksz, isz, osz;
    int64_t chunk, n_chunks; /* units per chunk, chunks per image */
    /* [0] full chunks, [1] the smaller last chunk (units 0: none); with row chunks, one part
     * per distinct geometry of a chunk (row_part) */
    conv_part part[CONV_PARTS];
    /* channels-last with fewer images than threads (2-D): each image cut into n_rows chunks
     * of `rows` output rows (a channel range is strided there, rows are contiguous); chunk j
     * runs part[row_part[j]], whose pads and input rows are the chunk's (conv_rows_of).
     * n_rows 1: no row chunks */
    int64_t rows, n_rows;
    int64_t rows_want; /* rows a chunk when cutting into rows pays (0: never) */
    int64_t row_in, row_out; /* elements of one input / output row (W C, OW M) */
    unsigned char row_part[CONV_MAX_ROW_CHUNKS];
    int64_t row_i0[CONV_MAX_ROW_CHUNKS]; /* the first input row chunk j reads */
    int variant;             /* the choice the parts were built with (CONV_VARIANTS) */
    dnnl_memory_desc_t src_img; /* one image of X in the primitives' layout */
    int64_t src_img_elems;
    bool src_reorder;
    bool src_cvt; /* bf16 with X channel-blocked: the input "reorder" only converts each image
                     (same layout, r_src[0] over its src_img_elems elements as 1-D; with amx
                     from the blocked image to the primitive's channels-last one) */
    int64_t src_from_elems; /* src_cvt: elements of one image of X as stored */
    int64_t src_chunk, src_n_chunks; /* input channels per reorder item */
    bool bf16;      /* precision bf16 (dn_bf16): the primitives read X and W in bf16 (X
                       converted by the input reorder, W once when constant); Y stays f32 */
    bool amx;       /* bf16 on a CPU with AMX, a convolution with enough products per output
                       (CONV_AMX_MIN_K): oneDNN's layouts for X and Y (channels-last: its
                       AMX kernels take no channel blocks), a blocked X reordered into it
                       (and converted) by one reorder, Y reordered into its blocks after */
    size_t src_esz; /* bytes of one element of X as the primitives read it (4, or 2 in bf16) */
    dn_prim r_src[2];
    dnnl_memory_desc_t r_src_from[2], r_src_to[2];
    void *wbuf; /* constant weights, chunk after chunk, each in its primitive's layout */
    bool wbuf_shared; /* wbuf belongs to another entry of the cache (same chunks, layouts) */
    /* oneDNN memory objects and streams kept from run to run (dn_exec_held), per work item
     * so that threads never share one: HELD_PER_ITEM for each convolution item (conv,
     * conv_sum, r_dst, r_z), then one per input reorder item (their creation per call was
     * ~10% of a small model's time) */
    dn_held *held;
    size_t n_held;
    int64_t held_items; /* convolution items covered (items past them make their own) */
} conv_entry;

enum { HELD_CONV, HELD_CONV_SUM, HELD_R_DST, HELD_R_Z, HELD_PER_ITEM };

static void conv_clear(dn_state *s, dn_entry *he) {
    conv_entry *e = (conv_entry *)he;
    for (int i = 0; i < CONV_PARTS; i++) {
        dn_prim_clear(&e->part[i].conv);
        dn_prim_clear(&e->part[i].conv_sum);
        dn_prim_clear(&e->part[i].r_wei);
        dn_prim_clear(&e->part[i].r_dst);
        dn_prim_clear(&e->part[i].r_z);
    }
    for (int i = 0; i < 2; i++) dn_prim_clear(&e->r_src[i]);
    if (!e->wbuf_shared) tdm_free(s->alloc, e->wbuf);
    e->wbuf = NULL;
    dn_held_array_free(s->alloc, e->held, e->n_held);
    e->held = NULL;
    e->n_held = 0;
    e->held_items = 0;
}

/* Another cached entry whose constant weights are laid out exactly as e's would be. */
static void *conv_find_weights(dn_state *s, const conv_entry *e) {
    for (int i = 0; i < s->n_entries; i++) {
        const conv_entry *o = (const conv_entry *)s->entries[i];
        if (!o->wbuf || o->chunk != e->chunk || o->n_chunks != e->n_chunks ||
            o->by_group != e->by_group || o->part[1].units != e->part[1].units ||
            !dnnl_memory_desc_equal(&o->part[0].wei, &e->part[0].wei) ||
            (e->n_rows == 1 && e->part[1].units &&
             !dnnl_memory_desc_equal(&o->part[1].wei, &e->part[1].wei)))
            continue; /* (row parts all share part[0]'s weights: conv_build_rows) */
        return o->wbuf;
    }
    return NULL;
}

/* The activation post-op(s), then scale * y + shift for an activation_affine (eltwise
 * linear). */
static bool conv_append_act(const conv_state *s, dnnl_post_ops_t po) {
    if (!dn_append_activation(po, s->act, s->act_params, s->n_act_params)) return false;
    return !s->act_own.affine ||
           dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_linear, s->act_own.scale,
                                        s->act_own.shift) == dnnl_success;
}

tdm_status *dn_conv_prepare(const tdm_node *node, int opset, int n_in,
                            const tdm_tensor *const *in, const tdm_allocator *a, void **state) {
    (void)opset;
    conv_state *s;
    TDM_TRY(dn_state_new(a, sizeof *s, sizeof(conv_entry), conv_clear, (dn_state **)&s));
    *state = s;
    s->blocked = strcmp(node->op_type, "BlockedConv") == 0;
    s->cl = s->blocked && tdm_attr_int(node, "block", 0) == TDM_BLOCK_CHANNELS_LAST;
    s->fused = s->blocked || strcmp(node->op_type, "FusedConv") == 0;
    if (n_in < 2 || tdm_attr_int(node, "group", 1) < 1) s->base.generic = true;
    if (n_in >= 2 && in[1] && in[1]->dtype == TDM_FLOAT) s->base.wconst = in[1];
    if (s->fused) {
        s->act = tdm_attr_string(node, "activation", "");
        s->act_params = tdm_attr_floats(node, "activation_params", &s->n_act_params);
        tdm_status *ast = tdm_fused_parse_act(node, &s->act_own);
        if (ast) { /* unknown here: the generic kernel reports it */
            tdm_status_free(ast);
            s->base.generic = true;
        }
        dnnl_post_ops_t po;
        if (dnnl_post_ops_create(&po) != dnnl_success) {
            s->base.generic = true;
        } else {
            if (!conv_append_act(s, po)) s->base.generic = true;
            dnnl_post_ops_destroy(po);
        }
    }
    return NULL;
}

typedef struct conv_geom {
    dnnl_dims_t strides, dil, pl, pr;
    int64_t xsp[3], ysp[3], k[3];
    bool bias, z;
    bool plain; /* activations in plain NCHW (pointwise convolutions) */
} conv_geom;

static dnnl_format_tag_t tag_plain(int nd) {
    return nd == 3 ? dnnl_abc : nd == 4 ? dnnl_abcd : dnnl_abcde;
}

static dnnl_format_tag_t tag_nhwc(int nd) {
    return nd == 3 ? dnnl_acb : nd == 4 ? dnnl_acdb : dnnl_acdeb;
}

/* The convolution's primitive descriptor with its post-ops: Z added (a sum into Y, or with
 * `zmd` a binary add reading Z), then the activation (unless `act` is false). *pd NULL when
 * oneDNN declines. */
static tdm_status *conv_pd(conv_state *s, const conv_geom *g, const dnnl_convolution_desc_t *cd,
                           const dnnl_memory_desc_t *zmd, bool act, dnnl_primitive_desc_t *pd) {
    *pd = NULL;
    dnnl_primitive_attr_t attr;
    TDM_TRY(dn_attr_new(&attr));
    dnnl_post_ops_t po = NULL;
    bool good = dnnl_post_ops_create(&po) == dnnl_success;
    if (good && g->z)
        good = (zmd ? dnnl_post_ops_append_binary(po, dnnl_binary_add, zmd)
                    : dnnl_post_ops_append_sum(po, 1.0f)) == dnnl_success;
    if (good && s->fused && act)
        good = conv_append_act(s, po);
    if (good) good = dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success;
    if (po) dnnl_post_ops_destroy(po);
    if (good && dnnl_primitive_desc_create(pd, cd, attr, s->base.eng, NULL) != dnnl_success)
        *pd = NULL;
    dnnl_primitive_attr_destroy(attr);
    return NULL;
}

/* Both descriptors picked the same implementation (oneDNN falls back to slower ones for
 * post-ops its fast kernels do not take). */
static bool same_impl(const_dnnl_primitive_desc_t a, const_dnnl_primitive_desc_t b) {
    const char *ia = NULL, *ib = NULL;
    if (dnnl_primitive_desc_query(a, dnnl_query_impl_info_str, 0, (void *)&ia) != dnnl_success ||
        dnnl_primitive_desc_query(b, dnnl_query_impl_info_str, 0, (void *)&ib) != dnnl_success)
        return false;
    return ia && ib && strcmp(ia, ib) == 0;
}

/* Builds the primitives of one chunk size with choice e->variant. src_fixed: the input
 * layout to use (NULL: as the choice says). *ok false (no error) when oneDNN declines or
 * offers only its reference code (its name then in s->base.refused). */
static tdm_status *conv_part_build(conv_state *s, conv_entry *e, const conv_geom *g,
                                   conv_part *p, int64_t units, const dnnl_memory_desc_t *src_fixed,
                                   bool *ok) {
    *ok = false;
    conv_layout lay = (conv_layout)(e->variant % CL_COUNT);
    bool with_act = e->variant < CL_COUNT;
    p->act_after = !with_act && s->fused && s->act && s->act[0];
    int nd = e->nd, nsp = nd - 2;
    int64_t sd[5], wd[6], dd[5], bd;
    sd[0] = dd[0] = e->mb;
    sd[1] = e->by_group ? units * e->Cg : e->C;
    dd[1] = bd = e->by_group ? units * e->Mg : units;
    int wnd = e->by_group ? nd + 1 : nd;
    if (e->by_group) {
        wd[0] = units, wd[1] = e->Mg, wd[2] = e->Cg;
        for (int i = 0; i < nsp; i++) wd[3 + i] = g->k[i];
    } else {
        wd[0] = units, wd[1] = e->C;
        for (int i = 0; i < nsp; i++) wd[2 + i] = g->k[i];
    }
    for (int i = 0; i < nsp; i++) {
        sd[2 + i] = g->xsp[i];
        dd[2 + i] = g->ysp[i];
    }
    p->units = units;
    dn_md_plain(&p->usr_wei, wnd, wd);
    dn_md_plain(&p->usr_dst, nd, dd);
    dn_md_plain(&p->bias, 1, &bd);
    dnnl_memory_desc_t src_any, dst_any, wei_any;
    dnnl_format_tag_t ytag = e->blk ? dn_tag_blocked(nd, e->blk) : 0; /* Y as stored */
    dnnl_format_tag_t act = g->plain ? tag_plain(nd) : dnnl_format_tag_any, dtag = act;
    if (lay == CL_BLOCKED) dtag = ytag ? ytag : dn_tag_blocked(nd, dn_block());
    else if (lay == CL_PLAIN) dtag = tag_plain(nd);
    else if (lay == CL_NHWC) dtag = tag_nhwc(nd);
    else if (ytag) dtag = ytag;
    if (e->amx) dtag = dnnl_format_tag_any; /* (channels-last; Y reordered into its blocks) */
    if (!dtag) return NULL;
    /* the source: X's own layout when blocked, else free in the first choice (oneDNN may
     * pick another layout than Y's: X is reordered into it), else the choice's */
    dnnl_format_tag_t stag = e->amx    ? dnnl_format_tag_any
                             : e->xblk ? ytag
                             : lay == CL_FREE ? act : dtag;
    if (src_fixed) src_any = *src_fixed;
    else if (!dn_md_tag(&src_any, nd, sd, stag)) return NULL;
    if (!dn_md_tag(&dst_any, nd, dd, dtag) || !dn_md_tag(&wei_any, wnd, wd, dnnl_format_tag_any))
        return NULL;
    if (e->bf16) src_any.data_type = wei_any.data_type = dnnl_bf16;
    /* Y and Z stored blocked: no reorders when the primitive writes that layout */
    if (ytag && !dn_md_tag(&p->usr_dst, nd, dd, ytag)) return NULL;
    bool y_strided = e->blk < 0 && units < e->M && !e->by_group; /* a chunk of NHWC channels */
    if (y_strided) { /* the primitive writes it dense, a reorder puts it in place (and Z) */
        int64_t ys[5];
        ys[nd - 1] = e->M;
        for (int i = nd - 2; i >= 2; i--) ys[i] = ys[i + 1] * dd[i + 1];
        ys[1] = 1;
        ys[0] = ys[2] * dd[2];
        dn_md_strided(&p->usr_dst, nd, dd, ys);
    }
    dnnl_convolution_desc_t cd;
    if (dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_inference,
                                                   dnnl_convolution_direct, &src_any, &wei_any,
                                                   g->bias ? &p->bias : NULL, &dst_any,
                                                   g->strides, g->dil, g->pl,
                                                   g->pr) != dnnl_success)
        return NULL;
    dnnl_primitive_desc_t pd = NULL, pb = NULL, psum = NULL;
    TDM_TRY(conv_pd(s, g, &cd, NULL, with_act, &pd));
    if (!pd) return NULL;
    if (dn_refuse_ref(&s->base, pd)) return NULL;
    if (g->z && ytag && dtag == ytag && !y_strided) {
        /* Z is in Y's layout: a binary add reads it where it is, instead of a copy into Y
         * for the sum post-op, when the same implementation takes it */
        tdm_status *st = conv_pd(s, g, &cd, &dst_any, with_act, &pb);
        if (st) {
            dnnl_primitive_desc_destroy(pd);
            return st;
        }
        if (pb && same_impl(pd, pb)) {
            psum = pd; /* kept for in-place runs */
            pd = pb;
            p->zbin = true;
        } else if (pb) {
            dnnl_primitive_desc_destroy(pb);
        }
    }
    dn_query_md(pd, dnnl_query_src_md, &p->src);
    dn_query_md(pd, dnnl_query_weights_md, &p->wei);
    dn_query_md(pd, dnnl_query_dst_md, &p->dst);
    p->wbytes = dn_md_bytes(&p->wei);
    tdm_status *cst = dn_prim_from_pd(pd, &p->conv);
    if (cst) {
        if (psum) dnnl_primitive_desc_destroy(psum);
        return cst;
    }
    if (psum) TDM_TRY(dn_prim_from_pd(psum, &p->conv_sum));
    TDM_TRY(dn_reorder_new(s->base.eng, &p->usr_wei, &p->wei, &p->r_wei));
    TDM_TRY(dn_reorder_new(s->base.eng, &p->dst, &p->usr_dst, &p->r_dst));
    if (g->z && !p->zbin) TDM_TRY(dn_reorder_new(s->base.eng, &p->usr_dst, &p->dst, &p->r_z));
    *ok = true;
    return NULL;
}

static int64_t gcd64(int64_t a, int64_t b) {
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* The chunks' input layout must cut into whole channel blocks at every chunk start. */
static bool src_cuts(const conv_entry *e, int64_t L) {
    if (!e->by_group || e->n_chunks == 1) return true;
    return L == 1 || (L > 1 && (e->chunk * e->Cg) % L == 0);
}

/* Plain dims of X and Y (a blocked tensor's C from W and the group, its M from W); *blk:
 * Y's channel block (0: plain; channels-last: TDM_BLOCK_CHANNELS_LAST, each tensor's one
 * block all its channels), *xblk: X is blocked. False when the shapes do not fit. */
static bool conv_dims(const conv_state *s, tdm_kernel_ctx *ctx, int64_t *xd, int64_t *yd,
                      int64_t *blk, bool *xblk) {
    const tdm_tensor *x = ctx->in[0], *w = ctx->in[1], *y = ctx->out[0];
    int nd = w->rank;
    *blk = 0;
    *xblk = false;
    if (nd < 3 || nd > 5) return false;
    for (int i = 0; i < nd && i < x->rank; i++) xd[i] = x->dims[i];
    for (int i = 0; i < nd && i < y->rank; i++) yd[i] = y->dims[i];
    if (!s->blocked) return x->rank == nd && y->rank == nd;
    int64_t group = tdm_attr_int(ctx->node, "group", 1), B = y->rank == nd + 1 ? y->dims[nd] : 0;
    int64_t C = w->dims[1] * group;
    if (B < 1 || group < 1 || y->dims[1] != (w->dims[0] + B - 1) / B || (s->cl && B != w->dims[0]))
        return false;
    yd[1] = w->dims[0];
    *blk = s->cl ? TDM_BLOCK_CHANNELS_LAST : B;
    if (x->rank == nd + 1) {
        int64_t xb = s->cl ? C : B; /* (channels-last: X's one block of C) */
        if (x->dims[nd] != xb || x->dims[1] != (C + xb - 1) / xb) return false;
        xd[1] = C;
        *xblk = true;
    } else if (x->rank != nd) {
        return false;
    }
    return true;
}

/* Row chunk j of a 2-D convolution: output rows [j rows, j rows + oh), input rows
 * [i0, i0 + ih), and the pads that make it the same sum as the whole convolution (never
 * larger than the whole one's). */
typedef struct conv_rows {
    int64_t i0, ih, pt, pb, oh;
} conv_rows;

static void conv_rows_of(const conv_entry *e, const conv_geom *g, int64_t j, conv_rows *r) {
    int64_t st = g->strides[0], ext = (g->k[0] - 1) * (g->dil[0] + 1) + 1;
    int64_t r0 = j * e->rows, r1 = r0 + e->rows < g->ysp[0] ? r0 + e->rows : g->ysp[0];
    int64_t first = r0 * st - g->pl[0], end = (r1 - 1) * st - g->pl[0] + ext;
    r->i0 = first > 0 ? first : 0;
    int64_t i1 = end < g->xsp[0] ? end : g->xsp[0];
    r->ih = i1 - r->i0;
    r->pt = r->i0 - first;
    r->pb = end - i1;
    r->oh = r1 - r0;
}

/* Chunks a and b take the same primitive (they differ at most in their first input row). */
static bool same_rows_geometry(const conv_rows *a, const conv_rows *b) {
    return a->ih == b->ih && a->pt == b->pt && a->pb == b->pb && a->oh == b->oh;
}

/* The parts of row chunks (e->rows, e->n_rows set): one per distinct geometry, each reading
 * and writing channels-last and all with part[0]'s weights layout (one copy serves them).
 * *ok false when they do not fit that. */
static tdm_status *conv_build_rows(conv_state *s, conv_entry *e, const conv_geom *g,
                                   int64_t units, bool *ok) {
    conv_rows kinds[CONV_PARTS];
    int np = 0;
    *ok = false;
    for (int64_t j = 0; j < e->n_rows; j++) {
        conv_rows r;
        conv_rows_of(e, g, j, &r);
        if (r.ih < 1) return NULL;
        int k = 0;
        while (k < np && !same_rows_geometry(&kinds[k], &r)) k++;
        if (k == np) {
            if (np == CONV_PARTS) return NULL;
            conv_geom gk = *g;
            gk.xsp[0] = r.ih;
            gk.ysp[0] = r.oh;
            gk.pl[0] = r.pt;
            gk.pr[0] = r.pb;
            kinds[np++] = r;
            TDM_TRY(conv_part_build(s, e, &gk, &e->part[k], units, NULL, ok));
            if (!*ok) return NULL;
            if (dn_channel_layout(&e->part[k].src) != TDM_BLOCK_CHANNELS_LAST ||
                !dnnl_memory_desc_equal(&e->part[k].wei, &e->part[0].wei)) {
                *ok = false;
                return NULL;
            }
        }
        e->row_part[j] = (unsigned char)k;
        e->row_i0[j] = r.i0;
    }
    e->row_in = g->xsp[1] * e->C;
    e->row_out = g->ysp[1] * e->M;
    return NULL;
}

/* Builds e's parts with choice e->variant: chunks of chunk0 units, or of e->rows_want output
 * rows (or, when that fails, no split). *ok false when oneDNN declines. */
static tdm_status *conv_build_parts(conv_state *s, conv_entry *e, const conv_geom *gp,
                                    int64_t chunk0, int64_t units, int T, bool *ok) {
    dn_state *bs = &s->base;
    dn_entry *he = &e->h;
    const conv_geom g = *gp;
    int nd = e->nd, nsp = nd - 2;
    int64_t C = e->C;
    *ok = false;
    e->chunk = chunk0;
    for (int attempt = 0; attempt < 2 && !*ok; attempt++) {
        bool by_rows = attempt == 0 && e->rows_want > 0;
        if (attempt == 1) {
            if (e->chunk == units && !e->rows_want) break;
            conv_clear(bs, he); /* no split */
            memset(e->part, 0, sizeof e->part);
            memset(e->r_src, 0, sizeof e->r_src);
            e->chunk = units;
        }
        e->n_chunks = (units + e->chunk - 1) / e->chunk;
        e->rows = by_rows ? e->rows_want : g.ysp[0];
        e->n_rows = by_rows ? (g.ysp[0] + e->rows - 1) / e->rows : 1;
        /* one primitive over the whole batch at 1 thread, except in channels-last: oneDNN's
         * brgemm convolutions gain nothing from the batch and lose cache locality (ResNet-50
         * batch 8, 1 thread, CPU ms a run: 407 -> 397 image by image; nChw16c's jit kernels
         * do gain from it: 16c layers 3-10% faster per image at batch 8 than at 1) */
        e->mb = e->n_chunks == 1 && e->n_rows == 1 && T == 1 && !(e->blk < 0 && !e->bf16) ? e->N : 1;
        if (by_rows) TDM_TRY(conv_build_rows(s, e, &g, e->chunk, ok));
        else TDM_TRY(conv_part_build(s, e, &g, &e->part[0], e->chunk, NULL, ok));
        if (!*ok) continue;
        int64_t L = dn_channel_layout(&e->part[0].src);
        if (!src_cuts(e, L) || (e->xblk && L != e->blk && !(e->amx && e->bf16))) {
            *ok = false;
            continue;
        }
        /* one image of X as the primitives take it */
        int64_t idims[5] = {e->mb, C};
        for (int i = 0; i < nsp; i++) idims[2 + i] = g.xsp[i];
        if (by_rows) *ok = dn_md_tag(&e->src_img, nd, idims, dn_tag_blocked(nd, L));
        else if (!e->by_group || e->n_chunks == 1) e->src_img = e->part[0].src;
        else if (L == 1) dn_md_plain(&e->src_img, nd, idims);
        else if (!dn_md_tag(&e->src_img, nd, idims, dn_tag_blocked(nd, L))) *ok = false;
        e->src_img.data_type = e->part[0].src.data_type;
        int64_t tail = units - (e->n_chunks - 1) * e->chunk;
        if (*ok && tail != e->chunk) {
            dnnl_memory_desc_t tsrc = e->part[0].src;
            int64_t td[5] = {1, tail * e->Cg};
            for (int i = 0; i < nsp; i++) td[2 + i] = g.xsp[i];
            if (e->by_group && L == 1) dn_md_plain(&tsrc, nd, td);
            else if (e->by_group && !dn_md_tag(&tsrc, nd, td, dn_tag_blocked(nd, L))) *ok = false;
            tsrc.data_type = e->part[0].src.data_type;
            if (*ok) TDM_TRY(conv_part_build(s, e, &g, &e->part[1], tail, &tsrc, ok));
        }
        if (*ok) {
            /* the input reorder, by blocks of channels */
            dnnl_memory_desc_t plain_img;
            dn_md_plain(&plain_img, nd, idims);
            e->src_reorder = !e->xblk && !dnnl_memory_desc_equal(&plain_img, &e->src_img);
            e->src_esz = e->bf16 ? sizeof(uint16_t) : sizeof(float);
            e->src_img_elems = (int64_t)(dn_md_bytes(&e->src_img) / e->src_esz);
            e->src_chunk = L > 1 && e->mb == 1 ? dn_chunk(C, L, e->N, T) : C;
            e->src_n_chunks = (C + e->src_chunk - 1) / e->src_chunk;
            if (e->bf16 && e->xblk) {
                int64_t ne = e->src_img_elems;
                e->src_reorder = e->src_cvt = true;
                e->src_chunk = C;
                e->src_n_chunks = 1;
                dn_md_plain(&e->r_src_from[0], 1, &ne);
                e->r_src_to[0] = e->r_src_from[0];
                e->r_src_to[0].data_type = dnnl_bf16;
                e->src_from_elems = ne;
                if (L != e->blk) { /* (amx) blocked f32 -> channels-last bf16 in one */
                    if (!dn_md_tag(&e->r_src_from[0], nd, idims, dn_tag_blocked(nd, e->blk))) {
                        *ok = false;
                        continue;
                    }
                    e->src_from_elems = (int64_t)(dn_md_bytes(&e->r_src_from[0]) / sizeof(float));
                    e->r_src_to[0] = e->src_img;
                }
                TDM_TRY(dn_reorder_new(bs->eng, &e->r_src_from[0], &e->r_src_to[0], &e->r_src[0]));
            } else if (e->src_reorder) {
                int64_t stail = C - (e->src_n_chunks - 1) * e->src_chunk;
                for (int i = 0; i < 2 && *ok; i++) {
                    int64_t cd[5] = {e->mb, i == 0 ? e->src_chunk : stail};
                    for (int k = 0; k < nsp; k++) cd[2 + k] = g.xsp[k];
                    if (i == 1 && stail == e->src_chunk) break;
                    dn_md_plain(&e->r_src_from[i], nd, cd);
                    if (L > 1) *ok = dn_md_tag(&e->r_src_to[i], nd, cd, dn_tag_blocked(nd, L));
                    else e->r_src_to[i] = e->src_img; /* one reorder of the whole image */
                    e->r_src_to[i].data_type = e->src_img.data_type; /* (bf16: converts) */
                    if (*ok)
                        TDM_TRY(dn_reorder_new(bs->eng, &e->r_src_from[i], &e->r_src_to[i],
                                               &e->r_src[i]));
                }
            }
        }
    }
    return NULL;
}

/* A 2-D convolution over a column (W = 1 everywhere: X, the kernel, Y; stride 1, no pads), as
 * magika's 5x1 Conv over 512 rows: described to oneDNN as the same convolution over a row
 * (H and W swapped), which is the same memory in every layout the kernel uses (plain, NHWC,
 * channel-blocked: a dimension of size 1 moves). oneDNN's kernels block the output along W:
 * over a column they take one output point a call (brgconv at 5 GFLOP/s on Zen 5, 2x slower
 * than ONNX Runtime's whole model); over a row, whole blocks of points. */
static void conv_column_as_row(conv_geom *g, int nsp) {
    if (nsp != 2 || g->xsp[1] != 1 || g->ysp[1] != 1 || g->k[1] != 1 || g->xsp[0] == 1 ||
        g->strides[1] != 1 || g->dil[1] != 0 || g->pl[1] != 0 || g->pr[1] != 0)
        return;
#define CONV_SWAP(a) do { int64_t t_ = (int64_t)(a)[0]; (a)[0] = (a)[1]; (a)[1] = t_; } while (0)
    CONV_SWAP(g->strides);
    CONV_SWAP(g->dil);
    CONV_SWAP(g->pl);
    CONV_SWAP(g->pr);
    CONV_SWAP(g->xsp);
    CONV_SWAP(g->ysp);
    CONV_SWAP(g->k);
#undef CONV_SWAP
}

/* An entry's primitives and parts dropped before another layout choice is built. */
static void conv_reset(dn_state *bs, conv_entry *e) {
    conv_clear(bs, &e->h);
    memset(e->part, 0, sizeof e->part);
    memset(e->r_src, 0, sizeof e->r_src);
}

/* The layout choices of conv_build_parts in turn (first the fused activation, then without);
 * reset_first: the entry holds an earlier attempt's primitives. */
static tdm_status *conv_try_variants(conv_state *s, conv_entry *e, const conv_geom *g, int64_t chunk0,
                                     int64_t units, int T, bool reset_first, bool *ok) {
    const bool has_act = s->fused && s->act && s->act[0];
    for (e->variant = 0; e->variant < CONV_VARIANTS; e->variant++) {
        if (e->variant >= CL_COUNT && !has_act) break; /* nothing to unfuse */
        if (e->variant || reset_first) conv_reset(&s->base, e);
        TDM_TRY(conv_build_parts(s, e, g, chunk0, units, T, ok));
        if (*ok) break;
    }
    return NULL;
}

/* The layout choices first on X as stored, then on a blocked X reordered to plain NCHW. */
static tdm_status *conv_build_any(conv_state *s, conv_entry *e, const conv_geom *g,
                                  const int64_t *xdims, int64_t chunk0, int64_t units, int T,
                                  bool *ok) {
    int nd = e->nd;
    *ok = false;
    TDM_TRY(conv_try_variants(s, e, g, chunk0, units, T, false, ok));
    if (*ok || !e->xblk) return NULL;
    int64_t bd[5];
    for (int i = 0; i < nd; i++) bd[i] = xdims[i];
    dn_md_plain(&e->unblk_to, nd, bd);
    if (!dn_md_tag(&e->unblk_from, nd, bd, dn_tag_blocked(nd, e->blk))) return NULL;
    e->xblk = false;
    e->xunblk = true;
    return conv_try_variants(s, e, g, chunk0, units, T, true, ok);
}

/* bf16 on a CPU with AMX: oneDNN's AMX convolutions take channels-last activations only
 * (no channel blocks), so a convolution goes there with X reordered (and converted) into
 * channels-last by one reorder and Y reordered back into its blocks, which pays where each
 * output sums enough products: input channels a group x kernel points >= CONV_AMX_MIN_K.
 * The others stay float32 on the blocked kernels: oneDNN's avx512_core_bf16 convolutions
 * measured slower than its float32 ones on that CPU (MobileNetV2 1x1 layers 4.95 ms against
 * 2.93, depthwise 1.17 against 0.69, plus 1.19 converting their inputs). CPU ms per run, 1
 * thread, on the AMX machine (session 15), threshold 64 / 256: ResNet-50 23.6 / 19.5 (fp32
 * 49.0; all bf16 on the blocked kernels 74.6); MobileNetV2 3.47 / 3.31 (fp32 4.2, before
 * 8.2), batch 8 37.2 / 34.9 (fp32 37.6). */
#define CONV_AMX_MIN_K 256

static tdm_status *conv_build(dn_state *bs, tdm_kernel_ctx *ctx, dn_entry *he) {
    conv_state *s = (conv_state *)bs;
    conv_entry *e = (conv_entry *)he;
    const tdm_tensor *w = ctx->in[1];
    const tdm_tensor *b = ctx->n_in > 2 ? ctx->in[2] : NULL;
    const tdm_tensor *z = s->fused && ctx->n_in > 3 ? ctx->in[3] : NULL;
    int64_t xdims[5], ydims[5];
    if (!conv_dims(s, ctx, xdims, ydims, &e->blk, &e->xblk)) return NULL;
    e->bf16 = dn_bf16(ctx);
    e->src_cvt = false;
    int nd = w->rank, nsp = nd - 2;
    tdm_nn_geom gm;
    tdm_status *gst = tdm_nn_geom_init(ctx->node, ctx->opset, TDM_NN_CONV, nd, xdims, w->dims, &gm);
    if (gst) { /* the generic kernel reports it */
        tdm_status_free(gst);
        return NULL;
    }
    int64_t group = tdm_attr_int(ctx->node, "group", 1);
    int64_t C = xdims[1], M = w->dims[0];
    if (group < 1 || C % group || M % group || w->dims[1] * group != C || ydims[1] != M)
        return NULL;
    if (b && (b->rank != 1 || b->dims[0] != M)) return NULL;
    conv_geom g = {.bias = b != NULL, .z = z != NULL};
    e->nd = nd;
    e->N = xdims[0], e->C = C, e->M = M, e->group = group;
    e->Cg = C / group, e->Mg = M / group;
    e->Mp = e->blk > 0 ? (M + e->blk - 1) / e->blk * e->blk : M;
    e->ksz = e->isz = e->osz = 1;
    for (int i = 0; i < nsp; i++) {
        if (gm.out[i] != ydims[2 + i] || gm.kernel[i] != w->dims[2 + i]) return NULL;
        g.strides[i] = gm.stride[i];
        g.dil[i] = gm.dil[i] - 1;
        g.pl[i] = gm.pad_b[i];
        g.pr[i] = gm.pad_e[i];
        g.xsp[i] = xdims[2 + i];
        g.ysp[i] = ydims[2 + i];
        g.k[i] = gm.kernel[i];
        e->ksz *= gm.kernel[i];
        e->isz *= xdims[2 + i];
        e->osz *= ydims[2 + i];
    }
    conv_column_as_row(&g, nsp);
    /* A pointwise convolution on plain NCHW is one GEMM per image, about as fast as the
     * blocked 1x1 kernel without the two reorders (measured on MobileNetV2 / ResNet-50 1x1
     * layers from 14x14 up); smaller images do better blocked, and so do post-ops (the
     * GEMM-based convolution applies them in a slow separate pass: 4x slower with Clip).
     * Not in bf16: X is converted anyway, and oneDNN's bf16 GEMM convolution is slower than
     * its brgemm 1x1 kernel. */
    g.plain = !e->blk && !e->bf16 && group == 1 && e->osz >= 196 && !z && !(s->fused && s->act && s->act[0]);
    for (int i = 0; i < nsp; i++)
        if (g.k[i] != 1 || g.strides[i] != 1 || g.pl[i] || g.pr[i]) g.plain = false;
    /* chunks */
    int T = dn_threads(ctx);
    int64_t blk = e->blk > 0 ? e->blk : dn_block();
    e->by_group = group > 1;
    int64_t units = e->by_group ? group : M, align = blk;
    if (e->by_group) {
        int64_t a1 = blk / gcd64(blk, e->Cg), a2 = blk / gcd64(blk, e->Mg);
        align = a1 / gcd64(a1, a2) * a2;
    }
    double flops = 2.0 * (double)e->N * (double)M * (double)e->Cg * (double)e->ksz * (double)e->osz;
    /* channels-last: chunks of channels (a dense convolution's; its Y chunk written dense and
     * reordered into place, since oneDNN takes strided NHWC only with its reference code) where
     * the weights outweigh X and Y (small images: each chunk of rows would read all of them
     * again; ResNet-50's stage 3-4 1x1 at 2 threads 0.38 -> 0.63 ms as rows), else chunks of
     * output rows (2-D) */
    bool cl_rows = e->blk < 0 && (e->by_group || M * e->Cg * e->ksz <= C * e->isz + M * e->osz);
    const int64_t chunk0 = flops < 2.0e6 || cl_rows ? units : dn_chunk(units, align, e->N, T);
    e->rows_want = 0;
    if (cl_rows && nsp == 2 && flops >= 2.0e6) {
        int64_t r = dn_chunk(g.ysp[0], 1, e->N, T);
        if (r < g.ysp[0] && (g.ysp[0] + r - 1) / r <= CONV_MAX_ROW_CHUNKS) e->rows_want = r;
    }
    bool ok = false, xblk = e->xblk;
    if (e->bf16 && dn_amx()) { /* AMX where it pays, else float32 (see CONV_AMX_MIN_K) */
        e->amx = e->Cg * e->ksz >= CONV_AMX_MIN_K;
        e->bf16 = e->amx;
    }
    TDM_TRY(conv_build_any(s, e, &g, xdims, chunk0, units, T, &ok));
    if (!ok && e->amx) { /* oneDNN declined: the blocked choices */
        conv_reset(bs, e);
        e->amx = e->xunblk = false;
        e->xblk = xblk;
        TDM_TRY(conv_build_any(s, e, &g, xdims, chunk0, units, T, &ok));
    }
    if (!ok) { /* (dn_cache_get logs a refused reference implementation) */
        conv_clear(bs, he);
        return NULL;
    }
    dn_note_impl(bs, "%s%s%s", dn_prim_impl(&e->part[0].conv),
                 e->part[0].act_after ? " + own activation" : "",
                 e->xunblk ? " (input reordered to plain)" : "");
    if (bs->refused[0]) {
        char sl[32], dl[32];
        dn_log(ctx, TDM_LOG_INFO, "oneDNN offered its reference convolution (%s) for the "
               "first choice; using %s%s (src %s, dst %s): %s", bs->refused,
               conv_layout_names[e->variant % CL_COUNT],
               e->part[0].act_after ? " with the activation applied after it" : "",
               dn_md_layout(&e->part[0].src, sl, sizeof sl),
               dn_md_layout(&e->part[0].dst, dl, sizeof dl), bs->impl);
    }
    if (w == bs->wconst && (e->wbuf = conv_find_weights(bs, e))) {
        e->wbuf_shared = true; /* another input shape already has them (dynamic batch) */
    } else if (w == bs->wconst) { /* weights reordered once, chunk after chunk */
        conv_part *last = e->n_rows == 1 && e->part[1].units ? &e->part[1] : &e->part[0];
        size_t bytes = e->part[0].wbytes * (size_t)(e->n_chunks - 1) + last->wbytes;
        if (!(e->wbuf = tdm_alloc(bs->alloc, bytes ? bytes : 1))) return dn_oom(ctx);
        for (int64_t j = 0; j < e->n_chunks; j++) {
            conv_part *p = j == e->n_chunks - 1 ? last : &e->part[0];
            int64_t ch0 = j * e->chunk * (e->by_group ? e->Mg : 1);
            const float *ws = (const float *)w->data + ch0 * e->Cg * e->ksz;
            TDM_TRY(dn_exec_reorder(ctx, bs->eng, &p->r_wei, &p->usr_wei, ws, &p->wei,
                                    (char *)e->wbuf + (size_t)j * e->part[0].wbytes));
        }
    }
    {
        int64_t items = e->N / e->mb * e->n_chunks * e->n_rows;
        int64_t src_items = e->src_reorder ? e->N / e->mb * e->src_n_chunks : 0;
        e->n_held = (size_t)(items * HELD_PER_ITEM + src_items);
        if ((e->held = dn_held_array(bs->alloc, e->n_held))) e->held_items = items;
        else e->n_held = 0; /* (the calls make their own objects) */
    }
    he->generic = false;
    return NULL;
}

/* The kept objects of conv item `item` for `what` (NULL: none kept). */
static dn_held *conv_held(const conv_entry *e, int64_t item, int what) {
    return item < e->held_items ? &e->held[item * HELD_PER_ITEM + what] : NULL;
}

typedef struct conv_run {
    conv_state *s;
    conv_entry *e;
    const float *x, *w, *b, *z;
    float *y;
    char *src;         /* X in the primitives' layout (may be x), e->src_esz bytes an element */
    char *slots;       /* per item: scratch for the item's Y (and weights), then the
                          convolution's scratchpad: `slot` bytes each */
    size_t dst_bytes;  /* of a slot: Y part (0: written in place), then the weights part */
    size_t pad_at;     /* of a slot: where the scratchpad starts */
    size_t slot;
} conv_run;

static tdm_status *src_item(void *arg, tdm_kernel_ctx *ctx, int64_t item) {
    conv_run *r = arg;
    conv_entry *e = r->e;
    int64_t n = item / e->src_n_chunks, j = item % e->src_n_chunks;
    int i = j == e->src_n_chunks - 1 && e->r_src[1].p ? 1 : 0;
    int64_t c0 = j * e->src_chunk;
    size_t at = (size_t)(e->held_items * HELD_PER_ITEM + item);
    dn_held *h = e->held && at < e->n_held ? &e->held[at] : NULL;
    if (e->src_cvt) /* blocked f32 image -> the same layout in bf16 */
        return dn_exec_reorder_held(ctx, r->s->base.eng, &e->r_src[0], &e->r_src_from[0],
                                    r->x + n * e->src_from_elems, &e->r_src_to[0],
                                    r->src + (size_t)(n * e->src_img_elems) * e->src_esz, h);
    return dn_exec_reorder_held(ctx, r->s->base.eng, &e->r_src[i], &e->r_src_from[i],
                                r->x + (n * e->mb * e->C + c0) * e->isz, &e->r_src_to[i],
                                r->src + (size_t)(n * e->src_img_elems + c0 * e->isz) * e->src_esz,
                                h);
}

static tdm_status *conv_item(void *arg, tdm_kernel_ctx *ctx, int64_t item) {
    conv_run *r = arg;
    conv_entry *e = r->e;
    dnnl_engine_t eng = r->s->base.eng;
    int64_t per = e->n_chunks * e->n_rows, n = item / per, j = item % per, rj = 0;
    conv_part *p = j == e->n_chunks - 1 && e->part[1].units ? &e->part[1] : &e->part[0];
    if (e->n_rows > 1) { /* a chunk of rows (then one chunk of channels): channels-last */
        rj = j;
        j = 0;
        p = &e->part[e->row_part[rj]];
    }
    int64_t ch0 = j * e->chunk * (e->by_group ? e->Mg : 1);
    int64_t cin0 = e->by_group ? j * e->chunk * e->Cg : 0;
    int64_t in_at = e->n_rows > 1 ? e->row_i0[rj] * e->row_in : cin0 * e->isz;
    int64_t out_at = n * e->mb * e->Mp * e->osz + (e->blk < 0 ? ch0 : ch0 * e->osz) +
                     rj * e->rows * e->row_out; /* (channels-last: channel ch0 of pixel 0) */
    const char *src = r->src + (size_t)(n * e->src_img_elems + in_at) * e->src_esz;
    float *yslice = r->y + out_at;
    char *slot = r->slots ? r->slots + (size_t)item * r->slot : NULL;
    const void *wei;
    if (e->wbuf) {
        wei = (const char *)e->wbuf + (size_t)j * e->part[0].wbytes;
    } else if (!p->r_wei.p) {
        wei = r->w + ch0 * e->Cg * e->ksz;
    } else {
        wei = slot + r->dst_bytes;
        TDM_TRY(dn_exec_reorder(ctx, eng, &p->r_wei, &p->usr_wei, r->w + ch0 * e->Cg * e->ksz,
                                &p->wei, (void *)wei));
    }
    void *dst = p->r_dst.p ? (void *)slot : (void *)yslice;
    const float *zslice = r->z ? r->z + out_at : NULL;
    /* Y in Z's memory (in place): Z is already where the sum post-op accumulates */
    const dn_prim *conv = zslice == dst && p->conv_sum.p ? &p->conv_sum : &p->conv;
    bool zarg = zslice && p->zbin && conv == &p->conv;
    if (zslice && !p->zbin) /* (a no-op when Y is in Z's memory: same layout, same place) */
        TDM_TRY(dn_exec_reorder_held(ctx, eng, &p->r_z, &p->usr_dst, zslice, &p->dst, dst,
                                     conv_held(e, item, HELD_R_Z)));
    dn_arg args[5] = {{DNNL_ARG_SRC, &p->src, src},
                      {DNNL_ARG_WEIGHTS, &p->wei, wei},
                      {DNNL_ARG_DST, &p->dst, dst}};
    int na = 3;
    if (r->b) args[na++] = (dn_arg){DNNL_ARG_BIAS, &p->bias, r->b + ch0};
    if (zarg)
        args[na++] = (dn_arg){DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, &p->dst, zslice};
    TDM_TRY(dn_exec_held(ctx, eng, conv, na, args, conv->scratch ? slot + r->pad_at : NULL,
                         conv_held(e, item, conv == &p->conv ? HELD_CONV : HELD_CONV_SUM)));
    if (p->act_after) /* element-wise: the layout does not matter */
        tdm_fused_apply_act(&r->s->act_own, dst, (int64_t)(dn_md_bytes(&p->dst) / sizeof(float)));
    if (p->r_dst.p)
        return dn_exec_reorder_held(ctx, eng, &p->r_dst, &p->dst, dst, &p->usr_dst, yslice,
                                    conv_held(e, item, HELD_R_DST));
    return NULL;
}

static size_t round64(size_t n) { return (n + 63) / 64 * 64; }

/* All the run's scratch is one buffer (X in the primitives' layout, then one slot per item
 * with the item's scratchpad), which the state keeps from run to run (dn_scratch_get): with
 * glibc, buffers freed after each run make the heap shrink and the next run fault every
 * page in again (measured +30% on a 3x3 convolution). */
static tdm_status *conv_exec(conv_state *s, tdm_kernel_ctx *ctx, conv_entry *e) {
    const tdm_tensor *b = ctx->n_in > 2 ? ctx->in[2] : NULL;
    const tdm_tensor *z = s->fused && ctx->n_in > 3 ? ctx->in[3] : NULL;
    conv_run r = {s, e, ctx->in[0]->data, ctx->in[1]->data, b ? b->data : NULL,
                  z ? z->data : NULL, ctx->out[0]->data, (char *)ctx->in[0]->data, NULL, 0, 0, 0};
    size_t dst_b = 0, wei_b = 0, pad_b = 0;
    for (int i = 0; i < CONV_PARTS; i++) {
        const conv_part *p = &e->part[i];
        if (!p->units) continue;
        if (round64(p->conv.scratch) > pad_b) pad_b = round64(p->conv.scratch);
        if (round64(p->conv_sum.scratch) > pad_b) pad_b = round64(p->conv_sum.scratch);
        if (p->r_dst.p && round64(dn_md_bytes(&p->dst)) > dst_b) dst_b = round64(dn_md_bytes(&p->dst));
        if (!e->wbuf && p->r_wei.p && round64(p->wbytes) > wei_b) wei_b = round64(p->wbytes);
    }
    r.dst_bytes = dst_b;
    r.pad_at = dst_b + wei_b;
    r.slot = dst_b + wei_b + pad_b;
    int64_t groups = e->N / e->mb, items = groups * e->n_chunks * e->n_rows;
    size_t src_b = e->src_reorder ? round64((size_t)groups * (size_t)e->src_img_elems * e->src_esz) : 0;
    size_t unblk_b = e->xunblk ? round64(dn_md_bytes(&e->unblk_to)) : 0;
    size_t total = unblk_b + src_b + r.slot * (size_t)items;
    char *buf = NULL;
    bool own = false;
    if (total) {
        if (!(buf = dn_scratch_get(&s->base, ctx, total, &own))) return dn_oom(ctx);
        r.slots = buf + unblk_b + src_b;
    }
    tdm_status *st = NULL;
    if (e->xunblk) { /* X blocked -> plain (on the pool's threads), then as a plain X */
        dn_unblock_copy(ctx->pool, ctx->in[0]->data, e->N, e->C, e->isz,
                        e->blk > 0 ? e->blk : e->C, (float *)buf);
        r.x = (const float *)buf;
        r.src = buf;
    }
    if (!st && e->src_reorder) {
        r.src = buf + unblk_b;
        st = dn_parallel(ctx, groups * e->src_n_chunks, src_item, &r);
    }
    if (!st) st = dn_parallel(ctx, items, conv_item, &r);
    dn_scratch_put(&s->base, ctx, buf, own);
    if (!st && e->blk > 0 && e->Mp > e->M) { /* the last block's padding channels are zeros */
        int64_t cb = e->Mp / e->blk, used = e->M - (cb - 1) * e->blk;
        for (int64_t n = 0; n < e->N; n++) {
            float *o = r.y + ((n * cb + cb - 1) * e->osz) * e->blk;
            for (int64_t q = 0; q < e->osz; q++)
                memset(o + q * e->blk + used, 0, (size_t)(e->blk - used) * sizeof(float));
        }
    }
    return st;
}

static bool same_shape(const tdm_tensor *a, const tdm_tensor *b) {
    if (a->rank != b->rank) return false;
    for (int i = 0; i < a->rank; i++)
        if (a->dims[i] != b->dims[i]) return false;
    return true;
}

/* The generic path: FusedConv's generic kernel, through plain copies for BlockedConv. */
static tdm_status *conv_generic(const conv_state *s, tdm_kernel_ctx *ctx) {
    if (!s || !s->blocked) return dn_fallback(ctx);
    const tdm_tensor *w = ctx->n_in > 1 ? ctx->in[1] : NULL;
    if (!w || !ctx->in[0] || !ctx->out[0] || w->rank < 3)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "BlockedConv needs X, W and Y");
    int64_t group = tdm_attr_int(ctx->node, "group", 1);
    return dn_blocked_fallback(ctx, TDM_FUSED_DOMAIN, "FusedConv", 1, w->dims[1] * group,
                               w->dims[0]);
}

tdm_status *dn_conv_run(tdm_kernel_ctx *ctx) {
    conv_state *s = ctx->state;
    if (!s || s->base.generic || ctx->n_in < 2 || !ctx->in[0] || !ctx->in[1] || !ctx->out[0])
        return conv_generic(s, ctx);
    const tdm_tensor *x = ctx->in[0], *w = ctx->in[1];
    const tdm_tensor *b = ctx->n_in > 2 ? ctx->in[2] : NULL;
    const tdm_tensor *z = s->fused && ctx->n_in > 3 ? ctx->in[3] : NULL;
    const tdm_tensor *y = ctx->out[0];
    int extra = s->blocked ? 1 : 0; /* Y's block dim */
    if (x->dtype != TDM_FLOAT || w->dtype != TDM_FLOAT || (b && b->dtype != TDM_FLOAT) ||
        (z && (z->dtype != TDM_FLOAT || !same_shape(z, y))) || w->rank < 3 || w->rank > 5 ||
        (x->rank != w->rank && x->rank != w->rank + extra) || y->rank != w->rank + extra ||
        x->count == 0 || y->count == 0 || w->count == 0)
        return conv_generic(s, ctx);
    int64_t key[DN_KEY];
    int nk = 0;
    key[nk++] = dn_threads(ctx);
    key[nk++] = (b ? 1 : 0) | (z ? 2 : 0) | (w == s->base.wconst ? 4 : 0) | (dn_bf16(ctx) ? 8 : 0);
    key[nk++] = x->rank;
    key[nk++] = y->dims[y->rank - 1];
    for (int i = 0; i < x->rank; i++) key[nk++] = x->dims[i];
    for (int i = 0; i < w->rank; i++) key[nk++] = w->dims[i];
    int omp = dn_omp_begin();
    dn_entry *e;
    tdm_status *st = dn_cache_get(&s->base, ctx, key, nk, conv_build, &e);
    if (!st) st = e->generic ? conv_generic(s, ctx) : conv_exec(s, ctx, (conv_entry *)e);
    dn_entry_done(&s->base, e);
    dn_omp_end(omp);
    return st;
}
