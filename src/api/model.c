#include <string.h>

#include "api/api_impl.h"
#include "core/alloc.h"
#include "graph/infer.h"

/* Calls fn(ctx, g) for g and every subgraph in it (If/Loop/Scan bodies, at any depth; the
 * loader bounds the depth), parents first. */
static void each_graph(const tdm_graph *g, void (*fn)(void *ctx, const tdm_graph *g), void *ctx) {
    fn(ctx, g);
    for (size_t i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_attrs; k++) {
            const tdm_attr *at = &g->nodes[i].attrs[k];
            if (at->type == TDM_ATTR_GRAPH && at->g) each_graph(at->g, fn, ctx);
            if (at->type == TDM_ATTR_GRAPHS)
                for (size_t j = 0; j < at->n; j++)
                    if (at->graphs[j]) each_graph(at->graphs[j], fn, ctx);
        }
}

static void count_graph(void *ctx, const tdm_graph *g) {
    tdm_model *md = ctx;
    if (g->depth > 0) {
        md->n_subgraphs++;
        md->nested_nodes += g->n_nodes;
    }
    for (size_t i = 0; i < g->n_nodes; i++) {
        const char *op = g->nodes[i].op_type;
        size_t j = 0;
        while (j < md->n_ops && strcmp(md->ops[j].op, op)) j++;
        if (j == md->n_ops && md->ops) md->ops[md->n_ops++].op = g->nodes[i].op_type; /* borrowed */
        if (j < md->n_ops) md->ops[j].nodes++;
        /* weights given as Constant nodes count as parameters too */
        const tdm_attr *v = strcmp(op, "Constant") ? NULL : tdm_node_attr(&g->nodes[i], "value");
        if (v && v->type == TDM_ATTR_TENSOR && v->t) {
            md->params += v->t->count;
            md->param_bytes += (int64_t)v->t->nbytes;
        }
    }
    for (size_t v = 0; v < g->n_values; v++) {
        const tdm_value *val = &g->values[v];
        if (val->is_initializer && val->data) {
            md->params += val->data->count;
            md->param_bytes += (int64_t)val->data->nbytes;
        }
    }
}

static void count_nodes(void *ctx, const tdm_graph *g) { *(size_t *)ctx += g->n_nodes; }

tdm_status *tdm_model_wrap(tdm_env *env, tdm_onnx_model *m, bool graph_borrowed, tdm_model **out) {
    tdm_model *md = tdm_calloc(env->alloc, 1, sizeof *md);
    if (!md) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
    md->env = env;
    md->m = m;
    md->graph_borrowed = graph_borrowed;
    size_t all = 0;
    each_graph(m->graph, count_nodes, &all);
    md->ops = tdm_calloc(env->alloc, all ? all : 1, sizeof *md->ops);
    if (!md->ops) {
        tdm_free(env->alloc, md);
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
    }
    each_graph(m->graph, count_graph, md);
    *out = md;
    return NULL;
}

tdm_status *tdm_model_load(tdm_env *env, const char *path, tdm_model **out) {
    if (!env || !path || !out) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_model_load: NULL argument");
    tdm_onnx_model *m;
    TDM_TRY(tdm_onnx_load_file(path, env->alloc, &m));
    tdm_onnx_log_lenient(m, path, &env->log);
    tdm_status *st = tdm_graph_infer_shapes(m->graph);
    if (st) {
        tdm_onnx_model_free(m);
        return tdm_status_wrap(st, "'%s': ", path);
    }
    st = tdm_model_wrap(env, m, false, out);
    if (st) tdm_onnx_model_free(m);
    return st;
}

tdm_status *tdm_model_load_from_buffer(tdm_env *env, const void *data, size_t size,
                                       const char *base_dir, tdm_model **out) {
    if (!env || !out) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_model_load_from_buffer: NULL argument");
    tdm_onnx_model *m;
    TDM_TRY(tdm_onnx_load_buffer(data, size, base_dir, env->alloc, &m));
    tdm_onnx_log_lenient(m, "the model", &env->log);
    tdm_status *st = tdm_graph_infer_shapes(m->graph);
    if (st) {
        tdm_onnx_model_free(m);
        return st;
    }
    st = tdm_model_wrap(env, m, false, out);
    if (st) tdm_onnx_model_free(m);
    return st;
}

void tdm_model_free(tdm_model *md) {
    if (!md) return;
    const tdm_allocator *a = md->env->alloc;
    if (md->graph_borrowed && md->m) md->m->graph = NULL;
    tdm_onnx_model_free(md->m);
    tdm_free(a, md->ops);
    tdm_free(a, md);
}

