/* Convolution passes: BatchNormalization folded into the Conv before it, then Conv with a
 * residual Add and / or an activation behind it becomes one FusedConv (ops/fused.h); on the
 * CPU, a dilated 1-D convolution's pads become a Pad in front of it. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "core/alloc.h"
#include "graph/fuse_impl.h"
#include "ops/fused.h"

/* A float32 constant holding exactly n values (any shape). */
static const float *const_vec(const fz_ctx *fz, int v, int64_t n) {
    const tdm_tensor *t = fz_const(fz, v);
    return t && t->dtype == TDM_FLOAT && t->count == n ? t->data : NULL;
}

/* Conv(x, W, B) -> BatchNormalization(scale, bias, mean, var, eps) (inference form)
 *   == Conv(x, W * f, (B - mean) * f + bias) with f = scale / sqrt(var + eps) per output
 * channel, since BN is affine per channel and the channel is the Conv's output channel.
 * Needs constant W (and B) and BN parameters, float32, no training mode, no other reader
 * of the Conv's output, and BN's optional outputs unused. New constants are made; the
 * originals may be shared with other nodes. */
static tdm_status *fold_bn(fz_ctx *fz, int bi) {
    tdm_node *bn = fz_node(fz, bi);
    if (bn->n_inputs != 5 || bn->outputs[0] < 0) return NULL;
    for (int k = 1; k < bn->n_outputs; k++)
        if (bn->outputs[k] >= 0 && fz_uses(fz, bn->outputs[k]) > 0) return NULL;
    if (tdm_attr_int(bn, "training_mode", 0) || tdm_attr_int(bn, "spatial", 1) != 1) return NULL;
    int x = bn->inputs[0], ci = fz_producer(fz, x);
    if (!fz_is_op(fz, ci, "Conv") || fz_sole_consumer(fz, x) != bi || !fz_is_f32(fz, x)) return NULL;
    tdm_node *conv = fz_node(fz, ci);
    const tdm_tensor *w = conv->n_inputs > 1 ? fz_const(fz, conv->inputs[1]) : NULL;
    if (!w || w->dtype != TDM_FLOAT || w->rank < 3 || w->dims[0] < 1) return NULL;
    int64_t M = w->dims[0], per = w->count / M;
    const float *cb = NULL;
    if (conv->n_inputs > 2 && conv->inputs[2] >= 0 && !(cb = const_vec(fz, conv->inputs[2], M)))
        return NULL;
    const float *scale = const_vec(fz, bn->inputs[1], M), *bias = const_vec(fz, bn->inputs[2], M);
    const float *mean = const_vec(fz, bn->inputs[3], M), *var = const_vec(fz, bn->inputs[4], M);
    if (!scale || !bias || !mean || !var) return NULL;
    double eps = tdm_attr_float(bn, "epsilon", 1e-5f);

    const tdm_allocator *a = fz->g->alloc;
    tdm_tensor *nw, *nb;
    TDM_TRY(tdm_tensor_new(a, TDM_FLOAT, w->rank, w->dims, &nw));
    tdm_status *st = tdm_tensor_new(a, TDM_FLOAT, 1, &M, &nb);
    if (st) {
        tdm_tensor_destroy(nw);
        return st;
    }
    const float *wd = w->data;
    float *nwd = nw->data, *nbd = nb->data;
    for (int64_t m = 0; m < M; m++) {
        double f = scale[m] / sqrt((double)var[m] + eps);
        for (int64_t j = 0; j < per; j++) nwd[m * per + j] = (float)(wd[m * per + j] * f);
        nbd[m] = (float)(((cb ? cb[m] : 0.0) - mean[m]) * f + bias[m]);
    }
    int wv, bv;
    const char *wname = fz->g->values[conv->inputs[1]].name;
    if ((st = fz_new_const(fz, wname, nw, &wv))) {
        tdm_tensor_destroy(nb);
        return st;
    }
    TDM_TRY(fz_new_const(fz, wname, nb, &bv));
    conv = fz_node(fz, ci);
    bn = fz_node(fz, bi);
    if (conv->n_inputs < 3) {
        int *ins = tdm_alloc(a, 3 * sizeof(int));
        if (!ins) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory in graph fusion");
        ins[0] = conv->inputs[0];
        tdm_free(a, conv->inputs);
        conv->inputs = ins;
        conv->n_inputs = 3;
    }
    conv->inputs[1] = wv;
    conv->inputs[2] = bv;
    conv->outputs[0] = bn->outputs[0];
    fz_kill(fz, bi);
    fz->count++;
    return NULL;
}

