/* Clean-up and activation passes for convolution networks of the MobileNetV3 / PP-LCNet
 * kind, which exporters (paddle2onnx above all) write out op by op:
 *  - Identity nodes are dropped (their readers read the input), so the patterns behind them
 *    become visible;
 *  - Conv -> Add(per-channel constant) becomes the Conv's bias (exporters that keep the
 *    bias apart from the convolution), Conv -> Mul(per-channel constant) is folded into the
 *    weights and bias (PP-LCNetV3's learnable scale after each convolution);
 *  - ReduceMean over H and W with keepdims of a rank-4 tensor becomes GlobalAveragePool
 *    (the squeeze-excitation pooling of PP-LCNetV3), which the blocked layout can take;
 *  - fz_match_hswish recognises the decomposed hard-swish for the Conv fusion (fuse_conv.c):
 *      x * clip(x + 3, 0, 6) / 6     (the division as Div by 6 or Mul by 1/6, applied to the
 *                                     product or to the clip)
 *      x * HardSigmoid(x, alpha = 1/6, beta = 0.5)
 *    with operands in either order. All are x * min(max(x + 3, 0), 6) / 6, oneDNN's
 *    eltwise_hardswish, which its JIT kernels (depthwise ones included) take as a post-op;
 *  - fz_match_swish recognises x * Sigmoid(x) (SiLU, YOLO's activation): eltwise_swish. */
#include <float.h>
#include <stdint.h>
#include <string.h>

#include "core/alloc.h"
#include "graph/fuse_impl.h"
#include "ops/fused.h"

/* ---- Identity ---- */

/* Node i copies x to y: every reader of y reads x instead and the node goes, unless y is a
 * graph output or read by a subgraph (those name y). */
static void bypass(fz_ctx *fz, int i, int x, int y) {
    const int *cons;
    int nc = fz_consumers(fz, y, &cons);
    if (fz_uses(fz, y) != nc) return;
    for (int c = 0; c < nc; c++) {
        tdm_node *r = fz_node(fz, cons[c]);
        for (int k = 0; k < r->n_inputs; k++)
            if (r->inputs[k] == y) r->inputs[k] = x;
    }
    fz_kill(fz, i);
    fz->count++;
}

/* Identity(x) -> y with y neither a graph output nor read by a subgraph (those name y):
 * every reader of y reads x instead. */
tdm_status *fz_pass_identity(fz_ctx *fz) {
    for (size_t i = 0; i < fz->g->n_nodes; i++) {
        TDM_TRY(fz_refresh(fz));
        if (!fz_is_op(fz, (int)i, "Identity")) continue;
        tdm_node *n = fz_node(fz, (int)i);
        if (n->n_inputs != 1 || n->n_outputs != 1 || n->inputs[0] < 0 || n->outputs[0] < 0)
            continue;
        int x = n->inputs[0], y = n->outputs[0];
        bypass(fz, (int)i, x, y);
    }
    return NULL;
}

/* ---- Slice over whole axes ---- */

/* Element i of an int32/int64 constant; false when t is not one or i is out of range. */
static bool const_int(const tdm_tensor *t, int64_t i, int64_t *v) {
    if (!t || i < 0 || i >= t->count) return false;
    if (t->dtype == TDM_INT64) *v = ((const int64_t *)t->data)[i];
    else if (t->dtype == TDM_INT32) *v = ((const int32_t *)t->data)[i];
    else return false;
    return true;
}

/* Slice (opset >= 10) whose every sliced axis is taken whole with step 1 (start 0, end at
 * least the dim: INT32_MAX or more, exporters' "to the end", or the dim when it is known)
 * copies its input: y's readers read x instead (y neither a graph output nor read by a
 * subgraph). jax2tf writes such Slices around magika's Conv (8 MB copied per run). */
