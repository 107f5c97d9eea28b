/* Test helper for test_opencl.c: builds ONNX models in memory with the protobuf-c structs,
 * with attributes, float/int64 initializers and static input shapes (the shapes also say
 * what random inputs to make). Everything a model holds is freed by mb_free. Nodes are
 * "Op:in1,in2->out1,out2" strings (empty names for omitted inputs: "Clip:x,,hi->y"). */
#ifndef TDM_TEST_OPENCL_BUILDER_H
#define TDM_TEST_OPENCL_BUILDER_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "onnx/onnx.pb-c.h"

#define MAXB 4096

typedef struct mb {
    Onnx__ModelProto model;
    Onnx__GraphProto graph;
    Onnx__OperatorSetIdProto opset, *opsets[1];
    Onnx__NodeProto *nodes[32];
    Onnx__ValueInfoProto *ins[16], *outs[8];
    Onnx__TensorProto *inits[16];
    void *blocks[MAXB];
    int nb;
    /* graph inputs: shapes for the random data */
    int in_rank[16];
    int64_t in_dims[16][8];
    bool positive; /* random inputs in (0.1, 2] instead of [-2, 2] */
} mb;

static void *mb_new(mb *m, size_t n) {
    assert_true(m->nb < MAXB);
    void *p = calloc(1, n ? n : 1);
    m->blocks[m->nb++] = p;
    return p;
}

static char *mb_s(mb *m, const char *s) {
    char *d = mb_new(m, strlen(s) + 1);
    strcpy(d, s);
    return d;
}

static void mb_init(mb *m, int opset) {
    memset(m, 0, sizeof *m);
    onnx__model_proto__init(&m->model);
    onnx__graph_proto__init(&m->graph);
    onnx__operator_set_id_proto__init(&m->opset);
    m->opset.domain = mb_s(m, "");
    m->opset.has_version = 1;
    m->opset.version = opset;
    m->opsets[0] = &m->opset;
    m->model.has_ir_version = 1;
    m->model.ir_version = 8;
    m->model.n_opset_import = 1;
    m->model.opset_import = m->opsets;
    m->model.graph = &m->graph;
    m->graph.name = mb_s(m, "g");
    m->graph.node = m->nodes;
    m->graph.input = m->ins;
    m->graph.output = m->outs;
    m->graph.initializer = m->inits;
}

static void mb_free(mb *m) {
    for (int i = 0; i < m->nb; i++) free(m->blocks[i]);
    m->nb = 0;
}

static char **mb_list(mb *m, const char *s, size_t *n) {
    char **v = mb_new(m, 16 * sizeof *v);
    *n = 0;
    const char *p = s;
    while (*p) {
        const char *q = p;
        while (*q && *q != ',') q++;
        char *e = mb_new(m, (size_t)(q - p) + 1);
        memcpy(e, p, (size_t)(q - p));
        v[(*n)++] = e;
        p = *q ? q + 1 : q;
    }
    return v;
}

/* "Op:a,b->c" (empty names allowed: "Op:x,,z->y") */
static Onnx__NodeProto *mb_node(mb *m, const char *spec) {
    Onnx__NodeProto *n = mb_new(m, sizeof *n);
    onnx__node_proto__init(n);
    char buf[256];
    snprintf(buf, sizeof buf, "%s", spec);
    char *colon = strchr(buf, ':'), *arrow = strstr(buf, "->");
    *colon = 0;
    *arrow = 0;
    n->op_type = mb_s(m, buf);
    char nm[16];
    snprintf(nm, sizeof nm, "n%zu", m->graph.n_node);
    n->name = mb_s(m, nm);
    /* keep empty entries between commas */
    char **in = mb_new(m, 16 * sizeof *in);
    size_t ni = 0;
    char *p = colon + 1;
    if (*p) {
        for (;;) {
            char *q = strchr(p, ',');
            if (q) *q = 0;
            in[ni++] = mb_s(m, p);
            if (!q) break;
            p = q + 1;
        }
    }
    n->input = in;
    n->n_input = ni;
    n->output = mb_list(m, arrow + 2, &n->n_output);
    n->attribute = mb_new(m, 16 * sizeof *n->attribute);
    m->nodes[m->graph.n_node++] = n;
    return n;
}