tdm_status *fz_pass_bn_fold(fz_ctx *fz) {
    for (size_t i = 0; i < fz->g->n_nodes; i++) {
        TDM_TRY(fz_refresh(fz));
        if (fz_is_op(fz, (int)i, "BatchNormalization")) TDM_TRY(fold_bn(fz, (int)i));
    }
    return NULL;
}

/* An activation FusedConv / FusedMatMul can absorb: node i reads v as its only data input
 * and writes one output. Clip needs constant bounds. Returns the contract's name and
 * parameters, or NULL. */
static const char *conv_activation(const fz_ctx *fz, int i, int v, float *params, int *np) {
    tdm_node *n = fz_node(fz, i);
    if (n->dead || n->domain[0] || n->n_inputs < 1 || n->inputs[0] != v || n->n_outputs != 1 ||
        n->outputs[0] < 0)
        return NULL;
    const char *op = n->op_type;
    *np = 0;
    static const char *const plain[] = {"Relu", "Sigmoid", "Tanh", "HardSwish"};
    for (size_t k = 0; k < sizeof plain / sizeof plain[0]; k++)
        if (strcmp(op, plain[k]) == 0) return n->n_inputs == 1 ? plain[k] : NULL;
    if (strcmp(op, "LeakyRelu") == 0 && n->n_inputs == 1) {
        params[(*np)++] = tdm_attr_float(n, "alpha", 0.01f);
        return "LeakyRelu";
    }
    if (strcmp(op, "HardSigmoid") == 0 && n->n_inputs == 1) {
        params[(*np)++] = tdm_attr_float(n, "alpha", 0.2f);
        params[(*np)++] = tdm_attr_float(n, "beta", 0.5f);
        return "HardSigmoid";
    }
    if (strcmp(op, "Clip") == 0) {
        float lo = -FLT_MAX, hi = FLT_MAX; /* the spec's defaults: the type's limits */
        if (n->opset < 11) {
            if (n->n_inputs != 1) return NULL;
            lo = tdm_attr_float(n, "min", lo);
            hi = tdm_attr_float(n, "max", hi);
        } else {
            if (n->n_inputs > 3) return NULL;
            if (n->n_inputs > 1 && n->inputs[1] >= 0 && !fz_scalar(fz, n->inputs[1], 1, &lo))
                return NULL;
            if (n->n_inputs > 2 && n->inputs[2] >= 0 && !fz_scalar(fz, n->inputs[2], 1, &hi))
                return NULL;
        }
        params[(*np)++] = lo;
        params[(*np)++] = hi;
        return "Clip";
    }
    return NULL;
}

/* Conv(X, W, B) [-> Add(., Z)] [-> activation] -> FusedConv(X, W, B, Z) with the Conv's
 * attributes: Y = act(Conv + B + Z) is the contract's order. The activation is one node
 * (conv_activation) or a decomposed hard-swish, SiLU or GELU (fz_match_hswish,
 * fz_match_swish, fz_match_gelu),
 * whose input is read by its own nodes alone; behind an activation, a Mul and / or an Add by
 * scalar constants become its activation_affine. The Add's other operand must
 * have exactly the Conv output's shape (no broadcasting: known equal dims, or unknown dims
 * with the same symbolic origin); every inner value has a single reader and is no graph
 * output; float32 only (the fused kernels' type). */
