/* The quantizer: reading the model, finding the quantizable nodes and the roles of their
 * inputs, the exclude patterns, and the accessors of include/tandem/quantize.h. */
#include <limits.h>
#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_impl.h"
#include "graph/infer.h"
#include "quant/quant_impl.h"

/* ---- protobuf-c allocations in one list, freed together ---- */

typedef struct arena_block {
    struct arena_block *next;
    max_align_t pad[];
} arena_block;

struct q_arena {
    const tdm_allocator *a;
    arena_block *head;
    bool failed;
};

q_arena *tdm_quant_arena_new(const tdm_allocator *a) {
    q_arena *ar = tdm_calloc(a, 1, sizeof *ar);
    if (ar) ar->a = a;
    return ar;
}

void *tdm_quant_arena_alloc(void *user, size_t size) {
    q_arena *ar = user;
    arena_block *b = tdm_alloc(ar->a, sizeof *b + size);
    if (!b) {
        ar->failed = true;
        return NULL;
    }
    b->next = ar->head;
    ar->head = b;
    return b->pad;
}

void tdm_quant_arena_free_one(void *user, void *p) { (void)user, (void)p; /* with the arena */ }

bool tdm_quant_arena_failed(const q_arena *ar) { return ar->failed; }

void tdm_quant_arena_destroy(q_arena *ar) {
    if (!ar) return;
    for (arena_block *b = ar->head, *n; b; b = n) {
        n = b->next;
        tdm_free(ar->a, b);
    }
    tdm_free(ar->a, ar);
}

/* ---- model analysis ---- */

static const tdm_value *ir_value(const tdm_quantizer *q, const char *name) {
    if (!name || !*name) return NULL;
    int v = tdm_graph_find_value(q->ir->graph, name);
    return v < 0 ? NULL : &q->ir->graph->values[v];
}

const tdm_tensor *tdm_quant_constant(const tdm_quantizer *q, const char *name) {
    const tdm_value *v = ir_value(q, name);
    if (!v || v->is_input) return NULL;
    const tdm_tensor *t = v->data;
    if (!t && v->producer >= 0) {
        const tdm_node *n = &q->ir->graph->nodes[v->producer];
        if (!strcmp(n->op_type, "Constant") && !n->domain[0]) t = tdm_attr_tensor(n, "value");
    }
    return t && t->dtype == TDM_FLOAT && t->data ? t : NULL;
}

/* A float value computed by the graph (or a graph input): an activation. `assume` says
 * what an unknown dtype counts as. */
static bool is_float_act(const tdm_quantizer *q, const char *name, bool assume) {
    const tdm_value *v = ir_value(q, name);
    if (!v || tdm_quant_constant(q, name)) return false;
    if (v->data && !v->is_input) return false; /* a non-float constant */
    return v->dtype == TDM_FLOAT || (v->dtype == TDM_UNDEFINED && assume);
}

static int find_act(tdm_quantizer *q, const char *name, bool create) {
    for (size_t i = 0; i < q->n_acts; i++)
        if (!strcmp(q->acts[i].name, name)) return (int)i;
    if (!create) return -1;
    q_act *na = tdm_alloc(q->a, (q->n_acts + 1) * sizeof *na);
    if (!na) return -2;
    if (q->n_acts) memcpy(na, q->acts, q->n_acts * sizeof *na);
    tdm_free(q->a, q->acts);
    q->acts = na;
    q_act *x = &q->acts[q->n_acts];
    memset(x, 0, sizeof *x);
    x->name = name;
    x->share = -1;
    const tdm_value *v = ir_value(q, name);
    x->is_input = v && v->is_input;
    Onnx__GraphProto *g = q->mp->graph;
    for (size_t n = 0; n < g->n_node; n++)
        for (size_t k = 0; k < g->node[n]->n_input; k++)
            if (!strcmp(g->node[n]->input[k], name)) {
                x->consumers++;
                break;
            }
    return (int)q->n_acts++;
}

static int64_t attr_int(const Onnx__NodeProto *n, const char *name, int64_t def) {
    for (size_t i = 0; i < n->n_attribute; i++)
        if (!strcmp(n->attribute[i]->name, name)) return n->attribute[i]->i;
    return def;
}

