/* dnnl family: MaxPool and AveragePool (float32, 1-D to 3-D) on oneDNN's pooling_v2 primitive.
 * oneDNN's pooling on plain NCHW is a slow reference loop (8.6 ms against 0.09 ms blocked
 * for 64x112x112, 3x3 stride 2), so X is reordered into the channel-blocked layout its JIT
 * kernels take and Y back, by (image, block of channels) items on the thread pool: a
 * channel range of a plain NCHW image is contiguous. ceil_mode becomes extra right padding;
 * AveragePool with count_include_pad runs here only when no such extra padding is needed
 * (ONNX then divides by the window size, as oneDNN does). MaxPool with the Indices output
 * stays generic. BlockedPool (ops/fused.h: any of the four poolings on channel-blocked or
 * channels-last X and Y) needs no reorders; what oneDNN declines runs generic through plain
 * copies. Channels-last X and Y are not cut into channel ranges (one would be strided). */
#include <float.h>
#include <string.h>

#include "backends/cpu/k_dnnl.h"
#include "backends/cpu/k_nn.h"
#include "core/alloc.h"
#include "ops/fused.h"

typedef struct pool_state {
    dn_state base; /* first */
    bool max;
    bool include_pad;
    bool blocked;    /* BlockedPool: X and Y channel-blocked */
    bool cl;         /* BlockedPool in its channels-last form (block TDM_BLOCK_CHANNELS_LAST) */
    bool global;     /* GlobalAveragePool / GlobalMaxPool (BlockedPool only) */
    int src_opset;   /* opset to read the pooling's attributes as */
    const char *op;  /* the pooling's ONNX name */
    int64_t channels;
} pool_state;

typedef struct pool_part {
    int64_t units; /* channels per chunk; 0 = unused */
    dn_prim pool, r_src, r_dst;
    dnnl_memory_desc_t usr_src, src, dst, usr_dst;
} pool_part;

typedef struct pool_entry {
    dn_entry h; /* first */
    int64_t N, C, isz, osz, chunk, n_chunks;
    int64_t blk, Cp; /* blocked: the block and C rounded up to it (plain: 0 and C;
                        channels-last: C and C) */
    pool_part part[2];
    /* oneDNN memory objects and streams kept from run to run, HELD_PER_ITEM per work item
     * (pool, r_src, r_dst; NULL: each call makes its own) */
    dn_held *held;
    size_t n_held;
    /* blocked 2-D max pooling at stride 1, and channels-last at any stride, runs tandem's
     * loop (max_rows), not oneDNN's */
    bool own_max;
    int64_t kh, kw, sy, sx, pt, pl, H, W, OH, OW, row_chunk, n_row_chunks;
} pool_entry;

enum { HELD_POOL, HELD_R_SRC, HELD_R_DST, HELD_PER_ITEM };

static void pool_clear(dn_state *s, dn_entry *he) {
    pool_entry *e = (pool_entry *)he;
    for (int i = 0; i < 2; i++) {
        dn_prim_clear(&e->part[i].pool);
        dn_prim_clear(&e->part[i].r_src);
        dn_prim_clear(&e->part[i].r_dst);
    }
    dn_held_array_free(s->alloc, e->held, e->n_held);
    e->held = NULL;
    e->n_held = 0;
}

static dn_held *pool_held(const pool_entry *e, int64_t item, int what) {
    size_t at = (size_t)item * HELD_PER_ITEM + (size_t)what;
    return e->held && at < e->n_held ? &e->held[at] : NULL;
}

tdm_status *dn_pool_prepare(const tdm_node *node, int opset, int n_in,
                            const tdm_tensor *const *in, const tdm_allocator *a, void **state) {
    (void)in;
    pool_state *s;
    TDM_TRY(dn_state_new(a, sizeof *s, sizeof(pool_entry), pool_clear, (dn_state **)&s));
    *state = s;
    s->op = node->op_type;
    s->src_opset = opset;
    if (strcmp(node->op_type, "BlockedPool") == 0) {
        s->blocked = true;
        s->op = tdm_attr_string(node, "op", "");
        s->src_opset = (int)tdm_attr_int(node, "src_opset", 1);
        s->channels = tdm_attr_int(node, "channels", 0);
        s->global = strncmp(s->op, "Global", 6) == 0;
        s->cl = tdm_attr_int(node, "block", 0) == TDM_BLOCK_CHANNELS_LAST;
    }
    s->max = strcmp(s->op, "MaxPool") == 0 || strcmp(s->op, "GlobalMaxPool") == 0;
    s->include_pad = !s->max && tdm_attr_int(node, "count_include_pad", 0) != 0;
    if (n_in < 1 || (s->max && node->n_outputs > 1 && node->outputs[1] >= 0))
        s->base.generic = true;
    return NULL;
}