tdm_status *fz_pass_noop_slice(fz_ctx *fz) {
    for (size_t i = 0; i < fz->g->n_nodes; i++) {
        TDM_TRY(fz_refresh(fz));
        if (!fz_is_op(fz, (int)i, "Slice")) continue;
        tdm_node *n = fz_node(fz, (int)i);
        if (n->opset < 10 || n->n_inputs < 3 || n->n_outputs != 1 || n->outputs[0] < 0 ||
            n->inputs[0] < 0)
            continue;
        int x = n->inputs[0], y = n->outputs[0], xr = fz->g->values[x].rank;
        const tdm_tensor *st = fz_const(fz, n->inputs[1]), *en = fz_const(fz, n->inputs[2]);
        const tdm_tensor *ax = n->n_inputs > 3 && n->inputs[3] >= 0 ? fz_const(fz, n->inputs[3]) : NULL;
        const tdm_tensor *sp = n->n_inputs > 4 && n->inputs[4] >= 0 ? fz_const(fz, n->inputs[4]) : NULL;
        if (xr < 1 || !st || !en || st->rank != 1 || en->count != st->count ||
            (n->n_inputs > 3 && n->inputs[3] >= 0 && (!ax || ax->count != st->count)) ||
            (n->n_inputs > 4 && n->inputs[4] >= 0 && (!sp || sp->count != st->count)) ||
            fz->g->values[y].dtype != fz->g->values[x].dtype)
            continue;
        bool whole = true;
        for (int64_t k = 0; k < st->count && whole; k++) {
            int64_t a = k, b, e, step = 1;
            if ((ax && !const_int(ax, k, &a)) || !const_int(st, k, &b) || !const_int(en, k, &e) ||
                (sp && !const_int(sp, k, &step))) {
                whole = false;
                break;
            }
            if (a < 0) a += xr;
            int64_t dim = a >= 0 && a < xr ? fz->g->values[x].dims[a] : -1;
            whole = a >= 0 && a < xr && step == 1 && b == 0 &&
                    (e >= INT32_MAX || (dim >= 0 && e >= dim));
        }
        if (!whole) continue;
        bypass(fz, (int)i, x, y);
    }
    return NULL;
}

/* ---- a stack reduced over its new axis ---- */

/* The single axis Unsqueeze node u inserts into a value of rank r (normalized), or -1. */
static int64_t unsqueeze_axis(const fz_ctx *fz, const tdm_node *u, int r) {
    int64_t a;
    if (u->opset < 13) {
        size_t na;
        const int64_t *ax = tdm_attr_ints(u, "axes", &na);
        if (!ax || na != 1) return -1;
        a = ax[0];
    } else {
        const tdm_tensor *t = u->n_inputs > 1 && u->inputs[1] >= 0 ? fz_const(fz, u->inputs[1]) : NULL;
        if (!const_int(t, 0, &a) || t->count != 1) return -1;
    }
    if (a < 0) a += r + 1;
    return a >= 0 && a <= r ? a : -1;
}

/* ReduceMax / ReduceMin (keepdims 0) over axis a of Concat(axis a) of values that
 * Unsqueeze(axis a) made, each read by that Concat alone -> Max / Min of the values,
 * element-wise (they all have one shape: the Concat's other dims agree). PyTorch's
 * torch.stack(...).max(dim) (attacut's three convolution branches): the stack copies element
 * by element and the reduction runs over an innermost axis of 3. (Not ReduceMean -> Mean:
 * the CUDA backend has no variadic Mean, and the pass runs before placement.) */