static tdm_status *fuse_conv(fz_ctx *fz, int ci) {
    tdm_node *conv = fz_node(fz, ci);
    if (conv->n_inputs < 2 || conv->n_inputs > 3 || conv->n_outputs != 1 || conv->outputs[0] < 0 ||
        !fz_is_f32(fz, conv->inputs[0]) || !fz_is_f32(fz, conv->inputs[1]) ||
        !fz_attrs_copyable(conv))
        return NULL;
    int y = conv->outputs[0], cur = y, z = -1;
    int add = -1, act = -1, np = 0;
    float params[2];
    const char *act_name = NULL;
    int next = fz_sole_consumer(fz, cur);
    if (fz_is_op(fz, next, "Add")) {
        int o = fz_other_input(fz_node(fz, next), cur);
        if (o >= 0 && fz_is_f32(fz, o) && fz_same_shape(fz, o, y) &&
            fz_node(fz, next)->n_outputs == 1 && fz_node(fz, next)->outputs[0] >= 0) {
            z = o;
            add = next;
            cur = fz_node(fz, next)->outputs[0];
            next = fz_sole_consumer(fz, cur);
        }
    }
    fz_act_match multi = {.n = 0};
    int rank = fz->g->values[y].rank;
    if (next >= 0 && (act_name = conv_activation(fz, next, cur, params, &np))) {
        act = next;
        cur = fz_node(fz, next)->outputs[0];
    } else if (next < 0 && rank >= 3 &&
               (fz_match_hswish(fz, cur, rank, &multi) || fz_match_swish(fz, cur, &multi) ||
                fz_match_gelu(fz, cur, rank, &multi))) {
        act_name = multi.name;
        np = multi.n_params;
        for (int k = 0; k < np; k++) params[k] = multi.params[k];
        cur = multi.out;
    } else {
        multi.n = 0;
    }
    if (add < 0 && act < 0 && multi.n == 0) return NULL;
    /* behind an activation: scale * act + shift with scalar constants (PP-LCNetV3) */
    int aff[2] = {-1, -1};
    float affine[2] = {1.0f, 0.0f};
    if (act_name && act_name[0]) {
        static const char *const aff_ops[2] = {"Mul", "Add"};
        for (int k = 0; k < 2; k++) {
            int r = fz_sole_consumer(fz, cur);
            if (!fz_is_op(fz, r, aff_ops[k])) continue;
            const tdm_node *rn = fz_node(fz, r);
            if (rn->n_outputs != 1 || rn->outputs[0] < 0 ||
                !fz_scalar(fz, fz_other_input(rn, cur), rank, &affine[k])) {
                affine[k] = k ? 0.0f : 1.0f;
                continue;
            }
            aff[k] = r;
            cur = rn->outputs[0];
        }
    }

    char *name = tdm_strdup(fz->g->alloc, conv->name);
    if (!name) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory in graph fusion");
    int fi;
    tdm_status *st = fz_new_node(fz, "FusedConv", TDM_FUSED_DOMAIN, name, z >= 0 ? 4 : conv->n_inputs,
                                 1, &fi);
    tdm_free(fz->g->alloc, name);
    TDM_TRY(st);
    conv = fz_node(fz, ci);
    tdm_node *f = fz_node(fz, fi);
    for (int k = 0; k < conv->n_inputs; k++) f->inputs[k] = conv->inputs[k];
    if (z >= 0) f->inputs[3] = z;
    f->outputs[0] = cur;
    for (int k = 0; k < conv->n_attrs; k++) TDM_TRY(fz_attr_copy(fz, fi, &fz_node(fz, ci)->attrs[k]));
    TDM_TRY(fz_attr_string(fz, fi, "activation", act_name ? act_name : ""));
    if (np) TDM_TRY(fz_attr_floats(fz, fi, "activation_params", params, np));
    if (aff[0] >= 0 || aff[1] >= 0) TDM_TRY(fz_attr_floats(fz, fi, "activation_affine", affine, 2));
    fz_kill(fz, ci);
    if (add >= 0) fz_kill(fz, add);
    if (act >= 0) fz_kill(fz, act);
    for (int k = 0; k < multi.n; k++) fz_kill(fz, multi.nodes[k]);
    for (int k = 0; k < 2; k++)
        if (aff[k] >= 0) fz_kill(fz, aff[k]);
    fz->count++;
    return NULL;
}

tdm_status *fz_pass_conv(fz_ctx *fz) {
    for (size_t i = 0; i < fz->g->n_nodes; i++) {
        TDM_TRY(fz_refresh(fz));
        if (fz_is_op(fz, (int)i, "Conv")) TDM_TRY(fuse_conv(fz, (int)i));
    }
    return NULL;
}

