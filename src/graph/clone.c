/* Deep copies of graphs (graph/clone.h). */
#include "graph/clone.h"

#include <string.h>

#include "core/alloc.h"
#include "core/status.h"

static tdm_status *clone_into(const tdm_graph *src, const bool *keep_data, tdm_graph *parent,
                              tdm_graph **out);

#define OOM() TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory copying a graph")

static void *dup_bytes(const tdm_allocator *a, const void *src, size_t n) {
    void *p = tdm_alloc(a, n ? n : 1);
    if (p && n) memcpy(p, src, n);
    return p;
}

static tdm_status *copy_attr(tdm_graph *g, const tdm_attr *s, tdm_attr *d) {
    const tdm_allocator *a = g->alloc;
    d->type = s->type;
    d->f = s->f;
    d->i = s->i;
    d->s_len = s->s_len;
    d->n = s->n;
    if (!(d->name = tdm_strdup(a, s->name ? s->name : ""))) return OOM();
    if (s->s && !(d->s = dup_bytes(a, s->s, s->s_len + 1))) return OOM();
    if (s->t) TDM_TRY(tdm_tensor_clone(a, s->t, &d->t));
    if (s->g) TDM_TRY(clone_into(s->g, NULL, g, &d->g));
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
            if (s->tensors[i]) TDM_TRY(tdm_tensor_clone(a, s->tensors[i], &d->tensors[i]));
    }
    if (s->graphs) {
        if (!(d->graphs = tdm_calloc(a, s->n + 1, sizeof *d->graphs))) return OOM();
        for (size_t i = 0; i < s->n; i++)
            if (s->graphs[i]) TDM_TRY(clone_into(s->graphs[i], NULL, g, &d->graphs[i]));
    }
    return NULL;
}

static tdm_status *copy_value(tdm_graph *g, const tdm_value *s, bool data) {
    int idx;
    TDM_TRY(tdm_graph_add_value(g, s->name, &idx));
    tdm_value *d = &g->values[idx];
    d->dtype = s->dtype;
    d->rank = s->rank;
    memcpy(d->dims, s->dims, sizeof d->dims);
    for (int k = 0; k < TDM_MAX_RANK; k++)
        if (s->dim_params[k] && !(d->dim_params[k] = tdm_strdup(g->alloc, s->dim_params[k]))) return OOM();
    if (data && s->data) TDM_TRY(tdm_tensor_clone(g->alloc, s->data, &d->data));
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

static tdm_status *copy_node(tdm_graph *g, const tdm_node *s) {
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
        for (int k = 0; k < s->n_attrs; k++) TDM_TRY(copy_attr(g, &s->attrs[k], &d->attrs[k]));
    }
    return NULL;
}

static tdm_status *copy_graph(const tdm_graph *src, const bool *keep_data, tdm_graph *g) {
    const tdm_allocator *a = g->alloc;
    if (src->name && !(g->name = tdm_strdup(a, src->name))) return OOM();
    for (size_t v = 0; v < src->n_values; v++)
        TDM_TRY(copy_value(g, &src->values[v], !keep_data || keep_data[v]));
    for (size_t i = 0; i < src->n_nodes; i++) TDM_TRY(copy_node(g, &src->nodes[i]));
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

static tdm_status *clone_into(const tdm_graph *src, const bool *keep_data, tdm_graph *parent,
                              tdm_graph **out) {
    tdm_graph *g = NULL;
    TDM_TRY(tdm_graph_new(src->alloc, &g));
    g->parent = parent;
    g->depth = src->depth;
    tdm_status *st = copy_graph(src, keep_data, g);
    if (st) {
        tdm_graph_free(g);
        return st;
    }
    *out = g;
    return NULL;
}

tdm_status *tdm_graph_clone(const tdm_graph *g, const bool *keep_data, tdm_graph **out) {
    if (!g || !out) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_graph_clone: NULL argument");
    return clone_into(g, keep_data, g->parent, out);
}
