/* Fusion driver and the helpers the passes share (fuse_impl.h): producer / consumer index,
 * symbolic dim origins, constant tests, node / value / attribute creation. */
#include "graph/fuse.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "graph/fuse_impl.h"
#include "graph/infer.h"
#include "ops/fused.h"
#include "ops/op.h"

/* ---- index ---- */

static void index_free(fz_ctx *fz) {
    const tdm_allocator *a = fz->g->alloc;
    tdm_free(a, fz->producer);
    tdm_free(a, fz->cons_start);
    tdm_free(a, fz->cons);
    tdm_free(a, fz->extra_uses);
    fz->producer = fz->cons_start = fz->cons = fz->extra_uses = NULL;
    fz->n_values = 0;
}

tdm_status *fz_refresh(fz_ctx *fz) {
    tdm_graph *g = fz->g;
    if (!fz->dirty && fz->producer && fz->n_values == g->n_values) return NULL;
    index_free(fz);
    const tdm_allocator *a = g->alloc;
    size_t nv = g->n_values;
    fz->producer = tdm_alloc(a, (nv + 1) * sizeof(int));
    fz->cons_start = tdm_calloc(a, nv + 2, sizeof(int));
    fz->extra_uses = tdm_calloc(a, nv + 1, sizeof(int));
    if (!fz->producer || !fz->cons_start || !fz->extra_uses) goto oom;
    for (size_t v = 0; v < nv; v++) fz->producer[v] = -1;
    size_t slots = 0;
    for (size_t i = 0; i < g->n_nodes; i++) {
        const tdm_node *n = &g->nodes[i];
        if (n->dead) continue;
        for (int k = 0; k < n->n_outputs; k++)
            if (n->outputs[k] >= 0) fz->producer[n->outputs[k]] = (int)i;
        for (int k = 0; k < n->n_inputs; k++)
            if (n->inputs[k] >= 0) {
                fz->cons_start[n->inputs[k] + 1]++;
                slots++;
            }
        for (int k = 0; k < n->n_implicit; k++) fz->extra_uses[n->implicit[k]]++;
    }
    for (size_t o = 0; o < g->n_outputs; o++) fz->extra_uses[g->outputs[o]]++;
    for (size_t v = 0; v < nv; v++)
        if (g->values[v].is_output) fz->extra_uses[v]++;
    for (size_t v = 0; v < nv; v++) fz->cons_start[v + 1] += fz->cons_start[v];
    fz->cons = tdm_alloc(a, (slots + 1) * sizeof(int));
    int *fill = tdm_alloc(a, (nv + 1) * sizeof(int));
    if (!fz->cons || !fill) {
        tdm_free(a, fill);
        goto oom;
    }
    memcpy(fill, fz->cons_start, nv * sizeof(int));
    for (size_t i = 0; i < g->n_nodes; i++) {
        const tdm_node *n = &g->nodes[i];
        if (n->dead) continue;
        for (int k = 0; k < n->n_inputs; k++)
            if (n->inputs[k] >= 0) fz->cons[fill[n->inputs[k]]++] = (int)i;
    }
    tdm_free(a, fill);
    fz->n_values = nv;
    fz->dirty = false;
    return NULL;
oom:
    index_free(fz);
    return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory in graph fusion");
}

int fz_producer(const fz_ctx *fz, int v) {
    return v >= 0 && (size_t)v < fz->n_values ? fz->producer[v] : -1;
}

int fz_consumers(const fz_ctx *fz, int v, const int **nodes) {
    if (v < 0 || (size_t)v >= fz->n_values) {
        *nodes = NULL;
        return 0;
    }
    *nodes = fz->cons + fz->cons_start[v];
    return fz->cons_start[v + 1] - fz->cons_start[v];
}

int fz_uses(const fz_ctx *fz, int v) {
    if (v < 0 || (size_t)v >= fz->n_values) return 1 << 20; /* unknown: never "single" */
    return fz->cons_start[v + 1] - fz->cons_start[v] + fz->extra_uses[v];
}

int fz_sole_consumer(const fz_ctx *fz, int v) {
    if (fz_uses(fz, v) != 1) return -1;
    const int *c;
    return fz_consumers(fz, v, &c) == 1 ? c[0] : -1;
}

/* ---- tests ---- */

tdm_node *fz_node(const fz_ctx *fz, int i) { return &fz->g->nodes[i]; }