static float attr_float(const Onnx__NodeProto *n, const char *name, float def) {
    for (size_t i = 0; i < n->n_attribute; i++)
        if (!strcmp(n->attribute[i]->name, name)) return n->attribute[i]->f;
    return def;
}

static bool kind_of(const char *op, q_kind *k) {
    static const struct {
        const char *op;
        q_kind kind;
    } table[] = {
        {"Conv", QK_CONV},        {"ConvTranspose", QK_CONV},   {"MatMul", QK_MATMUL},
        {"Gemm", QK_GEMM},        {"Add", QK_ELTWISE},          {"Mul", QK_ELTWISE},
        {"Concat", QK_CONCAT},    {"MaxPool", QK_MAXPOOL},      {"AveragePool", QK_AVGPOOL},
        {"GlobalAveragePool", QK_AVGPOOL},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (!strcmp(op, table[i].op)) {
            *k = table[i].kind;
            return true;
        }
    return false;
}

/* Fills the roles of node n's inputs; false when the node is not quantizable. */
static bool node_roles(tdm_quantizer *q, const Onnx__NodeProto *n, q_kind kind, q_input *in) {
    size_t ni = n->n_input;
    bool dynamic = q->opt.mode == TDM_QUANT_DYNAMIC;
    bool per_tensor = q->opt.per_tensor;
    for (size_t i = 0; i < ni; i++) in[i] = (q_input){QR_NONE, -1, -1};
    switch (kind) {
    case QK_CONV:
        if (dynamic || ni < 2 || !is_float_act(q, n->input[0], true)) return false;
        in[0].role = QR_ACT;
        if (tdm_quant_constant(q, n->input[1])) {
            in[1].role = QR_WEIGHT;
            /* (ConvTranspose: output channels along axis 1, [C, M/group, k...]; with groups
             * that axis holds M/group channels: per tensor) */
            bool ct = !strcmp(n->op_type, "ConvTranspose");
            in[1].axis = per_tensor || (ct && attr_int(n, "group", 1) != 1) ? -1 : ct ? 1 : 0;
        } else if (is_float_act(q, n->input[1], true)) {
            in[1].role = QR_ACT;
        } else {
            return false;
        }
        if (ni > 2 && n->input[2][0] && in[1].role == QR_WEIGHT && tdm_quant_constant(q, n->input[2]))
            in[2].role = QR_BIAS;
        return true;
    case QK_MATMUL:
    case QK_GEMM: {
        if (ni < 2 || !is_float_act(q, n->input[0], true)) return false;
        const tdm_tensor *w = tdm_quant_constant(q, n->input[1]);
        bool trans_b = kind == QK_GEMM && attr_int(n, "transB", 0);
        if (w) {
            in[1].role = QR_WEIGHT;
            in[1].axis = per_tensor || w->rank != 2 ? -1 : trans_b ? 0 : 1;
        } else if (!dynamic && is_float_act(q, n->input[1], true)) {
            in[1].role = QR_ACT;
        } else {
            return false;
        }
        in[0].role = QR_ACT;
        if (dynamic) {
            if (!w || w->rank != 2) return false;
            if (kind == QK_GEMM && (attr_int(n, "transA", 0) || attr_float(n, "alpha", 1.f) != 1.f ||
                                    (ni > 2 && n->input[2][0] && attr_float(n, "beta", 1.f) != 1.f)))
                return false;
            return true;
        }
        if (kind == QK_GEMM && ni > 2 && n->input[2][0]) {
            const tdm_tensor *c = tdm_quant_constant(q, n->input[2]);
            int64_t cols = w ? w->dims[trans_b ? 0 : 1] : -1;
            if (c && w && w->rank == 2 && c->rank == 1 && c->dims[0] == cols) in[2].role = QR_BIAS;
        }
        return true;
    }
    case QK_ELTWISE:
    case QK_CONCAT: {
        if (dynamic) return false;
        int acts = 0;
        for (size_t i = 0; i < ni; i++) {
            if (tdm_quant_constant(q, n->input[i])) {
                in[i].role = QR_CONST;
            } else if (is_float_act(q, n->input[i], false)) {
                in[i].role = QR_ACT;
                acts++;
            } else {
                return false; /* not float: nothing to quantize here */
            }
        }
        return acts > 0;
    }
    case QK_MAXPOOL:
    case QK_AVGPOOL:
        if (dynamic || ni < 1 || n->n_output != 1 || !is_float_act(q, n->input[0], false))
            return false;
        in[0].role = QR_ACT;
        return true;
    }
    return false;
}

/* A node's output read only by a Relu or Clip (and no graph output): the activation's output
 * is quantized instead (as ONNX Runtime's QDQ format does: the quantization range is the
 * activation's, and an int8 kernel runs the activation as a post-op before requantizing). */
static const char *activation_after(const tdm_quantizer *q, const char *name) {
    const Onnx__GraphProto *g = q->mp->graph;
    for (size_t i = 0; i < g->n_output; i++)
        if (!strcmp(g->output[i]->name, name)) return name;
    const Onnx__NodeProto *only = NULL;
    for (size_t p = 0; p < g->n_node; p++)
        for (size_t k = 0; k < g->node[p]->n_input; k++)
            if (!strcmp(g->node[p]->input[k], name)) {
                if (only) return name;
                only = g->node[p];
            }
    if (!only || (only->domain && only->domain[0]) || only->n_output != 1 ||
        (strcmp(only->op_type, "Relu") && strcmp(only->op_type, "Clip")) ||
        strcmp(only->input[0], name) || !is_float_act(q, only->output[0], true))
        return name;
    return only->output[0];
}

int tdm_quant_consumers(const tdm_quantizer *q, const char *name) {
    const Onnx__GraphProto *g = q->mp->graph;
    int n = 0;
    for (size_t p = 0; p < g->n_node; p++)
        for (size_t k = 0; k < g->node[p]->n_input; k++)
            if (!strcmp(g->node[p]->input[k], name)) {
                n++;
                break;
            }
    return n;
}

/* The one node reading `name` (and no graph output): its position, or -1. */
static int sole_consumer(const tdm_quantizer *q, const char *name) {
    const Onnx__GraphProto *g = q->mp->graph;
    for (size_t i = 0; i < g->n_output; i++)
        if (!strcmp(g->output[i]->name, name)) return -1;
    int at = -1;
    for (size_t p = 0; p < g->n_node; p++)
        for (size_t k = 0; k < g->node[p]->n_input; k++)
            if (!strcmp(g->node[p]->input[k], name)) {
                if (at >= 0 && at != (int)p) return -1;
                at = (int)p;
            }
    return at;
}

/* The per-output-channel constant `name` adds to a rank-r convolution result of M channels:
 * one value, or M values along axis 1 once broadcast ([M, 1, 1], [1, M, 1, 1], ...). */
static const tdm_tensor *channel_const(const tdm_quantizer *q, const char *name, int r, int64_t M) {
    const tdm_tensor *c = tdm_quant_constant(q, name);
    if (!c || c->dtype != TDM_FLOAT || c->rank > r) return NULL;
    if (c->count == 1) return c;
    if (c->count != M || c->rank < r - 1) return NULL;
    for (int d = 0; d < c->rank; d++)
        if (c->dims[d] != (d == c->rank - (r - 1) ? M : 1)) return NULL;
    return c;
}

/* Conv ([M, C/g, k...]) or ConvTranspose ([C, M/g, k...]) with a constant weight whose output
 * only an Add of a per-output-channel constant (paddle2onnx writes ConvTranspose's bias so)
 * and / or a BatchNormalization (constant parameters, inference form) read, in that order:
 * B' = B + add, then W' = W * s, B' = (B' - mean) * s + beta with s = scale / sqrt(var +
 * epsilon) per output channel; the chain becomes one node (as ONNX Runtime's pre-processing
 * does for Conv + BatchNormalization), so that an int8 kernel runs it whole with its bias
 * in int32 (PP-OCR's DB head: ConvTranspose -> Add -> BatchNormalization -> Relu twice). */
static tdm_status *fold_bn(tdm_quantizer *q, q_node *qn, const Onnx__NodeProto *n) {
    const Onnx__GraphProto *g = q->mp->graph;
    bool ct = !strcmp(n->op_type, "ConvTranspose");
    if ((strcmp(n->op_type, "Conv") && !ct) || n->n_output != 1 || qn->in[1].role != QR_WEIGHT)
        return NULL;
    const tdm_tensor *w = tdm_quant_constant(q, n->input[1]);
    int64_t group = attr_int(n, "group", 1);
    if (!w || w->rank < 3 || w->dims[0] < 1 || w->dims[1] < 1 || group < 1 ||
        (ct && w->dims[0] % group))
        return NULL;
    int64_t M = ct ? w->dims[1] * group : w->dims[0];
    const char *out = n->output[0];
    /* [Add(per-channel constant)] */
    const tdm_tensor *addc = NULL;
    int ap = sole_consumer(q, out);
    const Onnx__NodeProto *an = ap >= 0 ? g->node[ap] : NULL;
    if (an && !strcmp(an->op_type, "Add") && !(an->domain && an->domain[0]) && an->n_input == 2 &&
        an->n_output == 1) {
        int k = !strcmp(an->input[0], out) ? 1 : !strcmp(an->input[1], out) ? 0 : -1;
        if (k >= 0 && strcmp(an->input[k], out) &&
            (addc = channel_const(q, an->input[k], w->rank, M))) {
            out = an->output[0];
        } else {
            ap = -1;
        }
    } else {
        ap = -1;
    }
    /* [BatchNormalization] */
    const tdm_tensor *p[4] = {NULL, NULL, NULL, NULL};
    int bp = sole_consumer(q, out);
    const Onnx__NodeProto *bn = bp >= 0 ? g->node[bp] : NULL;
    bool has_bn = bn && !strcmp(bn->op_type, "BatchNormalization") && !(bn->domain && bn->domain[0]) &&
                  bn->n_input == 5 && !strcmp(bn->input[0], out) && !attr_int(bn, "training_mode", 0);
    for (size_t o = 1; has_bn && o < bn->n_output; o++)
        if (bn->output[o][0]) has_bn = false; /* training outputs */
    for (int i = 0; has_bn && i < 4; i++) {
        p[i] = tdm_quant_constant(q, bn->input[1 + i]);
        if (!p[i] || p[i]->dtype != TDM_FLOAT || p[i]->count != M) has_bn = false;
    }
    if (!has_bn) bp = -1;
    if (ap < 0 && bp < 0) return NULL;
    const tdm_tensor *b = n->n_input > 2 && n->input[2][0] ? tdm_quant_constant(q, n->input[2]) : NULL;
    if (n->n_input > 2 && n->input[2][0] && (!b || b->dtype != TDM_FLOAT || b->count != M))
        return NULL;
    TDM_TRY(tdm_tensor_new(q->a, TDM_FLOAT, w->rank, w->dims, &qn->fold_w));
    TDM_TRY(tdm_tensor_new(q->a, TDM_FLOAT, 1, &M, &qn->fold_b));
    float eps = has_bn ? attr_float(bn, "epsilon", 1e-5f) : 0.f;
    const float *wd = w->data;
    float *fw = qn->fold_w->data, *fb = qn->fold_b->data;
    int64_t ksz = 1, Mg = ct ? w->dims[1] : M / group, Cg = ct ? w->dims[0] / group : w->dims[1];
    for (int d = 2; d < w->rank; d++) ksz *= w->dims[d];
    for (int64_t m = 0; m < M; m++) {
        float s = has_bn ? ((const float *)p[0]->data)[m] / sqrtf(((const float *)p[3]->data)[m] + eps) : 1.f;
        float bias = (b ? ((const float *)b->data)[m] : 0.f) +
                     (addc ? ((const float *)addc->data)[addc->count == 1 ? 0 : m] : 0.f);
        fb[m] = has_bn ? (bias - ((const float *)p[2]->data)[m]) * s + ((const float *)p[1]->data)[m]
                       : bias;
        if (ct) { /* output channel m = group g, column mi: rows c of that group */
            int64_t gi = m / Mg, mi = m % Mg;
            for (int64_t c = gi * Cg; c < (gi + 1) * Cg; c++)
                for (int64_t i = 0; i < ksz; i++)
                    fw[(c * Mg + mi) * ksz + i] = wd[(c * Mg + mi) * ksz + i] * s;
        } else {
            int64_t per = w->count / M;
            for (int64_t i = 0; i < per; i++) fw[m * per + i] = wd[m * per + i] * s;
        }
    }
    qn->add_pos = ap;
    qn->bn_pos = bp;
    qn->bn_out = has_bn ? bn->output[0] : an->output[0];
    return NULL;
}

/* Marks the activations that only constants feed (graph order is topological). */
static tdm_status *mark_from_constants(tdm_quantizer *q) {
    Onnx__GraphProto *g = q->mp->graph;
    size_t cap = g->n_initializer + 16, n = 0;
    const char **set = tdm_alloc(q->a, cap * sizeof *set);
    if (!set) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
    for (size_t i = 0; i < g->n_initializer; i++) set[n++] = g->initializer[i]->name;
    tdm_status *st = NULL;
    for (size_t p = 0; p < g->n_node && !st; p++) {
        const Onnx__NodeProto *nd = g->node[p];
        bool all = !strcmp(nd->op_type, "Constant");
        for (size_t k = 0; k < nd->n_input && (all || k == 0); k++) {
            bool found = !nd->input[k][0];
            for (size_t j = 0; j < n && !found; j++) found = !strcmp(set[j], nd->input[k]);
            all = found;
        }
        if (!all || (nd->domain && nd->domain[0])) continue;
        for (size_t o = 0; o < nd->n_output; o++) {
            if (n == cap) {
                const char **ns = tdm_alloc(q->a, 2 * cap * sizeof *ns);
                if (!ns) {
                    st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
                    break;
                }
                memcpy(ns, set, n * sizeof *ns);
                tdm_free(q->a, set);
                set = ns;
                cap *= 2;
            }
            set[n++] = nd->output[o];
            for (size_t a = 0; a < q->n_acts; a++)
                if (!strcmp(q->acts[a].name, nd->output[o])) q->acts[a].from_constants = true;
        }
    }
    tdm_free(q->a, set);
    return st;
}

static tdm_status *analyse(tdm_quantizer *q) {
    Onnx__GraphProto *g = q->mp->graph;
    q->nodes = tdm_calloc(q->a, g->n_node + 1, sizeof *q->nodes);
    if (!q->nodes) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
    for (size_t p = 0; p < g->n_node; p++) {
        const Onnx__NodeProto *n = g->node[p];
        q_kind kind;
        if ((n->domain && n->domain[0] && strcmp(n->domain, "ai.onnx")) || !kind_of(n->op_type, &kind))
            continue;
        bool folded = false; /* an Add folded into the convolution before it */
        for (size_t i = 0; i < q->n_nodes && !folded; i++) folded = q->nodes[i].add_pos == (int)p;
        if (folded) continue;
        q_input *in = tdm_calloc(q->a, n->n_input + 1, sizeof *in);
        if (!in) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
        if (!node_roles(q, n, kind, in)) {
            tdm_free(q->a, in);
            continue;
        }
        q_node *qn = &q->nodes[q->n_nodes++];
        qn->pos = (int)p;
        qn->name = n->name ? n->name : "";
        qn->op = n->op_type;
        qn->kind = kind;
        qn->enabled = true;
        qn->n_in = (int)n->n_input;
        qn->in = in;
        qn->out_act = -1;
        qn->bn_pos = qn->add_pos = -1;
        if (q->opt.mode == TDM_QUANT_DYNAMIC) continue; /* activations quantized per run */
        if (kind == QK_CONV) TDM_TRY(fold_bn(q, qn, n));
        for (int i = 0; i < qn->n_in; i++)
            if (in[i].role == QR_ACT && (in[i].act = find_act(q, n->input[i], true)) < 0)
                return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
        const char *out0 = qn->bn_out ? qn->bn_out : n->n_output >= 1 ? n->output[0] : "";
        if (n->n_output >= 1 && is_float_act(q, out0, true)) {
            const char *out = activation_after(q, out0);
            int o = find_act(q, out, true);
            if (o < 0) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
            qn->out_act = o;
            if (kind == QK_MAXPOOL && q->acts[o].share < 0) q->acts[o].share = in[0].act;
        }
    }
    return NULL;
}

/* ---- exclude patterns: OP, /REGEX/ on node names, #FIRST-LAST positions ---- */

static tdm_status *apply_exclude(tdm_quantizer *q, const char *patterns) {
    size_t len = strlen(patterns);
    char *buf = tdm_alloc(q->a, len + 1);
    if (!buf) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
    memcpy(buf, patterns, len + 1);
    tdm_status *st = NULL;
    char *save = NULL;
    for (char *p = strtok_r(buf, ",", &save); p && !st; p = strtok_r(NULL, ",", &save)) {
        while (*p == ' ') p++;
        size_t pl = strlen(p);
        while (pl && p[pl - 1] == ' ') p[--pl] = 0;
        if (!pl) continue;
        if (p[0] == '/' && pl >= 2 && p[pl - 1] == '/') {
            p[pl - 1] = 0;
            regex_t re;
            if (regcomp(&re, p + 1, REG_EXTENDED | REG_NOSUB) != 0) {
                st = TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "exclude: bad regular expression '%s'", p + 1);
                break;
            }
            for (size_t i = 0; i < q->n_nodes; i++)
                if (regexec(&re, q->nodes[i].name, 0, NULL, 0) == 0) q->nodes[i].enabled = false;
            regfree(&re);
        } else if (p[0] == '#') {
            char *end;
            long lo = strtol(p + 1, &end, 10), hi = lo;
            if (end != p + 1 && *end == '-') hi = strtol(end + 1, &end, 10);
            if (end == p + 1 || *end || lo < 0 || hi < lo) {
                st = TDM_ERR(TDM_ERR_INVALID_ARGUMENT,
                             "exclude: bad node range '%s' (#FIRST-LAST or #N, positions from 0)", p);
                break;
            }
            for (size_t i = 0; i < q->n_nodes; i++)
                if (q->nodes[i].pos >= lo && q->nodes[i].pos <= hi) q->nodes[i].enabled = false;
        } else {
            for (size_t i = 0; i < q->n_nodes; i++)
                if (!strcmp(q->nodes[i].op, p)) q->nodes[i].enabled = false;
        }
    }
    tdm_free(q->a, buf);
    return st;
}