typedef struct pool_geom {
    int nd;
    dnnl_alg_kind_t alg;
    dnnl_dims_t strides, kernel, dil, pl, pr;
    int64_t xsp[3], ysp[3];
} pool_geom;

static tdm_status *pool_part_build(dn_state *bs, const pool_geom *g, int64_t blk, int64_t units,
                                   pool_part *p, bool *ok) {
    *ok = false;
    int nd = g->nd;
    int64_t xd[5] = {1, units}, yd[5] = {1, units};
    for (int i = 0; i < nd - 2; i++) {
        xd[2 + i] = g->xsp[i];
        yd[2 + i] = g->ysp[i];
    }
    p->units = units;
    dn_md_plain(&p->usr_src, nd, xd);
    dn_md_plain(&p->usr_dst, nd, yd);
    dnnl_format_tag_t tag = dn_tag_blocked(nd, blk ? blk : dn_block()); /* (-1: channels-last) */
    if (!tag || !dn_md_tag(&p->src, nd, xd, tag) ||
        !dn_md_tag(&p->dst, nd, yd, blk ? tag : dnnl_format_tag_any))
        return NULL;
    if (blk) { /* X and Y are stored blocked: no reorders */
        p->usr_src = p->src;
        p->usr_dst = p->dst;
    }
    dnnl_pooling_v2_desc_t pdsc;
    if (dnnl_pooling_v2_forward_desc_init(&pdsc, dnnl_forward_inference, g->alg, &p->src, &p->dst,
                                          g->strides, g->kernel, g->dil, g->pl,
                                          g->pr) != dnnl_success)
        return NULL;
    dnnl_primitive_attr_t attr;
    TDM_TRY(dn_attr_new(&attr));
    dnnl_primitive_desc_t pd;
    dnnl_status_t r = dnnl_primitive_desc_create(&pd, &pdsc, attr, bs->eng, NULL);
    dnnl_primitive_attr_destroy(attr);
    if (r != dnnl_success || dn_refuse_ref(bs, pd)) return NULL; /* generic: own pooling */
    dn_query_md(pd, dnnl_query_dst_md, &p->dst);
    TDM_TRY(dn_prim_from_pd(pd, &p->pool));
    TDM_TRY(dn_reorder_new(bs->eng, &p->usr_src, &p->src, &p->r_src));
    TDM_TRY(dn_reorder_new(bs->eng, &p->dst, &p->usr_dst, &p->r_dst));
    *ok = true;
    return NULL;
}

