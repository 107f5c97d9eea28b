/* Blocked-layout pass: chains of convolutions, poolings, element-wise ops, residual Adds and
 * channel Concats keep their tensors in oneDNN's channel-blocked layout (nChw<B>c) or in
 * channels-last (NHWC) instead of plain NCHW, so no convolution reorders its input and
 * output on every run. The block B is the device's (tdm_device_iface.channel_block, asked by
 * the planner: what oneDNN's convolutions take on the running CPU, nChw8c on AVX2, nChw16c on
 * AVX-512 without brgemm convolutions, channels-last where oneDNN prefers it); this pass never
 * asks a backend itself.
 *
 * Channels-last is the blocked form with one block of all C channels per tensor
 * (TDM_BLOCK_CHANNELS_LAST, ops/fused.h): [N, 1, H, W, C] is NHWC memory. Everything below
 * holds for it with B = C, so there are no padding channels, and a channel Concat or Split
 * works on the last axis of the twins (each tensor's block) with the sizes unchanged: there
 * is no BlockedConcat.
 *
 * The layout is explicit in the graph (ops/fused.h): a blocked tensor has the logical shape
 * [N, ceil(C/B), H, W, B]. The executor, the memory planner and copies between devices see
 * ordinary tensors; only the ops below ever read them:
 *  - Conv / FusedConv (2-D, float)       -> BlockedConv (input blocked or plain, output
 *                                           blocked, Z blocked);
 *  - MaxPool (no Indices), AveragePool,
 *    GlobalAveragePool, GlobalMaxPool    -> BlockedPool (blocked input);
 *  - Relu, LeakyRelu, Sigmoid, Tanh, HardSigmoid, HardSwish, Clip (constant bounds): the
 *    same op on the blocked tensor (element-wise, so the layout does not matter);
 *  - Add, Sub, Mul, Max, Min of two blocked tensors of the same plain shape, of the same
 *    known channel count (N, H, W may broadcast), or of a tensor and a per-channel
 *    [N, C, 1, 1] one (a squeeze-excitation scale): the same op;
 *  - Concat on the channel axis when every input's channel count is a multiple of B: Concat
 *    on the block axis; otherwise (a detector's 4 x 24 channels on AVX-512) BlockedConcat;
 *    channels-last: Concat on the last axis;
 *  - Split on the channel axis when every output's channel count is a multiple of B (YOLOv8's
 *    C2f blocks: a convolution's output cut in halves): Split on the block axis, the sizes
 *    divided by B; channels-last: Split on the last axis, the sizes as they are;
 *  - Resize (opset 11+, mode nearest, constant scales that keep N and C, no sizes, a
 *    coordinate mapping that is the identity at scale 1): the same op with the scales
 *    [1, 1, sh, sw, 1] (the FPN upsampling of detectors; per spatial axis the same mapping).
 * Padding channels may hold any finite value after an element-wise op (Sigmoid(0) = 0.5):
 * the ops above never mix channels except the convolution, whose reordered weights are
 * zero there, and FromBlocked drops them. Every other reader of a value that became
 * blocked (and a graph output) reads it through one FromBlocked node that writes the
 * original value. A convolution is converted only when its input is already blocked or
 * one of its readers could take a blocked tensor, so a lone convolution stays as it was.
 *
 * Placed graphs: only nodes whose `device` is negative are converted (unplaced, or placed on
 * the CPU by the caller, which marks them so; sched/plan.c). A node with a device >= 0 runs
 * elsewhere: it never reads a blocked tensor (it gets a FromBlocked like any plain reader)
 * and does not make its input "wanted" blocked. New nodes take the device mark of the node
 * they stand for (FromBlocked: -1, the CPU), so a blocked tensor never leaves the CPU and
 * copies to other devices carry plain data. */
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "graph/fuse_impl.h"
#include "ops/fused.h"

typedef struct bl_ctx {
    fz_ctx *fz;
    int64_t block; /* B, or TDM_BLOCK_CHANNELS_LAST */
    bool cl;       /* channels-last */
    size_t nv;   /* values before the pass (blk[] covers them) */
    int *blk;    /* per original value: its blocked twin, or -1 */
    bool *wants; /* per original value: some reader could take it blocked */
} bl_ctx;

static bool is_op(const tdm_node *n, const char *op) {
    return !n->dead && !n->domain[0] && strcmp(n->op_type, op) == 0;
}