/* ---- dilated 1-D convolution: pads as a Pad node (CPU) ----
 * oneDNN's direct (JIT) convolution takes a dilated kernel only while the left and right pads
 * stay within its few-column unroll; wider pads leave it the im2col + gemm convolution on the
 * plain layout. With the pads as a zero Pad in front (a copy of the small input), the
 * convolution has no pads and runs the direct kernel on the blocked layout (attacut's three
 * 48 -> 196 channel convolutions over 79 columns, kernels 5 and 9 with dilations 3 and 2,
 * pads 6 and 8: AVX2, 1 thread, CPU time p50 per run 0.62-0.74 -> 0.50-0.57 ms). 2-D
 * convolutions are left to the blocked pass. Needs opset 11 (Pad's pads as an input). */
static tdm_status *prepad_conv(fz_ctx *fz, int ci) {
    const tdm_node *n = fz_node(fz, ci);
    if (n->n_inputs < 2 || n->inputs[0] < 0 || n->n_outputs != 1) return NULL;
    int x = n->inputs[0];
    const tdm_value *xv = &fz->g->values[x];
    const tdm_attr *ap = tdm_node_attr(n, "auto_pad");
    if (xv->rank != 3 || !fz_is_f32(fz, x) || (ap && ap->s && strcmp(ap->s, "NOTSET") != 0))
        return NULL;
    size_t nd = 0, np = 0;
    const int64_t *dil = tdm_attr_ints(n, "dilations", &nd);
    const tdm_attr *pa = tdm_node_attr(n, "pads");
    if (!dil || nd != 1 || dil[0] <= 1 || !pa || pa->type != TDM_ATTR_INTS || pa->n != 2)
        return NULL;
    np = pa->n;
    int64_t pl = pa->ints[0], pr = pa->ints[1];
    if (pl < 0 || pr < 0 || pl + pr == 0) return NULL;
    int64_t pads[6] = {0, 0, pl, 0, 0, pr}, six = 6;
    tdm_tensor *t;
    TDM_TRY(tdm_tensor_new(fz->g->alloc, TDM_INT64, 1, &six, &t));
    memcpy(t->data, pads, sizeof pads);
    int pv, yv, pi;
    TDM_TRY(fz_new_const(fz, fz_node(fz, ci)->name, t, &pv));
    int64_t dims[3];
    memcpy(dims, fz->g->values[x].dims, sizeof dims);
    if (dims[2] >= 0) dims[2] += pl + pr;
    TDM_TRY(fz_new_value(fz, fz->g->values[x].name, TDM_FLOAT, 3, dims, &yv));
    char *name = tdm_strdup(fz->g->alloc, fz_node(fz, ci)->name);
    if (!name) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory in graph fusion");
    tdm_status *st = fz_new_node(fz, "Pad", "", name, 2, 1, &pi);
    tdm_free(fz->g->alloc, name);
    TDM_TRY(st);
    tdm_node *pn = fz_node(fz, pi);
    pn->inputs[0] = x;
    pn->inputs[1] = pv;
    pn->outputs[0] = yv;
    tdm_node *cn = fz_node(fz, ci);
    cn->inputs[0] = yv;
    tdm_attr *cp = (tdm_attr *)tdm_node_attr(cn, "pads");
    for (size_t k = 0; k < np; k++) cp->ints[k] = 0;
    fz->dirty = true;
    fz->count++;
    return NULL;
}

tdm_status *fz_pass_conv_prepad(fz_ctx *fz) {
    if (tdm_graph_opset(fz->g, "") < 11) return NULL;
    for (size_t i = 0; i < fz->g->n_nodes; i++) {
        TDM_TRY(fz_refresh(fz));
        if (fz_is_op(fz, (int)i, "Conv") || fz_is_fused(fz, (int)i, "FusedConv"))
            TDM_TRY(prepad_conv(fz, (int)i));
    }
    return NULL;
}

/* ---- Transpose(0, 2, 1[, 3]) -> Conv over L as ConvNwc1d (CPU) ----
 * A convolution along one axis whose input is a sequence [N, L, C(, 1)] turned channels-first
 * by a Transpose (magika: [8, 512, 256, 1] -> Conv W [512, 256, 5, 1]). ConvNwc1d
 * (ops/fused.h) reads the sequence as it is, one accumulating matrix product per kernel tap,
 * with no Transpose and no reorders around a direct convolution (magika on AVX2, CPU time per
 * run of the whole model 74.2 -> 73.1 ms at 1 thread, 79.2 -> 75.1 ms at 2 threads; with its
 * bias and GELU taken in too, 74.6 -> 71.1 and 75.0 -> 74.0 ms:
 * bench/results/real-2026-12-02-s14-avx2-i16.md). Matched: X float32
 * of rank 3 or 4 (then W's last dim 1), W a float32 constant, B absent or [O],
 * stride 1, dilation 1, group 1, pads along L alone (any), auto_pad NOTSET or VALID, the
 * Transpose's output read by the Conv alone. A FusedConv is taken when it adds nothing but
 * a tanh GELU (no Z, no affine). */