static tdm_status *pool_build(dn_state *bs, tdm_kernel_ctx *ctx, dn_entry *he) {
    pool_state *s = (pool_state *)bs;
    pool_entry *e = (pool_entry *)he;
    const tdm_tensor *x = ctx->in[0], *y = ctx->out[0];
    int nd = s->blocked ? x->rank - 1 : x->rank, nsp = nd - 2;
    int64_t xdims[5], ydims[5];
    for (int i = 0; i < nd; i++) {
        xdims[i] = x->dims[i];
        ydims[i] = y->dims[i];
    }
    e->blk = 0;
    if (s->blocked) {
        e->blk = x->dims[nd];
        if (e->blk < 1 || y->dims[nd] != e->blk || s->channels < 1 ||
            x->dims[1] != (s->channels + e->blk - 1) / e->blk || y->dims[1] != x->dims[1] ||
            (s->cl && e->blk != s->channels))
            return NULL;
        xdims[1] = ydims[1] = s->channels;
    }
    tdm_nn_geom gm;
    if (s->global) {
        memset(&gm, 0, sizeof gm);
        for (int i = 0; i < nsp; i++) {
            gm.in[i] = gm.kernel[i] = xdims[2 + i];
            gm.out[i] = gm.stride[i] = gm.dil[i] = 1;
        }
    } else {
        tdm_status *gst =
            tdm_nn_geom_init(ctx->node, s->src_opset, TDM_NN_POOL, nd, xdims, NULL, &gm);
        if (gst) {
            tdm_status_free(gst);
            return NULL;
        }
    }
    pool_geom g = {.nd = nd};
    g.alg = s->max ? dnnl_pooling_max
            : s->include_pad ? dnnl_pooling_avg_include_padding
                             : dnnl_pooling_avg_exclude_padding;
    e->N = xdims[0];
    e->C = xdims[1];
    e->Cp = e->blk ? x->dims[1] * e->blk : e->C;
    e->isz = e->osz = 1;
    int64_t ksz = 1;
    for (int i = 0; i < nsp; i++) {
        if (gm.out[i] != ydims[2 + i] || gm.out[i] < 1) return NULL;
        int64_t ext = (gm.kernel[i] - 1) * gm.dil[i] + 1;
        int64_t right = gm.pad_e[i];
        if ((gm.in[i] + gm.pad_b[i] + right - ext) / gm.stride[i] + 1 != gm.out[i]) {
            right = (gm.out[i] - 1) * gm.stride[i] + ext - gm.in[i] - gm.pad_b[i];
            if (s->include_pad) return NULL; /* ONNX's divisor differs from oneDNN's here */
        }
        if (right < 0 || gm.pad_b[i] >= ext || right >= ext) return NULL;
        g.strides[i] = gm.stride[i];
        g.kernel[i] = gm.kernel[i];
        g.dil[i] = gm.dil[i] - 1;
        g.pl[i] = gm.pad_b[i];
        g.pr[i] = right;
        g.xsp[i] = xdims[2 + i];
        g.ysp[i] = ydims[2 + i];
        e->isz *= xdims[2 + i];
        e->osz *= ydims[2 + i];
        ksz *= gm.kernel[i];
    }
    if (s->blocked && s->max && nsp == 2 && g.dil[0] == 0 && g.dil[1] == 0 &&
        (s->cl || (e->blk <= 64 && g.strides[0] == 1 && g.strides[1] == 1))) {
        /* oneDNN 2.6's JIT max pooling at stride 1 runs at a fraction of its bytes' speed
         * (PP-OCRv6 det's 2x2 SAME_UPPER MaxPool on 24x240x320, AVX2: 6.5-7.2 ms; this
         * loop 2.9 ms, about twice the time of reading X and writing Y from memory); its
         * channels-last one at twice ORT's time in ResNet-50 (64x112x112, 3x3 stride 2, 1
         * thread: 0.37 ms against ORT's NCHWc 0.18 in the two profilers), and whole images
         * only (not cut over rows for threads) */
        e->own_max = true;
        e->kh = g.kernel[0];
        e->kw = g.kernel[1];
        e->sy = g.strides[0];
        e->sx = g.strides[1];
        e->pt = g.pl[0];
        e->pl = g.pl[1];
        e->H = g.xsp[0];
        e->W = g.xsp[1];
        e->OH = g.ysp[0];
        e->OW = g.ysp[1];
        e->row_chunk = e->OH < 16 ? e->OH : 16;
        e->n_row_chunks = (e->OH + e->row_chunk - 1) / e->row_chunk;
        dn_note_impl(bs, "tandem:max_rows");
        he->generic = false;
        return NULL;
    }
    double work = (double)e->N * (double)e->C * (double)e->osz * (double)ksz;
    e->chunk = work < 2.0e5 || s->cl ? e->C : dn_chunk(e->C, e->blk ? e->blk : dn_block(), e->N,
                                                             dn_threads(ctx));
    e->n_chunks = (e->C + e->chunk - 1) / e->chunk;
    int64_t tblk = s->cl ? TDM_BLOCK_CHANNELS_LAST : e->blk; /* the layout as stored */
    bool ok;
    TDM_TRY(pool_part_build(bs, &g, tblk, e->chunk, &e->part[0], &ok));
    if (!ok) return NULL;
    int64_t tail = e->C - (e->n_chunks - 1) * e->chunk;
    if (tail != e->chunk) {
        TDM_TRY(pool_part_build(bs, &g, tblk, tail, &e->part[1], &ok));
        if (!ok) return NULL;
    }
    dn_note_impl(bs, "%s", dn_prim_impl(&e->part[0].pool));
    e->n_held = (size_t)(e->N * e->n_chunks) * HELD_PER_ITEM;
    if (!(e->held = dn_held_array(bs->alloc, e->n_held))) e->n_held = 0;
    he->generic = false;
    return NULL;
}