static const char *const unary_ops[] = {"Relu",    "LeakyRelu",   "Sigmoid", "Tanh",
                                        "HardSigmoid", "HardSwish", "Clip"};
static const char *const binary_ops[] = {"Add", "Sub", "Mul", "Max", "Min"};
static const char *const pool_ops[] = {"MaxPool", "AveragePool", "GlobalAveragePool",
                                       "GlobalMaxPool"};

static bool in_list(const tdm_node *n, const char *const *ops, size_t count) {
    for (size_t i = 0; i < count; i++)
        if (is_op(n, ops[i])) return true;
    return false;
}
#define IN_LIST(n, ops) in_list(n, ops, sizeof ops / sizeof ops[0])

static bool is_conv(const tdm_node *n) {
    return is_op(n, "Conv") || fz_node_is_fused(n, "FusedConv");
}

/* A Resize the blocked layout can take (see the header): its constant scales, or NULL. */
static const tdm_tensor *resize_scales(const fz_ctx *fz, const tdm_node *n) {
    if (!is_op(n, "Resize") || n->opset < 11 || n->n_inputs < 3 || n->n_inputs > 4 ||
        n->n_outputs != 1 || n->inputs[2] < 0 || (n->n_inputs == 4 && n->inputs[3] >= 0))
        return NULL;
    if (strcmp(tdm_attr_string(n, "mode", "nearest"), "nearest") != 0) return NULL;
    static const char *const ctms[] = {"half_pixel", "pytorch_half_pixel", "align_corners",
                                       "asymmetric"};
    const char *ct = tdm_attr_string(n, "coordinate_transformation_mode", "half_pixel");
    bool ok = false;
    for (size_t k = 0; k < sizeof ctms / sizeof ctms[0]; k++) ok |= strcmp(ct, ctms[k]) == 0;
    size_t na = 0;
    if (!ok || (tdm_attr_ints(n, "axes", &na) && na)) return NULL;
    const tdm_tensor *t = fz_const(fz, n->inputs[2]);
    if (!t || t->dtype != TDM_FLOAT || t->count != 4) return NULL;
    const float *sc = t->data;
    return sc[0] == 1.0f && sc[1] == 1.0f && sc[2] > 0.0f && sc[3] > 0.0f ? t : NULL;
}

/* Plain rank-4 float value with a known channel count. */
static bool plain4(const bl_ctx *b, int v) {
    if (v < 0 || (size_t)v >= b->nv) return false;
    const tdm_value *val = &b->fz->g->values[v];
    return val->dtype == TDM_FLOAT && val->rank == 4 && val->dims[1] > 0;
}

static int64_t channels(const bl_ctx *b, int v) { return b->fz->g->values[v].dims[1]; }

static bool blocked(const bl_ctx *b, int v) {
    return v >= 0 && (size_t)v < b->nv && b->blk[v] >= 0;
}

/* A new float value for the blocked twin of v (shape left to inference). */
static tdm_status *new_twin(bl_ctx *b, int v, int *out) {
    char base[96];
    const char *name = b->fz->g->values[v].name;
    snprintf(base, sizeof base, "%.80s/blocked", name ? name : "");
    return fz_new_value(b->fz, base, TDM_FLOAT, -1, NULL, out);
}

static tdm_status *new_node(bl_ctx *b, const char *op, int like, int n_in, int *idx) {
    char name[128];
    snprintf(name, sizeof name, "%.100s/%s", fz_node(b->fz, like)->name, op);
    TDM_TRY(fz_new_node(b->fz, op, TDM_FUSED_DOMAIN, name, n_in, 1, idx));
    fz_node(b->fz, *idx)->device = fz_node(b->fz, like)->device; /* (CPU mark: negative) */
    return NULL;
}

/* May node n become blocked (unplaced, or on the CPU)? */
static bool on_cpu(const tdm_node *n) { return n->device < 0; }

static tdm_status *copy_attrs(bl_ctx *b, int from, int to) {
    int na = fz_node(b->fz, from)->n_attrs;
    for (int k = 0; k < na; k++) TDM_TRY(fz_attr_copy(b->fz, to, &fz_node(b->fz, from)->attrs[k]));
    return NULL;
}

