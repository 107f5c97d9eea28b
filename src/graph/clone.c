/* Deep copies of graphs (graph/clone.h). */
#include "graph/clone.h"

#include <string.h>

#include "core/alloc.h"
#include "core/status.h"

/* How a copy takes constant data: keep_data (NULL: every value's) says whose; share: the
 * copy's tensors share the source's data (tdm_tensor_share) instead of copying it. */
typedef struct clone_how {
    const bool *keep_data;
    bool share;
} clone_how;

static tdm_status *clone_into(const tdm_graph *src, clone_how how, tdm_graph *parent,
                              tdm_graph **out);

#define OOM() TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory copying a graph")

static void *dup_bytes(const tdm_allocator *a, const void *src, size_t n) {
    void *p = tdm_alloc(a, n ? n : 1);
    if (p && n) memcpy(p, src, n);
    return p;
}

/* A copy of t: its data shared with t or copied. */
static tdm_status *copy_tensor(const tdm_graph *g, tdm_tensor *t, bool share, tdm_tensor **out) {
    return share ? tdm_tensor_share(t, out) : tdm_tensor_clone(g->alloc, t, out);
}

static tdm_status *copy_attr(tdm_graph *g, const tdm_attr *s, bool share, tdm_attr *d) {
    const tdm_allocator *a = g->alloc;
    d->type = s->type;
    d->f = s->f;
    d->i = s->i;
    d->s_len = s->s_len;
    d->n = s->n;
    if (!(d->name = tdm_strdup(a, s->name ? s->name : ""))) return OOM();
    if (s->s && !(d->s = dup_bytes(a, s->s, s->s_len + 1))) return OOM();
    clone_how body = {NULL, share};
    if (s->t) TDM_TRY(copy_tensor(g, s->t, share, &d->t));
    if (s->g) TDM_TRY(clone_into(s->g, body, g, &d->g));
    if (s->floats && !(d->floats = dup_bytes(a, s->floats, s->n * sizeof *s->floats))) return OOM();
    if (s->ints && !(d->ints = dup_bytes(a, s->ints, s->n * sizeof *s->ints))) return OOM();
    if (s->strings) {
        if (!(d->strings = tdm_calloc(a, s->n + 1, sizeof *d->strings))) return OOM();
        for (size_t i = 0; i < s->n; i++)
            if (s->strings[i] && !(d->strings[i] = tdm_strdup(a, s->strings[i]))) return OOM();
    }
    if (s->tensors) {
        if (!(d->tensors = tdm_calloc(a, s->n + 1, sizeof *d->tensors))) return OOM();
        for (size_t i = 0; i < s->n; i++)
            if (s->tensors[i]) TDM_TRY(copy_tensor(g, s->tensors[i], share, &d->tensors[i]));
    }
    if (s->graphs) {
        if (!(d->graphs = tdm_calloc(a, s->n + 1, sizeof *d->graphs))) return OOM();
        for (size_t i = 0; i < s->n; i++)
            if (s->graphs[i]) TDM_TRY(clone_into(s->graphs[i], body, g, &d->graphs[i]));
    }
    return NULL;
}

static tdm_status *copy_value(tdm_graph *g, const tdm_value *s, bool data, bool share) {
    int idx;
    TDM_TRY(tdm_graph_add_value(g, s->name, &idx));
    tdm_value *d = &g->values[idx];
    d->dtype = s->dtype;
    d->rank = s->rank;
    memcpy(d->dims, s->dims, sizeof d->dims);
    for (int k = 0; k < TDM_MAX_RANK; k++)
        if (s->dim_params[k] && !(d->dim_params[k] = tdm_strdup(g->alloc, s->dim_params[k]))) return OOM();
    if (data && s->data) TDM_TRY(copy_tensor(g, s->data, share, &d->data));
    d->producer = s->producer;
    d->n_consumers = s->n_consumers;
    d->is_input = s->is_input;
    d->is_output = s->is_output;
    d->is_initializer = s->is_initializer;
    d->is_outer = s->is_outer;
    d->kv_layer = s->kv_layer;
    d->kv_bytes = s->kv_bytes;
    d->kv_state = s->kv_state;
    return NULL;
}

