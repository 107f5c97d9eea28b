/* Test helper: the one builder of ONNX models in memory (protobuf-c structs) for the unit
 * tests. Everything a model holds is allocated through it and freed by mb_free; a model's
 * size is MB_MAX nodes, inputs, outputs and initializers. Include after <cmocka.h>.
 *
 *   mb_model m;
 *   mb_init(&m, 17);                                  opset of the default domain
 *   int64_t d[2] = {-1, 4};                           -1: a dynamic dim ("N")
 *   mb_input(&m, "x", 2, d);                          float input (rank -1: no shape)
 *   mb_init_f32(&m, "w", 1, d + 1, 4, w);             initializers: f32, i64, raw bytes,
 *   Onnx__NodeProto *n = mb_node(&m, "Gemm:x,w->y");  "Op:in1,in2->out1,out2"; empty names
 *   mb_attr_i(&m, n, "transB", 1);                    are omitted inputs ("Clip:x,,hi->y")
 *   mb_output(&m, "y");
 *   size_t size;
 *   void *bytes = mb_pack(&m, &size);                 free() the bytes
 *   mb_free(&m);
 *
 * Nodes are named n0, n1, ... in order. Graph inputs keep the shapes a run should feed them
 * (in_rank / in_dims: the declared ones, or mb_input_run's), for tests that make random
 * inputs. A subgraph (Loop, Scan, If bodies) is another mb_model whose graph is given to
 * mb_attr_graph; free it after packing the outer model. */
#ifndef TDM_TEST_MODEL_BUILDER_H
#define TDM_TEST_MODEL_BUILDER_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx/onnx.pb-c.h"

/* every test uses some of the helpers, none uses all */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"

#define MB_MAX 64       /* nodes, inputs, outputs, initializers */
#define MB_MAX_RANK 8   /* dims kept of a graph input's run-time shape */
#define MB_MAX_ATTRS 16 /* per node */

enum { MB_F32 = 1, MB_I64 = 7, MB_BOOL = 9 }; /* TensorProto.DataType values used most */

typedef struct mb_model {
    Onnx__ModelProto model;
    Onnx__GraphProto graph;
    Onnx__OperatorSetIdProto opset, *opsets[1];
    Onnx__NodeProto *nodes[MB_MAX];
    Onnx__ValueInfoProto *ins[MB_MAX], *outs[MB_MAX];
    Onnx__TensorProto *inits[MB_MAX];
    /* run-time shapes of the graph inputs */
    int in_rank[MB_MAX];
    int64_t in_dims[MB_MAX][MB_MAX_RANK];
    bool positive; /* for harnesses that make random inputs: (0.1, 2] instead of [-2, 2] */
    /* every block of the model, freed by mb_free */
    void **blocks;
    int n_blocks, cap_blocks;
} mb_model;

/* ---- memory ---- */

/* n zeroed bytes that live until mb_free. */
static void *mb_alloc(mb_model *m, size_t n) {
    if (m->n_blocks == m->cap_blocks) {
        int cap = m->cap_blocks ? 2 * m->cap_blocks : 64;
        void **b = realloc(m->blocks, (size_t)cap * sizeof *b);
        assert_non_null(b);
        m->blocks = b;
        m->cap_blocks = cap;
    }
    void *p = calloc(1, n ? n : 1);
    assert_non_null(p);
    m->blocks[m->n_blocks++] = p;
    return p;
}

static char *mb_strn(mb_model *m, const char *s, size_t n) {
    char *d = mb_alloc(m, n + 1);
    memcpy(d, s, n);
    return d;
}

static char *mb_str(mb_model *m, const char *s) { return mb_strn(m, s, strlen(s)); }

static void mb_free(mb_model *m) {
    for (int i = 0; i < m->n_blocks; i++) free(m->blocks[i]);
    free(m->blocks);
    m->blocks = NULL;
    m->n_blocks = m->cap_blocks = 0;
}

/* ---- model, graph, nodes ---- */

static void mb_init(mb_model *m, int opset) {
    memset(m, 0, sizeof *m);
    onnx__model_proto__init(&m->model);
    onnx__graph_proto__init(&m->graph);
    onnx__operator_set_id_proto__init(&m->opset);
    m->opset.domain = mb_str(m, "");
    m->opset.has_version = 1;
    m->opset.version = opset;
    m->opsets[0] = &m->opset;
    m->model.has_ir_version = 1;
    m->model.ir_version = 8;
    m->model.n_opset_import = 1;
    m->model.opset_import = m->opsets;
    m->model.graph = &m->graph;
    m->graph.name = mb_str(m, "g");
    m->graph.node = m->nodes;
    m->graph.input = m->ins;
    m->graph.output = m->outs;
    m->graph.initializer = m->inits;
}

