/* A protobuf-aware mutation for the model fuzzer: unpack the ModelProto with protobuf-c,
 * change one thing a model author could write, pack it again. Byte-level mutations almost
 * always break the protobuf framing; these keep it, so they reach shape inference and the
 * kernels with hostile attributes, constants and shapes.
 *
 * Mutations: an int/ints/float attribute (value, or the length of the list), an integer or
 * float element of an initializer or Constant tensor, a graph input's dim or element type,
 * a node's op_type (any operator tandem knows), a node input (another value, or omitted),
 * an attribute removed or added (common names, random ints), the default opset version.
 * Subgraphs (If/Loop/Scan bodies) are mutated too.
 *
 * Everything protobuf-c allocates while unpacking, and everything the mutation adds, comes
 * from one arena that is dropped at the end, so no ownership needs tracking. */
#ifndef TDM_FUZZ_ONNX_MUTATOR_H
#define TDM_FUZZ_ONNX_MUTATOR_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "onnx/loader.h"
#include "onnx/onnx.pb-c.h"
#include "ops/op.h"

typedef struct om_arena {
    void **blocks;
    size_t n, cap;
} om_arena;

static void *om_alloc(void *user, size_t size) {
    om_arena *a = user;
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 256;
        void **nb = realloc(a->blocks, cap * sizeof *nb);
        if (!nb) return NULL;
        a->blocks = nb;
        a->cap = cap;
    }
    void *p = malloc(size ? size : 1);
    if (p) a->blocks[a->n++] = p;
    return p;
}
static void om_free(void *user, void *p) { (void)user, (void)p; }
static void om_arena_drop(om_arena *a) {
    for (size_t i = 0; i < a->n; i++) free(a->blocks[i]);
    free(a->blocks);
}

static const int64_t om_ints[] = {0, 1, -1, 2, -2, 3, 4, 5, 7, 8, 16, -3, -8, 100, 1000, 65536,
                                  INT32_MAX, INT32_MIN, (int64_t)1 << 31, (int64_t)1 << 32,
                                  (int64_t)1 << 62, INT64_MAX, INT64_MIN, INT64_MIN + 1};
#define OM_N_INTS (sizeof om_ints / sizeof om_ints[0])

static int64_t om_int(fz_rng *r) {
    return fz_below(r, 3) ? om_ints[fz_below(r, 10)] : om_ints[fz_below(r, OM_N_INTS)];
}
static float om_float(fz_rng *r) {
    static const float fs[] = {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, 2.0f, 1e-30f, 1e30f, -1e30f,
                               3.4e38f, 1e-45f, INFINITY, -INFINITY, NAN};
    return fs[fz_below(r, sizeof fs / sizeof fs[0])];
}

static char *om_strdup(om_arena *a, const char *s) {
    size_t n = strlen(s);
    char *d = om_alloc(a, n + 1);
    if (d) memcpy(d, s, n + 1);
    return d;
}

/* A random operator name from tandem's own registry. */
static const char *om_random_op(fz_rng *r) {
    static const tdm_op_schema *const fams[] = {
#define TDM_X_(fam) tdm_ops_##fam,
        TDM_OP_FAMILIES(TDM_X_)
#undef TDM_X_
    };
    static const int *const counts[] = {
#define TDM_X_(fam) &tdm_ops_##fam##_count,
        TDM_OP_FAMILIES(TDM_X_)
#undef TDM_X_
    };
    size_t nf = sizeof fams / sizeof fams[0];
    for (int tries = 0; tries < 8; tries++) {
        size_t f = fz_below(r, nf);
        if (*counts[f] == 0) continue;
        const tdm_op_schema *s = &fams[f][fz_below(r, (uint64_t)*counts[f])];
        if (!s->domain[0]) return s->name;
    }
    return "Identity";
}

#define OM_MAX_GRAPHS 64
typedef struct om_graphs {
    Onnx__GraphProto *g[OM_MAX_GRAPHS];
    int n;
} om_graphs;

static void om_collect(om_graphs *gs, Onnx__GraphProto *g, int depth) {
    if (!g || gs->n == OM_MAX_GRAPHS || depth > 8) return;
    gs->g[gs->n++] = g;
    for (size_t i = 0; i < g->n_node; i++) {
        Onnx__NodeProto *n = g->node[i];
        for (size_t k = 0; k < n->n_attribute; k++) {
            Onnx__AttributeProto *a = n->attribute[k];
            if (a->g) om_collect(gs, a->g, depth + 1);
            for (size_t j = 0; j < a->n_graphs; j++) om_collect(gs, a->graphs[j], depth + 1);
        }
    }
}