/* Blocked twin of a plain value that has none: a ToBlocked node. */
static tdm_status *to_blocked(bl_ctx *b, int v, int like, int *out) {
    if (blocked(b, v)) {
        *out = b->blk[v];
        return NULL;
    }
    int t, nn;
    TDM_TRY(new_twin(b, v, &t));
    TDM_TRY(new_node(b, "ToBlocked", like, 1, &nn));
    fz_node(b->fz, nn)->inputs[0] = v;
    fz_node(b->fz, nn)->outputs[0] = t;
    TDM_TRY(fz_attr_int(b->fz, nn, "block", b->block));
    b->blk[v] = t; /* other readers may share it; v itself stays plain */
    *out = t;
    return NULL;
}

static tdm_status *convert_conv(bl_ctx *b, int i) {
    tdm_node *n = fz_node(b->fz, i);
    if (n->n_inputs < 2 || n->n_outputs != 1 || !fz_attrs_copyable(n) || !on_cpu(n)) return NULL;
    int x = n->inputs[0], w = n->inputs[1], y = n->outputs[0];
    int z = fz_node_is_fused(n, "FusedConv") && n->n_inputs > 3 ? n->inputs[3] : -1;
    const tdm_value *wv = w >= 0 ? &b->fz->g->values[w] : NULL;
    if (!plain4(b, x) || !plain4(b, y) || !wv || wv->rank != 4 || blocked(b, w) ||
        (n->n_inputs > 2 && blocked(b, n->inputs[2])) || (z >= 0 && !plain4(b, z)))
        return NULL;
    if (!blocked(b, x) && !b->wants[y]) return NULL;
    int zb = -1, yb, nn;
    if (z >= 0) TDM_TRY(to_blocked(b, z, i, &zb));
    TDM_TRY(new_twin(b, y, &yb));
    TDM_TRY(new_node(b, "BlockedConv", i, fz_node(b->fz, i)->n_inputs, &nn)); /* (n moved) */
    n = fz_node(b->fz, i);
    tdm_node *c = fz_node(b->fz, nn);
    for (int k = 0; k < n->n_inputs; k++) c->inputs[k] = n->inputs[k];
    if (blocked(b, x)) c->inputs[0] = b->blk[x];
    if (z >= 0) c->inputs[3] = zb;
    c->outputs[0] = yb;
    TDM_TRY(copy_attrs(b, i, nn));
    TDM_TRY(fz_attr_int(b->fz, nn, "block", b->block));
    fz_kill(b->fz, i);
    b->blk[y] = yb;
    b->fz->count++;
    return NULL;
}

static tdm_status *convert_pool(bl_ctx *b, int i) {
    tdm_node *n = fz_node(b->fz, i);
    if (n->n_inputs != 1 || n->n_outputs < 1 || (n->n_outputs > 1 && n->outputs[1] >= 0) ||
        !fz_attrs_copyable(n) || !on_cpu(n))
        return NULL;
    int x = n->inputs[0], y = n->outputs[0];
    if (!blocked(b, x) || !plain4(b, x) || !plain4(b, y)) return NULL;
    int yb, nn;
    TDM_TRY(new_twin(b, y, &yb));
    TDM_TRY(new_node(b, "BlockedPool", i, 1, &nn));
    fz_node(b->fz, nn)->inputs[0] = b->blk[x];
    fz_node(b->fz, nn)->outputs[0] = yb;
    TDM_TRY(copy_attrs(b, i, nn));
    n = fz_node(b->fz, i); /* (appending attributes to nn leaves node i in place) */
    TDM_TRY(fz_attr_string(b->fz, nn, "op", n->op_type));
    TDM_TRY(fz_attr_int(b->fz, nn, "src_opset", n->opset));
    TDM_TRY(fz_attr_int(b->fz, nn, "channels", channels(b, x)));
    TDM_TRY(fz_attr_int(b->fz, nn, "block", b->block));
    fz_kill(b->fz, i);
    b->blk[y] = yb;
    b->fz->count++;
    return NULL;
}

/* Concat of blocked inputs whose channel counts are not all multiples of the block (checked
 * by the caller): a BlockedConcat that packs the channels. */