/* The comma-separated names of s[0..len) (every entry kept, empty ones too; none when len
 * is 0) into a new array; their count in *n. */
static char **mb_names(mb_model *m, const char *s, size_t len, size_t *n) {
    size_t count = len ? 1 : 0;
    for (size_t i = 0; i < len; i++) count += s[i] == ',';
    char **v = mb_alloc(m, (count + 1) * sizeof *v);
    *n = 0;
    for (size_t start = 0; *n < count;) {
        size_t end = start;
        while (end < len && s[end] != ',') end++;
        v[(*n)++] = mb_strn(m, s + start, end - start);
        start = end + 1;
    }
    return v;
}

/* "Op:a,b->c" (empty names are omitted inputs: "Op:x,,z->y"; "Constant:->c" has none). */
static Onnx__NodeProto *mb_node(mb_model *m, const char *spec) {
    assert_true(m->graph.n_node < MB_MAX);
    const char *colon = strchr(spec, ':'), *arrow = strstr(spec, "->");
    assert_true(colon && arrow && colon < arrow);
    Onnx__NodeProto *n = mb_alloc(m, sizeof *n);
    onnx__node_proto__init(n);
    n->op_type = mb_strn(m, spec, (size_t)(colon - spec));
    char name[32];
    snprintf(name, sizeof name, "n%zu", m->graph.n_node);
    n->name = mb_str(m, name);
    n->input = mb_names(m, colon + 1, (size_t)(arrow - colon - 1), &n->n_input);
    n->output = mb_names(m, arrow + 2, strlen(arrow + 2), &n->n_output);
    n->attribute = mb_alloc(m, MB_MAX_ATTRS * sizeof *n->attribute);
    m->nodes[m->graph.n_node++] = n;
    return n;
}

/* ---- attributes ---- */

static Onnx__AttributeProto *mb_attr(mb_model *m, Onnx__NodeProto *n, const char *name,
                                     Onnx__AttributeProto__AttributeType type) {
    assert_true(n->n_attribute < MB_MAX_ATTRS);
    Onnx__AttributeProto *a = mb_alloc(m, sizeof *a);
    onnx__attribute_proto__init(a);
    a->name = mb_str(m, name);
    a->has_type = 1;
    a->type = type;
    n->attribute[n->n_attribute++] = a;
    return a;
}