static bool ints_all(const tdm_node *n, const char *name, int64_t want, int count) {
    size_t c = 0;
    const int64_t *v = tdm_attr_ints(n, name, &c);
    if (!v) return true; /* the default (1 for strides / dilations, 0 for pads) */
    if ((int)c != count) return false;
    for (size_t i = 0; i < c; i++)
        if (v[i] != want) return false;
    return true;
}

static tdm_status *nwc_conv(fz_ctx *fz, int ci) {
    const tdm_node *cv = fz_node(fz, ci);
    if (cv->n_inputs < 2 || cv->n_inputs > 3 || cv->n_outputs != 1 || cv->outputs[0] < 0 ||
        cv->inputs[0] < 0 || !fz_is_f32(fz, cv->inputs[0]))
        return NULL;
    const char *act = cv->domain[0] ? tdm_attr_string(cv, "activation", "") : "";
    if (cv->domain[0]) { /* FusedConv: nothing beyond the convolution and a tanh GELU */
        size_t na = 0;
        if ((act[0] && strcmp(act, "GeluTanh") != 0) || tdm_attr_floats(cv, "activation_affine", &na))
            return NULL;
    }
    int x = cv->inputs[0], ti = fz_producer(fz, x);
    if (!fz_is_op(fz, ti, "Transpose") || fz_sole_consumer(fz, x) != ci) return NULL;
    const tdm_node *tn = fz_node(fz, ti);
    if (tn->n_inputs != 1 || tn->inputs[0] < 0 || tn->n_outputs != 1) return NULL;
    int xin = tn->inputs[0];
    const tdm_value *xv = &fz->g->values[xin];
    size_t np = 0;
    const int64_t *perm = tdm_attr_ints(tn, "perm", &np);
    int r = (int)np; /* X's rank (its shape may be unknown here: magika's comes from a Reshape) */
    static const int64_t want[4] = {0, 2, 1, 3};
    if (!perm || (r != 3 && r != 4) || memcmp(perm, want, (size_t)r * sizeof *perm) != 0 ||
        !fz_is_f32(fz, xin) || (xv->rank >= 0 && xv->rank != r) ||
        (r == 4 && xv->rank == 4 && xv->dims[3] >= 0 && xv->dims[3] != 1))
        return NULL; /* (an unknown last dim other than 1 takes the op's plain loop) */
    const tdm_tensor *w = fz_const(fz, cv->inputs[1]);
    if (!w || w->dtype != TDM_FLOAT || w->rank != r || (r == 4 && w->dims[3] != 1) ||
        w->dims[0] < 1 || w->dims[2] < 1 || (xv->rank >= 0 && xv->dims[2] >= 0 && w->dims[1] != xv->dims[2]))
        return NULL;
    if (cv->n_inputs > 2 && cv->inputs[2] >= 0) {
        const tdm_value *bv = &fz->g->values[cv->inputs[2]];
        if (!fz_is_f32(fz, cv->inputs[2]) || bv->rank != 1 || bv->dims[0] != w->dims[0]) return NULL;
    }
    /* the Conv's attributes: only these, with the values the op can run */
    for (int k = 0; k < cv->n_attrs; k++) {
        const char *an = cv->attrs[k].name;
        if (strcmp(an, "strides") && strcmp(an, "dilations") && strcmp(an, "group") &&
            strcmp(an, "pads") && strcmp(an, "kernel_shape") && strcmp(an, "auto_pad") &&
            (!cv->domain[0] || (strcmp(an, "activation") && strcmp(an, "activation_params"))))
            return NULL;
    }
    const char *ap = tdm_attr_string(cv, "auto_pad", "NOTSET");
    if (strcmp(ap, "NOTSET") && strcmp(ap, "VALID") && ap[0]) return NULL;
    if (!ints_all(cv, "strides", 1, r - 2) || !ints_all(cv, "dilations", 1, r - 2) ||
        tdm_attr_int(cv, "group", 1) != 1)
        return NULL;
    size_t nk = 0;
    const int64_t *ks = tdm_attr_ints(cv, "kernel_shape", &nk);
    if (ks && ((int)nk != r - 2 || ks[0] != w->dims[2] || (r == 4 && ks[1] != 1))) return NULL;
    int64_t pads[2] = {0, 0};
    size_t npd = 0;
    const int64_t *pd = tdm_attr_ints(cv, "pads", &npd);
    if (pd && strcmp(ap, "VALID") != 0) {
        if ((int)npd != 2 * (r - 2)) return NULL;
        pads[0] = pd[0];
        pads[1] = pd[r - 2];
        if (pads[0] < 0 || pads[1] < 0 || pads[0] >= w->dims[2] || pads[1] >= w->dims[2])
            return NULL;
        if (r == 4 && (pd[1] != 0 || pd[3] != 0)) return NULL;
    }

    char *name = tdm_strdup(fz->g->alloc, cv->name);
    if (!name) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory in graph fusion");
    int fi;
    tdm_status *st = fz_new_node(fz, "ConvNwc1d", TDM_FUSED_DOMAIN, name, fz_node(fz, ci)->n_inputs, 1, &fi);
    tdm_free(fz->g->alloc, name);
    TDM_TRY(st);
    cv = fz_node(fz, ci);
    tdm_node *f = fz_node(fz, fi);
    f->inputs[0] = xin;
    for (int k = 1; k < cv->n_inputs; k++) f->inputs[k] = cv->inputs[k];
    f->outputs[0] = cv->outputs[0];
    TDM_TRY(fz_attr_ints(fz, fi, "pads", pads, 2));
    if (act[0]) TDM_TRY(fz_attr_string(fz, fi, "activation", "GeluTanh"));
    fz_kill(fz, ci);
    fz_kill(fz, ti);
    fz->count++;
    return NULL;
}

