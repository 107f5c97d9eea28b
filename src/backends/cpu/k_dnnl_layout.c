/* dnnl family: the channel-blocked layout ops (ops/fused.h): ToBlocked and FromBlocked,
 * and the generic path of BlockedConv / BlockedPool (dn_blocked_fallback: unblock, run the
 * plain generic kernel, block the result) for what oneDNN declines. Blocked tensors are
 * [N, Cb, S..., B] with Cb = ceil(C/B); the channels-last form is the case B = C, Cb = 1
 * (the same copies then transpose NCHW <-> NHWC). */
#include <string.h>

#include "backends/cpu/k_dnnl.h"
#include "core/alloc.h"
#include "ops/fused.h"

/* Sizes of a blocked tensor of `rank` dims (>= 4): N, Cb, spatial size, B. */
static void blocked_sizes(const tdm_tensor *t, int64_t *n, int64_t *cb, int64_t *sp, int64_t *b) {
    *n = t->dims[0];
    *cb = t->dims[1];
    *b = t->dims[t->rank - 1];
    *sp = 1;
    for (int d = 2; d < t->rank - 1; d++) *sp *= t->dims[d];
}

/* One parallel item of a (un)blocking copy: image i, block j, pixels [p0, p1). */
typedef struct blk_job {
    const float *src;
    float *dst;
    int64_t n, c, sp, b, cb, pt; /* pt: pixels per item */
    bool to_blocked;
} blk_job;

#define BLK_PIXELS 512 /* pixels per parallel item (a 16-channel block: 32 KiB) */
#define BLK_TILE 16    /* pixels per tile of the transpose (a tile of 16 x B stays in L1) */

static void blk_items(void *arg, int64_t lo, int64_t hi) {
    const blk_job *t = arg;
    int64_t per = (t->sp + t->pt - 1) / t->pt, b = t->b;
    for (int64_t it = lo; it < hi; it++) {
        int64_t ij = it / per, i = ij / t->cb, j = ij % t->cb;
        int64_t p0 = it % per * t->pt, p1 = p0 + t->pt < t->sp ? p0 + t->pt : t->sp;
        int64_t c0 = j * b, nb = t->c - c0 < b ? t->c - c0 : b;
        size_t bo = (size_t)((i * t->cb + j) * t->sp) * (size_t)b; /* the block's offset */
        size_t po = (size_t)(i * t->c + c0) * (size_t)t->sp;       /* its first plane's */
        for (int64_t q = p0; q < p1; q += BLK_TILE) {
            int64_t qe = q + BLK_TILE < p1 ? q + BLK_TILE : p1;
            if (t->to_blocked) {
                float *o = t->dst + bo;
                const float *s = t->src + po;
                for (int64_t k = 0; k < nb; k++)
                    for (int64_t p = q; p < qe; p++) o[p * b + k] = s[k * t->sp + p];
                for (int64_t p = q; p < qe; p++)
                    for (int64_t k = nb; k < b; k++) o[p * b + k] = 0.0f;
            } else {
                const float *s = t->src + bo;
                float *o = t->dst + po;
                for (int64_t k = 0; k < nb; k++)
                    for (int64_t p = q; p < qe; p++) o[k * t->sp + p] = s[p * b + k];
            }
        }
    }
}

static void blk_run(tdm_threadpool *pool, const float *src, int64_t n, int64_t c, int64_t sp,
                    int64_t b, float *dst, bool to_blocked) {
    blk_job t = {src, dst, n, c, sp, b, (c + b - 1) / b, BLK_PIXELS, to_blocked};
    int64_t items = n * t.cb * ((sp + t.pt - 1) / t.pt);
    if (items > 0) tdm_parallel_for(pool, items, 1, blk_items, &t);
}

void dn_block_copy(tdm_threadpool *pool, const float *src, int64_t n, int64_t c, int64_t sp,
                   int64_t b, float *dst) {
    blk_run(pool, src, n, c, sp, b, dst, true);
}