tdm_status *fz_pass_stack_reduce(fz_ctx *fz) {
    static const char *const red[][2] = {{"ReduceMax", "Max"}, {"ReduceMin", "Min"}};
    for (size_t i = 0; i < fz->g->n_nodes; i++) {
        TDM_TRY(fz_refresh(fz));
        int k = -1;
        for (int j = 0; j < 2; j++)
            if (fz_is_op(fz, (int)i, red[j][0])) k = j;
        if (k < 0) continue;
        const tdm_node *rn = fz_node(fz, (int)i);
        if (rn->n_outputs != 1 || rn->outputs[0] < 0 || rn->inputs[0] < 0 ||
            tdm_attr_int(rn, "keepdims", 1) != 0)
            continue;
        int cv = rn->inputs[0], ci = fz_producer(fz, cv), cr = fz->g->values[cv].rank;
        int64_t axes[TDM_MAX_RANK];
        int na;
        if (cr < 1 || !fz_is_op(fz, ci, "Concat") || fz_sole_consumer(fz, cv) != (int)i ||
            fz_uses(fz, cv) != 1 || !fz_reduce_axes(fz, rn, cr, axes, &na) || na != 1)
            continue;
        const tdm_node *cn = fz_node(fz, ci);
        int64_t ca = tdm_attr_int(cn, "axis", 0);
        if (ca < 0) ca += cr;
        if (ca != axes[0] || cn->n_inputs < 1 || cn->n_inputs > 64) continue;
        int srcs[64];
        bool fits = true;
        for (int j = 0; j < cn->n_inputs && fits; j++) {
            int uv = cn->inputs[j], ui = uv >= 0 ? fz_producer(fz, uv) : -1;
            fits = fz_is_op(fz, ui, "Unsqueeze") && fz_uses(fz, uv) == 1 &&
                   fz_sole_consumer(fz, uv) == ci;
            if (!fits) break;
            const tdm_node *un = fz_node(fz, ui);
            int sv = un->inputs[0];
            fits = sv >= 0 && fz->g->values[sv].rank == cr - 1 &&
                   fz->g->values[sv].dtype == fz->g->values[cv].dtype &&
                   unsqueeze_axis(fz, un, cr - 1) == ca;
            srcs[j] = sv;
        }
        if (!fits) continue;
        char *name = tdm_strdup(fz->g->alloc, rn->name);
        if (!name) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory in graph fusion");
        int n_src = cn->n_inputs, out = rn->outputs[0], mi;
        tdm_status *st = fz_new_node(fz, red[k][1], "", name, n_src, 1, &mi);
        tdm_free(fz->g->alloc, name);
        TDM_TRY(st);
        tdm_node *m = fz_node(fz, mi);
        for (int j = 0; j < n_src; j++) m->inputs[j] = srcs[j];
        m->outputs[0] = out;
        cn = fz_node(fz, ci);
        for (int j = 0; j < n_src; j++) fz_kill(fz, fz_producer(fz, cn->inputs[j]));
        fz_kill(fz, ci);
        fz_kill(fz, (int)i);
        fz->count++;
    }
    return NULL;
}

/* ---- Conv + Add(per-channel constant) ---- */

/* c is a float32 constant that adds one value per channel to a rank-yr convolution output
 * with m channels: every dim 1 except, possibly, the one aligned with the channel axis,
 * which is m. Returns its data (count 1 or m) or NULL. */
static const float *channel_const(const fz_ctx *fz, int c, int yr, int64_t m) {
    const tdm_tensor *t = fz_const(fz, c);
    if (!t || t->dtype != TDM_FLOAT || t->rank > yr || (t->count != 1 && t->count != m))
        return NULL;
    int ch = 1 - (yr - t->rank); /* the channel axis in t's dims (< 0: not there) */
    for (int d = 0; d < t->rank; d++)
        if (t->dims[d] != 1 && d != ch) return NULL;
    return t->data;
}

/* Squeeze node q of a rank-r input: how many axes it removes when all of them are spatial
 * (>= 2: batch and channel stay where they are) and given as constants; else 0. */
static int squeeze_spatial(const fz_ctx *fz, const tdm_node *q, int r) {
    int64_t ax[TDM_MAX_RANK];
    int n;
    if (!fz_axes_of(fz, q, 13, ax, &n) || n < 1 || n > r - 2) return 0;
    for (int i = 0; i < n; i++) {
        int64_t a = ax[i] < 0 ? ax[i] + r : ax[i];
        if (a < 2 || a >= r) return 0;
    }
    return n;
}

/* Conv(X, W[, B]) -> Add(., C) == Conv(X, W, B + C) and
 * Conv(X, W[, B]) -> Mul(., S) == Conv(X, W * S, B * S) (per output channel) when C / S holds
 * one value per output channel (channel_const) and the Add / Mul is the Conv output's only
 * reader. Also through a Squeeze of spatial axes between them (magika: Conv -> Squeeze(3) ->
 * Add(C [1, 512, 1])), which stays, after the Conv. New constants are made; the originals
 * may be shared with other nodes. */