int64_t tdm_model_ir_version(const tdm_model *md) { return md ? md->m->ir_version : 0; }
const char *tdm_model_producer(const tdm_model *md) { return md ? md->m->producer : ""; }
int64_t tdm_model_opset(const tdm_model *md, const char *domain) {
    return md ? tdm_graph_opset(md->m->graph, domain) : 0;
}
size_t tdm_model_input_count(const tdm_model *md) {
    if (!md) return 0;
    size_t n = 0; /* initializers listed as inputs are defaults, not required inputs */
    for (size_t i = 0; i < md->m->graph->n_inputs; i++)
        if (!md->m->graph->values[md->m->graph->inputs[i]].data) n++;
    return n;
}
size_t tdm_model_output_count(const tdm_model *md) { return md ? md->m->graph->n_outputs : 0; }

static void describe(const tdm_value *v, tdm_value_desc *d) {
    memset(d, 0, sizeof *d);
    d->name = v->name;
    d->dtype = v->dtype;
    d->rank = v->rank;
    for (int i = 0; i < v->rank && i < TDM_MAX_RANK; i++) {
        d->dims[i] = v->dims[i];
        d->dim_params[i] = v->dim_params[i];
    }
}

tdm_status *tdm_model_input(const tdm_model *md, size_t index, tdm_value_desc *out) {
    if (!md || !out) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_model_input: NULL argument");
    const tdm_graph *g = md->m->graph;
    size_t n = 0;
    for (size_t i = 0; i < g->n_inputs; i++) {
        const tdm_value *v = &g->values[g->inputs[i]];
        if (v->data) continue;
        if (n++ == index) {
            describe(v, out);
            return NULL;
        }
    }
    return TDM_ERR(TDM_ERR_NOT_FOUND, "model input %zu does not exist", index);
}

tdm_status *tdm_model_output(const tdm_model *md, size_t index, tdm_value_desc *out) {
    if (!md || !out) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_model_output: NULL argument");
    const tdm_graph *g = md->m->graph;
    if (index >= g->n_outputs) return TDM_ERR(TDM_ERR_NOT_FOUND, "model output %zu does not exist", index);
    describe(&g->values[g->outputs[index]], out);
    return NULL;
}

size_t tdm_model_node_count(const tdm_model *md) { return md ? md->m->graph->n_nodes : 0; }
size_t tdm_model_op_type_count(const tdm_model *md) { return md ? md->n_ops : 0; }
const char *tdm_model_op_type(const tdm_model *md, size_t i, size_t *nodes) {
    if (!md || i >= md->n_ops) return NULL;
    if (nodes) *nodes = md->ops[i].nodes;
    return md->ops[i].op;
}

typedef struct support_walk {
    tdm_device *dev;
    const char *op;
    bool ok;
} support_walk;

static void check_support(void *ctx, const tdm_graph *g) {
    support_walk *w = ctx;
    for (size_t k = 0; k < g->n_nodes && w->ok; k++) {
        const tdm_node *n = &g->nodes[k];
        if (strcmp(n->op_type, w->op)) continue;
        if (!n->schema) {
            w->ok = false;
            break;
        }
        tdm_dtype types[64];
        int nt = n->n_inputs < 64 ? n->n_inputs : 64;
        bool unknown = false;
        for (int j = 0; j < nt; j++) {
            types[j] = n->inputs[j] >= 0 ? g->values[n->inputs[j]].dtype : TDM_UNDEFINED;
            if (n->inputs[j] >= 0 && types[j] == TDM_UNDEFINED) unknown = true;
        }
        if (!tdm_device_find_kernel(w->dev, n, types, nt) && !unknown) w->ok = false;
    }
}

bool tdm_model_op_type_supported(const tdm_model *md, size_t i, const char *device) {
    if (!md || i >= md->n_ops) return false;
    tdm_device *dev = tdm_env_find_device(md->env, device ? device : "cpu");
    if (!dev) return false;
    support_walk w = {dev, md->ops[i].op, true};
    each_graph(md->m->graph, check_support, &w);
    return w.ok;
}

size_t tdm_model_nested_node_count(const tdm_model *md) { return md ? md->nested_nodes : 0; }
size_t tdm_model_subgraph_count(const tdm_model *md) { return md ? md->n_subgraphs : 0; }
size_t tdm_model_opset_count(const tdm_model *md) { return md ? md->m->graph->n_opsets : 0; }
const char *tdm_model_opset_domain(const tdm_model *md, size_t index, int64_t *version) {
    if (!md || index >= md->m->graph->n_opsets) return NULL;
    if (version) *version = md->m->graph->opsets[index].version;
    return md->m->graph->opsets[index].domain;
}

int64_t tdm_model_parameter_count(const tdm_model *md) { return md ? md->params : 0; }
int64_t tdm_model_parameter_bytes(const tdm_model *md) { return md ? md->param_bytes : 0; }