static tdm_status *concat_unaligned(bl_ctx *b, int i) {
    int nin = fz_node(b->fz, i)->n_inputs, y = fz_node(b->fz, i)->outputs[0], yb, nn;
    int64_t ch[64];
    if (nin > 64) return NULL;
    for (int k = 0; k < nin; k++) ch[k] = channels(b, fz_node(b->fz, i)->inputs[k]);
    TDM_TRY(new_twin(b, y, &yb));
    TDM_TRY(new_node(b, "BlockedConcat", i, nin, &nn));
    const tdm_node *n = fz_node(b->fz, i);
    tdm_node *c = fz_node(b->fz, nn);
    for (int k = 0; k < nin; k++) c->inputs[k] = b->blk[n->inputs[k]];
    c->outputs[0] = yb;
    TDM_TRY(fz_attr_int(b->fz, nn, "block", b->block));
    TDM_TRY(fz_attr_ints(b->fz, nn, "channels", ch, nin));
    fz_kill(b->fz, i);
    b->blk[y] = yb;
    b->fz->count++;
    return NULL;
}

/* Element-wise ops and Concat stay what they are, reading and writing blocked twins. */
static tdm_status *retarget(bl_ctx *b, int i, int n_blocked) {
    tdm_node *n = fz_node(b->fz, i);
    int y = n->outputs[0], yb;
    TDM_TRY(new_twin(b, y, &yb));
    n = fz_node(b->fz, i);
    for (int k = 0; k < n_blocked; k++) n->inputs[k] = b->blk[n->inputs[k]];
    n->outputs[0] = yb;
    b->blk[y] = yb;
    b->fz->dirty = true;
    b->fz->count++;
    return NULL;
}

/* The channel axis of Concat / Split node i on the rank-5 twins: the block axis (1), or
 * channels-last the last (4); an attribute set to its default (1) is added. */
static tdm_status *set_channel_axis(bl_ctx *b, int i) {
    int64_t axis = b->cl ? 4 : 1;
    tdm_node *n = fz_node(b->fz, i);
    for (int k = 0; k < n->n_attrs; k++)
        if (strcmp(n->attrs[k].name, "axis") == 0) {
            n->attrs[k].i = axis;
            return NULL;
        }
    return fz_attr_int(b->fz, i, "axis", axis);
}

/* x has y's shape and s is [N, C, 1, 1] of the same N and C (a squeeze-excitation scale):
 * their blocked twins [N, C/B, H, W, B] and [N, C/B, 1, 1, B] broadcast channel by channel
 * just as the plain tensors do. */
static bool channel_scale(const bl_ctx *b, int x, int s, int y) {
    const tdm_value *sv = &b->fz->g->values[s];
    return fz_same_shape(b->fz, x, y) && plain4(b, s) && sv->dims[2] == 1 && sv->dims[3] == 1 &&
           sv->dims[1] == channels(b, x) && fz_same_dim(b->fz, s, 0, x, 0);
}

static tdm_status *convert_other(bl_ctx *b, int i) {
    tdm_node *n = fz_node(b->fz, i);
    if (n->n_outputs != 1 || n->n_inputs < 1 || n->n_implicit || !plain4(b, n->outputs[0]) ||
        !on_cpu(n))
        return NULL;
    if (IN_LIST(n, unary_ops)) {
        if (!blocked(b, n->inputs[0])) return NULL;
        for (int k = 1; k < n->n_inputs; k++) /* Clip bounds: constants */
            if (n->inputs[k] >= 0 && !fz_const(b->fz, n->inputs[k])) return NULL;
        return retarget(b, i, 1);
    }
    if (IN_LIST(n, binary_ops)) {
        if (n->n_inputs != 2 || !blocked(b, n->inputs[0]) || !blocked(b, n->inputs[1]))
            return NULL;
        int a0 = n->inputs[0], a1 = n->inputs[1], y = n->outputs[0];
        bool same = fz_same_shape(b->fz, a0, a1) && fz_same_shape(b->fz, a0, y);
        /* the same known channel count everywhere: N, H and W broadcast in the blocked twins
         * [N, C/B, H, W, B] as in the plain tensors (e.g. an FPN's Add of a Resize output and
         * a backbone map, whose dims are not provably equal before the input shape is known) */
        bool same_c = plain4(b, a0) && plain4(b, a1) && channels(b, a0) == channels(b, y) &&
                      channels(b, a1) == channels(b, y);
        if (!same && !same_c && !channel_scale(b, a0, a1, y) && !channel_scale(b, a1, a0, y))
            return NULL;
        return retarget(b, i, 2);
    }
    const tdm_tensor *sc = resize_scales(b->fz, n);
    if (sc) {
        if (!blocked(b, n->inputs[0]) || !plain4(b, n->inputs[0])) return NULL;
        int64_t five = 5;
        tdm_tensor *t;
        TDM_TRY(tdm_tensor_new(b->fz->g->alloc, TDM_FLOAT, 1, &five, &t));
        const float *src = sc->data;
        float *d = t->data;
        d[0] = d[1] = d[4] = 1.0f;
        d[2] = src[2];
        d[3] = src[3];
        int v;
        TDM_TRY(fz_new_const(b->fz, b->fz->g->values[fz_node(b->fz, i)->inputs[2]].name, t, &v));
        fz_node(b->fz, i)->inputs[2] = v;
        return retarget(b, i, 1);
    }
    if (is_op(n, "Concat")) {
        int64_t axis = tdm_attr_int(n, "axis", 0);
        if (axis != 1 && axis != -3) return NULL;
        bool whole = true;
        for (int k = 0; k < n->n_inputs; k++) {
            if (!blocked(b, n->inputs[k]) || !plain4(b, n->inputs[k])) return NULL;
            whole &= b->cl || channels(b, n->inputs[k]) % b->block == 0;
        }
        if (!whole) return concat_unaligned(b, i);
        TDM_TRY(set_channel_axis(b, i));
        return retarget(b, i, n->n_inputs);
    }
    return NULL;
}