static tdm_status *copy_node(tdm_graph *g, const tdm_node *s, bool share) {
    const tdm_allocator *a = g->alloc;
    int idx;
    TDM_TRY(tdm_graph_add_node(g, s->name, s->op_type, s->domain, s->n_inputs, s->n_outputs, &idx));
    tdm_node *d = &g->nodes[idx];
    memcpy(d->inputs, s->inputs, (size_t)s->n_inputs * sizeof *d->inputs);
    memcpy(d->outputs, s->outputs, (size_t)s->n_outputs * sizeof *d->outputs);
    d->opset = s->opset;
    d->schema = s->schema;
    d->device = s->device;
    d->dead = s->dead;
    if (s->n_implicit) {
        if (!(d->implicit = dup_bytes(a, s->implicit, (size_t)s->n_implicit * sizeof *s->implicit)))
            return OOM();
        d->n_implicit = s->n_implicit;
    }
    if (s->n_attrs) {
        if (!(d->attrs = tdm_calloc(a, (size_t)s->n_attrs, sizeof *d->attrs))) return OOM();
        d->n_attrs = s->n_attrs; /* counted first: tdm_graph_free clears partial copies */
        for (int k = 0; k < s->n_attrs; k++) TDM_TRY(copy_attr(g, &s->attrs[k], share, &d->attrs[k]));
    }
    return NULL;
}

static tdm_status *copy_graph(const tdm_graph *src, clone_how how, tdm_graph *g) {
    const tdm_allocator *a = g->alloc;
    if (src->name && !(g->name = tdm_strdup(a, src->name))) return OOM();
    for (size_t v = 0; v < src->n_values; v++)
        TDM_TRY(copy_value(g, &src->values[v], !how.keep_data || how.keep_data[v], how.share));
    for (size_t i = 0; i < src->n_nodes; i++) TDM_TRY(copy_node(g, &src->nodes[i], how.share));
    if (!(g->inputs = dup_bytes(a, src->inputs, src->n_inputs * sizeof *src->inputs)) ||
        !(g->outputs = dup_bytes(a, src->outputs, src->n_outputs * sizeof *src->outputs)))
        return OOM();
    g->n_inputs = src->n_inputs;
    g->n_outputs = src->n_outputs;
    if (src->n_opsets) {
        if (!(g->opsets = tdm_calloc(a, src->n_opsets, sizeof *g->opsets))) return OOM();
        g->n_opsets = src->n_opsets;
        for (size_t i = 0; i < src->n_opsets; i++) {
            g->opsets[i].version = src->opsets[i].version;
            if (!(g->opsets[i].domain = tdm_strdup(a, src->opsets[i].domain))) return OOM();
        }
    }
    return NULL;
}

static tdm_status *clone_into(const tdm_graph *src, clone_how how, tdm_graph *parent,
                              tdm_graph **out) {
    tdm_graph *g = NULL;
    TDM_TRY(tdm_graph_new(src->alloc, &g));
    g->parent = parent;
    g->depth = src->depth;
    tdm_status *st = copy_graph(src, how, g);
    if (st) {
        tdm_graph_free(g);
        return st;
    }
    *out = g;
    return NULL;
}

tdm_status *tdm_graph_clone(const tdm_graph *g, const bool *keep_data, tdm_graph **out) {
    if (!g || !out) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_graph_clone: NULL argument");
    return clone_into(g, (clone_how){keep_data, false}, g->parent, out);
}

tdm_status *tdm_graph_clone_sharing(tdm_graph *g, tdm_graph **out) {
    if (!g || !out) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_graph_clone_sharing: NULL argument");
    return clone_into(g, (clone_how){NULL, true}, g->parent, out);
}
