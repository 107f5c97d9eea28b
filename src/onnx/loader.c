/* ModelProto -> tdm_graph. */
#include "onnx/loader.h"

#include <libgen.h>
#include <stdio.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/checked.h"
#include "onnx/onnx.pb-c.h"
#include "onnx/proto.h"
#include "ops/fused.h"

typedef struct conv {
    const tdm_allocator *a;
    const char *base_dir;
    unsigned lenient; /* TDM_ONNX_LENIENT_* accepted so far */
    bool map;         /* TDM_ONNX_MAP_EXTERNAL */
} conv;

static tdm_status *convert_graph(conv *c, const Onnx__GraphProto *gp, tdm_graph *parent,
                                 int depth, tdm_graph **out);

/* ---- protobuf-c allocator over the environment's allocator ---- */

typedef struct pc_ctx {
    const tdm_allocator *a;
    bool failed; /* tells a decoding error from an allocation failure */
} pc_ctx;

static void *pc_alloc(void *user, size_t size) {
    pc_ctx *c = user;
    void *p = tdm_alloc(c->a, size);
    if (!p) c->failed = true;
    return p;
}
static void pc_free(void *user, void *p) { tdm_free(((pc_ctx *)user)->a, p); }

/* ---- types ---- */

static tdm_status *fill_type(conv *c, tdm_graph *g, tdm_value *v, const Onnx__TypeProto *tp,
                             bool required) {
    if (!tp) {
        if (required)
            return TDM_ERR(TDM_ERR_INVALID_MODEL, "graph input/output '%s' has no type information",
                           v->name);
        return NULL;
    }
    if (tp->value_case == ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE ||
        tp->value_case == ONNX__TYPE_PROTO__VALUE_MAP_TYPE ||
        tp->value_case == ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE) {
        /* a container (core/tensor.h): rank 1, its item count unknown until run time */
        v->dtype = tp->value_case == ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE ? TDM_SEQUENCE
                   : tp->value_case == ONNX__TYPE_PROTO__VALUE_MAP_TYPE    ? TDM_MAP
                                                                           : TDM_OPTIONAL;
        v->rank = 1;
        v->dims[0] = TDM_DIM_UNKNOWN;
        const Onnx__TypeProto *item = tp->value_case == ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE
                                          ? (tp->sequence_type ? tp->sequence_type->elem_type : NULL)
                                      : tp->value_case == ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE
                                          ? (tp->optional_type ? tp->optional_type->elem_type : NULL)
                                          : NULL;
        if (item && item->value_case == ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE && item->tensor_type &&
            item->tensor_type->has_elem_type && item->tensor_type->elem_type > 0 &&
            item->tensor_type->elem_type < TDM_DTYPE_COUNT)
            v->item_dtype = (tdm_dtype)item->tensor_type->elem_type;
        return NULL;
    }
    if (tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE) {
        if (!required) return NULL;
        const char *what = tp->value_case == ONNX__TYPE_PROTO__VALUE_SPARSE_TENSOR_TYPE
                               ? "a sparse tensor"
                               : "no";
        return TDM_ERR(tp->value_case == ONNX__TYPE_PROTO__VALUE__NOT_SET ? TDM_ERR_INVALID_MODEL
                                                                          : TDM_ERR_UNSUPPORTED,
                       "graph input/output '%s' has %s type; only tensors, sequences, maps "
                       "and optionals are supported", v->name, what);
    }
    const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
    if (!tt) return NULL;
    if (tt->has_elem_type) {
        if (tt->elem_type <= 0 || tt->elem_type >= TDM_DTYPE_COUNT) {
            if (required)
                return TDM_ERR(TDM_ERR_UNSUPPORTED, "value '%s' has unsupported element type %d",
                               v->name, tt->elem_type);
        } else {
            v->dtype = (tdm_dtype)tt->elem_type;
        }
    }
    if (!tt->shape) return NULL; /* unknown rank */
    if (tt->shape->n_dim > TDM_MAX_RANK)
        return TDM_ERR(TDM_ERR_LIMIT, "value '%s' has rank %zu; the maximum is %d", v->name,
                       tt->shape->n_dim, TDM_MAX_RANK);
    v->rank = (int)tt->shape->n_dim;
    for (int d = 0; d < v->rank; d++) {
        const Onnx__TensorShapeProto__Dimension *dim = tt->shape->dim[d];
        v->dims[d] = TDM_DIM_UNKNOWN;
        if (dim->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) {
            if (dim->dim_value == -1) { /* Paddle2ONNX's "dynamic": unknown, as ORT reads it */
                c->lenient |= TDM_ONNX_LENIENT_DIM_MINUS_ONE;
                continue;
            }
            if (dim->dim_value < 0)
                return TDM_ERR(TDM_ERR_INVALID_MODEL, "value '%s': dimension %d is negative (%lld)",
                               v->name, d, (long long)dim->dim_value);
            v->dims[d] = dim->dim_value;
        } else if (dim->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM &&
                   dim->dim_param && dim->dim_param[0]) {
            tdm_free(g->alloc, v->dim_params[d]);
            v->dim_params[d] = tdm_strdup(g->alloc, dim->dim_param);
            if (!v->dim_params[d]) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
        }
    }
    return NULL;
}