/* Changes one element of a tensor's data (whichever field holds it). */
static int om_mutate_tensor(Onnx__TensorProto *t, fz_rng *r) {
    if (!t) return 0;
    int64_t v = om_int(r);
    float f = om_float(r);
    if (t->n_int64_data) {
        t->int64_data[fz_below(r, t->n_int64_data)] = v;
        return 1;
    }
    if (t->n_int32_data) {
        t->int32_data[fz_below(r, t->n_int32_data)] = (int32_t)v;
        return 1;
    }
    if (t->n_float_data) {
        t->float_data[fz_below(r, t->n_float_data)] = f;
        return 1;
    }
    if (t->n_double_data) {
        t->double_data[fz_below(r, t->n_double_data)] = f;
        return 1;
    }
    if (t->has_raw_data && t->raw_data.len) {
        size_t es = t->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__INT64 ||
                            t->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE
                        ? 8
                    : t->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__INT32 ||
                            t->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT
                        ? 4
                        : 1;
        size_t n = t->raw_data.len / es;
        if (!n) return 0;
        uint8_t *p = t->raw_data.data + fz_below(r, n) * es;
        if (t->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT) memcpy(p, &f, 4);
        else if (t->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE) {
            double d = f;
            memcpy(p, &d, 8);
        } else if (es == 8) memcpy(p, &v, 8);
        else if (es == 4) {
            int32_t w = (int32_t)v;
            memcpy(p, &w, 4);
        } else *p = (uint8_t)v;
        return 1;
    }
    return 0;
}

static const char *const om_attr_names[] = {
    "axis", "axes", "perm", "kernel_shape", "pads", "strides", "dilations", "group", "keepdims",
    "k", "largest", "batch_dims", "mode", "transA", "transB", "alpha", "beta", "epsilon",
    "output_padding", "output_shape", "blocksize", "select_last_index", "allowzero", "to",
    "ceil_mode", "count_include_pad", "exclusive", "reverse", "sorted", "upper", "reduction",
    "noop_with_empty_axes", "center_point_box", "detect_negative", "storage_order", "split",
    "num_outputs", "hidden_size", "direction", "spatial_scale", "sampling_ratio",
};

static int om_mutate_attr(om_arena *a, Onnx__NodeProto *n, fz_rng *r) {
    if (n->n_attribute && fz_below(r, 5)) {
        Onnx__AttributeProto *at = n->attribute[fz_below(r, n->n_attribute)];
        if (at->t && fz_below(r, 2)) return om_mutate_tensor(at->t, r);
        if (at->n_ints) {
            switch (fz_below(r, 3)) {
            case 0: at->n_ints = fz_below(r, at->n_ints); return 1; /* shorter */
            case 1: {                                               /* longer */
                size_t nn = at->n_ints + 1 + fz_below(r, 4);
                int64_t *v = om_alloc(a, nn * sizeof *v);
                if (!v) return 0;
                memcpy(v, at->ints, at->n_ints * sizeof *v);
                for (size_t i = at->n_ints; i < nn; i++) v[i] = om_int(r);
                at->ints = v;
                at->n_ints = nn;
                return 1;
            }
            default: at->ints[fz_below(r, at->n_ints)] = om_int(r); return 1;
            }
        }
        if (at->n_floats) {
            at->floats[fz_below(r, at->n_floats)] = om_float(r);
            return 1;
        }
        if (at->has_i || (at->has_type && at->type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT)) {
            at->i = om_int(r);
            at->has_i = 1;
            return 1;
        }
        if (at->has_f || (at->has_type && at->type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT)) {
            at->f = om_float(r);
            at->has_f = 1;
            return 1;
        }
        if (fz_below(r, 2)) { /* remove it */
            size_t k = 0;
            while (k < n->n_attribute && n->attribute[k] != at) k++;
            n->attribute[k] = n->attribute[--n->n_attribute];
            return 1;
        }
    }
    /* add an attribute (replacing one of the same name would make a duplicate: skip those) */
    const char *name = om_attr_names[fz_below(r, sizeof om_attr_names / sizeof om_attr_names[0])];
    for (size_t k = 0; k < n->n_attribute; k++)
        if (n->attribute[k]->name && strcmp(n->attribute[k]->name, name) == 0) return 0;
    Onnx__AttributeProto *at = om_alloc(a, sizeof *at);
    Onnx__AttributeProto **arr = om_alloc(a, (n->n_attribute + 1) * sizeof *arr);
    if (!at || !arr) return 0;
    onnx__attribute_proto__init(at);
    at->name = om_strdup(a, name);
    at->has_type = 1;
    if (fz_below(r, 2)) {
        at->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
        at->has_i = 1;
        at->i = om_int(r);
    } else {
        at->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
        at->n_ints = fz_below(r, 7);
        at->ints = om_alloc(a, (at->n_ints + 1) * sizeof *at->ints);
        if (!at->ints) return 0;
        for (size_t i = 0; i < at->n_ints; i++) at->ints[i] = om_int(r);
    }
    if (n->n_attribute) memcpy(arr, n->attribute, n->n_attribute * sizeof *arr);
    arr[n->n_attribute++] = at;
    n->attribute = arr;
    return 1;
}

/* A value name of g: an input, an initializer or a node output. */
static const char *om_random_value(Onnx__GraphProto *g, fz_rng *r) {
    size_t total = g->n_input + g->n_initializer;
    for (size_t i = 0; i < g->n_node; i++) total += g->node[i]->n_output;
    if (!total) return "";
    size_t k = fz_below(r, total);
    if (k < g->n_input) return g->input[k]->name ? g->input[k]->name : "";
    k -= g->n_input;
    if (k < g->n_initializer) return g->initializer[k]->name ? g->initializer[k]->name : "";
    k -= g->n_initializer;
    for (size_t i = 0; i < g->n_node; i++) {
        if (k < g->node[i]->n_output) return g->node[i]->output[k];
        k -= g->node[i]->n_output;
    }
    return "";
}

