#include "graph/graph.h"

#include <string.h>

#include "core/alloc.h"
#include "core/hash.h"
#include "core/status.h"
#include "ops/op.h"

/* ---- name index: open addressing over value indices ---- */

typedef struct name_index {
    int *slots; /* value index + 1; 0 = empty */
    size_t cap;
} name_index;


/* The index hangs off the graph through a side allocation kept in g->name; to keep the
 * public struct simple we store it in a parallel structure reached via this helper. */
typedef struct graph_impl {
    tdm_graph g;
    name_index idx;
} graph_impl;

static graph_impl *impl(const tdm_graph *g) { return (graph_impl *)g; }

static int index_rebuild(tdm_graph *g) {
    name_index *ix = &impl(g)->idx;
    size_t cap = 16;
    while (cap < g->n_values * 2 + 1) cap *= 2;
    int *slots = tdm_calloc(g->alloc, cap, sizeof *slots);
    if (!slots) return -1;
    for (size_t v = 0; v < g->n_values; v++) {
        size_t h = tdm_hash_str(TDM_HASH_INIT, g->values[v].name) & (cap - 1);
        while (slots[h]) h = (h + 1) & (cap - 1);
        slots[h] = (int)v + 1;
    }
    tdm_free(g->alloc, ix->slots);
    ix->slots = slots;
    ix->cap = cap;
    return 0;
}

int tdm_graph_find_value(const tdm_graph *g, const char *name) {
    const name_index *ix = &impl(g)->idx;
    if (!ix->cap) return -1;
    size_t h = tdm_hash_str(TDM_HASH_INIT, name) & (ix->cap - 1);
    while (ix->slots[h]) {
        int v = ix->slots[h] - 1;
        if (strcmp(g->values[v].name, name) == 0) return v;
        h = (h + 1) & (ix->cap - 1);
    }
    return -1;
}

const tdm_value *tdm_graph_outer_def(const tdm_graph *g, const char *name) {
    for (const tdm_graph *p = g->parent; p; p = p->parent) {
        int u = tdm_graph_find_value(p, name);
        if (u >= 0 && !p->values[u].is_outer) return &p->values[u];
    }
    return NULL;
}

tdm_status *tdm_graph_new(const tdm_allocator *a, tdm_graph **out) {
    graph_impl *gi = tdm_calloc(a, 1, sizeof *gi);
    if (!gi) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory creating a graph");
    gi->g.alloc = a;
    *out = &gi->g;
    return NULL;
}

tdm_status *tdm_node_append_attr(const tdm_allocator *a, tdm_node *n, const char *name,
                                 tdm_attr **out) {
    tdm_attr *na = tdm_calloc(a, (size_t)n->n_attrs + 1, sizeof *na);
    char *nm = tdm_strdup(a, name);
    if (!na || !nm) {
        tdm_free(a, na);
        tdm_free(a, nm);
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory adding attribute '%s'", name);
    }
    if (n->n_attrs) memcpy(na, n->attrs, (size_t)n->n_attrs * sizeof *na);
    tdm_free(a, n->attrs);
    n->attrs = na;
    na[n->n_attrs].name = nm;
    *out = &na[n->n_attrs++];
    return NULL;
}

void tdm_attr_clear(const tdm_allocator *a, tdm_attr *at) {
    tdm_free(a, at->name);
    tdm_free(a, at->s);
    tdm_tensor_destroy(at->t);
    tdm_graph_free(at->g);
    tdm_free(a, at->floats);
    tdm_free(a, at->ints);
    if (at->strings)
        for (size_t i = 0; i < at->n; i++) tdm_free(a, at->strings[i]);
    tdm_free(a, at->strings);
    if (at->tensors)
        for (size_t i = 0; i < at->n; i++) tdm_tensor_destroy(at->tensors[i]);
    tdm_free(a, at->tensors);
    if (at->graphs)
        for (size_t i = 0; i < at->n; i++) tdm_graph_free(at->graphs[i]);
    tdm_free(a, at->graphs);
    memset(at, 0, sizeof *at);
}