bool fz_is_op(const fz_ctx *fz, int i, const char *op) {
    if (i < 0) return false;
    const tdm_node *n = &fz->g->nodes[i];
    return !n->dead && !n->domain[0] && strcmp(n->op_type, op) == 0;
}

bool fz_is_fused(const fz_ctx *fz, int i, const char *op) {
    return i >= 0 && fz_node_is_fused(&fz->g->nodes[i], op);
}

bool fz_node_is_fused(const tdm_node *n, const char *op) {
    return !n->dead && strcmp(n->domain, TDM_FUSED_DOMAIN) == 0 && strcmp(n->op_type, op) == 0;
}

const tdm_tensor *fz_const(const fz_ctx *fz, int v) {
    if (v < 0) return NULL;
    const tdm_value *val = &fz->g->values[v];
    if (!val->data && val->is_outer) { /* a body reading an enclosing graph's constant */
        const tdm_value *o = tdm_graph_outer_def(fz->g, val->name);
        if (o) val = o;
    }
    return val->data && !val->is_input ? val->data : NULL;
}

bool fz_scalar(const fz_ctx *fz, int v, int max_rank, float *val) {
    const tdm_tensor *t = fz_const(fz, v);
    if (!t || t->dtype != TDM_FLOAT || t->count != 1 || t->rank > max_rank) return false;
    *val = ((const float *)t->data)[0];
    return true;
}

bool fz_close(float a, float b) { return fabsf(a - b) <= 1e-4f * fabsf(b); }

bool fz_is_f32(const fz_ctx *fz, int v) { return v >= 0 && fz->g->values[v].dtype == TDM_FLOAT; }

int fz_other_input(const tdm_node *n, int v) {
    if (n->n_inputs != 2) return -1;
    if (n->inputs[0] == v && n->inputs[1] != v) return n->inputs[1];
    if (n->inputs[1] == v && n->inputs[0] != v) return n->inputs[0];
    return -1;
}

static uint32_t origin_of(const fz_ctx *fz, int v, int d) {
    if (fz->origin && (size_t)v < fz->n_origin) return fz->origin[(size_t)v * TDM_MAX_RANK + d];
    return 0;
}

bool fz_same_shape(const fz_ctx *fz, int a, int b) {
    const tdm_value *va = &fz->g->values[a], *vb = &fz->g->values[b];
    if (va->rank < 0 || va->rank != vb->rank) return false;
    for (int d = 0; d < va->rank; d++) {
        int64_t x = va->dims[d], y = vb->dims[d];
        if (x >= 0 || y >= 0) {
            if (x != y) return false;
            continue;
        }
        uint32_t oa = origin_of(fz, a, d), ob = origin_of(fz, b, d);
        if (!oa || oa != ob) return false;
    }
    return true;
}

bool fz_same_dim(const fz_ctx *fz, int a, int da, int b, int db) {
    const tdm_value *va = &fz->g->values[a], *vb = &fz->g->values[b];
    if (da < 0 || db < 0 || da >= va->rank || db >= vb->rank) return false;
    int64_t x = va->dims[da], y = vb->dims[db];
    if (x >= 0 || y >= 0) return x == y;
    uint32_t oa = origin_of(fz, a, da), ob = origin_of(fz, b, db);
    return oa && oa == ob;
}

bool fz_axes_of(const fz_ctx *fz, const tdm_node *n, int input_since, int64_t *axes, int *count) {
    int c = 0;
    if (n->opset < input_since) {
        size_t na = 0;
        const int64_t *a = tdm_attr_ints(n, "axes", &na);
        if (a && na > TDM_MAX_RANK) return false;
        for (size_t i = 0; a && i < na; i++) axes[c++] = a[i];
    } else if (n->n_inputs > 1 && n->inputs[1] >= 0) {
        const tdm_tensor *t = fz_const(fz, n->inputs[1]);
        if (!t || (t->count > 0 && t->dtype != TDM_INT64) || t->count > TDM_MAX_RANK) return false;
        for (int64_t i = 0; i < t->count; i++) axes[c++] = ((const int64_t *)t->data)[i];
    }
    *count = c;
    return true;
}