/* Split on the channel axis into whole blocks: the same Split on the block axis of the
 * twins, its sizes (input or attribute, when given) divided by B; an even split (none given,
 * or opset 18's num_outputs) cuts whole blocks as it cuts whole channels. */
/* Split n cuts input 0 on the channel axis into whole blocks of `block` channels (every output
 * a known rank-4 float value whose channel count is a multiple of the block). */
static bool split_whole_blocks(const fz_ctx *fz, const tdm_node *n, int64_t block) {
    bool cl = block == TDM_BLOCK_CHANNELS_LAST; /* (any count is whole) */
    int64_t axis = tdm_attr_int(n, "axis", 0);
    if ((axis != 1 && axis != -3) || n->n_outputs < 1 || n->n_outputs > 64 || n->n_implicit)
        return false;
    for (int k = 0; k < n->n_outputs; k++) {
        int v = n->outputs[k];
        if (v < 0) return false;
        const tdm_value *val = &fz->g->values[v];
        if (val->dtype != TDM_FLOAT || val->rank != 4 || val->dims[1] <= 0 ||
            (!cl && val->dims[1] % block))
            return false;
    }
    return true;
}

static tdm_status *convert_split(bl_ctx *b, int i) {
    tdm_node *n = fz_node(b->fz, i);
    int x = n->inputs[0];
    if (!blocked(b, x) || !plain4(b, x) || !on_cpu(n) || !split_whole_blocks(b->fz, n, b->block))
        return NULL;
    for (int k = 0; k < n->n_outputs; k++)
        if (!plain4(b, n->outputs[k])) return NULL;
    int sv = n->n_inputs > 1 ? n->inputs[1] : -1, nsv = -1;
    if (sv >= 0 && !b->cl) { /* (channels-last: the sizes stay) */
        const tdm_tensor *t = fz_const(b->fz, sv);
        if (!t || t->dtype != TDM_INT64 || t->count != n->n_outputs) return NULL;
        int64_t cnt = t->count;
        tdm_tensor *u;
        TDM_TRY(tdm_tensor_new(b->fz->g->alloc, TDM_INT64, 1, &cnt, &u));
        const int64_t *src = t->data;
        int64_t *d = u->data;
        for (int64_t k = 0; k < cnt; k++) d[k] = src[k] / b->block;
        TDM_TRY(fz_new_const(b->fz, b->fz->g->values[sv].name, u, &nsv));
    }
    int tw[64];
    for (int k = 0; k < fz_node(b->fz, i)->n_outputs; k++)
        TDM_TRY(new_twin(b, fz_node(b->fz, i)->outputs[k], &tw[k]));
    n = fz_node(b->fz, i);
    for (int k = 0; k < n->n_attrs && !b->cl; k++) {
        tdm_attr *a = &n->attrs[k];
        if (strcmp(a->name, "split") == 0) /* (before opset 13) */
            for (size_t j = 0; j < a->n; j++) a->ints[j] /= b->block;
    }
    TDM_TRY(set_channel_axis(b, i));
    n = fz_node(b->fz, i);
    n->inputs[0] = b->blk[x];
    if (nsv >= 0) n->inputs[1] = nsv;
    for (int k = 0; k < n->n_outputs; k++) {
        b->blk[n->outputs[k]] = tw[k];
        n->outputs[k] = tw[k];
    }
    b->fz->dirty = true;
    b->fz->count++;
    return NULL;
}