/* ---- opset 11 / 12 models with per-channel weights ----
 * DequantizeLinear's axis needs opset 13. Between 11 and 13 a few operators changed meaning
 * or moved attributes to inputs; a model without them means the same under 13, and the
 * writer imports 13 instead. Returns the first node that prevents it, or NULL. */
static const Onnx__NodeProto *opset13_blocker(tdm_quantizer *q) {
    const Onnx__GraphProto *g = q->mp->graph;
    for (size_t p = 0; p < g->n_node; p++) {
        const Onnx__NodeProto *n = g->node[p];
        const char *op = n->op_type;
        bool has_attr = false;
        for (size_t i = 0; i < n->n_attribute; i++) {
            const char *an = n->attribute[i]->name;
            has_attr |= !strcmp(an, "axes") || !strcmp(an, "split") || !strcmp(an, "ratio");
            if (n->attribute[i]->has_type && (n->attribute[i]->type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH ||
                                              n->attribute[i]->type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPHS))
                return n; /* bodies are not looked into */
        }
        if (n->domain && n->domain[0] && strcmp(n->domain, "ai.onnx")) continue;
        if ((!strcmp(op, "Squeeze") || !strcmp(op, "Unsqueeze") || !strcmp(op, "Split") ||
             !strcmp(op, "ReduceSum") || !strcmp(op, "Dropout")) && (has_attr || !strcmp(op, "Unsqueeze")))
            return n;
        if (!strcmp(op, "Softmax") || !strcmp(op, "LogSoftmax") || !strcmp(op, "Hardmax")) {
            /* before 13 the input is flattened to 2-D at `axis`: the same only on the last axis */
            const tdm_value *x = n->n_input ? ir_value(q, n->input[0]) : NULL;
            int64_t axis = attr_int(n, "axis", 1);
            if (!x) return n;
            if (x->rank < 1) { /* rank unknown here: calibration sees it */
                if (q->n_pending == sizeof q->pending / sizeof q->pending[0]) return n;
                q->pending[q->n_pending] = n->input[0];
                q->pending_axis[q->n_pending] = axis;
                q->pending_node[q->n_pending++] = n->name ? n->name : "";
            } else if (axis != -1 && axis != x->rank - 1) {
                return n;
            }
        }
    }
    return NULL;
}