bool fz_reduce_axes(const fz_ctx *fz, const tdm_node *n, int rank, int64_t *axes, int *count) {
    int c;
    if (!fz_axes_of(fz, n, 18, axes, &c)) return false;
    if (c == 0) { /* every axis, unless opset 18's noop_with_empty_axes */
        if (n->opset >= 18 && tdm_attr_int(n, "noop_with_empty_axes", 0)) return false;
        for (int d = 0; d < rank; d++) axes[c++] = d;
    }
    for (int i = 0; i < c; i++) {
        if (axes[i] < 0) axes[i] += rank;
        if (axes[i] < 0 || axes[i] >= rank) return false;
    }
    *count = c;
    return true;
}

/* ---- symbolic dim origins ----
 * For every value and unknown dim, a code naming where the size comes from: the dim of a
 * graph input (or of a node output we cannot see through). Propagated forward in
 * topological order through ops whose output dim provably equals an input dim:
 * elementwise unary ops, broadcasting ops when every input that can contribute carries
 * the same origin, the batch dim of convolutions and pooling, Gemm / MatMul rows, Concat's
 * non-axis dims; the spatial dims of Conv / FusedConv / MaxPool / AveragePool keep the input's
 * origin when the window keeps the size (stride 1, "same" padding) and otherwise get one
 * derived origin per (input origin, window extent, stride, padding), since the output size
 * is a function of those alone. Two unknown dims with the same origin have the same size at
 * run time. */

static bool op_in(const tdm_node *n, const char *const *list) {
    if (n->domain[0]) return false;
    for (; *list; list++)
        if (strcmp(n->op_type, *list) == 0) return true;
    return false;
}

static const char *const same_shape_ops[] = {
    "Relu", "LeakyRelu", "Clip", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "Elu",
    "Selu", "Celu", "Softplus", "Softsign", "Abs", "Neg", "Exp", "Log", "Sqrt", "Reciprocal",
    "Erf", "Identity", "Cast", "Dropout", "BatchNormalization", "InstanceNormalization",
    "LayerNormalization", "Softmax", "LogSoftmax", "Floor", "Ceil", "Round", "Sign", "Gelu",
    "Mish", "ThresholdedRelu", "PRelu", "LRN", "MeanVarianceNormalization", "Sin", "Cos",
    "Not", NULL};
static const char *const bcast_ops[] = {"Add", "Sub", "Mul", "Div", "Pow", "Max",
                                        "Min", "Sum", "Mean", "Where", NULL};
static const char *const batch_ops[] = {"Conv",           "ConvTranspose",     "MaxPool",
                                        "AveragePool",    "LpPool",            "GlobalAveragePool",
                                        "GlobalMaxPool",  "GlobalLpPool",      NULL};

static uint32_t self_code(size_t v, int d) { return (uint32_t)(v * TDM_MAX_RANK + (size_t)d + 1); }

/* A window over a dim (convolution, pooling): output size = f(input size) for fixed kernel
 * extent, stride, total padding (or "same" padding). Equal inputs and parameters give equal
 * outputs, so each distinct (input origin, parameters) gets one derived origin. */
typedef struct fz_derived {
    uint32_t from;
    int64_t extent, stride, pad; /* pad -1: auto_pad SAME_* (ceil(in / stride)) */
    uint32_t code;
} fz_derived;

static bool is_conv_like(const tdm_node *n) {
    if (!n->domain[0]) return !strcmp(n->op_type, "Conv");
    return !strcmp(n->domain, TDM_FUSED_DOMAIN) && !strcmp(n->op_type, "FusedConv");
}

/* Origin of spatial output dim d (>= 2) of a Conv / FusedConv / MaxPool / AveragePool of
 * rank-r input x; 0 when unknown (or out of memory: then nothing is proven). */