typedef struct pool_run {
    pool_state *s;
    pool_entry *e;
    const float *x;
    float *y;
    char *slots;   /* per item: blocked X, blocked Y, the scratchpad */
    size_t src_bytes, pad_at, slot;
} pool_run;

static tdm_status *pool_item(void *arg, tdm_kernel_ctx *ctx, int64_t item) {
    pool_run *r = arg;
    pool_entry *e = r->e;
    dnnl_engine_t eng = r->s->base.eng;
    int64_t n = item / e->n_chunks, j = item % e->n_chunks;
    pool_part *p = j == e->n_chunks - 1 && e->part[1].units ? &e->part[1] : &e->part[0];
    int64_t c0 = j * e->chunk;
    const float *xs = r->x + (n * e->Cp + c0) * e->isz;
    float *ys = r->y + (n * e->Cp + c0) * e->osz;
    char *slot = r->slots ? r->slots + (size_t)item * r->slot : NULL; /* (no scratch: NULL) */
    const void *src = xs;
    void *dst = p->r_dst.p ? (void *)(slot + r->src_bytes) : (void *)ys;
    if (p->r_src.p) {
        TDM_TRY(dn_exec_reorder_held(ctx, eng, &p->r_src, &p->usr_src, xs, &p->src, slot,
                                     pool_held(e, item, HELD_R_SRC)));
        src = slot;
    }
    dn_arg args[2] = {{DNNL_ARG_SRC, &p->src, src}, {DNNL_ARG_DST, &p->dst, dst}};
    TDM_TRY(dn_exec_held(ctx, eng, &p->pool, 2, args, p->pool.scratch ? slot + r->pad_at : NULL,
                         pool_held(e, item, HELD_POOL)));
    if (p->r_dst.p)
        return dn_exec_reorder_held(ctx, eng, &p->r_dst, &p->dst, dst, &p->usr_dst, ys,
                                    pool_held(e, item, HELD_R_DST));
    return NULL;
}

static size_t round64(size_t n) { return (n + 63) / 64 * 64; }

/* Max pooling on blocked or channels-last X (2-D, dilation 1): one item is row_chunk output
 * rows of one plane (a block of channels of one image; channels-last: the image); each output
 * is the maximum over the part of its window inside X (padding never wins), NaN skipped as the
 * generic kernel skips it. The lanes (channels) of a pixel are independent, so the innermost
 * loop vectorises; channels-last runs them 64 at a time. */
typedef struct max_run {
    const pool_entry *e;
    const float *x;
    float *y;
} max_run;

/* rows [oy0, oy1) of B lanes of one plane whose pixels are S floats apart; B a constant in each
 * instance (8, 16, 64: registers) */
static inline __attribute__((always_inline)) void max_plane(const pool_entry *e, const float *x,
                                                            float *y, int64_t oy0, int64_t oy1,
                                                            const int64_t B, int64_t S) {
    const int64_t W = e->W, OW = e->OW;
    for (int64_t oy = oy0; oy < oy1; oy++) {
        int64_t iy = oy * e->sy - e->pt;
        int64_t ky0 = iy < 0 ? -iy : 0, ky1 = e->H - iy < e->kh ? e->H - iy : e->kh;
        for (int64_t ox = 0; ox < OW; ox++) {
            int64_t ix = ox * e->sx - e->pl;
            int64_t kx0 = ix < 0 ? -ix : 0, kx1 = W - ix < e->kw ? W - ix : e->kw;
            float m[64];
            for (int64_t b = 0; b < B; b++) m[b] = -FLT_MAX;
            for (int64_t ky = ky0; ky < ky1; ky++)
                for (int64_t kx = kx0; kx < kx1; kx++) {
                    const float *p = x + ((iy + ky) * W + ix + kx) * S;
                    for (int64_t b = 0; b < B; b++) m[b] = p[b] > m[b] ? p[b] : m[b];
                }
            float *q = y + (oy * OW + ox) * S;
            for (int64_t b = 0; b < B; b++) q[b] = m[b];
        }
    }
}