/* ---- attributes ---- */

static tdm_status *convert_attr(conv *c, const Onnx__AttributeProto *ap, tdm_attr *at,
                                tdm_graph *g, int depth, const char *node) {
    const tdm_allocator *a = c->a;
    if (!ap->name || !ap->name[0])
        return TDM_ERR(TDM_ERR_INVALID_MODEL, "node '%s' has an attribute without a name", node);
    at->name = tdm_strdup(a, ap->name);
    if (!at->name) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
    int type = ap->has_type ? (int)ap->type : 0;
    if (type == 0) { /* IR < 3 models omit the type: infer it from the field present */
        if (ap->n_floats) type = TDM_ATTR_FLOATS;
        else if (ap->n_ints) type = TDM_ATTR_INTS;
        else if (ap->n_strings) type = TDM_ATTR_STRINGS;
        else if (ap->n_tensors) type = TDM_ATTR_TENSORS;
        else if (ap->n_graphs) type = TDM_ATTR_GRAPHS;
        else if (ap->t) type = TDM_ATTR_TENSOR;
        else if (ap->g) type = TDM_ATTR_GRAPH;
        else if (ap->has_s) type = TDM_ATTR_STRING;
        else if (ap->has_i) type = TDM_ATTR_INT;
        else if (ap->has_f) type = TDM_ATTR_FLOAT;
    }
    at->type = (tdm_attr_type)type;
    switch (type) {
    case TDM_ATTR_FLOAT: at->f = ap->f; break;
    case TDM_ATTR_INT: at->i = ap->i; break;
    case TDM_ATTR_STRING:
        at->s = tdm_strndup(a, ap->s.data ? (const char *)ap->s.data : "", ap->s.len);
        at->s_len = ap->s.len;
        if (!at->s) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
        break;
    case TDM_ATTR_TENSOR:
        if (!ap->t)
            return TDM_ERR(TDM_ERR_INVALID_MODEL, "node '%s': tensor attribute '%s' has no tensor",
                           node, ap->name);
        TDM_TRY(tdm_onnx_convert_tensor(ap->t, a, c->base_dir, ap->name, &at->t));
        break;
    case TDM_ATTR_GRAPH:
        if (!ap->g)
            return TDM_ERR(TDM_ERR_INVALID_MODEL, "node '%s': graph attribute '%s' has no graph",
                           node, ap->name);
        TDM_TRY(convert_graph(c, ap->g, g, depth + 1, &at->g));
        break;
    case TDM_ATTR_FLOATS:
        at->n = ap->n_floats;
        at->floats = tdm_calloc(a, ap->n_floats ? ap->n_floats : 1, sizeof(float));
        if (!at->floats) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
        if (ap->n_floats) memcpy(at->floats, ap->floats, ap->n_floats * sizeof(float));
        break;
    case TDM_ATTR_INTS:
        at->n = ap->n_ints;
        at->ints = tdm_calloc(a, ap->n_ints ? ap->n_ints : 1, sizeof(int64_t));
        if (!at->ints) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
        if (ap->n_ints) memcpy(at->ints, ap->ints, ap->n_ints * sizeof(int64_t));
        break;
    case TDM_ATTR_STRINGS:
        at->strings = tdm_calloc(a, ap->n_strings ? ap->n_strings : 1, sizeof(char *));
        if (!at->strings) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
        at->n = ap->n_strings;
        for (size_t i = 0; i < ap->n_strings; i++) {
            at->strings[i] = tdm_strndup(a, ap->strings[i].data ? (const char *)ap->strings[i].data : "",
                                         ap->strings[i].len);
            if (!at->strings[i]) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
        }
        break;
    case TDM_ATTR_TENSORS:
        at->tensors = tdm_calloc(a, ap->n_tensors ? ap->n_tensors : 1, sizeof(tdm_tensor *));
        if (!at->tensors) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
        at->n = ap->n_tensors;
        for (size_t i = 0; i < ap->n_tensors; i++)
            TDM_TRY(tdm_onnx_convert_tensor(ap->tensors[i], a, c->base_dir, ap->name, &at->tensors[i]));
        break;
    case TDM_ATTR_GRAPHS:
        at->graphs = tdm_calloc(a, ap->n_graphs ? ap->n_graphs : 1, sizeof(tdm_graph *));
        if (!at->graphs) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
        at->n = ap->n_graphs;
        for (size_t i = 0; i < ap->n_graphs; i++)
            TDM_TRY(convert_graph(c, ap->graphs[i], g, depth + 1, &at->graphs[i]));
        break;
    default:
        /* sparse tensors and type protos: kept as untyped attributes nobody reads */
        at->type = TDM_ATTR_UNDEFINED;
        break;
    }
    return NULL;
}