/* Could node n take input v in the blocked layout (judged before any rewrite)? */
static bool takes_blocked(const fz_ctx *fz, const tdm_node *n, int v, int64_t block) {
    if (!on_cpu(n)) return false;
    if (resize_scales(fz, n)) return n->inputs[0] == v;
    if (is_conv(n)) return n->inputs[0] == v; /* (a Z alone does not make it blocked) */
    if (IN_LIST(n, pool_ops) || IN_LIST(n, unary_ops)) return n->inputs[0] == v;
    if (is_op(n, "Split")) return n->inputs[0] == v && split_whole_blocks(fz, n, block);
    return IN_LIST(n, binary_ops) || is_op(n, "Concat");
}

/* Readers that kept the plain value, graph outputs and subgraph reads get a FromBlocked. */
static tdm_status *materialise(bl_ctx *b) {
    tdm_graph *g = b->fz->g;
    bool *need = tdm_calloc(g->alloc, b->nv + 1, sizeof *need);
    if (!need) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory in the blocked-layout pass");
    for (size_t i = 0; i < g->n_nodes; i++) {
        const tdm_node *n = &g->nodes[i];
        if (n->dead) continue;
        for (int k = 0; k < n->n_inputs; k++)
            if (blocked(b, n->inputs[k])) need[n->inputs[k]] = true;
        for (int k = 0; k < n->n_implicit; k++)
            if (blocked(b, n->implicit[k])) need[n->implicit[k]] = true;
    }
    for (size_t o = 0; o < g->n_outputs; o++)
        if (blocked(b, g->outputs[o])) need[g->outputs[o]] = true;
    tdm_status *st = NULL;
    for (size_t v = 0; v < b->nv && !st; v++) {
        if (!need[v] || g->values[v].producer < 0) continue; /* a ToBlocked source: still plain */
        int p = b->fz->producer[v];
        bool plain = false; /* still written plain (a ToBlocked source), by any output slot */
        for (int k = 0; p >= 0 && !g->nodes[p].dead && k < g->nodes[p].n_outputs; k++)
            plain |= g->nodes[p].outputs[k] == (int)v;
        if (plain) continue;
        int nn;
        char name[128];
        snprintf(name, sizeof name, "%.100s/FromBlocked", g->values[v].name);
        if ((st = fz_new_node(b->fz, "FromBlocked", TDM_FUSED_DOMAIN, name, 1, 1, &nn))) break;
        g->nodes[nn].inputs[0] = b->blk[v];
        g->nodes[nn].outputs[0] = (int)v;
        if (!(st = fz_attr_int(b->fz, nn, "block", b->block)))
            st = fz_attr_int(b->fz, nn, "channels", g->values[v].dims[1]);
    }
    tdm_free(g->alloc, need);
    return st;
}

/* Does channels-last suit the graph (where the device prefers it)? oneDNN's channels-last
 * convolutions (brgemm) beat jit:avx512_core on nChw16c only on dense k x k convolutions
 * whose channel counts are whole vectors of 16 floats (ResNet-50's 3x3 layers 8-15%
 * faster); they tie on wide 1x1 ones and lose on the rest: a 3-channel first layer (its
 * input copied to channels-last), 1x1 layers of 16-32 channels over large images, depthwise
 * layers, and channel counts such as 24 (PP-OCRv4 det's 96 -> 24 3x3: 6.7 ms against 5.7).
 * So: when such convolutions do at least a quarter of the convolutions' work (multiply-adds
 * per image; weights alone when an output size is unknown). ResNet-50 0.45, YOLOv8n 0.79;
 * MobileNetV2, PP-OCRv4 / v6 det 0 (measured on the AMX Xeon, session 16: channels-last
 * made ResNet-50 5% and YOLOv8n 5% faster, MobileNetV2 4-14% and PP-OCRv4 det 8% slower).
 * Not with TDM_CL_MAX_IMAGES_PER_THREAD or more images per thread where the batch is known:
 * there oneDNN's channel-blocked kernels gain from the batch (one primitive over it at 1
 * thread) and brgemm's do not (ResNet-50, 1 thread, CPU ms a run: batch 8 368 blocked
 * against 396 channels-last image by image; batch 8 on 2 threads, 4 images each, a tie;
 * batch 1 49-50 against 52-55 wall). A batch known only at run time (a dynamic leading
 * dimension) is taken as small: the plan is made before it is seen (a session's free_dims
 * makes it known; else the latency strategy makes a second plan at such a run). */