/* ---- creation ---- */

static tdm_status *load(tdm_quantizer *q) {
    TDM_TRY(tdm_read_file(q->path, q->a, TDM_MAX_MODEL_BYTES, &q->file, &q->file_size));
    TDM_TRY(tdm_onnx_check_wire(q->file, q->file_size, 0, TDM_MAX_PROTO_DEPTH));
    q_arena *ar = q->arena = tdm_quant_arena_new(q->a);
    if (!ar) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
    ProtobufCAllocator pa = {tdm_quant_arena_alloc, tdm_quant_arena_free_one, ar};
    q->mp = onnx__model_proto__unpack(&pa, q->file_size, q->file);
    if (!q->mp)
        return tdm_quant_arena_failed(ar) ? TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory decoding the model")
                          : TDM_ERR(TDM_ERR_INVALID_MODEL, "not a valid ONNX model");
    if (!q->mp->graph) return TDM_ERR(TDM_ERR_INVALID_MODEL, "the model has no graph");
    char dir[PATH_MAX];
    TDM_TRY(tdm_onnx_load_buffer(q->file, q->file_size, tdm_path_dir(q->path, dir, sizeof dir), q->a,
                                 &q->ir));
    tdm_status_free(tdm_graph_infer_shapes(q->ir->graph)); /* what it knows helps; not required */
    q->opset = 0;
    for (size_t i = 0; i < q->mp->n_opset_import; i++) {
        const Onnx__OperatorSetIdProto *o = q->mp->opset_import[i];
        if (!o->domain || !o->domain[0] || !strcmp(o->domain, "ai.onnx")) q->opset = o->version;
    }
    return NULL;
}