/* ---- graph ---- */

/* Finds `name` in g or, for subgraphs, in enclosing graphs (then a local placeholder marked
 * is_outer is created). Creates an undefined placeholder if not found anywhere. */
static tdm_status *resolve_input(tdm_graph *g, const char *name, int *out) {
    int v = tdm_graph_find_value(g, name);
    if (v >= 0) {
        *out = v;
        return NULL;
    }
    bool outer = false;
    for (const tdm_graph *p = g->parent; p; p = p->parent)
        if (tdm_graph_find_value(p, name) >= 0) {
            outer = true;
            break;
        }
    TDM_TRY(tdm_graph_add_value(g, name, &v));
    g->values[v].is_outer = outer;
    *out = v;
    return NULL;
}

/* Records, as implicit inputs of node ni, the values of g that its subgraphs read by name. */
static tdm_status *add_implicit(tdm_graph *g, int ni, const tdm_graph *sub) {
    for (size_t v = 0; v < sub->n_values; v++) {
        if (!sub->values[v].is_outer) continue;
        int idx;
        TDM_TRY(resolve_input(g, sub->values[v].name, &idx));
        tdm_node *n = &g->nodes[ni];
        bool dup = false;
        for (int k = 0; k < n->n_implicit; k++)
            if (n->implicit[k] == idx) dup = true;
        if (dup) continue;
        int *arr = tdm_alloc(g->alloc, (size_t)(n->n_implicit + 1) * sizeof(int));
        if (!arr) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
        if (n->n_implicit) memcpy(arr, n->implicit, (size_t)n->n_implicit * sizeof(int));
        tdm_free(g->alloc, n->implicit);
        n->implicit = arr;
        n->implicit[n->n_implicit++] = idx;
    }
    return NULL;
}