void tdm_graph_free(tdm_graph *g) {
    if (!g) return;
    const tdm_allocator *a = g->alloc;
    for (size_t i = 0; i < g->n_values; i++) {
        tdm_value *v = &g->values[i];
        tdm_free(a, v->name);
        for (int d = 0; d < TDM_MAX_RANK; d++) tdm_free(a, v->dim_params[d]);
        tdm_tensor_destroy(v->data);
    }
    for (size_t i = 0; i < g->n_nodes; i++) {
        tdm_node *n = &g->nodes[i];
        tdm_free(a, n->name);
        tdm_free(a, n->op_type);
        tdm_free(a, n->domain);
        tdm_free(a, n->inputs);
        tdm_free(a, n->outputs);
        tdm_free(a, n->implicit);
        for (int k = 0; k < n->n_attrs; k++) tdm_attr_clear(a, &n->attrs[k]);
        tdm_free(a, n->attrs);
    }
    for (size_t i = 0; i < g->n_opsets; i++) tdm_free(a, g->opsets[i].domain);
    tdm_free(a, g->opsets);
    tdm_free(a, g->values);
    tdm_free(a, g->nodes);
    tdm_free(a, g->inputs);
    tdm_free(a, g->outputs);
    tdm_free(a, g->name);
    tdm_free(a, impl(g)->idx.slots);
    tdm_free(a, impl(g));
}

tdm_status *tdm_graph_add_value(tdm_graph *g, const char *name, int *out_index) {
    if (g->n_values >= (size_t)INT32_MAX / 2)
        return TDM_ERR(TDM_ERR_LIMIT, "too many values in the graph");
    if (tdm_grow(g->alloc, (void **)&g->values, &g->cap_values, g->n_values + 1, sizeof(tdm_value)))
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory adding value '%s'", name);
    tdm_value *v = &g->values[g->n_values];
    memset(v, 0, sizeof *v);
    v->name = tdm_strdup(g->alloc, name);
    if (!v->name) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory adding value '%s'", name);
    v->rank = -1;
    v->producer = -1;
    g->n_values++;
    name_index *ix = &impl(g)->idx;
    if (g->n_values * 2 >= ix->cap) {
        if (index_rebuild(g)) {
            g->n_values--;
            tdm_free(g->alloc, v->name);
            return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory indexing value '%s'", name);
        }
    } else {
        size_t h = tdm_hash_str(TDM_HASH_INIT, name) & (ix->cap - 1);
        while (ix->slots[h]) h = (h + 1) & (ix->cap - 1);
        ix->slots[h] = (int)g->n_values;
    }
    *out_index = (int)g->n_values - 1;
    return NULL;
}

tdm_status *tdm_graph_add_node(tdm_graph *g, const char *name, const char *op_type,
                               const char *domain, int n_inputs, int n_outputs, int *out_index) {
    if (g->n_nodes >= (size_t)INT32_MAX / 2) return TDM_ERR(TDM_ERR_LIMIT, "too many nodes");
    if (tdm_grow(g->alloc, (void **)&g->nodes, &g->cap_nodes, g->n_nodes + 1, sizeof(tdm_node)))
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory adding a node");
    tdm_node *n = &g->nodes[g->n_nodes];
    memset(n, 0, sizeof *n);
    n->device = -1;
    n->name = tdm_strdup(g->alloc, name ? name : "");
    n->op_type = tdm_strdup(g->alloc, op_type);
    n->domain = tdm_strdup(g->alloc, domain && strcmp(domain, "ai.onnx") ? domain : "");
    n->inputs = tdm_calloc(g->alloc, (size_t)(n_inputs ? n_inputs : 1), sizeof(int));
    n->outputs = tdm_calloc(g->alloc, (size_t)(n_outputs ? n_outputs : 1), sizeof(int));
    g->n_nodes++; /* counted now so tdm_graph_free releases partial allocations */
    if (!n->name || !n->op_type || !n->domain || !n->inputs || !n->outputs)
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory adding node '%s'", name ? name : "");
    n->n_inputs = n_inputs;
    n->n_outputs = n_outputs;
    for (int i = 0; i < n_inputs; i++) n->inputs[i] = -1;
    for (int i = 0; i < n_outputs; i++) n->outputs[i] = -1;
    *out_index = (int)g->n_nodes - 1;
    return NULL;
}

