/* Graph passes that need no device: dead-node removal, constant folding, compaction. */
#include <stdint.h>
#include <string.h>

#include "core/alloc.h"
#include "graph/infer.h"

static bool value_is_const(const tdm_value *v) { return v->data && !v->is_input; }

/* Shape of a statically known tensor (Shape-15 start/end honoured). */
static tdm_status *fold_shape(const tdm_graph *g, const tdm_node *n, tdm_tensor **out) {
    const tdm_value *in = &g->values[n->inputs[0]];
    if (in->rank < 0) return TDM_ERR(TDM_ERR_UNSUPPORTED, "rank unknown");
    for (int d = 0; d < in->rank; d++)
        if (in->dims[d] < 0) return TDM_ERR(TDM_ERR_UNSUPPORTED, "dims unknown");
    int64_t r = in->rank;
    int64_t start = n->opset >= 15 ? tdm_attr_int(n, "start", 0) : 0;
    int64_t end = n->opset >= 15 ? tdm_attr_int(n, "end", r) : r;
    if (start < 0) start += r;
    if (end < 0) end += r;
    if (start < 0) start = 0;
    if (start > r) start = r;
    if (end < 0) end = 0;
    if (end > r) end = r;
    int64_t len = end > start ? end - start : 0;
    tdm_tensor *t;
    TDM_TRY(tdm_tensor_new(g->alloc, TDM_INT64, 1, &len, &t));
    for (int64_t i = 0; i < len; i++) ((int64_t *)t->data)[i] = in->dims[start + i];
    *out = t;
    return NULL;
}

/* The graphs enclosing a body being folded, innermost first (NULL for the main graph). */
typedef struct fold_scope {
    const tdm_graph *g;
    const struct fold_scope *up;
} fold_scope;

static tdm_status *fold_graph(tdm_graph *g, tdm_fold_fn eval, void *user,
                              const fold_scope *outer, int *folded);

/* The constant tensor of value v of g, or NULL: its own data, or for a value a body reads
 * from an enclosing graph, that graph's constant of the same name (the innermost graph
 * that defines the name decides). */
static const tdm_tensor *const_of(const tdm_graph *g, int v, const fold_scope *outer) {
    const tdm_value *val = &g->values[v];
    if (value_is_const(val)) return val->data;
    if (!val->is_outer) return NULL;
    for (const fold_scope *s = outer; s; s = s->up) {
        int u = tdm_graph_find_value(s->g, val->name);
        if (u < 0) continue;
        const tdm_value *o = &s->g->values[u];
        if (value_is_const(o)) return o->data;
        if (!o->is_outer) return NULL; /* computed there */
    }
    return NULL;
}

/* A control-flow node's body: its Constant nodes and the nodes that read only the body's
 * constants fold like the main graph's (to a fixed point), and leave the body, so that a
 * run of the body does not rebuild its constants every time (silero VAD's If bodies hold
 * their weights in 107 Constant nodes, and slice and concatenate an enclosing body's
 * weights for an LSTM). Values a body reads from enclosing graphs count as constants where
 * those graphs have them as constants. Shape nodes do not fold from the shapes a body
 * declares: nothing inferred them. */
static tdm_status *fold_body(tdm_graph *b, tdm_fold_fn eval, void *user, const fold_scope *outer,
                             int *count) {
    for (int round = 0; round < 8; round++) {
        int folded = 0, removed = 0;
        TDM_TRY(fold_graph(b, eval, user, outer, &folded));
        if (folded == 0) break;
        TDM_TRY(tdm_graph_remove_dead(b, &removed));
        TDM_TRY(tdm_graph_compact(b));
        *count += folded;
    }
    return NULL;
}