static tdm_status *convert_graph(conv *c, const Onnx__GraphProto *gp, tdm_graph *parent,
                                 int depth, tdm_graph **out) {
    if (depth > TDM_MAX_SUBGRAPH_DEPTH)
        return TDM_ERR(TDM_ERR_LIMIT, "subgraphs are nested deeper than %d levels",
                       TDM_MAX_SUBGRAPH_DEPTH);
    tdm_graph *g;
    TDM_TRY(tdm_graph_new(c->a, &g));
    g->parent = parent;
    g->depth = depth;
    tdm_status *st = NULL;
    if (gp->name && !(g->name = tdm_strdup(c->a, gp->name))) {
        st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
        goto fail;
    }
    if (gp->n_sparse_initializer) {
        st = TDM_ERR(TDM_ERR_UNSUPPORTED, "sparse initializers are not supported");
        goto fail;
    }
    /* initializers */
    for (size_t i = 0; i < gp->n_initializer; i++) {
        Onnx__TensorProto *tp = gp->initializer[i]; /* ours: its raw_data may move to the tensor */
        if (!tp->name || !tp->name[0]) {
            st = TDM_ERR(TDM_ERR_INVALID_MODEL, "initializer %zu has no name", i);
            goto fail;
        }
        if (tdm_graph_find_value(g, tp->name) >= 0) {
            st = TDM_ERR(TDM_ERR_INVALID_MODEL, "initializer '%s' is defined twice", tp->name);
            goto fail;
        }
        int v;
        if ((st = tdm_graph_add_value(g, tp->name, &v))) goto fail;
        tdm_tensor *t;
        if ((st = tdm_onnx_take_tensor(tp, c->a, c->base_dir, tp->name, c->map, &t))) goto fail;
        tdm_value *val = &g->values[v];
        val->data = t;
        val->is_initializer = true;
        val->dtype = t->dtype;
        val->rank = t->rank;
        for (int d = 0; d < t->rank; d++) val->dims[d] = t->dims[d];
    }
    /* inputs */
    g->inputs = tdm_calloc(c->a, gp->n_input ? gp->n_input : 1, sizeof(int));
    if (!g->inputs) {
        st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < gp->n_input; i++) {
        const Onnx__ValueInfoProto *vi = gp->input[i];
        if (!vi->name || !vi->name[0]) {
            st = TDM_ERR(TDM_ERR_INVALID_MODEL, "graph input %zu has no name", i);
            goto fail;
        }
        int v = tdm_graph_find_value(g, vi->name);
        if (v >= 0 && g->values[v].is_input) {
            st = TDM_ERR(TDM_ERR_INVALID_MODEL, "graph input '%s' is listed twice", vi->name);
            goto fail;
        }
        if (v < 0 && (st = tdm_graph_add_value(g, vi->name, &v))) goto fail;
        tdm_value *val = &g->values[v];
        val->is_input = true;
        if (!val->data && (st = fill_type(c, g, val, vi->type, depth == 0))) goto fail;
        g->inputs[g->n_inputs++] = v;
    }
    /* nodes */
    for (size_t i = 0; i < gp->n_node; i++) {
        const Onnx__NodeProto *np = gp->node[i];
        if (!np->op_type || !np->op_type[0]) {
            st = TDM_ERR(TDM_ERR_INVALID_MODEL, "node %zu has no op_type", i);
            goto fail;
        }
        if (np->n_input > 4096 || np->n_output > 4096) {
            st = TDM_ERR(TDM_ERR_LIMIT, "node '%s' has too many inputs or outputs",
                         np->name ? np->name : "");
            goto fail;
        }
        char autoname[64];
        const char *name = np->name;
        if (!name || !name[0]) {
            snprintf(autoname, sizeof autoname, "%s_%zu", np->op_type, i);
            name = autoname;
        }
        /* domain "tandem" holds the nodes the graph optimizer makes (ops/fused.h: packed
         * weights, blocked layouts), whose kernels rely on what it checked: refused in a model */
        if (np->domain && strcmp(np->domain, TDM_FUSED_DOMAIN) == 0) {
            st = TDM_ERR(TDM_ERR_INVALID_MODEL, "node '%s' (%s) is in domain '%s', tandem's own "
                         "domain for the nodes its graph optimizer makes: a model cannot hold them",
                         name, np->op_type, TDM_FUSED_DOMAIN);
            goto fail;
        }
        int ni;
        if ((st = tdm_graph_add_node(g, name, np->op_type, np->domain, (int)np->n_input,
                                     (int)np->n_output, &ni)))
            goto fail;
        for (size_t k = 0; k < np->n_input; k++) {
            const char *in = np->input[k];
            if (!in || !in[0]) continue;
            int v;
            if ((st = resolve_input(g, in, &v))) goto fail;
            g->nodes[ni].inputs[k] = v;
        }
        for (size_t k = 0; k < np->n_output; k++) {
            const char *on = np->output[k];
            if (!on || !on[0]) continue;
            int v = tdm_graph_find_value(g, on);
            if (v < 0 && (st = tdm_graph_add_value(g, on, &v))) goto fail;
            g->nodes[ni].outputs[k] = v;
        }
        if (np->n_attribute) {
            tdm_node *n = &g->nodes[ni];
            n->attrs = tdm_calloc(c->a, np->n_attribute, sizeof(tdm_attr));
            if (!n->attrs) {
                st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
                goto fail;
            }
            for (size_t k = 0; k < np->n_attribute; k++) {
                n->n_attrs = (int)k + 1;
                if ((st = convert_attr(c, np->attribute[k], &n->attrs[k], g, depth, name))) goto fail;
                n = &g->nodes[ni]; /* convert_attr does not move nodes, but stay safe */
            }
            for (int k = 0; k < n->n_attrs; k++)
                for (int j = 0; j < k; j++)
                    if (strcmp(n->attrs[j].name, n->attrs[k].name) == 0) {
                        st = TDM_ERR(TDM_ERR_INVALID_MODEL, "node '%s' has attribute '%s' twice",
                                     name, n->attrs[k].name);
                        goto fail;
                    }
        }
    }
    /* outputs */
    g->outputs = tdm_calloc(c->a, gp->n_output ? gp->n_output : 1, sizeof(int));
    if (!g->outputs) {
        st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < gp->n_output; i++) {
        const Onnx__ValueInfoProto *vi = gp->output[i];
        if (!vi->name || !vi->name[0]) {
            st = TDM_ERR(TDM_ERR_INVALID_MODEL, "graph output %zu has no name", i);
            goto fail;
        }
        int v;
        if ((st = resolve_input(g, vi->name, &v))) goto fail;
        tdm_value *val = &g->values[v];
        val->is_output = true;
        if ((st = fill_type(c, g, val, vi->type, depth == 0))) goto fail;
        g->outputs[g->n_outputs++] = v;
    }
    for (size_t i = 0; i < g->n_nodes && !st; i++)
        for (int k = 0; k < g->nodes[i].n_attrs && !st; k++) {
            const tdm_attr *at = &g->nodes[i].attrs[k];
            if (at->type == TDM_ATTR_GRAPH) st = add_implicit(g, (int)i, at->g);
            if (at->type == TDM_ATTR_GRAPHS)
                for (size_t j = 0; j < at->n && !st; j++) st = add_implicit(g, (int)i, at->graphs[j]);
        }
    if (st) goto fail;
    for (size_t i = 0; i < gp->n_value_info; i++) {
        const Onnx__ValueInfoProto *vi = gp->value_info[i];
        if (!vi->name) continue;
        int v = tdm_graph_find_value(g, vi->name);
        if (v < 0 || g->values[v].data || g->values[v].is_input) continue;
        if ((st = fill_type(c, g, &g->values[v], vi->type, false))) goto fail;
    }
    *out = g;
    return NULL;
fail:
    tdm_graph_free(g);
    return st;
}