static void mb_attr_i(mb_model *m, Onnx__NodeProto *n, const char *name, int64_t v) {
    Onnx__AttributeProto *a = mb_attr(m, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
    a->has_i = 1;
    a->i = v;
}

static void mb_attr_f(mb_model *m, Onnx__NodeProto *n, const char *name, float v) {
    Onnx__AttributeProto *a = mb_attr(m, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
    a->has_f = 1;
    a->f = v;
}

static void mb_attr_s(mb_model *m, Onnx__NodeProto *n, const char *name, const char *v) {
    Onnx__AttributeProto *a = mb_attr(m, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
    a->has_s = 1;
    a->s.len = strlen(v);
    a->s.data = (uint8_t *)mb_str(m, v);
}

static void mb_attr_ints(mb_model *m, Onnx__NodeProto *n, const char *name, int count,
                         const int64_t *v) {
    Onnx__AttributeProto *a = mb_attr(m, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
    a->n_ints = (size_t)count;
    a->ints = mb_alloc(m, (size_t)count * sizeof *v);
    if (count) memcpy(a->ints, v, (size_t)count * sizeof *v);
}

static void mb_attr_floats(mb_model *m, Onnx__NodeProto *n, const char *name, int count,
                           const float *v) {
    Onnx__AttributeProto *a = mb_attr(m, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS);
    a->n_floats = (size_t)count;
    a->floats = mb_alloc(m, (size_t)count * sizeof *v);
    if (count) memcpy(a->floats, v, (size_t)count * sizeof *v);
}

/* A tensor attribute (Constant's value); t from mb_new_tensor. */
static void mb_attr_tensor(mb_model *m, Onnx__NodeProto *n, const char *name,
                           Onnx__TensorProto *t) {
    mb_attr(m, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR)->t = t;
}

/* A graph attribute: g is the graph of another mb_model, which must outlive the packing. */
static void mb_attr_graph(mb_model *m, Onnx__NodeProto *n, const char *name, Onnx__GraphProto *g) {
    mb_attr(m, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH)->g = g;
}

/* ---- tensors and initializers ---- */

/* A tensor without data, not in the graph (for attributes; mb_tensor adds one to it);
 * name NULL: none. */
static Onnx__TensorProto *mb_new_tensor(mb_model *m, const char *name, int type, int rank,
                                        const int64_t *dims) {
    Onnx__TensorProto *t = mb_alloc(m, sizeof *t);
    onnx__tensor_proto__init(t);
    if (name) t->name = mb_str(m, name);
    t->has_data_type = 1;
    t->data_type = type;
    t->n_dims = (size_t)rank;
    t->dims = mb_alloc(m, ((size_t)rank + 1) * sizeof(int64_t));
    if (rank) memcpy(t->dims, dims, (size_t)rank * sizeof(int64_t));
    return t;
}

/* An initializer without data yet. */
static Onnx__TensorProto *mb_tensor(mb_model *m, const char *name, int type, int rank,
                                    const int64_t *dims) {
    assert_true(m->graph.n_initializer < MB_MAX);
    Onnx__TensorProto *t = mb_new_tensor(m, name, type, rank, dims);
    m->inits[m->graph.n_initializer++] = t;
    return t;
}

static void mb_set_f32(mb_model *m, Onnx__TensorProto *t, int n, const float *vals) {
    t->n_float_data = (size_t)n;
    t->float_data = mb_alloc(m, ((size_t)n + 1) * sizeof(float));
    if (n) memcpy(t->float_data, vals, (size_t)n * sizeof(float));
}

static void mb_set_raw(mb_model *m, Onnx__TensorProto *t, const void *raw, size_t len) {
    t->has_raw_data = 1;
    t->raw_data.len = len;
    t->raw_data.data = mb_alloc(m, len);
    if (len) memcpy(t->raw_data.data, raw, len);
}

/* int64 initializer of shape [n] */
static void mb_init_i64(mb_model *m, const char *name, int n, const int64_t *vals) {
    int64_t d = n;
    Onnx__TensorProto *t = mb_tensor(m, name, MB_I64, 1, &d);
    t->n_int64_data = (size_t)n;
    t->int64_data = mb_alloc(m, ((size_t)n + 1) * sizeof(int64_t));
    if (n) memcpy(t->int64_data, vals, (size_t)n * sizeof(int64_t));
}

/* float initializer (n values) */
static void mb_init_f32(mb_model *m, const char *name, int rank, const int64_t *dims, int n,
                        const float *vals) {
    mb_set_f32(m, mb_tensor(m, name, MB_F32, rank, dims), n, vals);
}

/* initializer of any data type with raw little-endian bytes (raw NULL: no data at all) */
static void mb_init_raw(mb_model *m, const char *name, int type, int rank, const int64_t *dims,
                        const void *raw, size_t len) {
    Onnx__TensorProto *t = mb_tensor(m, name, type, rank, dims);
    if (raw) mb_set_raw(m, t, raw, len);
}

/* The random numbers of mb_weight (and of tests that make their data with it): uniform in
 * [-1, 1), a sequence set by mb_rng_state. */
static uint32_t mb_rng_state;
static float mb_rnd(void) {
    mb_rng_state = mb_rng_state * 1664525u + 1013904223u;
    return (float)(mb_rng_state >> 8) / (float)(1u << 23) - 1.0f;
}

/* float initializer; vals NULL = random in [center - half, center + half) */
static void mb_weight(mb_model *m, const char *name, int rank, const int64_t *dims,
                      const float *vals, float center, float half) {
    Onnx__TensorProto *t = mb_tensor(m, name, MB_F32, rank, dims);
    size_t n = 1;
    for (int i = 0; i < rank; i++) n *= (size_t)dims[i];
    t->float_data = mb_alloc(m, n * sizeof(float));
    t->n_float_data = n;
    for (size_t i = 0; i < n; i++) t->float_data[i] = vals ? vals[i] : center + half * mb_rnd();
}

static void mb_scalar(mb_model *m, const char *name, float v) {
    mb_weight(m, name, 0, NULL, &v, 0, 0);
}

/* x -> z, BERT's erf GELU: (x * (erf(x / sqrt2) + 1)) * 0.5, reading the scalars one and half. */
static inline void mb_erf_gelu(mb_model *b) {
    mb_scalar(b, "sqrt2", 1.4142135f);
    mb_node(b, "Div:x,sqrt2->d");
    mb_node(b, "Erf:d->e");
    mb_node(b, "Add:e,one->a");
    mb_node(b, "Mul:x,a->m");
    mb_node(b, "Mul:m,half->z");
}

/* ---- graph inputs and outputs ---- */

/* A tensor value info of element type elem; rank -1: no shape; a dim < 0 is dynamic ("N"). */
static Onnx__ValueInfoProto *mb_value(mb_model *m, const char *name, int elem, int rank,
                                      const int64_t *dims) {
    Onnx__ValueInfoProto *v = mb_alloc(m, sizeof *v);
    onnx__value_info_proto__init(v);
    v->name = mb_str(m, name);
    Onnx__TypeProto *t = mb_alloc(m, sizeof *t);
    onnx__type_proto__init(t);
    Onnx__TypeProto__Tensor *tt = mb_alloc(m, sizeof *tt);
    onnx__type_proto__tensor__init(tt);
    tt->has_elem_type = 1;
    tt->elem_type = elem;
    if (rank >= 0) {
        Onnx__TensorShapeProto *sh = mb_alloc(m, sizeof *sh);
        onnx__tensor_shape_proto__init(sh);
        sh->dim = mb_alloc(m, ((size_t)rank + 1) * sizeof *sh->dim);
        for (int i = 0; i < rank; i++) {
            Onnx__TensorShapeProto__Dimension *d = mb_alloc(m, sizeof *d);
            onnx__tensor_shape_proto__dimension__init(d);
            if (dims[i] >= 0) {
                d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
                d->dim_value = dims[i];
            } else {
                d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
                d->dim_param = mb_str(m, "N");
            }
            sh->dim[sh->n_dim++] = d;
        }
        tt->shape = sh;
    }
    t->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    t->tensor_type = tt;
    v->type = t;
    return v;
}

/* A graph input declared with `decl` (see mb_value) that a run feeds with shape `run` (NULL:
 * the declared one). */
static void mb_input_as(mb_model *m, const char *name, int elem, int rank, const int64_t *decl,
                        const int64_t *run) {
    assert_true(m->graph.n_input < MB_MAX);
    int k = (int)m->graph.n_input;
    m->ins[m->graph.n_input++] = mb_value(m, name, elem, rank, decl);
    m->in_rank[k] = rank;
    for (int d = 0; d < rank && d < MB_MAX_RANK; d++) m->in_dims[k][d] = run ? run[d] : decl[d];
}

/* float input */
static void mb_input(mb_model *m, const char *name, int rank, const int64_t *dims) {
    mb_input_as(m, name, MB_F32, rank, dims, NULL);
}

/* float input declared with `decl` (-1: dynamic) and fed with `run` */
static void mb_input_run(mb_model *m, const char *name, int rank, const int64_t *decl,
                         const int64_t *run) {
    mb_input_as(m, name, MB_F32, rank, decl, run);
}

/* input of element type elem */
static void mb_input_t(mb_model *m, const char *name, int elem, int rank, const int64_t *dims) {
    mb_input_as(m, name, elem, rank, dims, NULL);
}

/* float input of a static shape given as a list: IN(m, "x", 2, 3, 4) */
static void mb_input_v(mb_model *m, const char *name, int rank, ...) {
    int64_t dims[MB_MAX_RANK];
    va_list ap;
    va_start(ap, rank);
    for (int i = 0; i < rank && i < MB_MAX_RANK; i++) dims[i] = va_arg(ap, int64_t);
    va_end(ap);
    mb_input(m, name, rank, dims);
}
#define IN(m, name, ...) mb_input_v(m, name, MB_NARGS(__VA_ARGS__), MB_I64S(__VA_ARGS__))
#define MB_NARGS(...) MB_NARGS_(__VA_ARGS__, 8, 7, 6, 5, 4, 3, 2, 1, 0)
#define MB_NARGS_(a, b, c, d, e, f, g, h, n, ...) n
#define MB_I64S(...) MB_I64S_(MB_NARGS(__VA_ARGS__), __VA_ARGS__)
#define MB_I64S_(n, ...) MB_CAT(MB_I64S_, n)(__VA_ARGS__)
#define MB_CAT(a, b) MB_CAT_(a, b)
#define MB_CAT_(a, b) a##b
#define MB_I64S_1(a) (int64_t)(a)
#define MB_I64S_2(a, ...) (int64_t)(a), MB_I64S_1(__VA_ARGS__)
#define MB_I64S_3(a, ...) (int64_t)(a), MB_I64S_2(__VA_ARGS__)
#define MB_I64S_4(a, ...) (int64_t)(a), MB_I64S_3(__VA_ARGS__)
#define MB_I64S_5(a, ...) (int64_t)(a), MB_I64S_4(__VA_ARGS__)
#define MB_I64S_6(a, ...) (int64_t)(a), MB_I64S_5(__VA_ARGS__)

static void mb_output_t(mb_model *m, const char *name, int elem, int rank, const int64_t *dims) {
    assert_true(m->graph.n_output < MB_MAX);
    m->outs[m->graph.n_output++] = mb_value(m, name, elem, rank, dims);
}

/* float output of unknown shape */
static void mb_output(mb_model *m, const char *name) { mb_output_t(m, name, MB_F32, -1, NULL); }

/* ---- bytes ---- */

/* The serialised model (free() it); m stays as it is. */
static void *mb_pack(mb_model *m, size_t *size) {
    *size = onnx__model_proto__get_packed_size(&m->model);
    void *buf = malloc(*size ? *size : 1);
    assert_non_null(buf);
    onnx__model_proto__pack(&m->model, buf);
    return buf;
}

#pragma GCC diagnostic pop

#endif
