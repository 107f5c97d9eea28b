/* Writing the quantized model: a copy of the model's protobuf with new node and initializer
 * lists (the unpacked model itself is never changed), packed by protobuf-c.
 *
 * Static mode: every quantized activation X gets X -> QuantizeLinear -> DequantizeLinear ->
 * X_DequantizeLinear_Output, which every node reading X reads instead (graph outputs keep
 * X). Weights W become W_quantized (int8) + W_scale + W_zero_point and a DequantizeLinear
 * whose output is named W, so that every reader sees the dequantized weight.
 * Dynamic mode: MatMul / Gemm A x W becomes DynamicQuantizeLinear(A) -> MatMulInteger with
 * W_quantized -> Cast -> Mul by A's scale x W's scales (-> Add of Gemm's C). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant/quant_impl.h"

typedef struct wctx {
    tdm_quantizer *q;
    q_arena *ar;
    Onnx__NodeProto **nodes;
    size_t n_nodes, cap_nodes;
    Onnx__TensorProto **inits;
    size_t n_inits, cap_inits;
    /* constants replaced by quantized ones: names (their initializer / Constant node goes) */
    const char **gone;
    size_t n_gone, cap_gone;
    /* quantized weights: name, scales (per channel or one) for the biases */
    const char **w_name;
    float **w_scale;
    int64_t *w_count;
    size_t n_w, cap_w;
    bool oom;
    const char *clash; /* a name the writer made that the model already has */
} wctx;

/* `name`, noted when the model already has a tensor of that name. */
static const char *fresh(wctx *w, const char *name) {
    if (!w->clash && tdm_graph_find_value(w->q->ir->graph, name) >= 0) w->clash = name;
    return name;
}

static void *wal(wctx *w, size_t size) {
    void *p = tdm_quant_arena_alloc(w->ar, size ? size : 1);
    if (!p) w->oom = true;
    else memset(p, 0, size ? size : 1);
    return p;
}

