/* Test helper for test_fuse.c: builds ONNX models in memory (protobuf-c structs) with float
 * and int64 initializers, attributes, and inputs whose declared shape may be dynamic while
 * the run-time shape is fixed. Everything is freed by fb_free. Include after <cmocka.h>. */
#ifndef TDM_TEST_FUSE_BUILDER_H
#define TDM_TEST_FUSE_BUILDER_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx/onnx.pb-c.h"

#define FB_MAX 64

typedef struct fb {
    Onnx__ModelProto model;
    Onnx__GraphProto graph;
    Onnx__OperatorSetIdProto opset;
    Onnx__OperatorSetIdProto *opsets[1];
    Onnx__NodeProto *nodes[FB_MAX];
    Onnx__ValueInfoProto *ins[FB_MAX], *outs[FB_MAX];
    Onnx__TensorProto *inits[FB_MAX];
    void *allocs[4096];
    int n_allocs;
    /* run-time shapes of the inputs */
    int in_rank[FB_MAX];
    int64_t in_dims[FB_MAX][8];
} fb;

static void *fb_alloc(fb *b, size_t size) {
    void *p = calloc(1, size ? size : 1);
    assert_non_null(p);
    assert_true(b->n_allocs < 4096);
    b->allocs[b->n_allocs++] = p;
    return p;
}

static char *fb_str(fb *b, const char *s, size_t n) {
    char *d = fb_alloc(b, n + 1);
    memcpy(d, s, n);
    return d;
}

static void fb_init(fb *b, int opset) {
    memset(b, 0, sizeof *b);
    onnx__model_proto__init(&b->model);
    onnx__graph_proto__init(&b->graph);
    onnx__operator_set_id_proto__init(&b->opset);
    b->opset.domain = fb_str(b, "", 0);
    b->opset.has_version = 1;
    b->opset.version = opset;
    b->opsets[0] = &b->opset;
    b->model.has_ir_version = 1;
    b->model.ir_version = 8;
    b->model.n_opset_import = 1;
    b->model.opset_import = b->opsets;
    b->model.graph = &b->graph;
    b->graph.name = fb_str(b, "g", 1);
    b->graph.node = b->nodes;
    b->graph.input = b->ins;
    b->graph.output = b->outs;
    b->graph.initializer = b->inits;
}

static void fb_free(fb *b) {
    for (int i = 0; i < b->n_allocs; i++) free(b->allocs[i]);
    b->n_allocs = 0;
}

/* "Op:a,b->c" (empty names allowed) */
static Onnx__NodeProto *fb_node(fb *b, const char *spec) {
    Onnx__NodeProto *n = fb_alloc(b, sizeof *n);
    onnx__node_proto__init(n);
    const char *colon = strchr(spec, ':'), *arrow = strstr(spec, "->");
    n->op_type = fb_str(b, spec, (size_t)(colon - spec));
    char nm[32];
    snprintf(nm, sizeof nm, "n%zu", b->graph.n_node);
    n->name = fb_str(b, nm, strlen(nm));
    n->input = fb_alloc(b, 8 * sizeof(char *));
    n->output = fb_alloc(b, 8 * sizeof(char *));
    n->attribute = fb_alloc(b, 8 * sizeof(Onnx__AttributeProto *));
    const char *p = colon + 1;
    while (p < arrow) {
        const char *q = p;
        while (q < arrow && *q != ',') q++;
        n->input[n->n_input++] = fb_str(b, p, (size_t)(q - p));
        p = q < arrow ? q + 1 : q;
    }
    p = arrow + 2;
    while (*p) {
        const char *q = p;
        while (*q && *q != ',') q++;
        n->output[n->n_output++] = fb_str(b, p, (size_t)(q - p));
        p = *q ? q + 1 : q;
    }
    b->nodes[b->graph.n_node++] = n;
    return n;
}

static Onnx__AttributeProto *fb_attr(fb *b, Onnx__NodeProto *n, const char *name, int type) {
    Onnx__AttributeProto *a = fb_alloc(b, sizeof *a);
    onnx__attribute_proto__init(a);
    a->name = fb_str(b, name, strlen(name));
    a->has_type = 1;
    a->type = type;
    n->attribute[n->n_attribute++] = a;
    return a;
}