int64_t tdm_graph_opset(const tdm_graph *g, const char *domain) {
    while (g->parent) g = g->parent;
    if (!domain || strcmp(domain, "ai.onnx") == 0) domain = "";
    for (size_t i = 0; i < g->n_opsets; i++)
        if (strcmp(g->opsets[i].domain, domain) == 0) return g->opsets[i].version;
    return 0;
}

/* ---- tdm_graph_finalize: producers, readers, topological order, schemas ---- */

/* Each value's producing node (-1: none); a value may have one producer, and graph inputs
 * and initializers have none. Clears the reader counts for link_readers. */
static tdm_status *link_producers(tdm_graph *g) {
    for (size_t v = 0; v < g->n_values; v++) {
        g->values[v].producer = -1;
        g->values[v].n_consumers = 0;
    }
    for (size_t i = 0; i < g->n_nodes; i++) {
        tdm_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_outputs; k++) {
            int v = n->outputs[k];
            if (v < 0) continue;
            if (g->values[v].producer >= 0)
                return TDM_ERR(TDM_ERR_INVALID_MODEL,
                               "value '%s' is produced by two nodes ('%s' and '%s')",
                               g->values[v].name, g->nodes[g->values[v].producer].name, n->name);
            if (g->values[v].data || g->values[v].is_input)
                return TDM_ERR(TDM_ERR_INVALID_MODEL,
                               "node '%s' writes '%s', which is a graph input or initializer",
                               n->name, g->values[v].name);
            g->values[v].producer = (int)i;
        }
    }
    return NULL;
}

/* Whether a value without a producer is defined anyway (input, initializer, outer scope). */
static bool defined_without_producer(const tdm_value *val) {
    return val->data || val->is_input || val->is_outer;
}

/* Counts each value's readers (inputs and implicit inputs of nodes) and each node's inputs
 * made by another node (indeg[node]; *n_edges their sum); every value read, and every graph
 * output, must be defined. */
static tdm_status *link_readers(tdm_graph *g, int *indeg, size_t *n_edges) {
    for (size_t i = 0; i < g->n_nodes; i++) {
        tdm_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_inputs; k++) {
            int v = n->inputs[k];
            if (v < 0) continue;
            tdm_value *val = &g->values[v];
            val->n_consumers++;
            if (val->producer < 0 && !defined_without_producer(val))
                return TDM_ERR(TDM_ERR_INVALID_MODEL,
                               "node '%s' (%s) reads '%s', which no node, input or initializer defines",
                               n->name, n->op_type, val->name);
            if (val->producer >= 0) {
                indeg[i]++;
                (*n_edges)++;
            }
        }
        for (int k = 0; k < n->n_implicit; k++) {
            tdm_value *val = &g->values[n->implicit[k]];
            val->n_consumers++;
            if (val->producer >= 0) {
                indeg[i]++;
                (*n_edges)++;
            }
        }
    }
    for (size_t o = 0; o < g->n_outputs; o++) {
        const tdm_value *val = &g->values[g->outputs[o]];
        if (val->producer < 0 && !defined_without_producer(val))
            return TDM_ERR(TDM_ERR_INVALID_MODEL, "graph output '%s' is never defined", val->name);
    }
    return NULL;
}

/* The producer of node n's k-th input, counting its explicit inputs, then its implicit ones
 * (k < n_inputs + n_implicit); -1 for an omitted input or a value no node makes. */
static int input_producer(const tdm_graph *g, const tdm_node *n, int k) {
    int v = k < n->n_inputs ? n->inputs[k] : n->implicit[k - n->n_inputs];
    return v >= 0 ? g->values[v].producer : -1;
}

/* Kahn's algorithm over the producer -> reader edges (indeg from link_readers, consumed):
 * the node indices in topological order into order[n_nodes]; stable (ready nodes keep
 * file order). A cycle is an error naming a node on it. */