static tdm_status *convert_model(const Onnx__ModelProto *mp, conv *c, tdm_onnx_model *m) {
    if (!mp->graph) return TDM_ERR(TDM_ERR_INVALID_MODEL, "the model has no graph");
    TDM_TRY(convert_graph(c, mp->graph, NULL, 0, &m->graph));
    tdm_graph *g = m->graph;
    g->opsets = tdm_calloc(c->a, mp->n_opset_import ? mp->n_opset_import : 1, sizeof(tdm_opset_import));
    if (!g->opsets) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
    bool has_default = false;
    for (size_t i = 0; i < mp->n_opset_import; i++) {
        const Onnx__OperatorSetIdProto *op = mp->opset_import[i];
        const char *d = op->domain && strcmp(op->domain, "ai.onnx") ? op->domain : "";
        if (op->version < 1 || op->version > 1000)
            return TDM_ERR(TDM_ERR_INVALID_MODEL, "opset version %lld of domain '%s' is invalid",
                           (long long)op->version, d);
        if (strcmp(d, TDM_FUSED_DOMAIN) == 0) /* as its nodes (convert_graph) */
            return TDM_ERR(TDM_ERR_INVALID_MODEL, "the model imports an opset of domain '%s', "
                           "tandem's own domain for the nodes its graph optimizer makes", d);
        bool again = false;
        for (size_t j = 0; j < g->n_opsets; j++) {
            if (strcmp(g->opsets[j].domain, d) != 0) continue;
            if (g->opsets[j].version != op->version)
                return TDM_ERR(TDM_ERR_INVALID_MODEL,
                               "opset of domain '%s' is imported twice, as versions %lld and %lld",
                               d, (long long)g->opsets[j].version, (long long)op->version);
            again = true; /* skl2onnx writes the same import twice: harmless */
        }
        if (again) {
            c->lenient |= TDM_ONNX_LENIENT_DUP_OPSET;
            continue;
        }
        g->opsets[g->n_opsets].domain = tdm_strdup(c->a, d);
        if (!g->opsets[g->n_opsets].domain) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
        g->opsets[g->n_opsets].version = op->version;
        g->n_opsets++;
        if (!d[0]) has_default = true;
    }
    if (!has_default)
        for (size_t i = 0; i < g->n_nodes; i++)
            if (!g->nodes[i].domain[0])
                return TDM_ERR(TDM_ERR_INVALID_MODEL,
                               "node '%s' (%s) is in the default ONNX domain, but the model imports "
                               "no opset of that domain", g->nodes[i].name, g->nodes[i].op_type);
    m->ir_version = mp->has_ir_version ? mp->ir_version : 0;
    m->model_version = mp->model_version;
    char prod[256];
    snprintf(prod, sizeof prod, "%s%s%s", mp->producer_name ? mp->producer_name : "",
             mp->producer_version && mp->producer_version[0] ? " " : "",
             mp->producer_version ? mp->producer_version : "");
    m->producer = tdm_strdup(c->a, prod);
    if (!m->producer) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
    return tdm_graph_finalize(g);
}

tdm_status *tdm_onnx_load_buffer(const void *data, size_t size, const char *base_dir,
                                 const tdm_allocator *a, tdm_onnx_model **out) {
    return tdm_onnx_load_buffer_ex(data, size, base_dir, 0, a, out);
}