static void fb_attr_i(fb *b, Onnx__NodeProto *n, const char *name, int64_t v) {
    Onnx__AttributeProto *a = fb_attr(b, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
    a->has_i = 1;
    a->i = v;
}

static void fb_attr_f(fb *b, Onnx__NodeProto *n, const char *name, float v) {
    Onnx__AttributeProto *a = fb_attr(b, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
    a->has_f = 1;
    a->f = v;
}

static void fb_attr_ints(fb *b, Onnx__NodeProto *n, const char *name, int count, const int64_t *v) {
    Onnx__AttributeProto *a = fb_attr(b, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
    a->ints = fb_alloc(b, (size_t)count * sizeof(int64_t));
    memcpy(a->ints, v, (size_t)count * sizeof(int64_t));
    a->n_ints = (size_t)count;
}

static Onnx__ValueInfoProto *fb_value(fb *b, const char *name, int rank, const int64_t *dims) {
    Onnx__ValueInfoProto *v = fb_alloc(b, sizeof *v);
    onnx__value_info_proto__init(v);
    v->name = fb_str(b, name, strlen(name));
    Onnx__TypeProto *t = fb_alloc(b, sizeof *t);
    onnx__type_proto__init(t);
    Onnx__TypeProto__Tensor *tt = fb_alloc(b, sizeof *tt);
    onnx__type_proto__tensor__init(tt);
    tt->has_elem_type = 1;
    tt->elem_type = 1;
    if (rank >= 0) {
        Onnx__TensorShapeProto *sh = fb_alloc(b, sizeof *sh);
        onnx__tensor_shape_proto__init(sh);
        sh->dim = fb_alloc(b, ((size_t)rank + 1) * sizeof *sh->dim);
        for (int i = 0; i < rank; i++) {
            Onnx__TensorShapeProto__Dimension *d = fb_alloc(b, sizeof *d);
            onnx__tensor_shape_proto__dimension__init(d);
            if (dims[i] >= 0) {
                d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
                d->dim_value = dims[i];
            } else {
                d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
                d->dim_param = fb_str(b, "N", 1);
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

/* A float input declared with `decl` dims (-1: dynamic) and fed with `run` dims. */
static void fb_input(fb *b, const char *name, int rank, const int64_t *decl, const int64_t *run) {
    int i = (int)b->graph.n_input;
    b->ins[b->graph.n_input++] = fb_value(b, name, rank, decl);
    b->in_rank[i] = rank;
    for (int d = 0; d < rank && d < 8; d++) b->in_dims[i][d] = run ? run[d] : decl[d];
}

static void fb_output(fb *b, const char *name) {
    b->outs[b->graph.n_output++] = fb_value(b, name, -1, NULL);
}

static Onnx__TensorProto *fb_tensor(fb *b, const char *name, int type, int rank, const int64_t *dims) {
    Onnx__TensorProto *t = fb_alloc(b, sizeof *t);
    onnx__tensor_proto__init(t);
    t->name = fb_str(b, name, strlen(name));
    t->has_data_type = 1;
    t->data_type = type;
    t->n_dims = (size_t)rank;
    t->dims = fb_alloc(b, ((size_t)rank + 1) * sizeof(int64_t));
    if (rank) memcpy(t->dims, dims, (size_t)rank * sizeof(int64_t));
    b->inits[b->graph.n_initializer++] = t;
    return t;
}

static uint32_t rng_state;
static float rnd(void) { /* uniform in [-1, 1) */
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)(rng_state >> 8) / (float)(1u << 23) - 1.0f;
}

/* A float initializer; vals NULL = random in [lo, lo + 2 * half) */
static void fb_f32(fb *b, const char *name, int rank, const int64_t *dims, const float *vals,
                   float center, float half) {
    Onnx__TensorProto *t = fb_tensor(b, name, 1, rank, dims);
    size_t n = 1;
    for (int i = 0; i < rank; i++) n *= (size_t)dims[i];
    t->float_data = fb_alloc(b, n * sizeof(float));
    t->n_float_data = n;
    for (size_t i = 0; i < n; i++) t->float_data[i] = vals ? vals[i] : center + half * rnd();
}

static void fb_scalar(fb *b, const char *name, float v) { fb_f32(b, name, 0, NULL, &v, 0, 0); }

static void fb_i64(fb *b, const char *name, int n, const int64_t *vals) {
    int64_t d = n;
    Onnx__TensorProto *t = fb_tensor(b, name, 7, 1, &d);
    t->int64_data = fb_alloc(b, (size_t)n * sizeof(int64_t));
    memcpy(t->int64_data, vals, (size_t)n * sizeof(int64_t));
    t->n_int64_data = (size_t)n;
}

#endif