static uint32_t window_origin(fz_ctx *fz, const tdm_node *n, int x, int r, int d) {
    int sd = d - 2, nsp = r - 2;
    uint32_t from = origin_of(fz, x, d);
    if (sd < 0 || !from) return 0;
    int64_t k;
    size_t nk, ns, np, ndl;
    const int64_t *ks = tdm_attr_ints(n, "kernel_shape", &nk);
    if (ks && (int)nk == nsp) {
        k = ks[sd];
    } else if (is_conv_like(n) && n->n_inputs > 1 && n->inputs[1] >= 0 &&
               fz->g->values[n->inputs[1]].rank == r) {
        k = fz->g->values[n->inputs[1]].dims[d];
    } else {
        return 0;
    }
    const int64_t *st = tdm_attr_ints(n, "strides", &ns), *pd = tdm_attr_ints(n, "pads", &np);
    const int64_t *dl = tdm_attr_ints(n, "dilations", &ndl);
    int64_t s = st && (int)ns == nsp ? st[sd] : 1, dil = dl && (int)ndl == nsp ? dl[sd] : 1;
    if ((st && (int)ns != nsp) || (dl && (int)ndl != nsp) || (pd && (int)np != 2 * nsp) || k < 1 ||
        s < 1 || dil < 1 || (!is_conv_like(n) && tdm_attr_int(n, "ceil_mode", 0)))
        return 0;
    const char *ap = tdm_attr_string(n, "auto_pad", "NOTSET");
    int64_t extent = dil * (k - 1) + 1, pad;
    if (!strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER")) pad = -1;
    else if (!strcmp(ap, "VALID")) pad = 0;
    else if (!strcmp(ap, "NOTSET") || !ap[0]) pad = pd ? pd[sd] + pd[sd + nsp] : 0;
    else return 0;
    if (s == 1 && (pad == -1 || pad == extent - 1)) return from; /* the size is kept */
    if (pad == -1) extent = 0; /* ceil(in / s): the extent does not matter */
    for (size_t i = 0; i < fz->n_derived; i++) {
        const fz_derived *e = &fz->derived[i];
        if (e->from == from && e->extent == extent && e->stride == s && e->pad == pad) return e->code;
    }
    if (fz->next_origin == UINT32_MAX) return 0;
    if (fz->n_derived == fz->cap_derived) {
        size_t cap = fz->cap_derived ? 2 * fz->cap_derived : 64;
        fz_derived *nd = tdm_alloc(fz->g->alloc, cap * sizeof *nd);
        if (!nd) return 0;
        if (fz->n_derived) memcpy(nd, fz->derived, fz->n_derived * sizeof *nd);
        tdm_free(fz->g->alloc, fz->derived);
        fz->derived = nd;
        fz->cap_derived = cap;
    }
    fz_derived *e = &fz->derived[fz->n_derived++];
    *e = (fz_derived){from, extent, s, pad, fz->next_origin++};
    return e->code;
}

/* Origin of output dim d (unknown) of node n, whose output 0 has rank r. */
static uint32_t node_origin(fz_ctx *fz, const tdm_node *n, int r, int d) {
    const tdm_value *vals = fz->g->values;
    int x = n->n_inputs > 0 ? n->inputs[0] : -1;
    int xr = x >= 0 ? vals[x].rank : -1;
    if (x < 0) return 0;
    if (op_in(n, same_shape_ops)) return xr == r ? origin_of(fz, x, d) : 0;
    bool window = is_conv_like(n) || (!n->domain[0] && (!strcmp(n->op_type, "MaxPool") ||
                                                        !strcmp(n->op_type, "AveragePool")));
    if (window && d >= 2 && xr == r && n->n_outputs >= 1) return window_origin(fz, n, x, r, d);
    if (op_in(n, batch_ops) || is_conv_like(n) ||
        (!n->domain[0] && strcmp(n->op_type, "Flatten") == 0 && tdm_attr_int(n, "axis", 1) == 1))
        return d == 0 && xr >= 1 ? origin_of(fz, x, 0) : 0;
    if (!n->domain[0] && strcmp(n->op_type, "Gemm") == 0)
        return d == 0 && xr == 2 && !tdm_attr_int(n, "transA", 0) ? origin_of(fz, x, 0) : 0;
    if (!n->domain[0] && strcmp(n->op_type, "MatMul") == 0) {
        int b = n->inputs[1];
        return b >= 0 && vals[b].rank == 2 && xr == r && r >= 2 && d < r - 1
                   ? origin_of(fz, x, d) : 0;
    }
    if (!n->domain[0] && strcmp(n->op_type, "Concat") == 0) {
        int64_t axis = tdm_attr_int(n, "axis", 0);
        if (axis < 0) axis += r;
        return xr == r && d != axis ? origin_of(fz, x, d) : 0; /* Concat checks they agree */
    }
    if (op_in(n, bcast_ops)) {
        uint32_t found = 0;
        for (int k = 0; k < n->n_inputs; k++) {
            int v = n->inputs[k];
            if (v < 0 || vals[v].rank < 0 || vals[v].rank > r) return 0;
            int dv = d - (r - vals[v].rank);
            if (dv < 0 || vals[v].dims[dv] == 1) continue;
            if (vals[v].dims[dv] >= 0) return 0;
            uint32_t o = origin_of(fz, v, dv);
            if (!o || (found && o != found)) return 0;
            found = o;
        }
        return found;
    }
    return 0;
}

static tdm_status *compute_origins(fz_ctx *fz) {
    tdm_graph *g = fz->g;
    size_t nv = g->n_values;
    if (nv > (size_t)(UINT32_MAX / TDM_MAX_RANK) - 1) return NULL; /* no origins: dims must be known */
    fz->origin = tdm_calloc(g->alloc, nv * TDM_MAX_RANK + 1, sizeof(uint32_t));
    if (!fz->origin) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory in graph fusion");
    fz->n_origin = nv;
    fz->next_origin = (uint32_t)(nv * TDM_MAX_RANK + 1);
    for (size_t v = 0; v < nv; v++)
        for (int d = 0; d < TDM_MAX_RANK; d++) fz->origin[v * TDM_MAX_RANK + d] = self_code(v, d);
    /* nodes are in topological order (finalize sorted them) */
    for (size_t i = 0; i < g->n_nodes; i++) {
        const tdm_node *n = &g->nodes[i];
        if (n->dead || n->n_outputs < 1 || n->outputs[0] < 0) continue;
        int y = n->outputs[0], r = g->values[y].rank;
        for (int d = 0; d < r && d < TDM_MAX_RANK; d++) {
            if (g->values[y].dims[d] >= 0) continue;
            uint32_t o = node_origin(fz, n, r, d);
            if (o) fz->origin[(size_t)y * TDM_MAX_RANK + d] = o;
        }
    }
    return NULL;
}

/* ---- rewriting ---- */

static tdm_status *oom(void) { return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory in graph fusion"); }

/* Fused nodes live in domain "tandem"; finalize gives nodes the opset the graph imports for
 * their domain, so the graph imports "tandem" version 1 once a fused node exists. */
static tdm_status *ensure_domain(tdm_graph *g, const char *domain) {
    while (g->parent) g = g->parent; /* only the main graph's imports count */
    if (!domain[0] || tdm_graph_opset(g, domain) > 0) return NULL;
    size_t cap = g->n_opsets;
    tdm_opset_import *ops = tdm_calloc(g->alloc, cap + 1, sizeof *ops);
    char *name = tdm_strdup(g->alloc, domain);
    if (!ops || !name) {
        tdm_free(g->alloc, ops);
        tdm_free(g->alloc, name);
        return oom();
    }
    if (cap) memcpy(ops, g->opsets, cap * sizeof *ops);
    ops[cap].domain = name;
    ops[cap].version = 1;
    tdm_free(g->alloc, g->opsets);
    g->opsets = ops;
    g->n_opsets = cap + 1;
    return NULL;
}

tdm_status *fz_new_node(fz_ctx *fz, const char *op, const char *domain, const char *name,
                        int n_in, int n_out, int *index) {
    tdm_graph *g = fz->g;
    TDM_TRY(ensure_domain(g, domain));
    int idx;
    TDM_TRY(tdm_graph_add_node(g, name, op, domain, n_in, n_out, &idx));
    tdm_node *n = &g->nodes[idx];
    n->opset = (int)tdm_graph_opset(g, n->domain);
    n->schema = tdm_op_find(n->domain, op, n->opset);
    fz->dirty = true;
    if (!n->schema) {
        n->dead = true;
        return TDM_ERR(TDM_ERR_INTERNAL, "graph fusion: no schema for %s%s%s at opset %d",
                       n->domain, n->domain[0] ? "." : "", op, n->opset);
    }
    *index = idx;
    return NULL;
}

static char *unique_name(tdm_graph *g, const char *base) {
    size_t len = strlen(base) + 32;
    char *buf = tdm_alloc(g->alloc, len);
    if (!buf) return NULL;
    for (int k = 0;; k++) {
        snprintf(buf, len, "%s_fz%d", base, k);
        /* unique in the enclosing graphs too: a body nested in g that reads a name from
         * further out would otherwise find the new value first */
        const tdm_graph *p = g;
        while (p && tdm_graph_find_value(p, buf) < 0) p = p->parent;
        if (!p) return buf;
    }
}

tdm_status *fz_new_value(fz_ctx *fz, const char *base, tdm_dtype dt, int rank,
                         const int64_t *dims, int *v) {
    tdm_graph *g = fz->g;
    char *name = unique_name(g, base);
    if (!name) return oom();
    int idx;
    tdm_status *st = tdm_graph_add_value(g, name, &idx);
    tdm_free(g->alloc, name);
    TDM_TRY(st);
    tdm_value *val = &g->values[idx];
    val->dtype = dt;
    val->rank = rank;
    for (int d = 0; d < rank && d < TDM_MAX_RANK; d++) val->dims[d] = dims[d];
    fz->dirty = true;
    *v = idx;
    return NULL;
}

tdm_status *fz_new_const(fz_ctx *fz, const char *base, tdm_tensor *t, int *v) {
    int idx;
    tdm_status *st = fz_new_value(fz, base, t->dtype, t->rank, t->dims, &idx);
    if (st) {
        tdm_tensor_destroy(t);
        return st;
    }
    fz->g->values[idx].data = t;
    *v = idx;
    return NULL;
}

void fz_kill(fz_ctx *fz, int node) {
    fz->g->nodes[node].dead = true;
    fz->dirty = true;
}

static tdm_status *attr_append(fz_ctx *fz, int node, const char *name, tdm_attr **out) {
    return tdm_node_append_attr(fz->g->alloc, &fz->g->nodes[node], name, out);
}

tdm_status *fz_attr_string(fz_ctx *fz, int node, const char *name, const char *s) {
    tdm_attr *at = NULL;
    TDM_TRY(attr_append(fz, node, name, &at));
    at->type = TDM_ATTR_STRING;
    at->s = tdm_strdup(fz->g->alloc, s);
    at->s_len = strlen(s);
    return at->s ? NULL : oom();
}

tdm_status *fz_attr_float(fz_ctx *fz, int node, const char *name, float f) {
    tdm_attr *at = NULL;
    TDM_TRY(attr_append(fz, node, name, &at));
    at->type = TDM_ATTR_FLOAT;
    at->f = f;
    return NULL;
}

tdm_status *fz_attr_int(fz_ctx *fz, int node, const char *name, int64_t i) {
    tdm_attr *at = NULL;
    TDM_TRY(attr_append(fz, node, name, &at));
    at->type = TDM_ATTR_INT;
    at->i = i;
    return NULL;
}

tdm_status *fz_attr_floats(fz_ctx *fz, int node, const char *name, const float *f, int n) {
    tdm_attr *at = NULL;
    TDM_TRY(attr_append(fz, node, name, &at));
    at->type = TDM_ATTR_FLOATS;
    at->floats = tdm_alloc(fz->g->alloc, ((size_t)n + 1) * sizeof(float));
    if (!at->floats) return oom();
    if (n) memcpy(at->floats, f, (size_t)n * sizeof(float));
    at->n = (size_t)n;
    return NULL;
}

tdm_status *fz_attr_ints(fz_ctx *fz, int node, const char *name, const int64_t *v, int n) {
    tdm_attr *at = NULL;
    TDM_TRY(attr_append(fz, node, name, &at));
    at->type = TDM_ATTR_INTS;
    at->ints = tdm_alloc(fz->g->alloc, ((size_t)n + 1) * sizeof(int64_t));
    if (!at->ints) return oom();
    if (n) memcpy(at->ints, v, (size_t)n * sizeof(int64_t));
    at->n = (size_t)n;
    return NULL;
}

bool fz_attrs_copyable(const tdm_node *n) {
    for (int k = 0; k < n->n_attrs; k++) {
        tdm_attr_type t = n->attrs[k].type;
        if (t != TDM_ATTR_INT && t != TDM_ATTR_FLOAT && t != TDM_ATTR_STRING &&
            t != TDM_ATTR_INTS && t != TDM_ATTR_FLOATS)
            return false;
        if (t == TDM_ATTR_INTS && n->attrs[k].n > INT32_MAX) return false;
        if (t == TDM_ATTR_FLOATS && n->attrs[k].n > INT32_MAX) return false;
    }
    return true;
}

tdm_status *fz_attr_copy(fz_ctx *fz, int node, const tdm_attr *src) {
    /* copy what we need first: appending may not move src (it lives on another node) */
    switch (src->type) {
    case TDM_ATTR_INT: return fz_attr_int(fz, node, src->name, src->i);
    case TDM_ATTR_FLOAT: return fz_attr_float(fz, node, src->name, src->f);
    case TDM_ATTR_STRING: return fz_attr_string(fz, node, src->name, src->s ? src->s : "");
    case TDM_ATTR_INTS: return fz_attr_ints(fz, node, src->name, src->ints, (int)src->n);
    case TDM_ATTR_FLOATS: return fz_attr_floats(fz, node, src->name, src->floats, (int)src->n);
    default:
        return TDM_ERR(TDM_ERR_INTERNAL, "graph fusion: cannot copy attribute '%s'", src->name);
    }
}

tdm_status *fz_vector_const(fz_ctx *fz, int c, int64_t n, int max_rank, int *v) {
    *v = -1;
    const tdm_tensor *t = fz_const(fz, c);
    if (!t || t->dtype != TDM_FLOAT || t->rank > max_rank || n < 1) return NULL;
    if (t->count != n && t->count != 1) return NULL;
    for (int d = 0; d + 1 < t->rank; d++)
        if (t->dims[d] != 1) return NULL;
    if (t->rank == 1 && t->count == n) {
        *v = c;
        return NULL;
    }
    tdm_tensor *nt;
    TDM_TRY(tdm_tensor_new(fz->g->alloc, TDM_FLOAT, 1, &n, &nt));
    const float *src = t->data;
    float *dst = nt->data;
    for (int64_t i = 0; i < n; i++) dst[i] = t->count == 1 ? src[0] : src[i];
    return fz_new_const(fz, fz->g->values[c].name, nt, v);
}

/* ---- driver ---- */

static tdm_status *fuse_graph(tdm_graph *g, bool cpu, int *count);

/* A body g: what its values read from enclosing graphs (dtype, shape) where the body does
 * not declare it, then its static shapes. The sizes a Loop or Scan body declares for its
 * inputs are not trusted (a carried value may grow from one iteration to the next; nothing
 * checks the declaration), only their type and rank (`loose`). False when inference finds
 * the body invalid for these shapes (a branch that never runs with them, say): then it is
 * left as it is. */
static bool body_shapes(tdm_graph *g, bool loose) {
    for (size_t i = 0; loose && i < g->n_inputs; i++) {
        tdm_value *val = &g->values[g->inputs[i]];
        for (int d = 0; d < val->rank && d < TDM_MAX_RANK; d++) val->dims[d] = TDM_DIM_UNKNOWN;
    }
    for (size_t v = 0; v < g->n_values; v++) {
        tdm_value *val = &g->values[v];
        if (!val->is_outer || val->rank >= 0) continue;
        const tdm_value *o = tdm_graph_outer_def(g, val->name);
        if (!o) continue;
        if (val->dtype == TDM_UNDEFINED) val->dtype = o->dtype;
        if (val->dtype != o->dtype) continue;
        val->rank = o->rank;
        for (int d = 0; d < o->rank && d < TDM_MAX_RANK; d++) val->dims[d] = o->dims[d];
    }
    tdm_status *st = tdm_graph_infer_shapes(g);
    if (!st) return true;
    tdm_status_free(st);
    return false;
}

/* The bodies of g's control-flow nodes (If / Loop / Scan, at any depth): shapes, the fusion
 * passes, compaction. Bodies run on the CPU (the only backend with control-flow kernels),
 * so they get the CPU-only rewrites (`cpu`) too when the caller asks for them. What a body
 * reads from enclosing graphs keeps its name (the executor looks it up there) and counts as
 * a constant where the enclosing graph has it as one; the body's outputs are never
 * rewritten away (fz_refresh counts them as uses). */
static tdm_status *fuse_bodies(tdm_graph *g, bool cpu, int *count) {
    for (size_t i = 0; i < g->n_nodes; i++) {
        tdm_node *n = &g->nodes[i];
        if (n->dead) continue;
        for (int k = 0; k < n->n_attrs; k++) {
            tdm_attr *at = &n->attrs[k];
            size_t nb = at->type == TDM_ATTR_GRAPH ? 1 : at->type == TDM_ATTR_GRAPHS ? at->n : 0;
            for (size_t j = 0; j < nb; j++) {
                tdm_graph *b = at->type == TDM_ATTR_GRAPH ? at->g : at->graphs[j];
                if (!b || !body_shapes(b, strcmp(n->op_type, "If") != 0)) continue;
                int c = 0;
                TDM_TRY(fuse_graph(b, cpu, &c));
                if (c) {
                    TDM_TRY(tdm_graph_compact(b));
                    tdm_status_free(tdm_graph_infer_shapes(b)); /* (was consistent before) */
                }
                *count += c;
                TDM_TRY(fuse_bodies(b, cpu, count));
            }
        }
    }
    return NULL;
}

tdm_status *tdm_graph_fuse(tdm_graph *g, int *count) {
    *count = 0;
    if (g->parent) return NULL; /* bodies: through their main graph's call */
    TDM_TRY(fuse_graph(g, false, count));
    return fuse_bodies(g, true, count);
}

static tdm_status *fuse_graph(tdm_graph *g, bool cpu, int *count) {
    *count = 0;
    fz_ctx fz = {.g = g, .dirty = true};
    tdm_status *st = compute_origins(&fz);
    /* Order: layout and Identity clean-up first (they expose patterns), BatchNorm and bias
     * folding before the Conv fusion that absorbs the activation behind them, LayerNorm and
     * Attention before the MatMul fusion (their MatMuls must not be taken by it first), and
     * so is the one-hot product (a lookup, not a MatMul);
     * Transposes sunk past element-wise ops after the stack rewrite that makes such a Max. */
    tdm_status *(*const passes[])(fz_ctx *) = {
        fz_pass_layout,      fz_pass_identity,  fz_pass_noop_slice, fz_pass_bn_fold,
        fz_pass_conv_bias,   fz_pass_reduce_pool, fz_pass_onehot_matmul, fz_pass_layernorm,
        fz_pass_attention,   fz_pass_matmul,    fz_pass_conv,      fz_pass_stack_reduce,
        fz_pass_sink_transpose};
    for (size_t p = 0; !st && p < sizeof passes / sizeof passes[0]; p++) st = passes[p](&fz);
    if (!st && cpu) st = fz_pass_gelu(&fz);
    if (!st && cpu) st = fz_pass_conv_prepad(&fz);
    if (!st && cpu) st = fz_pass_conv_nwc(&fz);
    index_free(&fz);
    tdm_free(g->alloc, fz.origin);
    tdm_free(g->alloc, fz.derived);
    *count = fz.count;
    return st;
}

tdm_status *tdm_graph_fuse_cpu(tdm_graph *g, int *count) {
    *count = 0;
    if (g->parent) return NULL;
    fz_ctx fz = {.g = g, .dirty = true};
    tdm_status *st = compute_origins(&fz);
    if (!st) st = fz_pass_gelu(&fz);
    if (!st) st = fz_pass_conv_prepad(&fz);
    if (!st) st = fz_pass_conv_nwc(&fz);
    index_free(&fz);
    tdm_free(g->alloc, fz.origin);
    tdm_free(g->alloc, fz.derived);
    *count = fz.count;
    return st;
}

tdm_status *tdm_graph_fuse_qdq(tdm_graph *g, int *count) {
    *count = 0;
    if (g->parent) return NULL;
    fz_ctx fz = {.g = g, .dirty = true};
    tdm_status *st = compute_origins(&fz);
    if (!st) st = fz_pass_qdq(&fz);
    index_free(&fz);
    tdm_free(g->alloc, fz.origin);
    tdm_free(g->alloc, fz.derived);
    *count = fz.count;
    return st;
}

tdm_status *tdm_graph_fuse_blocked(tdm_graph *g, int64_t block, int channels_last, int threads,
                                   int *count) {
    *count = 0;
    if (g->parent) return NULL;
    fz_ctx fz = {.g = g, .dirty = true};
    tdm_status *st = compute_origins(&fz);
    if (!st) st = fz_pass_blocked(&fz, block, channels_last, threads);
    /* 8-bit tensors channels-last between int8 convolutions (oneDNN's layouts: block > 0) */
    if (!st && block >= 2) st = fz_pass_q8_nhwc(&fz);
    index_free(&fz);
    tdm_free(g->alloc, fz.origin);
    tdm_free(g->alloc, fz.derived);
    *count = fz.count;
    return st;
}

tdm_status *tdm_graph_pack_nbits(tdm_graph *g, int *count) {
    *count = 0;
    if (g->parent) return NULL;
    fz_ctx fz = {.g = g, .dirty = true};
    tdm_status *st = fz_pass_nbits(&fz);
    index_free(&fz);
    tdm_free(g->alloc, fz.origin);
    tdm_free(g->alloc, fz.derived);
    *count = fz.count;
    return st;
}