tdm_status *tdm_onnx_load_buffer_ex(const void *data, size_t size, const char *base_dir,
                                    unsigned flags, const tdm_allocator *a, tdm_onnx_model **out) {
    if (!data && size) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "model buffer is NULL");
    if (size == 0) return TDM_ERR(TDM_ERR_INVALID_MODEL, "the model is empty (0 bytes)");
    if (size > TDM_MAX_MODEL_BYTES)
        return TDM_ERR(TDM_ERR_LIMIT, "the model is %zu bytes; protobuf messages are limited to 2 GiB "
                       "(use external data for large weights)", size);
    TDM_TRY(tdm_onnx_check_wire(data, size, 0, TDM_MAX_PROTO_DEPTH));
    pc_ctx pcc = {a, false};
    ProtobufCAllocator pa = {pc_alloc, pc_free, &pcc};
    Onnx__ModelProto *mp = onnx__model_proto__unpack(&pa, size, data);
    if (!mp && pcc.failed)
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory decoding the model");
    if (!mp)
        return TDM_ERR(TDM_ERR_INVALID_MODEL,
                       "the file is not a valid ONNX model (protobuf decoding failed)");
    tdm_onnx_model *m = tdm_calloc(a, 1, sizeof *m);
    tdm_status *st = NULL;
    if (!m) {
        st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
    } else {
        m->alloc = a;
        conv c = {a, base_dir, 0, (flags & TDM_ONNX_MAP_EXTERNAL) != 0};
        st = convert_model(mp, &c, m);
        m->lenient = c.lenient;
    }
    onnx__model_proto__free_unpacked(mp, &pa);
    if (st) {
        tdm_onnx_model_free(m);
        return st;
    }
    *out = m;
    return NULL;
}

void tdm_onnx_log_lenient(const tdm_onnx_model *m, const char *what, const tdm_logger *lg) {
    if (!m || !m->lenient) return;
    if (m->lenient & TDM_ONNX_LENIENT_DUP_OPSET)
        tdm_log(lg, TDM_LOG_WARN,
                "%s imports an opset twice with the same version; the repeat is ignored", what);
    if (m->lenient & TDM_ONNX_LENIENT_DIM_MINUS_ONE)
        tdm_log(lg, TDM_LOG_WARN,
                "%s gives a dimension as -1 (not allowed by ONNX); read as unknown", what);
}

void tdm_onnx_model_free(tdm_onnx_model *m) {
    if (!m) return;
    const tdm_allocator *a = m->alloc;
    tdm_graph_free(m->graph);
    tdm_free(a, m->producer);
    tdm_free(a, m);
}

char *tdm_path_dir(const char *path, char *buf, size_t size) {
    snprintf(buf, size, "%s", path);
    char *slash = strrchr(buf, '/');
    if (!slash) snprintf(buf, size, ".");
    else if (slash == buf) buf[1] = 0;
    else *slash = 0;
    return buf;
}

tdm_status *tdm_onnx_load_file(const char *path, const tdm_allocator *a, tdm_onnx_model **out) {
    void *data;
    size_t size;
    TDM_TRY(tdm_read_file(path, a, TDM_MAX_MODEL_BYTES, &data, &size));
    char dir[PATH_MAX];
    tdm_status *st = tdm_onnx_load_buffer(data, size, tdm_path_dir(path, dir, sizeof dir), a, out);
    tdm_free(a, data);
    return tdm_status_wrap(st, "loading '%s': ", path);
}

tdm_status *tdm_onnx_load_tensor_file(const char *path, const tdm_allocator *a, tdm_tensor **out) {
    void *data;
    size_t size;
    TDM_TRY(tdm_read_file(path, a, TDM_MAX_MODEL_BYTES, &data, &size));
    tdm_status *st = tdm_onnx_check_wire(data, size, 1, TDM_MAX_PROTO_DEPTH);
    if (!st) {
        pc_ctx pcc = {a, false};
        ProtobufCAllocator pa = {pc_alloc, pc_free, &pcc};
        Onnx__TensorProto *tp = onnx__tensor_proto__unpack(&pa, size, data);
        if (!tp && pcc.failed) {
            st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory decoding '%s'", path);
        } else if (!tp) {
            st = TDM_ERR(TDM_ERR_INVALID_MODEL, "'%s' is not a valid TensorProto", path);
        } else {
            char dir[PATH_MAX];
            st = tdm_onnx_convert_tensor(tp, a, tdm_path_dir(path, dir, sizeof dir), "tensor", out);
            onnx__tensor_proto__free_unpacked(tp, &pa);
        }
    }
    tdm_free(a, data);
    return st;
}