void dn_unblock_copy(tdm_threadpool *pool, const float *src, int64_t n, int64_t c, int64_t sp,
                     int64_t b, float *dst) {
    blk_run(pool, src, n, c, sp, b, dst, false);
}

static tdm_status *shape_error(tdm_kernel_ctx *ctx) {
    return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                          "blocked and plain tensors do not match");
}

tdm_status *dn_to_blocked_run(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0];
    tdm_tensor *y = ctx->out[0];
    int64_t n, cb, sp, b;
    if (!x || !y || y->rank != x->rank + 1) return shape_error(ctx);
    blocked_sizes(y, &n, &cb, &sp, &b);
    if (x->dims[0] != n || b < 1 || (x->dims[1] + b - 1) / b != cb || x->count != n * x->dims[1] * sp)
        return shape_error(ctx);
    dn_block_copy(ctx->pool, x->data, n, x->dims[1], sp, b, y->data);
    return NULL;
}

tdm_status *dn_from_blocked_run(tdm_kernel_ctx *ctx) {
    const tdm_tensor *x = ctx->in[0];
    tdm_tensor *y = ctx->out[0];
    int64_t n, cb, sp, b;
    if (!x || !y || x->rank != y->rank + 1) return shape_error(ctx);
    blocked_sizes(x, &n, &cb, &sp, &b);
    if (y->dims[0] != n || b < 1 || (y->dims[1] + b - 1) / b != cb || y->count != n * y->dims[1] * sp)
        return shape_error(ctx);
    dn_unblock_copy(ctx->pool, x->data, n, y->dims[1], sp, b, y->data);
    return NULL;
}

/* BlockedConcat (ops/fused.h): each input block's lanes go to one or two output blocks (the
 * input's channel offset need not be a multiple of the block); a whole block at lane 0 is one
 * copy of its plane. Y's padding lanes are zeroed. Items: (image, input block), in parallel. */
typedef struct bcat_job {
    tdm_kernel_ctx *ctx;
    const int64_t *ch;
    int64_t n, cbo, sp, b, total, items_per_image;
} bcat_job;

static void bcat_items(void *arg, int64_t i0, int64_t i1) {
    const bcat_job *j = arg;
    int64_t b = j->b, sp = j->sp;
    for (int64_t it = i0; it < i1; it++) {
        int64_t i = it / j->items_per_image, r = it % j->items_per_image, off = 0;
        int k = 0;
        for (;; k++) { /* input k's block r */
            int64_t cb = (j->ch[k] + b - 1) / b;
            if (r < cb) break;
            r -= cb;
            off += j->ch[k];
        }
        float *yi = (float *)j->ctx->out[0]->data + i * j->cbo * sp * b;
        int64_t cbk = (j->ch[k] + b - 1) / b, c0 = r * b;
        const float *s = (const float *)j->ctx->in[k]->data + (i * cbk + r) * sp * b;
        int64_t nb = j->ch[k] - c0 < b ? j->ch[k] - c0 : b, oc = off + c0;
        int64_t lane = oc % b, r1 = nb < b - lane ? nb : b - lane, r2 = nb - r1;
        float *d1 = yi + (oc / b) * sp * b + lane, *d2 = yi + (oc / b + 1) * sp * b;
        if (lane == 0 && nb == b) {
            memcpy(d1, s, (size_t)(sp * b) * sizeof(float));
            continue;
        }
        for (int64_t p = 0; p < sp; p++) {
            const float *sp_ = s + p * b;
            for (int64_t l = 0; l < r1; l++) d1[p * b + l] = sp_[l];
            for (int64_t l = 0; l < r2; l++) d2[p * b + l] = sp_[r1 + l];
        }
    }
}