static int om_mutate_graph(om_arena *a, Onnx__ModelProto *m, Onnx__GraphProto *g, fz_rng *r) {
    switch (fz_below(r, 10)) {
    case 0: case 1: case 2: /* attributes */
        if (!g->n_node) return 0;
        return om_mutate_attr(a, g->node[fz_below(r, g->n_node)], r);
    case 3: /* initializer data */
        if (!g->n_initializer) return 0;
        return om_mutate_tensor(g->initializer[fz_below(r, g->n_initializer)], r);
    case 4: { /* a graph input's dims or element type */
        if (!g->n_input) return 0;
        Onnx__ValueInfoProto *vi = g->input[fz_below(r, g->n_input)];
        if (!vi->type || vi->type->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE ||
            !vi->type->tensor_type) /* a oneof: tensor_type shares storage with the others */
            return 0;
        Onnx__TypeProto__Tensor *tt = vi->type->tensor_type;
        if (fz_below(r, 4) == 0) {
            tt->elem_type = (int32_t)fz_below(r, 20);
            tt->has_elem_type = 1;
            return 1;
        }
        if (!tt->shape) return 0;
        if (tt->shape->n_dim && fz_below(r, 4)) {
            Onnx__TensorShapeProto__Dimension *d = tt->shape->dim[fz_below(r, tt->shape->n_dim)];
            if (fz_below(r, 3) == 0) {
                d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
                d->dim_param = om_strdup(a, "n");
            } else {
                d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
                d->dim_value = fz_below(r, 8) ? (int64_t)fz_below(r, 5) : om_int(r);
            }
            return 1;
        }
        tt->shape->n_dim = fz_below(r, tt->shape->n_dim + 1); /* lower rank */
        return 1;
    }
    case 5: { /* op type */
        if (!g->n_node) return 0;
        Onnx__NodeProto *n = g->node[fz_below(r, g->n_node)];
        n->op_type = om_strdup(a, om_random_op(r));
        return n->op_type != NULL;
    }
    case 6: { /* a node input: another value, or omitted */
        if (!g->n_node) return 0;
        Onnx__NodeProto *n = g->node[fz_below(r, g->n_node)];
        if (!n->n_input) return 0;
        size_t k = fz_below(r, n->n_input);
        if (fz_below(r, 4) == 0) n->input[k] = "";
        else n->input[k] = (char *)om_random_value(g, r);
        return 1;
    }
    case 7: { /* drop or add a node input */
        if (!g->n_node) return 0;
        Onnx__NodeProto *n = g->node[fz_below(r, g->n_node)];
        if (n->n_input && fz_below(r, 2)) {
            n->n_input--;
            return 1;
        }
        char **arr = om_alloc(a, (n->n_input + 1) * sizeof *arr);
        if (!arr) return 0;
        if (n->n_input) memcpy(arr, n->input, n->n_input * sizeof *arr);
        arr[n->n_input++] = (char *)om_random_value(g, r);
        n->input = arr;
        return 1;
    }
    case 8: /* opset */
        if (!m->n_opset_import) return 0;
        m->opset_import[fz_below(r, m->n_opset_import)]->version = 1 + (int64_t)fz_below(r, 18);
        return 1;
    default: { /* graph output dropped or swapped for another value */
        if (!g->n_output) return 0;
        Onnx__ValueInfoProto *vi = g->output[fz_below(r, g->n_output)];
        vi->name = (char *)om_random_value(g, r);
        return 1;
    }
    }
}

/* Returns the new size, or 0 when the bytes do not parse (the caller mutates bytes then). */
static size_t onnx_mutate_model(uint8_t *data, size_t size, size_t max_size, fz_rng *r) {
    tdm_status *bad = tdm_onnx_check_wire(data, size, 0, 64); /* protobuf-c recursion bound */
    if (bad) {
        tdm_status_free(bad);
        return 0;
    }
    om_arena arena = {0};
    ProtobufCAllocator pa = {om_alloc, om_free, &arena};
    Onnx__ModelProto *m = onnx__model_proto__unpack(&pa, size, data);
    size_t out = 0;
    if (m && m->graph) {
        om_graphs gs = {{0}, 0};
        om_collect(&gs, m->graph, 0);
        int changed = 0;
        int rounds = 1 + (int)fz_below(r, 3);
        for (int i = 0; i < rounds * 4 && changed < rounds; i++)
            changed += om_mutate_graph(&arena, m, gs.g[fz_below(r, (uint64_t)gs.n)], r);
        if (changed) {
            size_t n = onnx__model_proto__get_packed_size(m);
            if (n <= max_size) out = onnx__model_proto__pack(m, data);
        }
    }
    om_arena_drop(&arena);
    return out;
}

#endif