/* ---- SequenceProto / OptionalProto / MapProto (onnx-data.proto; test data .pb files) ----
 * Not in the compiled onnx.proto: read from the wire here. Fields used:
 *   SequenceProto: elem_type 2, tensor_values 3, sequence_values 5, map_values 6,
 *                  optional_values 7;
 *   OptionalProto: elem_type 2, tensor_value 3, sequence_value 5, map_value 6, optional_value 7;
 *   MapProto:      key_type 2, keys 3 (packed int64), string_keys 4, values 5 (a SequenceProto).
 * elem_type: 1 tensor, 3 sequence, 4 map, 5 optional. */

typedef struct wire {
    const uint8_t *p, *end;
} wire;

static bool wire_varint(wire *w, uint64_t *v) {
    *v = 0;
    for (int s = 0; s < 64 && w->p < w->end; s += 7) {
        uint8_t b = *w->p++;
        *v |= (uint64_t)(b & 0x7f) << s;
        if (!(b & 0x80)) return true;
    }
    return false;
}

/* Next field: number, wire type, and for length-delimited fields the bytes. */
static bool wire_field(wire *w, int *field, int *type, uint64_t *num, wire *sub) {
    uint64_t key;
    if (!wire_varint(w, &key)) return false;
    *field = (int)(key >> 3);
    *type = (int)(key & 7);
    switch (*type) {
    case 0: return wire_varint(w, num);
    case 1:
        if (w->end - w->p < 8) return false;
        w->p += 8;
        return true;
    case 5:
        if (w->end - w->p < 4) return false;
        w->p += 4;
        return true;
    case 2: {
        uint64_t len;
        if (!wire_varint(w, &len) || len > (uint64_t)(w->end - w->p)) return false;
        sub->p = w->p;
        sub->end = w->p + len;
        w->p += len;
        return true;
    }
    default: return false;
    }
}

static tdm_status *value_from_wire(wire w, tdm_dtype kind, const tdm_allocator *a, int depth,
                                   tdm_tensor **out);

static tdm_status *tensor_from_wire(wire w, const tdm_allocator *a, tdm_tensor **out) {
    TDM_TRY(tdm_onnx_check_wire(w.p, (size_t)(w.end - w.p), 1, TDM_MAX_PROTO_DEPTH));
    pc_ctx pcc = {a, false};
    ProtobufCAllocator pa = {pc_alloc, pc_free, &pcc};
    Onnx__TensorProto *tp = onnx__tensor_proto__unpack(&pa, (size_t)(w.end - w.p), w.p);
    if (!tp)
        return TDM_ERR(pcc.failed ? TDM_ERR_OUT_OF_MEMORY : TDM_ERR_INVALID_MODEL,
                       "a tensor inside a sequence/optional is not a valid TensorProto");
    tdm_status *st = tdm_onnx_convert_tensor(tp, a, NULL, "tensor", out);
    onnx__tensor_proto__free_unpacked(tp, &pa);
    return st;
}

/* A map's values from their SequenceProto: its single 1-D tensor, or its scalars as one 1-D
 * tensor; anything else stays a sequence (taken from `vals`). */
static tdm_status *map_values(tdm_tensor *vals, const tdm_allocator *a, tdm_tensor **out) {
    tdm_tensor **it = vals->data;
    int64_t n = vals->count;
    if (n == 1 && it[0] && it[0]->rank == 1) {
        *out = it[0];
        it[0] = NULL;
        return NULL;
    }
    bool scalars = true;
    for (int64_t i = 0; i < n; i++)
        if (!it[i] || it[i]->count != 1 || it[i]->dtype != it[0]->dtype ||
            tdm_dtype_has_ptrs(it[i]->dtype))
            scalars = false;
    if (!scalars || n == 0) return tdm_tensor_clone(a, vals, out);
    TDM_TRY(tdm_tensor_new(a, it[0]->dtype, 1, &n, out));
    size_t es = tdm_dtype_elem_size(it[0]->dtype);
    for (int64_t i = 0; i < n; i++) memcpy((char *)(*out)->data + (size_t)i * es, it[i]->data, es);
    return NULL;
}

static const tdm_dtype elem_kinds[6] = {TDM_UNDEFINED, TDM_UNDEFINED, TDM_UNDEFINED,
                                        TDM_SEQUENCE, TDM_MAP, TDM_OPTIONAL};