static bool suits_channels_last(const fz_ctx *fz, int threads) {
    double all = 0.0, fit = 0.0, w_all = 0.0, w_fit = 0.0;
    bool sized = true;
    for (size_t i = 0; i < fz->g->n_nodes; i++) {
        const tdm_node *n = &fz->g->nodes[i];
        if (!is_conv(n) || !on_cpu(n) || n->n_inputs < 2 || n->inputs[1] < 0) continue;
        const tdm_value *w = &fz->g->values[n->inputs[1]], *y = &fz->g->values[n->outputs[0]];
        if (y->rank >= 3 &&
            y->dims[0] >= (int64_t)TDM_CL_MAX_IMAGES_PER_THREAD * (threads > 1 ? threads : 1))
            return false;
        if (w->rank != 4 || w->dims[0] <= 0 || w->dims[1] <= 0 || w->dims[2] <= 0 || w->dims[3] <= 0)
            continue;
        int64_t group = tdm_attr_int(n, "group", 1), M = w->dims[0], C = w->dims[1] * group;
        double macs = (double)M * (double)w->dims[1] * (double)(w->dims[2] * w->dims[3]);
        bool good = group == 1 && w->dims[2] * w->dims[3] > 1 && C % 16 == 0 && M % 16 == 0;
        w_all += macs;
        w_fit += good ? macs : 0.0;
        if (y->rank == 4 && y->dims[2] > 0 && y->dims[3] > 0) macs *= (double)(y->dims[2] * y->dims[3]);
        else sized = false;
        all += macs;
        fit += good ? macs : 0.0;
    }
    return sized ? all > 0.0 && fit >= 0.25 * all : w_all > 0.0 && w_fit >= 0.25 * w_all;
}

tdm_status *fz_pass_blocked(fz_ctx *fz, int64_t block, int channels_last, int threads) {
    if (block < 2 || block > 64) return NULL;
    if (channels_last == TDM_CL_ALWAYS ||
        (channels_last == TDM_CL_SUITED && suits_channels_last(fz, threads)))
        block = TDM_BLOCK_CHANNELS_LAST;
    bool cl = block == TDM_BLOCK_CHANNELS_LAST;
    TDM_TRY(fz_refresh(fz));
    tdm_graph *g = fz->g;
    bl_ctx b = {fz, block, cl, g->n_values, NULL, NULL};
    b.blk = tdm_alloc(g->alloc, (b.nv + 1) * sizeof *b.blk);
    b.wants = tdm_calloc(g->alloc, b.nv + 1, sizeof *b.wants);
    tdm_status *st = NULL;
    if (!b.blk || !b.wants) {
        st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory in the blocked-layout pass");
        goto done;
    }
    for (size_t v = 0; v < b.nv; v++) {
        b.blk[v] = -1;
        const int *cons;
        int nc = fz_consumers(fz, (int)v, &cons);
        for (int c = 0; c < nc; c++)
            if (takes_blocked(fz, fz_node(fz, cons[c]), (int)v, block)) b.wants[v] = true;
    }
    size_t n_nodes = g->n_nodes; /* the original nodes, in topological order */
    for (size_t i = 0; i < n_nodes && !st; i++) {
        const tdm_node *n = &g->nodes[i];
        if (n->dead) continue;
        if (is_conv(n)) st = convert_conv(&b, (int)i);
        else if (IN_LIST(n, pool_ops)) st = convert_pool(&b, (int)i);
        else if (is_op(n, "Split")) st = convert_split(&b, (int)i);
        else st = convert_other(&b, (int)i);
    }
    if (!st && fz->count) {
        fz->dirty = true;
        if (!(st = fz_refresh(fz))) st = materialise(&b);
    }
done:
    tdm_free(g->alloc, b.blk);
    tdm_free(g->alloc, b.wants);
    return st;
}