/* Node n of graph g (enclosed by `outer`): folds its bodies, which see g's constants. */
static tdm_status *fold_bodies(const tdm_graph *g, tdm_node *n, tdm_fold_fn eval, void *user,
                               const fold_scope *outer, int *count) {
    const fold_scope scope = {g, outer};
    for (int k = 0; k < n->n_attrs; k++) {
        tdm_attr *at = &n->attrs[k];
        if (at->type == TDM_ATTR_GRAPH) TDM_TRY(fold_body(at->g, eval, user, &scope, count));
        if (at->type == TDM_ATTR_GRAPHS)
            for (size_t j = 0; j < at->n; j++)
                TDM_TRY(fold_body(at->graphs[j], eval, user, &scope, count));
    }
    return NULL;
}

tdm_status *tdm_graph_fold_constants(tdm_graph *g, tdm_fold_fn eval, void *user, int *folded) {
    return fold_graph(g, eval, user, NULL, folded);
}

static tdm_status *fold_graph(tdm_graph *g, tdm_fold_fn eval, void *user,
                              const fold_scope *outer, int *folded) {
    const bool body = outer != NULL;
    int count = 0;
    for (size_t i = 0; i < g->n_nodes; i++) {
        tdm_node *n = &g->nodes[i];
        if (n->dead || n->n_outputs > 16 || n->n_inputs > 64) continue;
        bool has_graph_attr = false;
        for (int k = 0; k < n->n_attrs; k++)
            if (n->attrs[k].type == TDM_ATTR_GRAPH || n->attrs[k].type == TDM_ATTR_GRAPHS)
                has_graph_attr = true;
        if (has_graph_attr) {
            TDM_TRY(fold_bodies(g, n, eval, user, outer, &count));
            continue;
        }
        tdm_tensor *outs[16] = {0};
        tdm_status *st;
        if (strcmp(n->op_type, "Shape") == 0 && !n->domain[0] && n->n_inputs == 1 &&
            n->inputs[0] >= 0) {
            if (body) continue;
            st = fold_shape(g, n, &outs[0]);
        } else {
            bool all_const = true;
            const tdm_tensor *ins[64];
            for (int k = 0; k < n->n_inputs; k++) {
                int v = n->inputs[k];
                ins[k] = NULL;
                if (v < 0) continue;
                if (!(ins[k] = const_of(g, v, outer))) {
                    all_const = false;
                    break;
                }
            }
            if (!all_const || !n->schema) continue;
            st = eval(user, n, ins, outs);
        }
        if (st) {
            tdm_code code = tdm_status_code(st);
            tdm_status_free(st);
            for (int k = 0; k < n->n_outputs; k++) tdm_tensor_destroy(outs[k]);
            if (code == TDM_ERR_UNSUPPORTED) continue;
            /* a kernel error on constants is left for run time to report with context */
            continue;
        }
        for (int k = 0; k < n->n_outputs; k++) {
            int v = n->outputs[k];
            if (v < 0) {
                tdm_tensor_destroy(outs[k]);
                continue;
            }
            tdm_value *val = &g->values[v];
            tdm_tensor_destroy(val->data);
            val->data = outs[k];
            if (outs[k]) {
                val->dtype = outs[k]->dtype;
                val->rank = outs[k]->rank;
                for (int d = 0; d < outs[k]->rank; d++) val->dims[d] = outs[k]->dims[d];
            }
            val->producer = -1;
        }
        n->dead = true;
        count++;
    }
    *folded = count;
    return NULL;
}

tdm_status *tdm_graph_remove_dead(tdm_graph *g, int *removed) {
    bool *live = tdm_calloc(g->alloc, g->n_values ? g->n_values : 1, sizeof(bool));
    if (!live) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory in dead-node removal");
    for (size_t o = 0; o < g->n_outputs; o++) live[g->outputs[o]] = true;
    int count = 0;
    for (size_t i = g->n_nodes; i-- > 0;) {
        tdm_node *n = &g->nodes[i];
        if (n->dead) continue;
        bool used = false;
        for (int k = 0; k < n->n_outputs; k++)
            if (n->outputs[k] >= 0 && live[n->outputs[k]]) used = true;
        if (!used) {
            n->dead = true;
            count++;
            continue;
        }
        for (int k = 0; k < n->n_inputs; k++)
            if (n->inputs[k] >= 0) live[n->inputs[k]] = true;
        for (int k = 0; k < n->n_implicit; k++) live[n->implicit[k]] = true;
    }
    tdm_free(g->alloc, live);
    *removed = count;
    return NULL;
}