static tdm_status *value_from_wire(wire w, tdm_dtype kind, const tdm_allocator *a, int depth,
                                   tdm_tensor **out) {
    if (depth > 16) return TDM_ERR(TDM_ERR_LIMIT, "sequences/optionals nested too deeply");
    if (kind == TDM_UNDEFINED) return tensor_from_wire(w, a, out);
    /* first pass: count the items */
    int64_t n = 0;
    wire r = w, sub = {0};
    int field, type;
    uint64_t num;
    while (r.p < r.end) {
        if (!wire_field(&r, &field, &type, &num, &sub))
            return TDM_ERR(TDM_ERR_INVALID_MODEL, "malformed sequence/optional/map data");
        if (kind != TDM_MAP && type == 2 && field >= 3 && field <= 7 && field != 4) n++;
    }
    if (kind == TDM_OPTIONAL && n > 1)
        return TDM_ERR(TDM_ERR_INVALID_MODEL, "optional with %lld values", (long long)n);
    tdm_tensor *c = NULL;
    TDM_TRY(tdm_container_new(a, kind, kind == TDM_MAP ? 2 : n, &c));
    tdm_tensor **slots = c->data;
    tdm_status *st = NULL;
    int64_t i = 0;
    tdm_dtype key_type = TDM_INT64;
    r = w;
    while (!st && r.p < r.end) {
        wire_field(&r, &field, &type, &num, &sub);
        if (kind == TDM_MAP) {
            if (field == 2 && type == 0) key_type = (tdm_dtype)num;
            else if (field == 5 && type == 2 && !slots[1]) {
                tdm_tensor *vals = NULL;
                st = value_from_wire(sub, TDM_SEQUENCE, a, depth + 1, &vals);
                /* the values: one 1-D tensor, or scalars (onnx's from_dict) made one */
                if (!st) st = map_values(vals, a, &slots[1]);
                tdm_tensor_destroy(vals);
            }
            continue;
        }
        if (type != 2 || field < 3 || field > 7 || field == 4) continue;
        st = value_from_wire(sub, field == 3 ? TDM_UNDEFINED : elem_kinds[field - 2], a, depth + 1,
                             &slots[i++]);
    }
    if (!st && kind == TDM_MAP) {
        /* keys: packed int64 (3) or strings (4) */
        tdm_dtype kt = key_type == TDM_STRING ? TDM_STRING : TDM_INT64;
        int64_t nk = 0;
        r = w;
        while (r.p < r.end) {
            wire_field(&r, &field, &type, &num, &sub);
            if (kt == TDM_STRING && field == 4 && type == 2) nk++;
            if (kt == TDM_INT64 && field == 3 && type == 2) {
                wire q = sub;
                while (q.p < q.end && wire_varint(&q, &num)) nk++;
            }
            if (kt == TDM_INT64 && field == 3 && type == 0) nk++;
        }
        st = tdm_tensor_new(a, kt, 1, &nk, &slots[0]);
        int64_t k = 0;
        r = w;
        while (!st && r.p < r.end) {
            wire_field(&r, &field, &type, &num, &sub);
            if (kt == TDM_STRING && field == 4 && type == 2) {
                char *s = tdm_strndup(a, (const char *)sub.p, (size_t)(sub.end - sub.p));
                if (!s) st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
                else ((char **)slots[0]->data)[k++] = s;
            } else if (kt == TDM_INT64 && field == 3 && type == 2) {
                wire q = sub;
                while (q.p < q.end && wire_varint(&q, &num))
                    ((int64_t *)slots[0]->data)[k++] = (int64_t)num;
            } else if (kt == TDM_INT64 && field == 3 && type == 0) {
                ((int64_t *)slots[0]->data)[k++] = (int64_t)num;
            }
        }
    }
    if (!st && kind == TDM_MAP &&
        (!slots[1] || slots[1]->count != slots[0]->count))
        st = TDM_ERR(TDM_ERR_INVALID_MODEL, "a map's values are missing or not one per key");
    if (st) {
        tdm_tensor_destroy(c);
        return st;
    }
    *out = c;
    return NULL;
}

tdm_status *tdm_onnx_load_value_file(const char *path, const tdm_allocator *a, tdm_dtype kind,
                                     tdm_tensor **out) {
    if (kind == TDM_UNDEFINED || !tdm_dtype_is_container(kind))
        return tdm_onnx_load_tensor_file(path, a, out);
    void *data;
    size_t size;
    TDM_TRY(tdm_read_file(path, a, TDM_MAX_MODEL_BYTES, &data, &size));
    wire w = {data, (const uint8_t *)data + size};
    tdm_status *st = value_from_wire(w, kind, a, 0, out);
    tdm_free(a, data);
    return st ? tdm_status_wrap(st, "'%s': ", path) : NULL;
}