static tdm_status *max_rows(void *arg, tdm_kernel_ctx *ctx, int64_t item) {
    (void)ctx;
    const max_run *r = arg;
    const pool_entry *e = r->e;
    int64_t plane = item / e->n_row_chunks, rc = item % e->n_row_chunks, S = e->blk;
    const float *x = r->x + plane * e->H * e->W * S;
    float *y = r->y + plane * e->OH * e->OW * S;
    int64_t oy0 = rc * e->row_chunk, oy1 = oy0 + e->row_chunk < e->OH ? oy0 + e->row_chunk : e->OH;
    if (S == 8) max_plane(e, x, y, oy0, oy1, 8, 8);
    else if (S == 16) max_plane(e, x, y, oy0, oy1, 16, 16);
    else
        for (int64_t c0 = 0; c0 < S; c0 += 64) {
            if (S - c0 >= 64) max_plane(e, x + c0, y + c0, oy0, oy1, 64, S);
            else max_plane(e, x + c0, y + c0, oy0, oy1, S - c0, S);
        }
    return NULL;
}

/* One scratch allocation per run (see conv_exec in k_dnnl_conv.c for why). */
static tdm_status *pool_exec(pool_state *s, tdm_kernel_ctx *ctx, pool_entry *e) {
    if (e->own_max) {
        max_run r1 = {e, ctx->in[0]->data, ctx->out[0]->data};
        return dn_parallel(ctx, e->N * (e->Cp / e->blk) * e->n_row_chunks, max_rows, &r1);
    }
    pool_run r = {s, e, ctx->in[0]->data, ctx->out[0]->data, NULL, 0, 0, 0};
    size_t sb = 0, db = 0, pb = 0;
    for (int i = 0; i < 2; i++) {
        const pool_part *p = &e->part[i];
        if (!p->units) continue;
        if (round64(p->pool.scratch) > pb) pb = round64(p->pool.scratch);
        if (p->r_src.p && round64(dn_md_bytes(&p->src)) > sb) sb = round64(dn_md_bytes(&p->src));
        if (p->r_dst.p && round64(dn_md_bytes(&p->dst)) > db) db = round64(dn_md_bytes(&p->dst));
    }
    r.src_bytes = sb;
    r.pad_at = sb + db;
    r.slot = sb + db + pb;
    int64_t items = e->N * e->n_chunks;
    char *buf = NULL;
    bool own = false;
    if (r.slot) {
        if (!(buf = dn_scratch_get(&s->base, ctx, r.slot * (size_t)items, &own))) return dn_oom(ctx);
        r.slots = buf;
    }
    tdm_status *st = dn_parallel(ctx, items, pool_item, &r);
    dn_scratch_put(&s->base, ctx, buf, own);
    return st;
}

/* The generic path: the plain pooling's generic kernel, through plain copies for
 * BlockedPool. */
static tdm_status *pool_generic(const pool_state *s, tdm_kernel_ctx *ctx) {
    if (!s || !s->blocked) return dn_fallback(ctx);
    if (!ctx->in[0] || !ctx->out[0] || ctx->in[0]->rank < 4 || ctx->out[0]->rank < 4)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "BlockedPool needs X and Y");
    return dn_blocked_fallback(ctx, "", s->op, s->src_opset, s->channels, s->channels);
}

tdm_status *dn_pool_run(tdm_kernel_ctx *ctx) {
    pool_state *s = ctx->state;
    if (!s || s->base.generic || ctx->n_in < 1 || !ctx->in[0] || !ctx->out[0] ||
        (ctx->n_out > 1 && ctx->out[1]))
        return pool_generic(s, ctx);
    const tdm_tensor *x = ctx->in[0], *y = ctx->out[0];
    int extra = s->blocked ? 1 : 0;
    if (x->dtype != TDM_FLOAT || x->rank < 3 + extra || x->rank > 5 + extra ||
        y->rank != x->rank || x->count == 0 || y->count == 0)
        return pool_generic(s, ctx);
    int64_t key[DN_KEY];
    int nk = 0;
    key[nk++] = dn_threads(ctx);
    key[nk++] = x->rank;
    for (int i = 0; i < x->rank; i++) key[nk++] = x->dims[i];
    int omp = dn_omp_begin();
    dn_entry *e;
    tdm_status *st = dn_cache_get(&s->base, ctx, key, nk, pool_build, &e);
    if (!st) st = e->generic ? pool_generic(s, ctx) : pool_exec(s, ctx, (pool_entry *)e);
    dn_entry_done(&s->base, e);
    dn_omp_end(omp);
    return st;
}