static tdm_status *fold_affine(fz_ctx *fz, int ai, bool mul) {
    tdm_node *op = fz_node(fz, ai);
    if (op->n_inputs != 2 || op->n_outputs != 1 || op->outputs[0] < 0) return NULL;
    for (int s = 0; s < 2; s++) {
        int y = op->inputs[s], c = op->inputs[1 - s], ci = fz_producer(fz, y), qi = -1;
        if (y == c || fz_sole_consumer(fz, y) != ai || !fz_is_f32(fz, y)) continue;
        int yr = fz->g->values[y].rank, squeezed = 0;
        if (fz_is_op(fz, ci, "Squeeze")) { /* Conv -> Squeeze(spatial axes) -> Add / Mul */
            const tdm_node *q = fz_node(fz, ci);
            int y0 = q->n_inputs >= 1 ? q->inputs[0] : -1, c0 = fz_producer(fz, y0);
            if (!fz_is_op(fz, c0, "Conv") || fz_sole_consumer(fz, y0) != ci || q->n_outputs != 1)
                continue;
            const tdm_node *cv = fz_node(fz, c0);
            int r = cv->n_inputs >= 2 ? fz->g->values[cv->inputs[1]].rank : -1; /* W's = Y's */
            if (r < 3 || !(squeezed = squeeze_spatial(fz, q, r))) continue;
            qi = ci;
            ci = c0;
            yr = r - squeezed;
        }
        if (!fz_is_op(fz, ci, "Conv")) continue;
        tdm_node *conv = fz_node(fz, ci);
        if (conv->n_inputs < 2 || conv->n_outputs != 1 || yr < (qi >= 0 ? 2 : 3)) continue;
        int64_t m = fz->g->values[conv->inputs[1]].dims[0];
        if (fz->g->values[conv->inputs[1]].rank != yr + squeezed || m < 1) continue;
        const float *cv = channel_const(fz, c, yr, m);
        const tdm_tensor *bt = conv->n_inputs > 2 && conv->inputs[2] >= 0
                                   ? fz_const(fz, conv->inputs[2]) : NULL;
        const tdm_tensor *wt = fz_const(fz, conv->inputs[1]);
        if (!cv || (conv->n_inputs > 2 && conv->inputs[2] >= 0 &&
                    (!bt || bt->dtype != TDM_FLOAT || bt->count != m)))
            continue;
        if (mul && (!wt || wt->dtype != TDM_FLOAT || wt->count % m)) continue;
        bool one = fz_const(fz, c)->count == 1;
        int wv = -1, bv;
        if (mul) { /* W * S per output channel */
            tdm_tensor *nw;
            TDM_TRY(tdm_tensor_new(fz->g->alloc, TDM_FLOAT, wt->rank, wt->dims, &nw));
            int64_t per = wt->count / m;
            const float *src = wt->data;
            float *dst = nw->data;
            for (int64_t k = 0; k < m; k++)
                for (int64_t j = 0; j < per; j++) dst[k * per + j] = src[k * per + j] * cv[one ? 0 : k];
            TDM_TRY(fz_new_const(fz, fz->g->values[fz_node(fz, ci)->inputs[1]].name, nw, &wv));
            conv = fz_node(fz, ci);
            bt = conv->n_inputs > 2 && conv->inputs[2] >= 0 ? fz_const(fz, conv->inputs[2]) : NULL;
        }
        tdm_tensor *nb;
        TDM_TRY(tdm_tensor_new(fz->g->alloc, TDM_FLOAT, 1, &m, &nb));
        float *d = nb->data;
        for (int64_t k = 0; k < m; k++) {
            float b0 = bt ? ((const float *)bt->data)[k] : 0.0f, v = cv[one ? 0 : k];
            d[k] = mul ? b0 * v : b0 + v;
        }
        TDM_TRY(fz_new_const(fz, fz->g->values[c].name, nb, &bv));
        conv = fz_node(fz, ci);
        op = fz_node(fz, ai);
        if (conv->n_inputs < 3) {
            int *ins = tdm_alloc(fz->g->alloc, 3 * sizeof(int));
            if (!ins) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory in graph fusion");
            ins[0] = conv->inputs[0];
            ins[1] = conv->inputs[1];
            tdm_free(fz->g->alloc, conv->inputs);
            conv->inputs = ins;
            conv->n_inputs = 3;
        }
        if (wv >= 0) conv->inputs[1] = wv;
        conv->inputs[2] = bv;
        if (qi >= 0) fz_node(fz, qi)->outputs[0] = op->outputs[0];
        else conv->outputs[0] = op->outputs[0];
        fz_kill(fz, ai);
        fz->count++;
        return NULL;
    }
    return NULL;
}