tdm_status *tdm_quantizer_create(tdm_env *env, const char *model_path,
                                 const tdm_quantize_options *options, tdm_quantizer **out) {
    if (!env || !model_path || !options || !out)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_quantizer_create: NULL argument");
    if (options->api_version < 1 || options->api_version > TDM_API_VERSION)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_quantizer_create: unknown api_version %d",
                       options->api_version);
    tdm_quantize_options o = *options;
    if (o.activation_type == TDM_UNDEFINED) o.activation_type = TDM_UINT8;
    if (o.activation_type != TDM_UINT8 && o.activation_type != TDM_INT8)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "activations are quantized to uint8 or int8, not %s",
                       tdm_dtype_name(o.activation_type));
    if (o.method < TDM_QUANT_MINMAX || o.method > TDM_QUANT_ENTROPY)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "unknown calibration method %d", (int)o.method);
    if (o.mode != TDM_QUANT_STATIC && o.mode != TDM_QUANT_DYNAMIC)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "unknown quantization mode %d", (int)o.mode);
    if (o.percentile == 0) o.percentile = 99.999;
    if (!(o.percentile > 50 && o.percentile <= 100))
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "percentile %g is not in (50, 100]", o.percentile);
    if (o.bins == 0) o.bins = 2048;
    if (o.bins < 256 || o.bins > (1 << 20))
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "histogram bins %d not in [256, 1048576]", o.bins);
    const tdm_allocator *a = env->alloc;
    tdm_quantizer *q = tdm_calloc(a, 1, sizeof *q);
    if (!q) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
    q->env = env;
    q->a = a;
    q->opt = o;
    q->opt.exclude = NULL;
    q->path = tdm_strdup(a, model_path);
    tdm_status *st = q->path ? load(q) : TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
    bool dynamic = o.mode == TDM_QUANT_DYNAMIC;
    if (!st && q->opset < (dynamic ? 11 : 10))
        st = TDM_ERR(TDM_ERR_UNSUPPORTED, "the model imports opset %lld of the default domain; %s "
                     "needs %d or later", (long long)q->opset,
                     dynamic ? "DynamicQuantizeLinear" : "QuantizeLinear", dynamic ? 11 : 10);
    /* (dynamic mode's per-column weights are MatMulInteger zero points: no axis needed) */
    if (!st && q->opset < 13 && !o.per_tensor && !dynamic) {
        const Onnx__NodeProto *b = q->opset >= 11 ? opset13_blocker(q) : NULL;
        if (q->opset < 11 || b)
            st = TDM_ERR(TDM_ERR_UNSUPPORTED, "the model imports opset %lld of the default domain; "
                         "per-channel weights need 13%s%s%s%s (quantize per tensor, or convert the "
                         "model to opset 13)", (long long)q->opset,
                         b ? ", and its node '" : "", b && b->name ? b->name : "", b ? "' " : "",
                         b ? b->op_type : "");
        else
            q->bump_opset = true;
    }
    if (!st) st = analyse(q);
    if (!st) st = mark_from_constants(q);
    if (!st && o.exclude) st = apply_exclude(q, o.exclude);
    if (st) {
        tdm_quantizer_free(q);
        return tdm_status_wrap(st, "quantizing '%s': ", model_path);
    }
    *out = q;
    return NULL;
}