static tdm_status *topo_order(const tdm_graph *g, int *indeg, size_t n_edges, int *order) {
    const tdm_allocator *a = g->alloc;
    size_t nn = g->n_nodes;
    /* CSR adjacency: the readers of node u are adj[first_use[u] .. first_use[u + 1]) */
    int *first_use = tdm_calloc(a, nn + 1, sizeof(int));
    int *adj = tdm_calloc(a, n_edges ? n_edges : 1, sizeof(int));
    tdm_status *st = NULL;
    if (!first_use || !adj) {
        st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory sorting the graph");
        goto done;
    }
    for (size_t i = 0; i < nn; i++) {
        const tdm_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_inputs + n->n_implicit; k++) {
            int p = input_producer(g, n, k);
            if (p >= 0) first_use[p + 1]++;
        }
    }
    for (size_t i = 0; i < nn; i++) first_use[i + 1] += first_use[i];
    int *fill = order; /* order is free until the queue below: the fill cursor per node */
    for (size_t i = 0; i < nn; i++) fill[i] = first_use[i];
    for (size_t i = 0; i < nn; i++) {
        const tdm_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_inputs + n->n_implicit; k++) {
            int p = input_producer(g, n, k);
            if (p >= 0) adj[fill[p]++] = (int)i;
        }
    }
    /* queue of ready nodes in index order */
    size_t head = 0, tail = 0;
    for (size_t i = 0; i < nn; i++)
        if (indeg[i] == 0) order[tail++] = (int)i;
    while (head < tail) {
        int u = order[head++];
        for (int e = first_use[u]; e < first_use[u + 1]; e++)
            if (--indeg[adj[e]] == 0) order[tail++] = adj[e];
    }
    if (tail != nn) {
        for (size_t i = 0; i < nn; i++)
            if (indeg[i] > 0) {
                st = TDM_ERR(TDM_ERR_INVALID_MODEL, "the graph has a cycle through node '%s' (%s)",
                             g->nodes[i].name, g->nodes[i].op_type);
                break;
            }
    }
done:
    tdm_free(a, first_use);
    tdm_free(a, adj);
    return st;
}

/* Reorders the nodes as `order` says and points the values at their producers' new
 * indices. */
static tdm_status *permute_nodes(tdm_graph *g, const int *order) {
    const tdm_allocator *a = g->alloc;
    size_t nn = g->n_nodes;
    tdm_node *sorted = tdm_alloc(a, (nn ? nn : 1) * sizeof(tdm_node));
    if (!sorted) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory sorting the graph");
    for (size_t i = 0; i < nn; i++) sorted[i] = g->nodes[order[i]];
    tdm_free(a, g->nodes);
    g->nodes = sorted;
    g->cap_nodes = nn;
    for (size_t i = 0; i < nn; i++)
        for (int k = 0; k < g->nodes[i].n_outputs; k++) {
            int v = g->nodes[i].outputs[k];
            if (v >= 0) g->values[v].producer = (int)i;
        }
    return NULL;
}

/* Node n's opset and schema; with a schema, its input and output counts are checked (every
 * kernel and shape function relies on them). */
static tdm_status *bind_schema(const tdm_graph *g, tdm_node *n) {
    n->opset = (int)tdm_graph_opset(g, n->domain);
    n->schema = tdm_op_find(n->domain, n->op_type, n->opset);
    const tdm_op_schema *sc = n->schema;
    if (!sc) return NULL;
    bool slots = sc->flags & TDM_OP_OPTIONAL_SLOTS;
    int last_in = n->n_inputs; /* trailing omitted inputs do not count */
    while (!slots && last_in > 0 && n->inputs[last_in - 1] < 0) last_in--;
    if (last_in < sc->min_inputs || n->n_inputs > sc->max_inputs ||
        n->n_outputs < sc->min_outputs || n->n_outputs > sc->max_outputs)
        return TDM_ERR(TDM_ERR_INVALID_MODEL,
                       "%s node '%s' has %d inputs and %d outputs; the operator takes %d..%d "
                       "inputs and %d..%d outputs", n->op_type, n->name, n->n_inputs,
                       n->n_outputs, sc->min_inputs, sc->max_inputs, sc->min_outputs,
                       sc->max_outputs);
    for (int k = 0; k < sc->min_inputs && k < n->n_inputs && !slots; k++)
        if (n->inputs[k] < 0)
            return TDM_ERR(TDM_ERR_INVALID_MODEL, "%s node '%s': required input %d is missing",
                           n->op_type, n->name, k);
    /* an output named "" (or a name that starts with a NUL byte) is an omitted one: only
     * optional outputs may be left out, the kernels write every required one */
    for (int k = 0; k < sc->min_outputs; k++)
        if (n->outputs[k] < 0)
            return TDM_ERR(TDM_ERR_INVALID_MODEL, "%s node '%s': required output %d is missing",
                           n->op_type, n->name, k);
    return NULL;
}