tdm_status *fz_pass_conv_bias(fz_ctx *fz) {
    for (size_t i = 0; i < fz->g->n_nodes; i++) {
        TDM_TRY(fz_refresh(fz));
        if (fz_is_op(fz, (int)i, "Add")) TDM_TRY(fold_affine(fz, (int)i, false));
        else if (fz_is_op(fz, (int)i, "Mul")) TDM_TRY(fold_affine(fz, (int)i, true));
    }
    return NULL;
}

/* ---- ReduceMean over H, W -> GlobalAveragePool ---- */

static tdm_status *reduce_to_gap(fz_ctx *fz, int ri) {
    const tdm_node *n = fz_node(fz, ri);
    if (n->n_inputs < 1 || n->n_outputs != 1 || n->outputs[0] < 0 || n->inputs[0] < 0) return NULL;
    int x = n->inputs[0];
    if (!fz_is_f32(fz, x) || fz->g->values[x].rank != 4 || !tdm_attr_int(n, "keepdims", 1))
        return NULL;
    int64_t axes[TDM_MAX_RANK];
    int count = 0;
    if (!fz_reduce_axes(fz, n, 4, axes, &count) || count != 2 || axes[0] + axes[1] != 5 ||
        axes[0] * axes[1] != 6)
        return NULL;
    char *name = tdm_strdup(fz->g->alloc, n->name);
    if (!name) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory in graph fusion");
    int gi;
    tdm_status *st = fz_new_node(fz, "GlobalAveragePool", "", name, 1, 1, &gi);
    tdm_free(fz->g->alloc, name);
    TDM_TRY(st);
    n = fz_node(fz, ri);
    fz_node(fz, gi)->inputs[0] = x;
    fz_node(fz, gi)->outputs[0] = n->outputs[0];
    fz_node(fz, gi)->device = n->device;
    fz_kill(fz, ri);
    fz->count++;
    return NULL;
}

tdm_status *fz_pass_reduce_pool(fz_ctx *fz) {
    for (size_t i = 0; i < fz->g->n_nodes; i++) {
        TDM_TRY(fz_refresh(fz));
        if (fz_is_op(fz, (int)i, "ReduceMean")) TDM_TRY(reduce_to_gap(fz, (int)i));
    }
    return NULL;
}

/* ---- hard-swish ---- */

static bool take(fz_act_match *m, int node) {
    if (node < 0 || m->n >= FZ_ACT_MAX_NODES) return false;
    m->nodes[m->n++] = node;
    return true;
}

/* The single reader of v when it is `op` (default domain) with one output; else -1. */
static int sole_op(const fz_ctx *fz, int v, const char *op) {
    int i = fz_sole_consumer(fz, v);
    if (!fz_is_op(fz, i, op)) return -1;
    const tdm_node *n = fz_node(fz, i);
    return n->n_outputs == 1 && n->outputs[0] >= 0 ? i : -1;
}

/* Binary node i computes v op k for a scalar constant k close to c (Div: v must be the
 * dividend); its output, or -1. */
static int with_const(const fz_ctx *fz, int i, const char *op, int v, float c, int rank) {
    if (!fz_is_op(fz, i, op)) return -1;
    const tdm_node *n = fz_node(fz, i);
    if (n->n_inputs != 2 || n->n_outputs != 1 || n->outputs[0] < 0) return -1;
    if (strcmp(op, "Div") == 0 && n->inputs[0] != v) return -1;
    float k;
    if (!fz_scalar(fz, fz_other_input(n, v), rank, &k) || !fz_close(k, c)) return -1;
    return n->outputs[0];
}

/* v / 6 or v * (1/6) by v's only reader: its output (taking the node), or -1. */
static int div6(const fz_ctx *fz, int v, int rank, fz_act_match *m) {
    int i = fz_sole_consumer(fz, v), o = with_const(fz, i, "Div", v, 6.0f, rank);
    if (o < 0) o = with_const(fz, i, "Mul", v, 1.0f / 6.0f, rank);
    return o >= 0 && take(m, i) ? o : -1;
}