void tdm_quantizer_free(tdm_quantizer *q) {
    if (!q) return;
    for (size_t i = 0; i < q->n_nodes; i++) {
        tdm_free(q->a, q->nodes[i].in);
        tdm_tensor_destroy(q->nodes[i].fold_w);
        tdm_tensor_destroy(q->nodes[i].fold_b);
    }
    tdm_free(q->a, q->nodes);
    for (size_t i = 0; i < q->n_acts; i++) tdm_free(q->a, q->acts[i].hist);
    tdm_free(q->a, q->acts);
    tdm_onnx_model_free(q->ir);
    tdm_quant_arena_destroy(q->arena);
    tdm_free(q->a, q->file);
    tdm_free(q->a, q->path);
    tdm_free(q->a, q);
}

/* ---- accessors ---- */

size_t tdm_quantizer_node_count(const tdm_quantizer *q) { return q ? q->n_nodes : 0; }

const char *tdm_quantizer_node_name(const tdm_quantizer *q, size_t i) {
    return q && i < q->n_nodes ? q->nodes[i].name : NULL;
}

const char *tdm_quantizer_node_op(const tdm_quantizer *q, size_t i) {
    return q && i < q->n_nodes ? q->nodes[i].op : NULL;
}

int64_t tdm_quantizer_node_position(const tdm_quantizer *q, size_t i) {
    return q && i < q->n_nodes ? q->nodes[i].pos : -1;
}