tdm_status *dn_blocked_concat_run(tdm_kernel_ctx *ctx) {
    tdm_tensor *y = ctx->out[0];
    size_t nc = 0;
    const int64_t *ch = tdm_attr_ints(ctx->node, "channels", &nc);
    int64_t n, cbo, sp, b;
    if (!y || y->rank < 4 || !ch || nc != (size_t)ctx->n_in) return shape_error(ctx);
    blocked_sizes(y, &n, &cbo, &sp, &b);
    int64_t total = 0, items = 0;
    for (int k = 0; k < ctx->n_in; k++) {
        const tdm_tensor *x = ctx->in[k];
        int64_t xn, xcb, xsp, xb;
        if (!x || x->rank != y->rank || ch[k] < 1) return shape_error(ctx);
        blocked_sizes(x, &xn, &xcb, &xsp, &xb);
        if (xn != n || xsp != sp || xb != b || xcb != (ch[k] + b - 1) / b) return shape_error(ctx);
        total += ch[k];
        items += xcb;
    }
    if (cbo != (total + b - 1) / b) return shape_error(ctx);
    if (total % b) /* the last block's padding lanes (before the items write the others) */
        for (int64_t i = 0; i < n; i++) {
            float *d = (float *)y->data + ((i + 1) * cbo - 1) * sp * b;
            for (int64_t p = 0; p < sp; p++)
                for (int64_t l = total % b; l < b; l++) d[p * b + l] = 0.0f;
        }
    bcat_job j = {ctx, ch, n, cbo, sp, b, total, items};
    tdm_parallel_for(ctx->pool, n * items, 1, bcat_items, &j);
    return NULL;
}

/* A plain tensor for blocked `t` holding `c` channels (unblocked when `copy`). */
static tdm_status *plain_of(tdm_kernel_ctx *ctx, const tdm_tensor *t, int64_t c, bool copy,
                            tdm_tensor **out) {
    int64_t dims[TDM_MAX_RANK], n, cb, sp, b;
    blocked_sizes(t, &n, &cb, &sp, &b);
    if (c < 1 || (c + b - 1) / b != cb) return shape_error(ctx);
    for (int d = 0; d < t->rank - 1; d++) dims[d] = t->dims[d];
    dims[1] = c;
    TDM_TRY(tdm_tensor_new(ctx->alloc, TDM_FLOAT, t->rank - 1, dims, out));
    if (copy) dn_unblock_copy(ctx->pool, t->data, n, c, sp, b, (*out)->data);
    return NULL;
}

tdm_status *dn_blocked_fallback(tdm_kernel_ctx *ctx, const char *domain, const char *op, int opset,
                                int64_t c_in, int64_t c_out) {
    tdm_node fake = *ctx->node;
    fake.op_type = (char *)op;
    fake.domain = (char *)domain;
    const tdm_tensor *ins[4] = {0};
    tdm_tensor *tmp[4] = {0}, *y = NULL;
    int n_in = ctx->n_in < 4 ? ctx->n_in : 4;
    bool conv = strcmp(ctx->node->op_type, "BlockedConv") == 0;
    tdm_status *st = NULL;
    for (int i = 0; i < n_in && !st; i++) {
        ins[i] = ctx->in[i];
        if (!ins[i]) continue;
        bool blk = i == 0 ? (!conv || ctx->in[0]->rank == ctx->in[1]->rank + 1) : conv && i == 3;
        if (!blk) continue;
        if (ins[i]->dtype != TDM_FLOAT) st = shape_error(ctx);
        else if (!(st = plain_of(ctx, ins[i], i == 0 ? c_in : c_out, true, &tmp[i]))) ins[i] = tmp[i];
    }
    if (!st) st = plain_of(ctx, ctx->out[0], c_out, false, &y);
    if (!st) {
        tdm_kernel_ctx sub = *ctx;
        sub.node = &fake;
        sub.opset = opset;
        sub.n_in = n_in;
        sub.in = ins;
        sub.n_out = 1;
        sub.out = &y;
        st = dn_fallback(&sub);
    }
    if (!st) {
        int64_t n, cb, sp, b;
        blocked_sizes(ctx->out[0], &n, &cb, &sp, &b);
        dn_block_copy(ctx->pool, y->data, n, c_out, sp, b, ctx->out[0]->data);
    }
    for (int i = 0; i < 4; i++) tdm_tensor_destroy(tmp[i]);
    tdm_tensor_destroy(y);
    return st;
}