/* Clip node i (reading v) bounds [0, 6]: attributes before opset 11, constant inputs after. */
static bool clip06(const fz_ctx *fz, int i, int v) {
    if (!fz_is_op(fz, i, "Clip")) return false;
    const tdm_node *n = fz_node(fz, i);
    if (n->n_inputs < 1 || n->inputs[0] != v || n->n_outputs != 1 || n->outputs[0] < 0)
        return false;
    float lo = -FLT_MAX, hi = FLT_MAX;
    if (n->opset < 11) {
        if (n->n_inputs != 1) return false;
        lo = tdm_attr_float(n, "min", lo);
        hi = tdm_attr_float(n, "max", hi);
    } else {
        if (n->n_inputs > 3) return false;
        if (n->n_inputs > 1 && n->inputs[1] >= 0 && !fz_scalar(fz, n->inputs[1], 1, &lo))
            return false;
        if (n->n_inputs > 2 && n->inputs[2] >= 0 && !fz_scalar(fz, n->inputs[2], 1, &hi))
            return false;
    }
    return lo == 0.0f && fz_close(hi, 6.0f);
}

/* Every reader of x is a matched node (x is read by the hard-swish alone). */
static bool x_only_in(const fz_ctx *fz, int x, const fz_act_match *m) {
    int slots = 0;
    for (int k = 0; k < m->n; k++) {
        const tdm_node *n = fz_node(fz, m->nodes[k]);
        for (int j = 0; j < n->n_inputs; j++) slots += n->inputs[j] == x;
    }
    return slots == fz_uses(fz, x);
}

/* x * g where Mul node i reads g (x's product with the gate): its output, or -1. */
static int times_x(const fz_ctx *fz, int g, int x, fz_act_match *m) {
    int i = sole_op(fz, g, "Mul");
    if (i < 0 || fz_other_input(fz_node(fz, i), g) != x || !take(m, i)) return -1;
    return fz_node(fz, i)->outputs[0];
}

/* The hard-swish reached from one reader r of x. */
static bool hswish_from(const fz_ctx *fz, int x, int r, int rank, fz_act_match *m) {
    m->n = 0;
    const tdm_node *n = fz_node(fz, r);
    if (fz_is_op(fz, r, "HardSigmoid")) { /* x * HardSigmoid(x, 1/6, 1/2) */
        if (n->n_inputs != 1 || n->n_outputs != 1 || n->outputs[0] < 0 ||
            !fz_close(tdm_attr_float(n, "alpha", 0.2f), 1.0f / 6.0f) ||
            !fz_close(tdm_attr_float(n, "beta", 0.5f), 0.5f) || !take(m, r))
            return false;
        m->out = times_x(fz, n->outputs[0], x, m);
        return m->out >= 0;
    }
    int a = with_const(fz, r, "Add", x, 3.0f, rank); /* x + 3 */
    if (a < 0 || !take(m, r)) return false;
    int ci = fz_sole_consumer(fz, a);
    if (!clip06(fz, ci, a) || !take(m, ci)) return false;
    int c = fz_node(fz, ci)->outputs[0];
    int p = times_x(fz, c, x, m); /* (x * clip) / 6 */
    if (p >= 0) {
        m->out = div6(fz, p, rank, m);
        return m->out >= 0;
    }
    int g = div6(fz, c, rank, m); /* x * (clip / 6) */
    if (g < 0) return false;
    m->out = times_x(fz, g, x, m);
    return m->out >= 0;
}

bool fz_match_hswish(const fz_ctx *fz, int x, int rank, fz_act_match *m) {
    const int *cons;
    int nc = fz_consumers(fz, x, &cons);
    if (nc != 2) return false;
    for (int c = 0; c < nc; c++) {
        if (!hswish_from(fz, x, cons[c], rank, m) || !x_only_in(fz, x, m)) continue;
        m->name = "HardSwish";
        m->n_params = 0;
        return true;
    }
    return false;
}

/* ---- SiLU ---- */

/* x * Sigmoid(x) (either operand order), x read by those two nodes alone. */
bool fz_match_swish(const fz_ctx *fz, int x, fz_act_match *m) {
    const int *cons;
    int nc = fz_consumers(fz, x, &cons);
    if (nc != 2) return false;
    for (int c = 0; c < nc; c++) {
        m->n = 0;
        const tdm_node *n = fz_node(fz, cons[c]);
        if (!fz_is_op(fz, cons[c], "Sigmoid") || n->n_inputs != 1 || n->n_outputs != 1 ||
            n->outputs[0] < 0 || !take(m, cons[c]))
            continue;
        m->out = times_x(fz, n->outputs[0], x, m);
        if (m->out < 0 || !x_only_in(fz, x, m)) continue;
        m->name = "Swish";
        m->n_params = 0;
        return true;
    }
    return false;
}