static Onnx__AttributeProto *mb_attr(mb *m, Onnx__NodeProto *n, const char *name,
                                     Onnx__AttributeProto__AttributeType type) {
    Onnx__AttributeProto *a = mb_new(m, sizeof *a);
    onnx__attribute_proto__init(a);
    a->name = mb_s(m, name);
    a->has_type = 1;
    a->type = type;
    n->attribute[n->n_attribute++] = a;
    return a;
}

static void mb_attr_i(mb *m, Onnx__NodeProto *n, const char *name, int64_t v) {
    Onnx__AttributeProto *a = mb_attr(m, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
    a->has_i = 1;
    a->i = v;
}

static void mb_attr_f(mb *m, Onnx__NodeProto *n, const char *name, float v) {
    Onnx__AttributeProto *a = mb_attr(m, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
    a->has_f = 1;
    a->f = v;
}

static void mb_attr_s(mb *m, Onnx__NodeProto *n, const char *name, const char *v) {
    Onnx__AttributeProto *a = mb_attr(m, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
    a->has_s = 1;
    a->s.len = strlen(v);
    a->s.data = (uint8_t *)mb_s(m, v);
}

static void mb_attr_ints(mb *m, Onnx__NodeProto *n, const char *name, int count,
                         const int64_t *v) {
    Onnx__AttributeProto *a = mb_attr(m, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
    a->n_ints = (size_t)count;
    a->ints = mb_new(m, (size_t)count * sizeof *v);
    memcpy(a->ints, v, (size_t)count * sizeof *v);
}

static void mb_attr_floats(mb *m, Onnx__NodeProto *n, const char *name, int count,
                           const float *v) {
    Onnx__AttributeProto *a = mb_attr(m, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS);
    a->n_floats = (size_t)count;
    a->floats = mb_new(m, (size_t)count * sizeof *v);
    memcpy(a->floats, v, (size_t)count * sizeof *v);
}

/* a float tensor attribute (Constant's value) */
static void mb_attr_tensor_f32(mb *m, Onnx__NodeProto *n, const char *name, int rank,
                               const int64_t *dims, int count, const float *v) {
    Onnx__AttributeProto *a = mb_attr(m, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR);
    Onnx__TensorProto *t = mb_new(m, sizeof *t);
    onnx__tensor_proto__init(t);
    t->has_data_type = 1;
    t->data_type = 1;
    t->n_dims = (size_t)rank;
    t->dims = mb_new(m, ((size_t)rank + 1) * sizeof(int64_t));
    if (rank) memcpy(t->dims, dims, (size_t)rank * sizeof(int64_t));
    t->n_float_data = (size_t)count;
    t->float_data = mb_new(m, ((size_t)count + 1) * sizeof(float));
    memcpy(t->float_data, v, (size_t)count * sizeof(float));
    a->t = t;
}

static Onnx__ValueInfoProto *mb_value(mb *m, const char *name, int elem, int rank,
                                      const int64_t *dims) {
    Onnx__ValueInfoProto *v = mb_new(m, sizeof *v);
    onnx__value_info_proto__init(v);
    v->name = mb_s(m, name);
    Onnx__TypeProto *t = mb_new(m, sizeof *t);
    onnx__type_proto__init(t);
    Onnx__TypeProto__Tensor *tt = mb_new(m, sizeof *tt);
    onnx__type_proto__tensor__init(tt);
    tt->has_elem_type = 1;
    tt->elem_type = elem;
    if (rank >= 0) {
        Onnx__TensorShapeProto *sh = mb_new(m, sizeof *sh);
        onnx__tensor_shape_proto__init(sh);
        sh->dim = mb_new(m, ((size_t)rank + 1) * sizeof *sh->dim);
        for (int i = 0; i < rank; i++) {
            Onnx__TensorShapeProto__Dimension *d = mb_new(m, sizeof *d);
            onnx__tensor_shape_proto__dimension__init(d);
            d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            d->dim_value = dims[i];
            sh->dim[sh->n_dim++] = d;
        }
        tt->shape = sh;
    }
    t->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    t->tensor_type = tt;
    v->type = t;
    return v;
}

/* float graph input with a static shape: dims as a list, e.g. IN(m, "x", 2, 3, 4) */
static void mb_input(mb *m, const char *name, int rank, ...) {
    va_list ap;
    va_start(ap, rank);
    int k = (int)m->graph.n_input;
    for (int i = 0; i < rank; i++) m->in_dims[k][i] = va_arg(ap, int64_t);
    va_end(ap);
    m->in_rank[k] = rank;
    m->ins[m->graph.n_input++] = mb_value(m, name, 1, rank, m->in_dims[k]);
}
#define IN(m, name, ...) mb_input(m, name, MB_NARGS(__VA_ARGS__), MB_I64(__VA_ARGS__))
#define MB_NARGS(...) MB_NARGS_(__VA_ARGS__, 8, 7, 6, 5, 4, 3, 2, 1, 0)
#define MB_NARGS_(a, b, c, d, e, f, g, h, n, ...) n
#define MB_I64(...) MB_I64_(MB_NARGS(__VA_ARGS__), __VA_ARGS__)
#define MB_I64_(n, ...) MB_CAT(MB_I64_, n)(__VA_ARGS__)
#define MB_CAT(a, b) MB_CAT_(a, b)
#define MB_CAT_(a, b) a##b
#define MB_I64_1(a) (int64_t)(a)
#define MB_I64_2(a, ...) (int64_t)(a), MB_I64_1(__VA_ARGS__)
#define MB_I64_3(a, ...) (int64_t)(a), MB_I64_2(__VA_ARGS__)
#define MB_I64_4(a, ...) (int64_t)(a), MB_I64_3(__VA_ARGS__)
#define MB_I64_5(a, ...) (int64_t)(a), MB_I64_4(__VA_ARGS__)

static void mb_output(mb *m, const char *name) {
    m->outs[m->graph.n_output++] = mb_value(m, name, 1, -1, NULL);
}

static Onnx__TensorProto *mb_tensor(mb *m, const char *name, int type, int rank,
                                    const int64_t *dims) {
    Onnx__TensorProto *t = mb_new(m, sizeof *t);
    onnx__tensor_proto__init(t);
    t->name = mb_s(m, name);
    t->has_data_type = 1;
    t->data_type = type;
    t->n_dims = (size_t)rank;
    t->dims = mb_new(m, ((size_t)rank + 1) * sizeof(int64_t));
    if (rank) memcpy(t->dims, dims, (size_t)rank * sizeof(int64_t));
    m->inits[m->graph.n_initializer++] = t;
    return t;
}

static void mb_init_i64(mb *m, const char *name, int n, const int64_t *vals) {
    int64_t d = n;
    Onnx__TensorProto *t = mb_tensor(m, name, 7, 1, &d);
    t->n_int64_data = (size_t)n;
    t->int64_data = mb_new(m, ((size_t)n + 1) * sizeof(int64_t));
    memcpy(t->int64_data, vals, (size_t)n * sizeof(int64_t));
}

static void mb_init_f32(mb *m, const char *name, int rank, const int64_t *dims, int n,
                        const float *vals) {
    Onnx__TensorProto *t = mb_tensor(m, name, 1, rank, dims);
    t->n_float_data = (size_t)n;
    t->float_data = mb_new(m, ((size_t)n + 1) * sizeof(float));
    memcpy(t->float_data, vals, (size_t)n * sizeof(float));
}

#endif