static char *wstr(wctx *w, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = wal(w, (size_t)n + 1);
    if (!s) return (char *)"";
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

static bool grow(wctx *w, void ***arr, size_t *cap, size_t need) {
    if (need <= *cap) return true;
    size_t nc = *cap ? *cap * 2 : 64;
    while (nc < need) nc *= 2;
    void **na = wal(w, nc * sizeof *na);
    if (!na) return false;
    if (*cap) memcpy(na, *arr, *cap * sizeof *na);
    *arr = na;
    *cap = nc;
    return true;
}

static void push_node(wctx *w, Onnx__NodeProto *n) {
    if (n && grow(w, (void ***)&w->nodes, &w->cap_nodes, w->n_nodes + 1)) w->nodes[w->n_nodes++] = n;
}

static void push_init(wctx *w, Onnx__TensorProto *t) {
    if (t && grow(w, (void ***)&w->inits, &w->cap_inits, w->n_inits + 1)) w->inits[w->n_inits++] = t;
}

static void push_gone(wctx *w, const char *name) {
    if (grow(w, (void ***)&w->gone, &w->cap_gone, w->n_gone + 1)) w->gone[w->n_gone++] = name;
}

static bool is_gone(const wctx *w, const char *name) {
    for (size_t i = 0; i < w->n_gone; i++)
        if (!strcmp(w->gone[i], name)) return true;
    return false;
}

static Onnx__TensorProto *new_tensor(wctx *w, const char *name, tdm_dtype dt, int rank,
                                     const int64_t *dims, const void *data, size_t bytes) {
    Onnx__TensorProto *t = wal(w, sizeof *t);
    if (!t) return NULL;
    onnx__tensor_proto__init(t);
    t->name = (char *)fresh(w, name);
    t->has_data_type = true;
    t->data_type = (int32_t)dt;
    t->n_dims = (size_t)rank;
    t->dims = wal(w, (size_t)(rank ? rank : 1) * sizeof *t->dims);
    if (t->dims && rank) memcpy(t->dims, dims, (size_t)rank * sizeof *dims);
    t->has_raw_data = true;
    t->raw_data.len = bytes;
    t->raw_data.data = wal(w, bytes);
    if (t->raw_data.data && bytes) memcpy(t->raw_data.data, data, bytes);
    return t;
}

static Onnx__NodeProto *new_node(wctx *w, const char *op, const char *name, int n_in,
                                 const char *const *in, int n_out, const char *const *out) {
    Onnx__NodeProto *n = wal(w, sizeof *n);
    if (!n) return NULL;
    onnx__node_proto__init(n);
    n->op_type = (char *)op;
    n->name = (char *)name;
    n->domain = (char *)"";
    n->n_input = (size_t)n_in;
    n->input = wal(w, (size_t)(n_in + 1) * sizeof *n->input);
    n->n_output = (size_t)n_out;
    n->output = wal(w, (size_t)(n_out + 1) * sizeof *n->output);
    if (!n->input || !n->output) return NULL;
    for (int i = 0; i < n_in; i++) n->input[i] = (char *)in[i];
    for (int i = 0; i < n_out; i++) n->output[i] = (char *)out[i];
    return n;
}

static void node_int_attr(wctx *w, Onnx__NodeProto *n, const char *name, int64_t v) {
    if (!n) return;
    Onnx__AttributeProto *at = wal(w, sizeof *at);
    Onnx__AttributeProto **list = wal(w, (n->n_attribute + 1) * sizeof *list);
    if (!at || !list) return;
    onnx__attribute_proto__init(at);
    at->name = (char *)name;
    at->has_type = true;
    at->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
    at->has_i = true;
    at->i = v;
    if (n->n_attribute) memcpy(list, n->attribute, n->n_attribute * sizeof *list);
    list[n->n_attribute++] = at;
    n->attribute = list;
}

static int64_t proto_attr_int(const Onnx__NodeProto *n, const char *name, int64_t def) {
    for (size_t i = 0; i < n->n_attribute; i++)
        if (!strcmp(n->attribute[i]->name, name)) return n->attribute[i]->i;
    return def;
}

/* ---- constants ---- */

/* Symmetric int8 weights in [-qmax, qmax] along `axis` (-1: per tensor) into dst; scales into sc
 * (count). qmax 127, or 64 with reduce_range. */
static void quantize_weight(const tdm_tensor *t, int axis, int qmax, int8_t *dst, float *sc,
                            int64_t *count) {
    const float *d = t->data;
    int64_t C = axis >= 0 ? t->dims[axis] : 1, inner = 1;
    for (int k = axis + 1; axis >= 0 && k < t->rank; k++) inner *= t->dims[k];
    int64_t outer = axis >= 0 ? t->count / (C * inner) : 1;
    if (axis < 0) inner = t->count;
    for (int64_t c = 0; c < C; c++) {
        float lo = 0, hi = 0;
        for (int64_t o = 0; o < outer; o++)
            for (int64_t i = 0; i < inner; i++) {
                float v = d[(o * C + c) * inner + i];
                if (v < lo) lo = v;
                if (v > hi) hi = v;
            }
        int32_t zp;
        tdm_quant_scale_zp(lo, hi, -qmax, qmax, true, &sc[c], &zp);
        for (int64_t o = 0; o < outer; o++)
            for (int64_t i = 0; i < inner; i++) {
                int64_t at = (o * C + c) * inner + i;
                float r = nearbyintf(d[at] / sc[c]);
                dst[at] = (int8_t)(r < -qmax ? -qmax : r > qmax ? qmax : r);
            }
    }
    *count = C;
}

static const char *emit_dq(wctx *w, const char *src, const char *out, int axis) {
    const char *in[3] = {wstr(w, "%s_quantized", src), wstr(w, "%s_scale", src),
                         wstr(w, "%s_zero_point", src)};
    const char *o[1] = {out};
    Onnx__NodeProto *n = new_node(w, "DequantizeLinear", wstr(w, "%s_DequantizeLinear", src), 3, in, 1, o);
    if (axis >= 0) node_int_attr(w, n, "axis", axis);
    push_node(w, n);
    return out;
}

/* A float tensor as an initializer. */
static void emit_float(wctx *w, const char *name, const tdm_tensor *t) {
    push_init(w, new_tensor(w, name, TDM_FLOAT, t->rank, t->dims, t->data, (size_t)t->count * 4));
}

/* Static mode: weight W (data t) -> W_quantized/_scale/_zero_point + DequantizeLinear -> W. */
static void emit_weight_t(wctx *w, const char *name, const tdm_tensor *t, int axis) {
    for (size_t i = 0; i < w->n_w; i++)
        if (!strcmp(w->w_name[i], name)) return; /* done for an earlier reader */
    if (!t || (axis >= 0 && (axis >= t->rank || t->dims[axis] < 1))) {
        if (t) emit_float(w, name, t);
        return;
    }
    int64_t C = axis >= 0 ? t->dims[axis] : 1;
    int8_t *qd = wal(w, (size_t)t->count);
    float *sc = wal(w, (size_t)C * sizeof *sc);
    int8_t *zp = wal(w, (size_t)C);
    if (!qd || !sc || !zp) return;
    int64_t count;
    quantize_weight(t, axis, w->q->opt.reduce_range ? 64 : 127, qd, sc, &count);
    push_init(w, new_tensor(w, wstr(w, "%s_quantized", name), TDM_INT8, t->rank, t->dims, qd, (size_t)t->count));
    int r = axis >= 0 ? 1 : 0;
    push_init(w, new_tensor(w, wstr(w, "%s_scale", name), TDM_FLOAT, r, &C, sc, (size_t)C * sizeof *sc));
    push_init(w, new_tensor(w, wstr(w, "%s_zero_point", name), TDM_INT8, r, &C, zp, (size_t)C));
    emit_dq(w, name, name, axis);
    push_gone(w, name);
    if (!grow(w, (void ***)&w->w_name, &w->cap_w, w->n_w + 1)) return;
    size_t cap = w->cap_w; /* the two other lists follow w_name's capacity */
    float **ns = wal(w, cap * sizeof *ns);
    int64_t *nc = wal(w, cap * sizeof *nc);
    if (!ns || !nc) return;
    if (w->n_w) {
        memcpy(ns, w->w_scale, w->n_w * sizeof *ns);
        memcpy(nc, w->w_count, w->n_w * sizeof *nc);
    }
    w->w_scale = ns;
    w->w_count = nc;
    w->w_name[w->n_w] = name;
    w->w_scale[w->n_w] = sc;
    w->w_count[w->n_w++] = C;
}

static void emit_weight(wctx *w, const char *name, int axis) {
    emit_weight_t(w, name, tdm_quant_constant(w->q, name), axis);
}

/* Bias B (data t) of a node whose input has scale `xs` and whose weight is `wname`: int32;
 * false when it stays float. */
static bool emit_bias_t(wctx *w, const char *name, const tdm_tensor *t, const char *wname, float xs) {
    size_t k = 0;
    while (k < w->n_w && strcmp(w->w_name[k], wname)) k++;
    if (!t || k == w->n_w || t->rank != 1) return false;
    int64_t N = t->dims[0], C = w->w_count[k];
    if (C != 1 && C != N) return false;
    int32_t *qd = wal(w, (size_t)N * sizeof *qd);
    float *sc = wal(w, (size_t)N * sizeof *sc);
    int32_t *zp = wal(w, (size_t)N * sizeof *zp);
    if (!qd || !sc || !zp) return false;
    const float *d = t->data;
    for (int64_t i = 0; i < N; i++) {
        sc[i] = xs * w->w_scale[k][C == 1 ? 0 : i];
        if (!(sc[i] > 0)) return false; /* stays float */
        double r = nearbyint((double)d[i] / sc[i]);
        qd[i] = (int32_t)(r < -2147483647.0 ? -2147483647.0 : r > 2147483647.0 ? 2147483647.0 : r);
    }
    push_init(w, new_tensor(w, wstr(w, "%s_quantized", name), TDM_INT32, 1, &N, qd, (size_t)N * 4));
    push_init(w, new_tensor(w, wstr(w, "%s_scale", name), TDM_FLOAT, 1, &N, sc, (size_t)N * 4));
    push_init(w, new_tensor(w, wstr(w, "%s_zero_point", name), TDM_INT32, 1, &N, zp, (size_t)N * 4));
    emit_dq(w, name, name, 0);
    push_gone(w, name);
    return true;
}

static void emit_bias(wctx *w, const char *name, const char *wname, float xs) {
    if (!is_gone(w, name)) emit_bias_t(w, name, tdm_quant_constant(w->q, name), wname, xs);
}

/* A constant operand of Add / Mul / Concat: the activation type, its own range, per tensor. */
static void emit_const(wctx *w, const char *name) {
    if (is_gone(w, name)) return;
    const tdm_tensor *t = tdm_quant_constant(w->q, name);
    if (!t) return;
    const float *d = t->data;
    float lo = 0, hi = 0;
    for (int64_t i = 0; i < t->count; i++) {
        if (d[i] < lo) lo = d[i];
        if (d[i] > hi) hi = d[i];
    }
    bool s8 = w->q->opt.activation_type == TDM_INT8;
    float sc;
    int32_t zp;
    tdm_quant_scale_zp(lo, hi, s8 ? -128 : 0, s8 ? 127 : 255, false, &sc, &zp);
    uint8_t *qd = wal(w, (size_t)t->count);
    if (!qd) return;
    for (int64_t i = 0; i < t->count; i++) {
        float r = nearbyintf(d[i] / sc) + (float)zp;
        r = r < (s8 ? -128 : 0) ? (s8 ? -128 : 0) : r > (s8 ? 127 : 255) ? (s8 ? 127 : 255) : r;
        qd[i] = s8 ? (uint8_t)(int8_t)r : (uint8_t)r;
    }
    uint8_t z = s8 ? (uint8_t)(int8_t)zp : (uint8_t)zp;
    tdm_dtype dt = w->q->opt.activation_type;
    push_init(w, new_tensor(w, wstr(w, "%s_quantized", name), dt, t->rank, t->dims, qd, (size_t)t->count));
    push_init(w, new_tensor(w, wstr(w, "%s_scale", name), TDM_FLOAT, 0, NULL, &sc, 4));
    push_init(w, new_tensor(w, wstr(w, "%s_zero_point", name), dt, 0, NULL, &z, 1));
    emit_dq(w, name, name, -1);
    push_gone(w, name);
}

/* ---- activations ---- */

static const char *dq_name(wctx *w, const char *x) { return fresh(w, wstr(w, "%s_DequantizeLinear_Output", x)); }

static void emit_qdq(wctx *w, const q_act *x) {
    tdm_dtype dt = w->q->opt.activation_type;
    const char *sn = wstr(w, "%s_scale", x->name), *zn = wstr(w, "%s_zero_point", x->name);
    const char *qn = fresh(w, wstr(w, "%s_QuantizeLinear_Output", x->name));
    uint8_t z = dt == TDM_INT8 ? (uint8_t)(int8_t)x->zp : (uint8_t)x->zp;
    push_init(w, new_tensor(w, sn, TDM_FLOAT, 0, NULL, &x->scale, 4));
    push_init(w, new_tensor(w, zn, dt, 0, NULL, &z, 1));
    const char *qi[3] = {x->name, sn, zn}, *qo[1] = {qn};
    push_node(w, new_node(w, "QuantizeLinear", wstr(w, "%s_QuantizeLinear", x->name), 3, qi, 1, qo));
    const char *di[3] = {qn, sn, zn}, *dout[1] = {dq_name(w, x->name)};
    push_node(w, new_node(w, "DequantizeLinear", wstr(w, "%s_DequantizeLinear", x->name), 3, di, 1, dout));
}

/* A shallow copy of node n with the inputs in `rename` (quantized activations) replaced. */
static Onnx__NodeProto *copy_renamed(wctx *w, const Onnx__NodeProto *n, const bool *qa) {
    Onnx__NodeProto *c = wal(w, sizeof *c);
    char **in = wal(w, (n->n_input + 1) * sizeof *in);
    if (!c || !in) return NULL;
    *c = *n;
    for (size_t i = 0; i < n->n_input; i++) {
        in[i] = n->input[i];
        for (size_t j = 0; n->input[i][0] && j < w->q->n_acts; j++)
            if (qa[j] && !strcmp(w->q->acts[j].name, n->input[i])) {
                in[i] = (char *)dq_name(w, n->input[i]);
                break;
            }
    }
    c->input = in;
    return c;
}

static bool is_removed_constant(const wctx *w, const Onnx__NodeProto *n) {
    return !strcmp(n->op_type, "Constant") && (!n->domain || !n->domain[0]) && n->n_output == 1 &&
           is_gone(w, n->output[0]);
}

static void write_static(wctx *w) {
    tdm_quantizer *q = w->q;
    Onnx__GraphProto *g = q->mp->graph;
    bool *qa = wal(w, q->n_acts + 1);
    if (!qa) return;
    for (size_t i = 0; i < q->n_nodes; i++) {
        const q_node *qn = &q->nodes[i];
        if (!qn->enabled) continue;
        for (int k = 0; k < qn->n_in; k++)
            if (qn->in[k].role == QR_ACT && q->acts[qn->in[k].act].seen) qa[qn->in[k].act] = true;
        if (qn->out_act >= 0 && q->acts[qn->out_act].seen && q->acts[qn->out_act].consumers > 0)
            qa[qn->out_act] = true;
    }
    /* Conv / ConvTranspose + [Add] + [BatchNormalization] folded into one node: its weight
     * and bias names */
    const char **fw = wal(w, (q->n_nodes + 1) * sizeof *fw), **fb = wal(w, (q->n_nodes + 1) * sizeof *fb);
    bool *skip = wal(w, g->n_node + 1);
    int *folded_at = wal(w, (g->n_node + 1) * sizeof *folded_at);
    if (!fw || !fb || !skip || !folded_at) return;
    for (size_t p = 0; p < g->n_node; p++) folded_at[p] = -1;
    for (size_t i = 0; i < q->n_nodes; i++) {
        const q_node *qn = &q->nodes[i];
        if (!qn->enabled || !qn->fold_w) continue;
        const Onnx__NodeProto *n = g->node[qn->pos];
        fw[i] = wstr(w, "%s_folded_W", qn->bn_out);
        fb[i] = wstr(w, "%s_folded_B", qn->bn_out);
        folded_at[qn->pos] = (int)i;
        /* the float parameters go when nothing else reads them */
        for (size_t k = 1; k < n->n_input; k++)
            if (n->input[k][0] && tdm_quant_consumers(q, n->input[k]) == 1) push_gone(w, n->input[k]);
        for (int f = 0; f < 2; f++) { /* the Add's constant, the BatchNormalization's */
            int at = f ? qn->bn_pos : qn->add_pos;
            if (at < 0) continue;
            const Onnx__NodeProto *fn = g->node[at];
            skip[at] = true;
            for (size_t k = 0; k < fn->n_input; k++)
                if (fn->input[k][0] && tdm_quant_constant(q, fn->input[k]) &&
                    tdm_quant_consumers(q, fn->input[k]) == 1)
                    push_gone(w, fn->input[k]);
        }
    }
    /* constants: weights first (biases need their scales) */
    for (size_t i = 0; i < q->n_nodes; i++) {
        const q_node *qn = &q->nodes[i];
        const Onnx__NodeProto *n = g->node[qn->pos];
        for (int k = 0; qn->enabled && k < qn->n_in; k++) {
            if (qn->in[k].role != QR_WEIGHT) continue;
            if (fw[i] && k == 1) emit_weight_t(w, fw[i], qn->fold_w, qn->in[k].axis);
            else emit_weight(w, n->input[k], qn->in[k].axis);
        }
    }
    for (size_t i = 0; i < q->n_nodes; i++) {
        const q_node *qn = &q->nodes[i];
        const Onnx__NodeProto *n = g->node[qn->pos];
        bool xq = qn->n_in > 0 && qn->in[0].role == QR_ACT && qa[qn->in[0].act];
        if (qn->enabled && fb[i] &&
            !(xq && emit_bias_t(w, fb[i], qn->fold_b, fw[i], q->acts[qn->in[0].act].scale)))
            emit_float(w, fb[i], qn->fold_b);
        for (int k = 0; qn->enabled && k < qn->n_in; k++) {
            if (qn->in[k].role == QR_CONST) emit_const(w, n->input[k]);
            if (qn->in[k].role == QR_BIAS && !fb[i] && xq)
                emit_bias(w, n->input[k], n->input[1], q->acts[qn->in[0].act].scale);
        }
    }
    for (size_t j = 0; j < q->n_acts; j++)
        if (qa[j] && q->acts[j].is_input) emit_qdq(w, &q->acts[j]);
    for (size_t p = 0; p < g->n_node; p++) {
        const Onnx__NodeProto *n = g->node[p];
        if (skip[p] || is_removed_constant(w, n)) continue;
        Onnx__NodeProto *c = copy_renamed(w, n, qa);
        if (c && folded_at[p] >= 0) { /* the Conv writes the BatchNormalization's output */
            const q_node *qn = &q->nodes[folded_at[p]];
            char **in = wal(w, 3 * sizeof *in), **out = wal(w, sizeof *out);
            if (!in || !out) return;
            in[0] = c->input[0];
            in[1] = (char *)fw[folded_at[p]];
            in[2] = (char *)fb[folded_at[p]];
            out[0] = (char *)qn->bn_out;
            c->input = in;
            c->n_input = 3;
            c->output = out;
            c->n_output = 1;
        }
        push_node(w, c);
        for (size_t o = 0; c && o < c->n_output; o++)
            for (size_t j = 0; c->output[o][0] && j < q->n_acts; j++)
                if (qa[j] && !strcmp(q->acts[j].name, c->output[o])) emit_qdq(w, &q->acts[j]);
    }
}

/* ---- dynamic mode ---- */

static void write_dynamic(wctx *w) {
    tdm_quantizer *q = w->q;
    Onnx__GraphProto *g = q->mp->graph;
    const q_node **at = wal(w, (g->n_node + 1) * sizeof *at);
    const char **dq_done = wal(w, (q->n_nodes + 1) * sizeof *dq_done);
    size_t n_dq = 0;
    if (!at || !dq_done) return;
    for (size_t i = 0; i < q->n_nodes; i++)
        if (q->nodes[i].enabled) at[q->nodes[i].pos] = &q->nodes[i];
    /* a weight goes when every reader is a quantized node */
    for (size_t i = 0; i < q->n_nodes; i++) {
        if (!at[q->nodes[i].pos]) continue;
        const char *wn = g->node[q->nodes[i].pos]->input[1];
        bool all = true;
        for (size_t p = 0; p < g->n_node && all; p++)
            for (size_t k = 0; k < g->node[p]->n_input; k++)
                if (!strcmp(g->node[p]->input[k], wn) && !(at[p] && k == 1)) all = false;
        if (all && !is_gone(w, wn)) push_gone(w, wn);
    }
    for (size_t p = 0; p < g->n_node; p++) {
        const Onnx__NodeProto *n = g->node[p];
        const q_node *qn = at[p];
        if (!qn) {
            if (!is_removed_constant(w, n)) push_node(w, (Onnx__NodeProto *)n);
            continue;
        }
        const char *A = n->input[0], *W = n->input[1], *Y = n->output[0];
        const tdm_tensor *t = tdm_quant_constant(q, W);
        bool trans_b = qn->kind == QK_GEMM && proto_attr_int(n, "transB", 0);
        int64_t K = t->dims[trans_b ? 1 : 0], N = t->dims[trans_b ? 0 : 1];
        int axis = qn->in[1].axis; /* along N, or -1 */
        const char *wq = wstr(w, "%s_%s_quantized", W, trans_b ? "T" : "KN");
        const char *ws = wstr(w, "%s_%s_scale", W, trans_b ? "T" : "KN");
        const char *wz = wstr(w, "%s_%s_zero_point", W, trans_b ? "T" : "KN");
        bool have = false;
        for (size_t i = 0; i < w->n_inits; i++) have |= !strcmp(w->inits[i]->name, wq);
        if (!have) {
            int8_t *qd = wal(w, (size_t)t->count), *kn = wal(w, (size_t)t->count);
            int64_t C = axis >= 0 ? N : 1, count;
            float *sc = wal(w, (size_t)C * sizeof *sc);
            int8_t *zp = wal(w, (size_t)C);
            if (!qd || !kn || !sc || !zp) return;
            quantize_weight(t, axis >= 0 ? (trans_b ? 0 : 1) : -1, w->q->opt.reduce_range ? 64 : 127,
                            qd, sc, &count);
            for (int64_t k = 0; k < K; k++)
                for (int64_t j = 0; j < N; j++) kn[k * N + j] = trans_b ? qd[j * K + k] : qd[k * N + j];
            int64_t dims[2] = {K, N};
            int r = axis >= 0 ? 1 : 0;
            push_init(w, new_tensor(w, wq, TDM_INT8, 2, dims, kn, (size_t)t->count));
            push_init(w, new_tensor(w, ws, TDM_FLOAT, r, &C, sc, (size_t)C * sizeof *sc));
            push_init(w, new_tensor(w, wz, TDM_INT8, r, &C, zp, (size_t)C));
        }
        const char *aq = fresh(w, wstr(w, "%s_quantized", A)), *as = fresh(w, wstr(w, "%s_scale", A)),
                   *az = fresh(w, wstr(w, "%s_zero_point", A));
        bool done = false;
        for (size_t i = 0; i < n_dq; i++) done |= !strcmp(dq_done[i], A);
        if (!done) {
            const char *o[3] = {aq, as, az};
            push_node(w, new_node(w, "DynamicQuantizeLinear", wstr(w, "%s_DynamicQuantizeLinear", A), 1,
                                  &A, 3, o));
            dq_done[n_dq++] = A;
        }
        const char *tag = n->name && n->name[0] ? n->name : Y;
        const char *yi = fresh(w, wstr(w, "%s_MatMulInteger_Output", tag));
        const char *yf = fresh(w, wstr(w, "%s_Cast_Output", tag)), *s = fresh(w, wstr(w, "%s_scales", tag));
        const char *mi[4] = {aq, wq, az, wz};
        push_node(w, new_node(w, "MatMulInteger", wstr(w, "%s_MatMulInteger", tag), 4, mi, 1, &yi));
        Onnx__NodeProto *cast = new_node(w, "Cast", wstr(w, "%s_Cast", tag), 1, &yi, 1, &yf);
        node_int_attr(w, cast, "to", TDM_FLOAT);
        push_node(w, cast);
        const char *si[2] = {as, ws};
        push_node(w, new_node(w, "Mul", wstr(w, "%s_ScaleMul", tag), 2, si, 1, &s));
        bool bias = qn->kind == QK_GEMM && n->n_input > 2 && n->input[2][0];
        const char *ym = bias ? fresh(w, wstr(w, "%s_MatMul_Output", tag)) : Y;
        const char *mo[2] = {yf, s};
        push_node(w, new_node(w, "Mul", wstr(w, "%s_Mul", tag), 2, mo, 1, &ym));
        if (bias) {
            const char *bi[2] = {ym, n->input[2]};
            push_node(w, new_node(w, "Add", wstr(w, "%s_BiasAdd", tag), 2, bi, 1, &Y));
        }
    }
}

tdm_status *tdm_quant_write(tdm_quantizer *q, void **data, size_t *size) {
    wctx w = {.q = q, .ar = tdm_quant_arena_new(q->a)};
    if (!w.ar) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
    if (q->opt.mode == TDM_QUANT_DYNAMIC) write_dynamic(&w);
    else write_static(&w);
    const Onnx__GraphProto *g0 = q->mp->graph;
    /* the original initializers that stay, after the new ones */
    for (size_t i = 0; i < g0->n_initializer; i++)
        if (!is_gone(&w, g0->initializer[i]->name ? g0->initializer[i]->name : ""))
            push_init(&w, g0->initializer[i]);
    Onnx__ValueInfoProto **inputs = wal(&w, (g0->n_input + 1) * sizeof *inputs);
    Onnx__GraphProto *g = wal(&w, sizeof *g);
    Onnx__ModelProto *m = wal(&w, sizeof *m);
    tdm_status *st = NULL;
    if (w.clash) {
        st = TDM_ERR(TDM_ERR_UNSUPPORTED, "the model already has a tensor named '%s', a name the "
                     "quantized model needs for a new one (is it quantized already?)", w.clash);
    } else if (w.oom || !inputs || !g || !m) {
        st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory writing the quantized model");
    } else {
        *g = *g0;
        g->node = w.nodes;
        g->n_node = w.n_nodes;
        g->initializer = w.inits;
        g->n_initializer = w.n_inits;
        g->n_input = 0;
        for (size_t i = 0; i < g0->n_input; i++)
            if (!is_gone(&w, g0->input[i]->name ? g0->input[i]->name : "")) inputs[g->n_input++] = g0->input[i];
        g->input = inputs;
        *m = *q->mp;
        m->graph = g;
        if (q->bump_opset) {
            Onnx__OperatorSetIdProto **ops = wal(&w, (m->n_opset_import + 1) * sizeof *ops);
            for (size_t i = 0; ops && i < m->n_opset_import; i++) {
                ops[i] = m->opset_import[i];
                const char *dn = ops[i]->domain;
                if (dn && dn[0] && strcmp(dn, "ai.onnx")) continue;
                Onnx__OperatorSetIdProto *o = wal(&w, sizeof *o);
                if (!o) break;
                *o = *ops[i];
                o->has_version = true;
                o->version = 13;
                ops[i] = o;
            }
            m->opset_import = ops;
            if (m->ir_version < 7) m->ir_version = 7;
        }
        size_t n = onnx__model_proto__get_packed_size(m);
        uint8_t *buf = malloc(n ? n : 1);
        if (!buf) {
            st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory packing the quantized model");
        } else {
            onnx__model_proto__pack(m, buf);
            *data = buf;
            *size = n;
        }
    }
    tdm_quant_arena_destroy(w.ar);
    return st;
}