/* ConvNwc1d [-> Squeeze] -> com.microsoft FastGelu without bias (fz_pass_gelu's node, as in
 * magika) -> the ConvNwc1d's activation "GeluTanh", applied to each block of output rows
 * while it is in cache; the Squeeze (element-wise ops commute with it) stays. */
static tdm_status *nwc_gelu(fz_ctx *fz, int ni) {
    const tdm_node *n = fz_node(fz, ni);
    if (tdm_attr_string(n, "activation", "")[0] || n->n_outputs != 1 || n->outputs[0] < 0)
        return NULL;
    int cur = n->outputs[0], next = fz_sole_consumer(fz, cur), qi = -1;
    if (fz_is_op(fz, next, "Squeeze") && fz_node(fz, next)->n_outputs == 1 &&
        fz_node(fz, next)->inputs[0] == cur && fz_node(fz, next)->outputs[0] >= 0) {
        qi = next;
        cur = fz_node(fz, qi)->outputs[0];
        next = fz_sole_consumer(fz, cur);
    }
    if (next < 0) return NULL;
    const tdm_node *g = fz_node(fz, next);
    if (g->dead || strcmp(g->domain, "com.microsoft") != 0 || strcmp(g->op_type, "FastGelu") != 0 ||
        g->inputs[0] != cur || (g->n_inputs > 1 && g->inputs[1] >= 0) || g->n_outputs != 1 ||
        g->outputs[0] < 0)
        return NULL;
    TDM_TRY(fz_attr_string(fz, ni, "activation", "GeluTanh"));
    int out = fz_node(fz, next)->outputs[0];
    if (qi >= 0) fz_node(fz, qi)->outputs[0] = out;
    else fz_node(fz, ni)->outputs[0] = out;
    fz_kill(fz, next);
    fz->count++;
    return NULL;
}

tdm_status *fz_pass_conv_nwc(fz_ctx *fz) {
    for (size_t i = 0; i < fz->g->n_nodes; i++) {
        TDM_TRY(fz_refresh(fz));
        if (fz_is_op(fz, (int)i, "Conv") || fz_is_fused(fz, (int)i, "FusedConv"))
            TDM_TRY(nwc_conv(fz, (int)i));
        else if (fz_is_fused(fz, (int)i, "ConvNwc1d")) /* (made above: appended, reached later) */
            TDM_TRY(nwc_gelu(fz, (int)i));
    }
    return NULL;
}