tdm_status *tdm_graph_compact(tdm_graph *g) {
    size_t w = 0;
    for (size_t i = 0; i < g->n_nodes; i++) {
        tdm_node *n = &g->nodes[i];
        if (!n->dead) {
            g->nodes[w++] = *n;
            continue;
        }
        tdm_free(g->alloc, n->name);
        tdm_free(g->alloc, n->op_type);
        tdm_free(g->alloc, n->domain);
        tdm_free(g->alloc, n->inputs);
        tdm_free(g->alloc, n->outputs);
        tdm_free(g->alloc, n->implicit);
        for (int k = 0; k < n->n_attrs; k++) tdm_attr_clear(g->alloc, &n->attrs[k]);
        tdm_free(g->alloc, n->attrs);
    }
    g->n_nodes = w;
    TDM_TRY(tdm_graph_finalize(g));
    /* constants nobody reads any more free their memory (subgraph reads count as reads
     * through the nodes' implicit inputs) */
    for (size_t v = 0; v < g->n_values; v++) {
        tdm_value *val = &g->values[v];
        if (val->data && val->n_consumers == 0 && !val->is_output && !val->is_input) {
            tdm_tensor_destroy(val->data);
            val->data = NULL;
        }
    }
    return NULL;
}

/* Subnormal float32 elements of x[0..n) (exponent bits 0, mantissa not). */
static int64_t count_subnormal(const uint32_t *x, int64_t n) {
    int64_t c = 0;
    for (int64_t i = 0; i < n; i++) c += (x[i] & 0x7f800000u) == 0 && (x[i] & 0x007fffffu) != 0;
    return c;
}

/* Ops whose inputs after the first are weights every run multiplies in full. */
static bool dense_op(const tdm_node *n) {
    static const char *const ops[] = {"Conv", "FusedConv", "BlockedConv", "ConvTranspose",
                                      "MatMul", "FusedMatMul", "Gemm"};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (!strcmp(n->op_type, ops[i])) return true;
    return false;
}

tdm_status *tdm_graph_flush_subnormal_constants(tdm_graph *g, int *changed) {
    /* only the weights of dense ops: a table read in part (Gather's) is not scanned, so its
     * pages stay where they are (mapped residency) */
    bool *weight = tdm_calloc(g->alloc, g->n_values ? g->n_values : 1, sizeof *weight);
    if (!weight) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory flushing subnormal weights");
    for (size_t i = 0; i < g->n_nodes; i++) {
        const tdm_node *n = &g->nodes[i];
        if (!n->dead && dense_op(n))
            for (int k = 1; k < n->n_inputs; k++)
                if (n->inputs[k] >= 0) weight[n->inputs[k]] = true;
    }
    int count = 0;
    tdm_status *st = NULL;
    for (size_t v = 0; v < g->n_values && !st; v++) {
        tdm_value *val = &g->values[v];
        tdm_tensor *t = val->data;
        if (!weight[v] || !value_is_const(val) || val->is_output || t->dtype != TDM_FLOAT ||
            t->device || count_subnormal(t->data, t->count) == 0)
            continue;
        tdm_tensor *c;
        if ((st = tdm_tensor_clone(g->alloc, t, &c))) break; /* the original may be mapped read-only */
        uint32_t *x = c->data;
        for (int64_t i = 0; i < c->count; i++)
            if ((x[i] & 0x7f800000u) == 0) x[i] &= 0x80000000u; /* subnormal -> signed 0 */
        tdm_tensor_destroy(t);
        val->data = c;
        count++;
    }
    tdm_free(g->alloc, weight);
    if (!st) *changed = count;
    return st;
}