/* The subgraphs in node n's attributes, finalized in turn (depth is bounded by the
 * loader). */
static tdm_status *finalize_subgraphs(tdm_node *n) {
    tdm_status *st = NULL;
    for (int k = 0; k < n->n_attrs && !st; k++) {
        tdm_attr *at = &n->attrs[k];
        if (at->type == TDM_ATTR_GRAPH) st = tdm_graph_finalize(at->g);
        if (at->type == TDM_ATTR_GRAPHS)
            for (size_t j = 0; j < at->n && !st; j++) st = tdm_graph_finalize(at->graphs[j]);
        if (st) st = tdm_status_wrap(st, "subgraph '%s' of node '%s': ", at->name, n->name);
    }
    return st;
}

tdm_status *tdm_graph_finalize(tdm_graph *g) {
    const tdm_allocator *a = g->alloc;
    size_t nn = g->n_nodes;
    TDM_TRY(link_producers(g));
    int *indeg = tdm_calloc(a, nn ? nn : 1, sizeof(int));
    int *order = tdm_calloc(a, nn ? nn : 1, sizeof(int));
    size_t n_edges = 0;
    tdm_status *st = NULL;
    if (!indeg || !order) st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory sorting the graph");
    if (!st) st = link_readers(g, indeg, &n_edges);
    if (!st) st = topo_order(g, indeg, n_edges, order);
    if (!st) st = permute_nodes(g, order);
    for (size_t i = 0; i < nn && !st; i++) {
        st = bind_schema(g, &g->nodes[i]);
        if (!st) st = finalize_subgraphs(&g->nodes[i]);
    }
    tdm_free(a, indeg);
    tdm_free(a, order);
    return st;
}

const tdm_attr *tdm_node_attr(const tdm_node *n, const char *name) {
    for (int i = 0; i < n->n_attrs; i++)
        if (strcmp(n->attrs[i].name, name) == 0) return &n->attrs[i];
    return NULL;
}

int64_t tdm_attr_int(const tdm_node *n, const char *name, int64_t def) {
    const tdm_attr *a = tdm_node_attr(n, name);
    return a && a->type == TDM_ATTR_INT ? a->i : def;
}

float tdm_attr_float(const tdm_node *n, const char *name, float def) {
    const tdm_attr *a = tdm_node_attr(n, name);
    if (!a) return def;
    if (a->type == TDM_ATTR_FLOAT) return a->f;
    if (a->type == TDM_ATTR_INT) return (float)a->i;
    return def;
}

const char *tdm_attr_string(const tdm_node *n, const char *name, const char *def) {
    const tdm_attr *a = tdm_node_attr(n, name);
    return a && a->type == TDM_ATTR_STRING ? a->s : def;
}

const int64_t *tdm_attr_ints(const tdm_node *n, const char *name, size_t *count) {
    const tdm_attr *a = tdm_node_attr(n, name);
    if (!a || a->type != TDM_ATTR_INTS) {
        *count = 0;
        return NULL;
    }
    *count = a->n;
    static const int64_t empty_ints[1];
    return a->ints ? a->ints : empty_ints;
}

const float *tdm_attr_floats(const tdm_node *n, const char *name, size_t *count) {
    const tdm_attr *a = tdm_node_attr(n, name);
    if (!a || a->type != TDM_ATTR_FLOATS) {
        *count = 0;
        return NULL;
    }
    *count = a->n;
    static const float empty_floats[1];
    return a->floats ? a->floats : empty_floats;
}

const tdm_tensor *tdm_attr_tensor(const tdm_node *n, const char *name) {
    const tdm_attr *a = tdm_node_attr(n, name);
    return a && a->type == TDM_ATTR_TENSOR ? a->t : NULL;
}