bool tdm_quantizer_node_enabled(const tdm_quantizer *q, size_t i) {
    return q && i < q->n_nodes && q->nodes[i].enabled;
}

void tdm_quantizer_set_enabled(tdm_quantizer *q, size_t i, bool enabled) {
    if (q && i < q->n_nodes) q->nodes[i].enabled = enabled;
}

size_t tdm_quantizer_tensor_count(const tdm_quantizer *q) { return q ? q->n_acts : 0; }

bool tdm_quantizer_tensor(const tdm_quantizer *q, size_t i, tdm_quant_param *out) {
    if (!q || !out || i >= q->n_acts || !q->calibrated) return false;
    const q_act *x = &q->acts[i];
    *out = (tdm_quant_param){x->name, (float)x->omin, (float)x->omax, x->rmin, x->rmax, x->scale, x->zp};
    return true;
}

tdm_status *tdm_quantizer_save_buffer(tdm_quantizer *q, void **data, size_t *size) {
    if (!q || !data || !size) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_quantizer_save_buffer: NULL argument");
    if (q->opt.mode == TDM_QUANT_STATIC && !q->calibrated && q->n_acts)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "static quantization needs calibration first "
                       "(tdm_quantizer_calibrate)");
    if (q->bump_opset && q->n_pending && (!q->bump_checked || q->bump_blocker))
        return TDM_ERR(TDM_ERR_UNSUPPORTED, "the model imports opset %lld; per-channel weights need "
                       "13, and %s%s%s (quantize per tensor, or convert the model to opset 13)",
                       (long long)q->opset, q->bump_blocker ? "the axis of node '" : "",
                       q->bump_blocker ? q->bump_blocker : "whether its Softmax nodes work on the last "
                       "axis is only known after calibration", q->bump_blocker ? "' is not the last" : "");
    return tdm_quant_write(q, data, size);
}

tdm_status *tdm_quantizer_save(tdm_quantizer *q, const char *path) {
    if (!q || !path) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_quantizer_save: NULL argument");
    void *data = NULL;
    size_t size = 0;
    TDM_TRY(tdm_quantizer_save_buffer(q, &data, &size));
    FILE *f = fopen(path, "wb");
    tdm_status *st = NULL;
    if (!f) {
        st = TDM_ERR(TDM_ERR_IO, "cannot write '%s'", path);
    } else {
        if (fwrite(data, 1, size, f) != size) st = TDM_ERR(TDM_ERR_IO, "writing '%s' failed", path);
        if (fclose(f) != 0 && !st) st = TDM_ERR(TDM_ERR_IO, "writing '%s' failed", path);
    }
    free(data);
    return st;
}
